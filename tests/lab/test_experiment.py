"""The unattended night on the lab (simulator), issue 54's second step: a plan of two restarting
variants (the drafter's k changed; the drafter off) run through the real CLI under the
rollout's locks: production measured, each variant a guarded rollout measured by the ledger's
canary, production restored by its revision (the inventory byte for byte, every node on
production's config hash) and measured again; the ledger holds canaries of three
configurations; `--resume` then has nothing left and says so.
The deadline guard's lab test is tests/lab/test_experiment_guard.py (on lab lane 2)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.spec import ClusterSpec

from tests.lab.conftest import tpwarden

pytestmark = pytest.mark.lab

VARIANTS = """\
variants:
  - name: k5
    set: [drafter.num_speculative_tokens=5]
  - name: no-drafter
    set: [drafter=null]
"""
PLAN = 'restore_by: "+02:00"\n' + VARIANTS


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def _up(inv: Path) -> tuple[ClusterSpec, str, bytes]:
    """The lab up on the inventory: its spec, production's config hash, the file's bytes."""
    up = tpwarden("up", "-i", str(inv), "--replace", "--json", timeout_s=300)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    spec = load_inventory(inv)
    return spec, spec.config_hash(), inv.read_bytes()


@pytest.mark.timeout(1800, func_only=True)  # 4 canaries, 3 restarts and an up; not the lock wait
def test_a_night_of_two_variants_restores_production_and_resume_has_nothing_left(
    night_inv: Path, tmp_path: Path
) -> None:
    inv = night_inv
    t0 = time.monotonic()
    spec, production, before = _up(inv)
    assert spec.serving.drafter is not None  # the lab's drafter: "off" is a real variant
    plan = tmp_path / "night.yml"
    plan.write_text(PLAN)

    night = tpwarden("experiment", "run", str(plan), "-i", str(inv), "--json", timeout_s=1500)
    assert night.stdout.strip(), night.stderr[-3000:]
    doc = json.loads(night.stdout)
    assert night.returncode == 0 and doc["ok"], (doc, night.stderr[-3000:])
    assert doc["done"] == ["k5", "no-drafter"] and not doc["failed"] and not doc["skipped"]
    assert doc["restored"]["ok"] and doc["restored"]["restarted"]

    results = tmp_path / "state" / "experiment" / spec.name / "night"
    hashes = set()
    for name in ("k5", "no-drafter"):
        res = _read(results / f"{name}.result.json")
        assert res["canary"]["status"] == "ok" and res["canary"]["levels"][0]["output_tok_s"] > 0
        assert res["config_hash"] != production and res["rollout_id"]
        hashes.add(res["config_hash"])
    assert len(hashes) == 2  # each variant is production plus its own change
    start = _read(results / "production-start.result.json")
    end = _read(results / "production-end.result.json")
    assert start["canary"]["status"] == end["canary"]["status"] == "ok"
    assert end["drift"]["1"] > 0 and end["restore"]["ok"]
    assert _read(results / "run.json")["finished"] is not None
    kinds = [json.loads(x)["kind"] for x in (results / "events.jsonl").read_text().splitlines()]
    # the deadline guard is started first (and writes its own `guard_*` lines as it goes)
    assert kinds[0] == "guard_started" and "guard_armed" in kinds
    night_kinds = [k for k in kinds if not k.startswith("guard_")]
    assert night_kinds[0] == "run_begin" and night_kinds[-1] == "run_end"
    assert kinds.count("variant_end") == 2 and "restore_end" in kinds

    # production restored: the inventory byte for byte, every node on its config hash
    assert inv.read_bytes() == before
    with Controller(spec) as ctl:
        assert {n.config_hash for n in ctl.status(with_gpus=False).nodes} == {production}
        assert ctl.probe()[0]
    with Ledger.open(ledger_file(spec), readonly=True) as led:
        measured = [c for c in led.canaries(spec.name) if c.trigger == "experiment"]
    assert len(measured) == 4 and all(c.status == "ok" for c in measured)
    assert len({c.cfg for c in measured}) == 3  # production, k5, the drafter off

    again = tpwarden("experiment", "run", str(plan), "-i", str(inv), "--resume", timeout_s=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "nothing is left" in again.stdout
    status = json.loads(tpwarden("experiment", "status", str(plan), "-i", str(inv),
                                 "--json").stdout)  # fmt: skip
    assert [v["status"] for v in status["variants"]] == ["done", "done"]
    assert status["lock_holder"] is None
    print(tpwarden("experiment", "status", str(plan), "-i", str(inv)).stdout)
    print(f"the night on the lab took {time.monotonic() - t0:.0f} s (up included)")
