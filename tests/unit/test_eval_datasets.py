"""Datasets without Hub access (issue 34, item 3), with a local fake cache and no network:
the archive format (manifest first, cache under hf/, the hub's snapshot symlinks kept, lock
files left out), the refusal of archives with members outside the cache, `fetch` driving the
venv's `datasets` through an injected runner, loading into a "head" (a fake session running
the real `tar` on a local folder), and `eval run` refusing up front (exit 2) when a task's data
is not in the cache it will mount, naming the commands."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.eval.cache import load_to_head, read_index
from tpwarden.cluster.eval.catalog import SUITES
from tpwarden.cluster.eval.datasets import (
    FORMAT,
    INDEX_NAME,
    data_refusal,
    fetch,
    fetch_plan,
    hub_tasks,
    manifest,
    pack,
    read_archive,
    unpack,
)
from tpwarden.cluster.eval.presets import EvalInputError
from typer.testing import CliRunner

from .fake_controller import FakeController

GOOD = Path(__file__).parent / "inventories" / "good.yml"
NOW = "2026-12-04T08:00:00+00:00"


def _fake_cache(root: Path, repo: str = "datasets--openai--gsm8k") -> Path:
    """What huggingface_hub and datasets leave in HF_HOME, in miniature."""
    blob = root / "hub" / repo / "blobs" / "abc123"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"parquet bytes")
    snap = root / "hub" / repo / "snapshots" / "rev1" / "main"
    snap.mkdir(parents=True)
    (snap / "test.parquet").symlink_to("../../../blobs/abc123")
    arrow = root / "datasets" / "openai___gsm8k" / "main" / "0.0.0"
    arrow.mkdir(parents=True)
    (arrow / "dataset_info.json").write_text("{}")
    (root / "datasets" / "_openai_gsm8k.lock").write_text("")
    return root


def _doc(tasks=("gsm8k",)) -> dict:
    plan = {"tasks": {t: {"datasets": [{"path": "openai/gsm8k", "name": "main", "kwargs": {}}],
                          "metrics": []} for t in tasks}}  # fmt: skip
    return manifest(plan, NOW)


def test_pack_puts_the_manifest_first_keeps_symlinks_and_leaves_locks_out(tmp_path):
    cache = _fake_cache(tmp_path / "hf")
    out = tmp_path / "out" / "data.tar.gz"
    pack(cache, _doc(), out)
    with tarfile.open(out) as tar:
        names = tar.getnames()
        link = tar.getmember("hf/hub/datasets--openai--gsm8k/snapshots/rev1/main/test.parquet")
    assert names[0] == INDEX_NAME and all(n.startswith("hf/") for n in names[1:])
    assert link.issym() and link.linkname == "../../../blobs/abc123"
    assert not any(n.endswith(".lock") for n in names)
    assert read_archive(out)["format"] == FORMAT and "gsm8k" in read_archive(out)["tasks"]
    assert not list(out.parent.glob(".*tmp"))  # written to a temp name and renamed


def test_unpack_into_a_local_cache_merges_the_index_over_loads(tmp_path):
    a, b = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    pack(_fake_cache(tmp_path / "hf1"), _doc(("gsm8k",)), a)
    pack(_fake_cache(tmp_path / "hf2", "datasets--cais--mmlu"), _doc(("mmlu",)), b)
    cache = tmp_path / "head-cache"
    unpack(a, cache, NOW)
    merged = unpack(b, cache, NOW)
    assert sorted(merged["tasks"]) == ["gsm8k", "mmlu"]
    snap = (
        cache / "hub" / "datasets--openai--gsm8k" / "snapshots" / "rev1" / "main" / "test.parquet"
    )
    assert snap.read_bytes() == b"parquet bytes"  # the symlink resolves inside the cache
    assert json.loads((cache / INDEX_NAME).read_text())["tasks"]["mmlu"]["archive"] == "b.tar.gz"


def _archive_with(tmp_path: Path, member: tarfile.TarInfo, first: bytes | None = None) -> Path:
    out = tmp_path / "bad.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        data = first if first is not None else json.dumps(_doc()).encode()
        info = tarfile.TarInfo(INDEX_NAME)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.addfile(member, io.BytesIO(b"x" * member.size))
    return out


def _member(name: str, linkname: str | None = None) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    if linkname is None:
        m.size = 1
    else:
        m.type, m.linkname = tarfile.SYMTYPE, linkname
    return m


@pytest.mark.parametrize(
    "member",
    [
        _member("etc/passwd"),
        _member("hf/../../etc/passwd"),
        _member("/hf/abs"),
        _member("hf/hub/x", "../../../etc/shadow"),
        _member("hf/hub/y", "/etc/shadow"),
    ],
    ids=["outside", "dotdot", "absolute", "symlink-escapes", "symlink-absolute"],
)
def test_an_archive_with_a_member_outside_the_cache_is_refused(tmp_path, member):
    with pytest.raises(EvalInputError, match="not a cache file"):
        read_archive(_archive_with(tmp_path, member))


def test_an_archive_of_another_format_is_refused(tmp_path):
    bad = _archive_with(tmp_path, _member("hf/x"), json.dumps({"format": "other/9"}).encode())
    with pytest.raises(EvalInputError, match="expected tpwarden-eval-datasets/1"):
        read_archive(bad)
    (tmp_path / "plain.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(EvalInputError, match="not a readable"):
        read_archive(tmp_path / "plain.tar.gz")


def _fake_venv(root: Path) -> Path:
    tasks = root / "lib" / "python3.11" / "site-packages" / "lm_eval" / "tasks"
    (tasks / "code").mkdir(parents=True)
    (tasks / "code" / "code.yaml").write_text(
        "task: mycode\ndataset_path: openai/openai_humaneval\nunsafe_code: true\n"
    )
    (tasks / "mc").mkdir()
    (tasks / "mc" / "_t_yaml").write_text("dataset_path: org/mc\noutput_type: multiple_choice\n")
    for sub in ("a", "b"):
        (tasks / "mc" / f"{sub}.yaml").write_text(
            f"include: _t_yaml\ntask: mc_{sub}\ndataset_name: {sub}\ntag: mc_tasks\n"
        )
    (tasks / "mc" / "_g.yaml").write_text("group: mcg\ntask:\n  - mc_tasks\n")
    return root


def test_fetch_plan_reads_each_tasks_datasets_from_the_yamls(tmp_path):
    venv = _fake_venv(tmp_path / "venv")
    plan = fetch_plan(["mcg", "mycode"], venv / "lib/python3.11/site-packages/lm_eval/tasks")
    assert [d["name"] for d in plan["tasks"]["mcg"]["datasets"]] == ["a", "b"]
    assert plan["tasks"]["mycode"]["metrics"] == ["code_eval"] and plan["metrics"] == ["code_eval"]
    assert len(plan["datasets"]) == 3


def test_fetch_runs_the_venvs_python_with_a_private_online_cache_and_packs_it(
    tmp_path, monkeypatch
):
    venv = _fake_venv(tmp_path / "venv")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    seen = {}

    def run(argv, env, **kw):
        seen.update(argv=argv, env=env, plan=json.loads(Path(argv[2]).read_text()))
        _fake_cache(Path(env["HF_HOME"]))
        return subprocess.CompletedProcess(argv, 0, "", "")

    out = tmp_path / "data.tar.gz"
    doc = fetch(["mcg"], venv, out, NOW, run=run)
    assert seen["argv"][0] == str(venv / "bin" / "python")
    assert "HF_DATASETS_OFFLINE" not in seen["env"] and seen["env"]["HF_HOME"] != os.environ.get(
        "HF_HOME"
    )
    assert len(seen["plan"]["datasets"]) == 2
    assert sorted(read_archive(out)["tasks"]) == ["mcg"] == sorted(doc["tasks"])


def test_fetch_failure_says_why(tmp_path):
    venv = _fake_venv(tmp_path / "venv")

    def run(argv, env, **kw):
        return subprocess.CompletedProcess(argv, 1, "", "ConnectionError: hub unreachable")

    with pytest.raises(Exception, match="hub unreachable"):
        fetch(["mcg"], venv, tmp_path / "x.tar.gz", NOW, run=run)
    assert not (tmp_path / "x.tar.gz").exists()


class LocalHead:
    """A NodeSession stand-in whose "head" is a local folder: commands run here, for real."""

    node = "head"

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run(self, argv, timeout=60.0, sudo=False, check=False):
        self.commands.append(list(argv))
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
        assert not check or r.returncode == 0, r.stderr
        return r

    def exists(self, remote):
        return Path(remote).exists()

    def read_bytes(self, remote):
        return Path(remote).read_bytes()

    def put_file(self, local, remote, mode=0o600):
        Path(remote).write_bytes(Path(local).read_bytes())

    def put_atomic(self, data, remote, mode=0o600, timeout=60.0):
        Path(remote).write_bytes(data)


def test_load_unpacks_with_the_heads_tar_and_records_the_tasks(tmp_path):
    archive = tmp_path / "data.tar.gz"
    pack(_fake_cache(tmp_path / "hf"), _doc(SUITES["field"]), archive)
    head, cache = LocalHead(), tmp_path / "srv" / "hf-cache"
    assert read_index(head, str(cache)) is None
    merged = load_to_head(head, archive, str(cache), NOW)
    assert sorted(merged["tasks"]) == sorted(SUITES["field"])
    assert read_index(head, str(cache))["tasks"]["gsm8k"]["loaded_at"] == NOW
    assert (
        cache / "datasets" / "openai___gsm8k" / "main" / "0.0.0" / "dataset_info.json"
    ).is_file()
    assert not list(cache.glob(".upload-*"))  # the upload is removed
    assert any(c[0] == "tar" and "--strip-components=1" in c for c in head.commands)


def test_data_refusal_names_the_missing_tasks_and_the_commands(tmp_path):
    index = {"tasks": {"mmlu": {}, "gsm8k": {}}}
    assert data_refusal(["mmlu", "gsm8k"], None, "inv.yml", "/srv/hf", lambda: index) is None
    msg = data_refusal(["mmlu", "humaneval"], None, "inv.yml", "/srv/hf", lambda: index)
    assert "humaneval" in msg and "mmlu," not in msg
    assert "tpwarden eval datasets fetch --tasks humaneval --out FILE" in msg
    assert "tpwarden eval datasets load FILE -i inv.yml" in msg

    def never():
        raise AssertionError("no cache configured: nothing may be read")

    msg = data_refusal(["mmlu"], "field", "inv.yml", None, never)
    assert "--suite field" in msg and "tpwarden.eval.hf_cache" in msg
    assert hub_tasks(["mmlu", "mine"], {"mine": {}}) == ["mmlu"]  # local tasks bring their data


def _inventory_with_cache(tmp_path: Path, cache: Path) -> Path:
    text = GOOD.read_text()
    anchor = "      watchdog:\n"
    assert anchor in text
    inv = tmp_path / "inv.yml"
    inv.write_text(text.replace(anchor, f"      eval:\n        hf_cache: {cache}\n{anchor}", 1))
    return inv


def test_eval_run_refuses_before_the_server_when_the_heads_cache_lacks_a_task(
    tmp_path, monkeypatch
):
    cache = tmp_path / "hf-cache"
    archive = tmp_path / "part.tar.gz"
    pack(_fake_cache(tmp_path / "hf"), _doc(("mmlu", "kmmlu")), archive)
    load_to_head(LocalHead(), archive, str(cache), NOW)
    inv = _inventory_with_cache(tmp_path, cache)
    control = FakeController.factory(head=LocalHead())  # the head session is a LocalHead
    monkeypatch.setattr("tpwarden.cluster.cli.eval.Controller", control)
    result = CliRunner().invoke(app, ["eval", "run", "-i", str(inv), "--suite", "field", "--json"])
    assert result.exit_code == 2, result.output
    # the refusal comes before any other Controller call (no server started, nothing applied)
    assert [c for ctl in control.made for c in ctl.calls if c != "session"] == []
    msg = json.loads(result.stdout)["error"]["message"]
    assert f"cache {cache} does not hold the data of mmlu_pro, kmmlu_direct" in msg
    assert "tpwarden eval datasets fetch --suite field --out FILE" in msg
    assert f"tpwarden eval datasets load FILE -i {inv}" in msg


def test_eval_run_without_a_cache_refuses_without_contacting_anything(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("contacted the cluster")

    monkeypatch.setattr("tpwarden.cluster.cli.eval.Controller", refuse)
    result = CliRunner().invoke(app, ["eval", "run", "-i", str(GOOD), "--tasks", "gsm8k"])
    assert result.exit_code == 2
    assert "names no tpwarden.eval.hf_cache for the data of gsm8k" in " ".join(
        result.output.split()
    )


def test_datasets_commands_refuse_bad_input_before_any_connection(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("contacted the cluster")

    monkeypatch.setattr("tpwarden.cluster.cli.eval_datasets.Controller", refuse)
    r = CliRunner().invoke(app, ["eval", "datasets", "fetch", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "exactly one of --suite or --tasks" in " ".join(r.output.split())
    (tmp_path / "junk.tar.gz").write_bytes(b"junk")
    inv = _inventory_with_cache(tmp_path, tmp_path / "c")
    r = CliRunner().invoke(
        app, ["eval", "datasets", "load", str(tmp_path / "junk.tar.gz"), "-i", str(inv), "--json"]
    )
    assert (
        r.exit_code == 2
        and "not a readable datasets archive" in json.loads(r.stdout)["error"]["message"]
    )
    r = CliRunner().invoke(
        app, ["eval", "datasets", "load", str(tmp_path / "junk.tar.gz"), "-i", str(GOOD)]
    )
    assert r.exit_code == 2 and "set tpwarden.eval.hf_cache" in " ".join(r.output.split())
