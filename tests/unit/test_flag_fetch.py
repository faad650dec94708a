"""Fetching the flag table from the serving image (cluster/vllm/flag_fetch.py, `tpwarden flags fetch`,
provision's fetch), with a fake docker engine; and the dump script's in-image mode run for real
against a stand-in `vllm` package (issue 28, item 4)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import docker.errors
import pytest
from tpwarden.cluster import flag_tables
from tpwarden.cluster.cli import app
from tpwarden.cluster.cli import provision as provision_cli
from tpwarden.cluster.containers.gateway import DockerGateway
from tpwarden.cluster.containers.job import OneShot, OneShotResult
from tpwarden.cluster.errors import DockerError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations import flags as flags_op
from tpwarden.cluster.vllm.flag_fetch import (
    DUMP_SCRIPT,
    SCRIPT_IN_CONTAINER,
    FlagFetchFailed,
    fetch_job,
    fetch_table,
)
from typer.testing import CliRunner

from tests.unit.test_flag_tables import ID_A, ID_B, IMAGE, inventory, table_doc

runner = CliRunner()


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return tmp_path / "xdg-cache" / "tpwarden" / "flag-tables"


class FakeEngine:
    """The head's docker engine: one image, a scripted throwaway run."""

    def __init__(self, image_id: str | None = ID_A, result: OneShotResult | None = None):
        self.id = image_id
        self.result = result or OneShotResult(0, json.dumps(table_doc("0.33.0+sm121")), "")
        self.jobs: list[OneShot] = []

    def image_id(self, image: str) -> str | None:
        return self.id if image == IMAGE else None

    def run_once(self, job: OneShot) -> OneShotResult:
        self.jobs.append(job)
        return self.result


def test_the_job_runs_the_shipped_dump_script_with_the_images_python(tmp_path):
    spec = load_inventory(inventory(tmp_path, "0.33.0+sm121"))
    job = fetch_job(spec, DUMP_SCRIPT.read_bytes())
    assert job.image == IMAGE
    assert job.argv == ("python3", SCRIPT_IN_CONTAINER, "--from-image")
    assert job.files == {SCRIPT_IN_CONTAINER: DUMP_SCRIPT.read_bytes()}
    assert job.gpus is (spec.serving.gpus == "all")
    assert job.env == {k: str(v) for k, v in spec.serving.env.items()}
    assert job.labels["io.tpwarden.component"] == "flag-table"
    assert job.labels["io.tpwarden.node"] == spec.head.name


def test_fetch_runs_once_per_image_id_and_caches_it(tmp_path, cache_home):
    spec = load_inventory(inventory(tmp_path, "0.33.0+sm121"))
    engine = FakeEngine()
    first = fetch_table(spec, engine)
    assert len(engine.jobs) == 1 and not first.reused and first.mismatch is None
    assert first.image_id == ID_A and first.vllm_version == "0.33.0+sm121"
    assert first.path == cache_home / f"sha256-{'a' * 64}.json" and first.path.is_file()
    assert first.options == len(table_doc("0.33.0+sm121")["options"])
    again = fetch_table(spec, engine)
    assert len(engine.jobs) == 1 and again.reused  # same image ID: nothing ran
    fetch_table(spec, engine, refresh=True)
    assert len(engine.jobs) == 2
    engine.id = ID_B  # the tag now names another build: read its parser
    assert not fetch_table(spec, engine).reused and len(engine.jobs) == 3
    assert flag_tables.cached_id(IMAGE) == ID_B


def test_a_table_reporting_another_version_is_cached_and_named(tmp_path):
    spec = load_inventory(inventory(tmp_path, "0.33.0+sm121"))
    result = OneShotResult(0, json.dumps(table_doc("0.33.1")), "")
    fetched = fetch_table(spec, FakeEngine(result=result))
    assert fetched.mismatch == f"image {IMAGE} reports vLLM 0.33.1, not 0.33.0+sm121"


