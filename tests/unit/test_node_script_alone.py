"""node/bench_facts.py is copied to a node and run as `python3 FILE` (bench.manifest.NODE_SCRIPT):
no tpwarden there, so it must run on the standard library alone. CI39d's lab bench test found
it importing tpwarden.cluster.durable for a type alias: every node's manifest lost its
processes ("Expecting value: line 1 column 1")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tpwarden.cluster.bench.manifest import NODE_SCRIPT


def test_the_bench_facts_script_runs_without_tpwarden(tmp_path: Path) -> None:
    alone = tmp_path / "bench_facts.py"
    shutil.copyfile(NODE_SCRIPT, alone)
    done = subprocess.run(
        # -S: no site-packages (no tpwarden, as on a node); -I: no user site, no PYTHONPATH
        [sys.executable, "-I", "-S", str(alone), "--sample-s", "0.05"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert isinstance(facts["processes"], list) and "thermal_zones" in facts
