"""The report's rollout on real vLLM: k=7 -> k=3 through `tpwarden rollout` with the real
`vllm bench serve` client, a real restart, real before/after figures, and the guard deciding
(kept or rolled back). Boots its own k=7 first (`own_config`: the tune test before it left the
server on another k); leaves k=3 when kept, k=7 when rolled back, restored by the next test that
needs the lab's config (leave_for_next)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory

pytestmark = pytest.mark.engine

TPWARDEN = [sys.executable, "-m", "tpwarden.cluster.cli"]


@pytest.mark.own_config
@pytest.mark.timeout(1800)
def test_k7_to_k3_real_restart_before_after_and_guard(engine_server, tmp_path, monkeypatch):
    path = tmp_path / "inventory.yml"
    text = Path(engine_server.inventory).read_text()
    assert "num_speculative_tokens: 3" in text
    path.write_text(text.replace("num_speculative_tokens: 3", "num_speculative_tokens: 7"))
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TPWARDEN_RUNS_DIR", str(tmp_path / "runs"))
    k7 = load_inventory(path)
    with Controller(k7, state_dir=tmp_path / "state", node_timeout_s=10) as ctl:
        assert ctl.up(timeout_s=900, replace=True).ok
    try:
        result = subprocess.run(
            [*TPWARDEN, "rollout", "-i", str(path), "--set", "drafter.num_speculative_tokens=3",
             "--bench", "quick", "--guard", "c=32 aggregate >= -50%", "--yes"],
            capture_output=True, text=True, timeout=1700,
        )  # fmt: skip
        rollouts = tmp_path / "state" / "rollout" / engine_server.spec.name  # lab, lab2 (lane)
        record = json.loads((rollouts / "current.json").read_text())
        b, a = record["baseline"]["rows"], record["after"]["rows"]
        print(f"real rollout k7->k3: step {record['step']}\n before {b}\n after {a}")
        assert b and a, record  # both measured on the real server
        assert all(r["aggregate"] > 0 for r in (*b.values(), *a.values())), (b, a)
        if result.returncode == 0:  # kept: the server runs the new config
            assert record["step"] == "done", record
            assert "num_speculative_tokens: 3" in path.read_text()
            with Controller(load_inventory(path), state_dir=tmp_path / "state") as ctl:
                st = ctl.status(timeout_s=15)
                assert st.ok and st.server.drafter_k == 3, st.notes
        else:  # the guard rolled back: the old config runs again
            assert "rolled" in record["step"], (record["step"], result.stdout[-2000:])
            assert "num_speculative_tokens: 7" in path.read_text()
    finally:
        engine_server.leave_for_next()
