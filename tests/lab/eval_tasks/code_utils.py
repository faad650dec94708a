"""pass@1 for the HumanEval-style lab task: run prompt + completion + tests in a subprocess."""

import os
import subprocess
import sys
import tempfile


def run_program(program: str, timeout_s: float = 10.0) -> bool:
    if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        raise RuntimeError("HF_ALLOW_CODE_EVAL=1 is required to execute generated code")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        r = subprocess.run([sys.executable, f.name], capture_output=True, timeout=timeout_s)
        return r.returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        os.unlink(f.name)


def process_results(doc, results):
    program = doc["prompt"] + results[0] + "\n\n" + doc["test"] + f"\ncheck({doc['entry_point']})\n"
    return {"pass@1": 1.0 if run_program(program) else 0.0}