def test_noise_before_the_table_on_stdout_is_skipped(tmp_path):
    spec = load_inventory(inventory(tmp_path, "0.33.0+sm121"))
    noisy = "INFO some library talks\n" + json.dumps(table_doc("0.33.0+sm121")) + "\n"
    assert fetch_table(spec, FakeEngine(result=OneShotResult(0, noisy, ""))).mismatch is None


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (FakeEngine(image_id=None), "is not there: provisioning loads it"),
        (
            FakeEngine(
                result=OneShotResult(1, "", "x\nModuleNotFoundError: No module named 'vllm'")
            ),
            r"failed \(exit 1\): ModuleNotFoundError: No module named .vllm.",
        ),
        (FakeEngine(result=OneShotResult(0, "hello\n", "")), "printed no flag table"),
        (FakeEngine(result=OneShotResult(0, '{"vllm_version": "x"}', "")), "printed no flag"),
    ],
)
def test_fetch_failures_say_what_broke_and_cache_nothing(tmp_path, cache_home, engine, message):
    spec = load_inventory(inventory(tmp_path, "0.33.0+sm121"))
    with pytest.raises(FlagFetchFailed, match=message):
        fetch_table(spec, engine)
    assert flag_tables.cached(IMAGE) is None


class FakeConnector:
    engine = FakeEngine()

    def __init__(self, ssh) -> None:
        self.closed = False

    def docker(self, node):
        return self.engine

    def close(self) -> None:
        self.closed = True


def test_cli_fetch_then_plan_checks_argv_against_the_image(tmp_path, monkeypatch):
    monkeypatch.setattr(FakeConnector, "engine", FakeEngine())
    monkeypatch.setattr(flags_op, "NodeConnector", FakeConnector)
    inv = inventory(tmp_path, "0.33.0+sm121", '["--max-num-seqs", "8"]')
    assert runner.invoke(app, ["plan", "-i", str(inv)]).exit_code == 2
    result = runner.invoke(app, ["flags", "fetch", "-i", str(inv), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] and doc["image_id"] == ID_A and doc["vllm_version"] == "0.33.0+sm121"
    assert runner.invoke(app, ["plan", "-i", str(inv)]).exit_code == 0
    shown = runner.invoke(app, ["flags", "show", "-i", str(inv), "--json"])
    assert json.loads(shown.stdout)["source"] == f"image {ID_A}"


def test_cli_fetch_exits_2_when_the_image_reports_another_version(tmp_path, monkeypatch):
    result = OneShotResult(0, json.dumps(table_doc("0.33.1")), "")
    monkeypatch.setattr(FakeConnector, "engine", FakeEngine(result=result))
    monkeypatch.setattr(flags_op, "NodeConnector", FakeConnector)
    inv = inventory(tmp_path, "0.33.0+sm121")
    done = runner.invoke(app, ["flags", "fetch", "-i", str(inv)])
    assert done.exit_code == 2
    assert "reports vLLM 0.33.1, not 0.33.0+sm121 (set it to '0.33.1')" in done.output


@pytest.mark.parametrize(("version", "ok"), [("0.33.0", True), ("0.33.0+sm121", False)])
def test_provision_fetch_failure_is_fatal_only_without_a_shipped_table(
    tmp_path, monkeypatch, version, ok
):
    broken = OneShotResult(1, "", "ModuleNotFoundError: No module named 'vllm'")
    monkeypatch.setattr(FakeConnector, "engine", FakeEngine(result=broken))
    monkeypatch.setattr(flags_op, "NodeConnector", FakeConnector)
    inv = inventory(tmp_path, version)
    doc = provision_cli.flag_table(load_inventory(inv), quiet=True)
    assert doc["ok"] is ok and "No module named 'vllm'" in doc["error"]


FAKE_VLLM = {
    "vllm/__init__.py": '__version__ = "0.33.0+sm121"\n',
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/serve.py": (
        "import os\n"
        "assert 'VLLM_TARGET_DEVICE' not in os.environ  # the image picks its own platform\n"
        "class ServeSubcommand:\n"
        "    def subparser_init(self, subparsers):\n"
        "        p = subparsers.add_parser('serve')\n"
        "        p.add_argument('model_tag', nargs='?')\n"
        "        p.add_argument('--max-num-seqs', type=int)\n"
        "        p.add_argument('--enforce-eager', action='store_true')\n"
        "        p.add_argument('--sm121-only', '-S')\n"
        "        return p\n"
        "    def cmd(self, args):\n"
        "        pass\n"
    ),
    "vllm/utils/__init__.py": "",
    "vllm/utils/argparse_utils.py": "from argparse import ArgumentParser as FlexibleArgumentParser\n",
}


