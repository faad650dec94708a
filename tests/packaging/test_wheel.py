"""The built wheel installs one import name, `servectl`, beside PyPI's `watchdog` (issue 18).

Before, the wheel installed top-level `cluster` and `watchdog`: PyPI's `watchdog` (filesystem
events) then failed to import, and uninstalling it deleted servectl's own files. This builds the
wheel as a user would (isolated build), installs it next to PyPI's `watchdog` in a fresh venv
and checks that both import and that uninstalling either leaves the other intact.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYPI_WATCHDOG = "watchdog==6.0.0"


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    # cwd outside the checkout: `python -c` puts the cwd first on sys.path, and the checkout's
    # own `watchdog/` folder would shadow what is installed
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd or "/")
    assert done.returncode == 0, f"{argv}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)])
    (found,) = out.glob("servectl-*.whl")
    return found


def test_the_wheel_has_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"servectl", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert "servectl/cluster/inventory.py" in names
    assert "servectl/watchdog/policy.py" in names
    assert "servectl/cluster/data/vllm_serve_flags_0.33.0.json" in names
    assert "servectl/watchdog/monitoring/servectl-rules.yml" in names  # monitoring_files
    assert "servectl/watchdog/monitoring/grafana-night.json" in names


def test_installed_beside_pypi_watchdog_both_import_and_uninstall_apart(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py, pip = str(venv / "bin" / "python"), [str(venv / "bin" / "python"), "-m", "pip", "-q"]
    _run([*pip, "install", "--no-deps", PYPI_WATCHDOG, str(wheel)])
    # find_spec imports the parent packages only: no runtime dependency is needed for this
    probe = (
        "import importlib.util as u, watchdog.observers, watchdog.events\n"
        "print(u.find_spec('servectl.watchdog.policy').origin)\n"
        "print(u.find_spec('servectl.cluster.inventory').origin)\n"
    )
    origins = _run([py, "-c", probe]).split()
    assert all("site-packages/servectl/" in o for o in origins), origins

    _run([*pip, "uninstall", "-y", "watchdog"])
    for origin in origins:
        assert Path(origin).is_file(), f"uninstalling PyPI's watchdog removed {origin}"
    _run([py, "-c", "import importlib.util as u; assert u.find_spec('servectl.watchdog.policy')"])

    _run([*pip, "install", "--no-deps", PYPI_WATCHDOG])
    _run([*pip, "uninstall", "-y", "servectl"])
    _run([py, "-c", "import watchdog.observers, watchdog.events"])
    assert not any(Path(o).exists() for o in origins)
