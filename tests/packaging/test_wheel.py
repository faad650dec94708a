"""The built wheel installs one import name, `tpwarden`, beside PyPI's `watchdog` (issue 18).

Before, the wheel installed top-level `cluster` and `watchdog`: PyPI's `watchdog` (filesystem
events) then failed to import, and uninstalling it deleted tpwarden's own files. This builds the
wheel as a user would (isolated build), installs it next to PyPI's `watchdog` in a fresh venv
and checks that both import and that uninstalling either leaves the other intact.

The wheel also carries the playbooks (`tpwarden.playbooks`): installed in a venv with no checkout
anywhere near, tpwarden finds them, `provision` prepares its run from them, and the nodes' wheel
is repacked from the installation (no source tree to build it from).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
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
    # Built from a copy of the files git knows (tracked, or new and not ignored): pip builds in
    # the tree, and setuptools packs whatever an earlier build left in build/lib (a package since
    # removed from the wheel would still ship from a developer's checkout)
    src = tmp_path_factory.mktemp("src")
    listed = _run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                   "--exclude-standard"])  # fmt: skip
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)])
    (found,) = out.glob("tpwarden-*.whl")
    return found


def test_the_wheel_has_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"tpwarden", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert "tpwarden/cluster/inventory/load.py" in names
    assert "tpwarden/watchdog/policy.py" in names
    # the rooms: control, bench, rollout and provision are packages; the node side is its own
    for package in ("cluster/control", "cluster/bench", "cluster/rollout", "cluster/provision"):
        assert f"tpwarden/{package}/__init__.py" in names
    assert "tpwarden/node/thermal/app.py" in names and "tpwarden/node/collector.py" in names
    assert "tpwarden/cluster/bench/prompts/ko-mixed-20.jsonl" in names  # bench's default prompts
    assert "tpwarden/cluster/data/vllm_serve_flags_0.33.0.json" in names
    # `tpwarden flags fetch` copies the dump script into the serving image's container
    assert "tpwarden/cluster/vllm/dump_serve_flags.py" in names
    assert "tpwarden/watchdog/monitoring/tpwarden-rules.yml" in names  # monitoring_files
    assert "tpwarden/watchdog/monitoring/grafana-night.json" in names
    # the lab is a development tool (a source checkout's editable install sees lab/):
    # neither the operators' nor the nodes' wheel carries it, nor its C stand-in and Dockerfiles
    assert not [n for n in names if n.startswith("tpwarden/lab/")]


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
        "print(u.find_spec('tpwarden.watchdog.policy').origin)\n"
        "print(u.find_spec('tpwarden.cluster.inventory.load').origin)\n"
    )
    origins = _run([py, "-c", probe]).split()
    assert all("site-packages/tpwarden/" in o for o in origins), origins

    _run([*pip, "uninstall", "-y", "watchdog"])
    for origin in origins:
        assert Path(origin).is_file(), f"uninstalling PyPI's watchdog removed {origin}"
    _run([py, "-c", "import importlib.util as u; assert u.find_spec('tpwarden.watchdog.policy')"])

    _run([*pip, "install", "--no-deps", PYPI_WATCHDOG])
    _run([*pip, "uninstall", "-y", "tpwarden"])
    _run([py, "-c", "import watchdog.observers, watchdog.events"])
    assert not any(Path(o).exists() for o in origins)


# --- the playbooks ship in the wheel; provisioning needs no checkout ---------------------------


def _tracked_playbook_files() -> list[str]:
    done = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "playbooks"], capture_output=True, text=True
    )
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.split()
    # no git (a source tarball): every file but Python's caches
    return [
        str(p.relative_to(REPO))
        for p in (REPO / "playbooks").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]


def test_the_wheel_carries_every_playbook_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = _tracked_playbook_files()
    assert "playbooks/site.yml" in tracked and "playbooks/remove.yml" in tracked
    missing = [f for f in tracked if "tpwarden/" + f not in names]
    assert not missing, (
        f"not in the wheel (pyproject package-data of tpwarden.playbooks): {missing}"
    )
    for name in (
        "site.yml",
        "ansible.cfg",
        "filter_plugins/tpwarden_filters.py",
        "roles/units/templates/tpwarden-thermal.service.j2",
        "roles/units/handlers/main.yml",
        "roles/model/files/tpwarden_manifest.py",
    ):
        assert f"tpwarden/playbooks/{name}" in names, name  # fmt: skip
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the built wheel and no checkout. Its dependencies (typer, rich, Ansible
    for the syntax check) are this test run's own, seen through a .pth line after the venv's
    own site-packages: offline and seconds, where `pip install 'tpwarden[control]'` downloads
    ~300 MB (the lab test tests/lab/test_provision_wheel.py does that install for real)."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin" / "python"), "-m", "pip", "-q", "install", "--no-deps", str(wheel)])
    site = Path(_run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                      "print(sysconfig.get_paths()['purelib'])"]).strip())  # fmt: skip
    (site / "zz_tpwarden_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_installed_tpwarden_finds_its_playbooks_without_a_checkout(
    installed: Path, tmp_path: Path
) -> None:
    py = str(installed / "bin" / "python")
    probe = (
        "import json; from tpwarden.cluster.provision import gateway as p\n"
        "print(json.dumps([str(p.PLAYBOOK_DIR), p.SOURCE_DIR and str(p.SOURCE_DIR)]))\n"
    )
    playbooks, source = json.loads(_run([py, "-c", probe], cwd=tmp_path))
    playbooks = Path(playbooks)
    assert source is None  # installed: no source tree
    assert playbooks.is_dir() and str(playbooks).startswith(str(installed))
    assert playbooks.name == "playbooks" and "site-packages/tpwarden" in str(playbooks)
    assert (playbooks / "site.yml").is_file() and (playbooks / "roles/units/tasks").is_dir()
    assert (playbooks / "filter_plugins/tpwarden_filters.py").is_file()

    # `tpwarden provision` prepares its ansible-runner run from the installed playbooks
    help_text = _run([str(installed / "bin" / "tpwarden"), "provision", "--help"], cwd=tmp_path)
    assert "--check" in help_text and "--source" in help_text
    inventory = tmp_path / "inventory.yml"
    shutil.copyfile(REPO / "inventory.example.yml", inventory)
    prepare = (
        "import json, sys; from pathlib import Path; from tpwarden.cluster.provision import gateway as p\n"
        "req = p.ProvisionRequest(inventory=Path(sys.argv[1]), check=True, "
        "state_root=Path(sys.argv[2]), ident='t')\n"
        "print(json.dumps(p.prepare(req).kwargs))\n"
    )
    kwargs = json.loads(_run([py, "-c", prepare, str(inventory), str(tmp_path / "state")],
                             cwd=tmp_path))  # fmt: skip
    assert kwargs["project_dir"] == str(playbooks) and kwargs["playbook"] == "site.yml"
    assert kwargs["envvars"]["ANSIBLE_CONFIG"] == str(playbooks / "ansible.cfg")
    assert kwargs["extravars"]["tpwarden_source_dir"] == ""  # the role repacks the install

    # Ansible itself resolves the roles from the installed directory
    env_cfg = f"ANSIBLE_CONFIG={playbooks / 'ansible.cfg'}"
    _run(["env", env_cfg, f"HOME={tmp_path}", py, "-m", "ansible.cli.playbook", "--syntax-check",
          "-i", str(inventory), str(playbooks / "site.yml")], cwd=tmp_path)  # fmt: skip


def test_installed_tpwarden_says_the_lab_is_a_checkout_tool(
    installed: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        # `status`, read-only: were the lab installed after all, this must not touch a real one
        [str(installed / "bin" / "tpwarden"), "lab", "status"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the lab is not installed" in done.stderr and "Traceback" not in done.stderr
    top = _run([str(installed / "bin" / "tpwarden"), "--help"], cwd=tmp_path)
    assert "lab" in top and "provision" in top  # every other command is there


def test_nodes_wheel_is_repacked_from_the_installation(
    wheel: Path, installed: Path, tmp_path: Path
) -> None:
    py = str(installed / "bin" / "python")
    repack = (
        "import sys; from pathlib import Path\n"
        "from tpwarden.cluster.provision import wheelhouse as wh\n"
        "print(wh.tpwarden_wheel(None, Path(sys.argv[1])))\n"
    )
    first = Path(_run([py, "-c", repack, str(tmp_path / "a")], cwd=tmp_path).strip())
    again = Path(_run([py, "-c", repack, str(tmp_path / "b")], cwd=tmp_path).strip())
    assert first.name == wheel.name
    assert first.read_bytes() == again.read_bytes()  # same install, same bytes
    built, repacked = zipfile.ZipFile(wheel), zipfile.ZipFile(first)
    assert sorted(built.namelist()) == sorted(repacked.namelist())
    for name in built.namelist():
        if not name.endswith(".dist-info/RECORD"):
            assert built.read(name) == repacked.read(name), name
    # pip takes it (RECORD checked) and installs the same files and the console script
    other = tmp_path / "node-venv"
    _run([sys.executable, "-m", "venv", str(other)])
    _run([str(other / "bin" / "python"), "-m", "pip", "-q", "install", "--no-deps", str(first)])
    assert (other / "bin" / "tpwarden").is_file()
    probe = "import tpwarden.playbooks as p, os; print(os.path.dirname(p.__file__))"
    node_playbooks = Path(_run([str(other / "bin" / "python"), "-c", probe]).strip())
    assert (node_playbooks / "site.yml").is_file()


# The lab's client image: Python 3.11 with pip (the eval image's base facts need both).
EVAL_BASE = "tpwarden-lab/vllm-client:latest"


def _image_present(image: str) -> bool:
    if shutil.which("docker") is None:
        return False
    done = subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=60)
    return done.returncode == 0


def test_installed_tpwarden_plans_the_eval_image_without_tools_lm_eval(
    installed: Path, tmp_path: Path
) -> None:
    # issue 52 item 7: `eval image build` read its pins from tools/lm_eval/'s venv, which a pip
    # install has neither of; the pins ship in the package now
    py = str(installed / "bin" / "python")
    probe = (
        "import json; from tpwarden.cluster.eval import image_build as b\n"
        "m = b.shipped_metadata()\n"
        "print(json.dumps([str(b.CLOSURE), m['lm-eval'].version, len(m)]))\n"
    )
    closure, version, count = json.loads(_run([py, "-c", probe], cwd=tmp_path))
    assert closure.startswith(str(installed)) and version == "0.4.13" and count > 20
    if not _image_present(EVAL_BASE):
        pytest.skip(f"the dry run reads a base image's facts: {EVAL_BASE} is built by the lab")
    # the head is this machine (ansible_host: local: its Docker engine, no SSH); no lm-eval venv
    inventory = tmp_path / "inventory.yml"
    text = (REPO / "inventory.example.yml").read_text()
    inventory.write_text(text.replace("ansible_host: 10.0.0.11", "ansible_host: local", 1))
    argv = [str(installed / "bin" / "tpwarden"), "eval", "image", "build", "-i", str(inventory),
            "--base", EVAL_BASE, "--dry-run", "--json"]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TPWARDEN_LMEVAL_VENV": "/nonexistent"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["dry_run"] and doc["pins_from"].startswith("the pins shipped")
    assert doc["wheels"]["lm-eval"] == "0.4.13" and doc["tag"].startswith("tpwarden/eval-client:")
    assert "FROM " + EVAL_BASE in doc["dockerfile"]
