"""tools/vllm/smoked.sh: an installer skips its ~22 s smoke test only while the venv is exactly
as it was when the smoke test last passed (same installer stamp, same installed distributions)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HELPER = Path(__file__).resolve().parents[2] / "tools" / "vllm" / "smoked.sh"


def _bash(venv: Path, call: str) -> subprocess.CompletedProcess[str]:
    """`call` in bash with the helper sourced and the venv as $1."""
    script = f'set -euo pipefail; source "{HELPER}"; {call}'
    return subprocess.run(["bash", "-c", script, "_", str(venv)], capture_output=True, text=True)


def _smoked(venv: Path, stamp: str) -> int:
    return _bash(venv, f'already_smoked "$1" "{stamp}"').returncode


def _venv(tmp_path: Path) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for dist in ("torch-2.13.0+cpu.dist-info", "vllm-0.33.0.dist-info"):
        (site / dist).mkdir(parents=True)
    return tmp_path / "venv"


def test_a_recorded_smoke_holds_until_the_stamp_or_a_package_changes(tmp_path):
    venv = _venv(tmp_path)
    site = venv / "lib" / "python3.11" / "site-packages"
    assert _smoked(venv, "vllm=0.33.0 reqs=abc") == 1  # never smoke-tested
    assert _bash(venv, 'record_smoked "$1" "vllm=0.33.0 reqs=abc"').returncode == 0
    assert _smoked(venv, "vllm=0.33.0 reqs=abc") == 0
    assert _smoked(venv, "vllm=0.33.0 reqs=def") == 1  # other requirements

    (site / "numpy-2.3.5.dist-info").mkdir()  # a package installed since
    assert _smoked(venv, "vllm=0.33.0 reqs=abc") == 1
    (site / "numpy-2.3.5.dist-info").rmdir()
    assert _smoked(venv, "vllm=0.33.0 reqs=abc") == 0

    torch = site / "torch-2.13.0+cpu.dist-info"  # the same version reinstalled
    stat = torch.stat()
    os.utime(torch, (stat.st_atime, stat.st_mtime + 5))
    assert _smoked(venv, "vllm=0.33.0 reqs=abc") == 1


def _installed(venv: Path, stamp: str, smoke: str) -> subprocess.CompletedProcess[str]:
    """An installer's early exit, with a smoke test that says it ran and passes or fails."""
    return _bash(
        venv,
        f'log() {{ echo "log: $*"; }}; smoke() {{ echo smoke; {smoke}; }}; '
        f'exit_if_installed "$1/stamp" "$1" "{stamp}"; echo install',
    )


def test_the_installers_early_exit_smoke_tests_once_then_trusts_the_record(tmp_path):
    venv = _venv(tmp_path)
    assert _installed(venv, "v=1", "true").stdout == "install\n"  # no stamp: install
    (venv / "stamp").write_text("v=1\n")
    first = _installed(venv, "v=1", "true")
    assert (first.returncode, first.stdout) == (0, f"smoke\nlog: already installed in {venv}\n")
    again = _installed(venv, "v=1", "false")  # no smoke test: it would fail now
    assert again.stdout == f"log: already installed in {venv} (smoke-tested as it is now)\n"
    assert _installed(venv, "v=2", "true").stdout == "install\n"  # another stamp: install
    (venv / "lib" / "python3.11" / "site-packages" / "numpy-2.3.5.dist-info").mkdir()
    broken = _installed(venv, "v=1", "false")  # changed since: smoke-tested, fails, reinstall
    assert broken.stdout == "smoke\ninstall\n"


def test_both_installers_exit_early_through_the_shared_record():
    for name in ("install-cpu.sh", "install-cpu-serve.sh"):
        text = (HELPER.parent / name).read_text()
        assert 'source "$HERE/smoked.sh"' in text, name
        assert 'exit_if_installed "$STAMP" "$VENV" "$(want_stamp)"' in text, name
        assert 'record_smoked "$VENV" "$(want_stamp)"' in text, name  # after a fresh install
