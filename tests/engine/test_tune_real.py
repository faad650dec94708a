"""Issue 33's last check on real vLLM: `tpwarden tune drafter --apply` on the lab's n-gram
drafter at k=3, with the smallest levels. It measures the real per-position counters, predicts
every k' in 0..3, and either rolls the recommendation out (a real restart, the same sweep after,
the guards deciding) with predicted against measured per level, or says the current k is best.
Works on a copy of the lab inventory (the rollout edits that copy). Runs just before the k7->k3
rollout test, which boots its own config first: the server is left on the k it applied
(leave_for_next), restored by the next test that needs the lab's config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tpwarden.lab.client_image import CLIENT_LATEST

pytestmark = pytest.mark.engine

TPWARDEN = [sys.executable, "-m", "tpwarden.cluster.cli"]


@pytest.mark.timeout(1800)
def test_tune_drafter_apply_on_the_real_ngram_drafter(engine_server, tmp_path, monkeypatch):
    inv = tmp_path / "inventory.yml"
    inv.write_text(Path(engine_server.inventory).read_text())
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(tmp_path / "state"))
    runs = tmp_path / "runs"
    try:
        result = subprocess.run(
            [*TPWARDEN, "tune", "drafter", "-i", str(inv), "--levels", "1,4",
             "--profile", "c1:0.5,c4:0.5", "--num-prompts", "4", "--output-len", "32",
             "--client-image", CLIENT_LATEST, "--runs-dir", str(runs), "--plot",
             str(tmp_path / "k.png"), "--apply", "--yes", "--json"],
            capture_output=True, text=True, timeout=1700,
        )  # fmt: skip
        assert result.stdout, result.stderr[-3000:]
        doc = json.loads(result.stdout)
        assert doc["command"] == "tune drafter" and doc["measured_k"] == 3, doc.get("error")
        for lv in doc["levels"]:  # the real counters moved, position by position
            assert lv["drafts"] > 0 and len(lv["accepted_per_pos"]) == 3, lv
            assert lv["accepted_per_pos"] == sorted(lv["accepted_per_pos"], reverse=True), lv
        assert sorted({p["k"] for p in doc["predictions"]}) == [0, 1, 2, 3]
        ap = doc["applied"]
        print(f"real tune k=3 -> {doc['recommendation']['k']}: {ap['step']}")
        if doc["recommendation"]["k"] == 3:
            assert ap["step"] == "not_needed" and result.returncode == 0, ap
            return
        assert ap["step"] in ("done", "rolled_back"), (ap, result.stderr[-3000:])
        assert result.returncode == (0 if ap["step"] == "done" else 1)
        for lv in ap["levels"]:  # the closing note: predicted vs measured, error as a ratio
            print(f"  c={lv['concurrency']}: predicted {lv['predicted_tok_s']:.1f}, "
                  f"measured {lv['measured_tok_s']:.1f}, ratio {lv['ratio']:.2f}")  # fmt: skip
            assert lv["measured_tok_s"] > 0 and lv["ratio"] > 0, lv
        saved = json.loads((Path(doc["source"]) / "tune.json").read_text())
        assert saved["applied"]["rollout_id"] == ap["rollout_id"]
        assert (tmp_path / "k.png").read_bytes()[:4] == b"\x89PNG"
        k_in_file = ap["to_k"] if ap["step"] == "done" else 3
        text = inv.read_text()
        assert (f"num_speculative_tokens: {k_in_file}" in text) or (k_in_file == 0), text
    finally:
        engine_server.leave_for_next()
