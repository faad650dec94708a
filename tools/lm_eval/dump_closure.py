"""Write the lm-eval closure's pins that `eval image build` ships (issue 52 item 7).

    .venv/bin/python tools/lm_eval/dump_closure.py [VENV] > cluster/data/lm_eval_0.4.13_closure.json

VENV defaults to the venv tools/lm_eval/install.sh builds. tests/unit/test_eval_image_build.py
fails when the shipped file and that venv disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tpwarden.cluster.eval.image_build import closure_json, venv_metadata
from tpwarden.cluster.eval.presets import EVAL_VENV

if __name__ == "__main__":
    venv = Path(sys.argv[1]) if len(sys.argv) > 1 else EVAL_VENV
    sys.stdout.write(closure_json(venv_metadata(venv)))