def test_dump_script_in_image_mode_reads_whatever_vllm_is_installed(tmp_path):
    """The script as the container runs it (a file, the image's python3, `--from-image`), with a
    stand-in vLLM of a custom version: its own parser's flags and version come out on stdout."""
    site, root = tmp_path / "site-packages", tmp_path / "root"
    for name, text in FAKE_VLLM.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    root.mkdir()
    (root / "secrets.py").write_text("raise ImportError('shadowed the stdlib')\n")
    script = root / SCRIPT_IN_CONTAINER.lstrip("/")
    script.write_bytes(DUMP_SCRIPT.read_bytes())  # alone, away from the package
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    env["PYTHONPATH"] = str(site)
    code = "import secrets, vllm.entrypoints.cli.serve"  # the stand-in for vLLM's own imports
    FAKE = {**FAKE_VLLM, "vllm/__init__.py": FAKE_VLLM["vllm/__init__.py"] + code + "\n"}
    (site / "vllm/__init__.py").write_text(FAKE["vllm/__init__.py"])
    done = subprocess.run(
        [sys.executable, str(script), "--from-image"],
        capture_output=True, text=True, env=env, cwd=root, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["vllm_version"] == "0.33.0+sm121" and doc["positional"] == ["model_tag"]
    by_flag = {f: o for o in doc["options"] for f in o["flags"]}
    assert by_flag["--sm121-only"]["flags"] == ["--sm121-only", "-S"]
    assert by_flag["--enforce-eager"]["takes_value"] is False
    assert by_flag["--max-num-seqs"]["takes_value"] is True
    path = flag_tables.store(IMAGE, ID_A, doc)  # what fetch stores
    assert flag_tables.cached(IMAGE).get("-S") is not None and path.is_file()


class FakeDockerAPI:
    """docker-py's APIClient as far as `DockerGateway.run_once` uses it."""

    def __init__(self, fail_start: bool = False, leftovers: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple] = []
        self.fail_start = fail_start
        self.polls = 0
        self.leftovers = leftovers

    def containers(self, all: bool, filters: dict):  # noqa: A002 - docker-py's name
        self.calls.append(("containers", all, filters))
        return [{"Id": c} for c in self.leftovers]

    def create_host_config(self, **kw):
        return kw

    def create_container(self, **kw):
        self.calls.append(("create", kw))
        return {"Id": "c0ffee"}

    def put_archive(self, container, path, data):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        self.calls.append(("put_archive", container, path, files))

    def start(self, container):
        if self.fail_start:
            raise docker.errors.APIError("no such runtime")
        self.calls.append(("start", container))

    def inspect_container(self, container):
        self.polls += 1
        status = "exited" if self.polls > 1 else "running"
        return {"State": {"Status": status, "ExitCode": 3}}

    def logs(self, container, stdout, stderr, tail="all"):
        return b"{}\n" if stdout else b"warn\n"

    def remove_container(self, container, force):
        self.calls.append(("remove", container, force))


def test_gateway_run_once_copies_the_file_waits_reads_and_removes(monkeypatch):
    monkeypatch.setattr("tpwarden.cluster.containers.gateway.time.sleep", lambda s: None)
    api = FakeDockerAPI(leftovers=("left0",))
    job = OneShot(
        image="img:1",
        argv=("python3", SCRIPT_IN_CONTAINER, "--from-image"),
        files={SCRIPT_IN_CONTAINER: b"print(1)\n"},
        env={"A": "1"},
        labels={"io.tpwarden.component": "flag-table"},
    )
    result = DockerGateway("node1", api).run_once(job)
    assert result == OneShotResult(3, "{}\n", "warn\n")
    # first the exited one-shots of the same labels that a killed caller left
    assert api.calls[:2] == [
        ("containers", True,
         {"label": ["io.tpwarden.component=flag-table"], "status": ["exited", "dead"]}),
        ("remove", "left0", True),
    ]  # fmt: skip
    del api.calls[:2]
    create = api.calls[0][1]
    assert create["entrypoint"] == ["python3"]
    assert create["command"] == [SCRIPT_IN_CONTAINER, "--from-image"]
    assert create["environment"] == ["A=1"] and create["host_config"]["network_mode"] == "none"
    assert create["host_config"]["device_requests"] is None  # gpus False
    assert api.calls[1] == (
        "put_archive",
        "c0ffee",
        "/",
        {"tpwarden-dump-serve-flags.py": b"print(1)\n"},
    )
    assert api.calls[-1] == ("remove", "c0ffee", True) and api.polls == 2


def test_gateway_run_once_removes_the_container_when_start_fails():
    api = FakeDockerAPI(fail_start=True)
    with pytest.raises(DockerError, match="no such runtime"):
        DockerGateway("node1", api).run_once(OneShot(image="img:1", argv=("python3",)))
    assert api.calls[-1] == ("remove", "c0ffee", True)


def _provision(tmp_path, monkeypatch, engine: FakeEngine, version: str, *args: str):
    from tpwarden.cluster.cli import provision as provision_cli
    from tpwarden.cluster.provision.gateway import ProvisionResult

    def run(request, on_event=None):
        return ProvisionResult(
            ident="r1", artifact_dir=tmp_path, playbook="site.yml", check=request.check,
            status="successful", rc=0, hosts=(), failures=(), duration_s=1.0,
        )  # fmt: skip

    monkeypatch.setattr(provision_cli.prov, "prepare", lambda request: None)
    monkeypatch.setattr(provision_cli.prov, "run", run)
    monkeypatch.setattr(FakeConnector, "engine", engine)
    monkeypatch.setattr(flags_op, "NodeConnector", FakeConnector)
    inv = inventory(tmp_path, version)
    result = runner.invoke(app, ["provision", "-i", str(inv), "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_provision_fetches_the_images_table_after_its_run(tmp_path, monkeypatch):
    engine = FakeEngine()
    code, doc = _provision(tmp_path, monkeypatch, engine, "0.33.0+sm121")
    assert code == 0 and len(engine.jobs) == 1
    assert doc["ok"] and doc["flag_table"]["ok"] and doc["flag_table"]["image_id"] == ID_A
    assert flag_tables.cached(IMAGE) is not None


@pytest.mark.parametrize("args", [("--check",), ("--tags", "units"), ("--remove",)])
def test_provision_fetches_nothing_when_it_did_not_bring_the_image(tmp_path, monkeypatch, args):
    engine = FakeEngine()
    code, doc = _provision(tmp_path, monkeypatch, engine, "0.33.0+sm121", *args)
    assert code == 0 and doc["flag_table"] is None and engine.jobs == []


def test_provision_fails_when_no_table_could_be_had(tmp_path, monkeypatch):
    broken = FakeEngine(result=OneShotResult(127, "", "python3: not found"))
    code, doc = _provision(tmp_path, monkeypatch, broken, "0.33.0+sm121")
    assert code == 1 and doc["ok"]  # the playbook ran fine; the table is what is missing
    assert not doc["flag_table"]["ok"] and "python3: not found" in doc["flag_table"]["error"]
    code, doc = _provision(tmp_path, monkeypatch, broken, "0.33.0")  # shipped table: a warning
    assert code == 0 and doc["flag_table"]["ok"] is True
