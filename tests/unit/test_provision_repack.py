"""The nodes' tpwarden wheel without a source tree: repacked from an installed distribution
(`provision_repack`), and the wheelhouse built from it with an injected pip (no network).

The installed distribution is a small fake site-packages written here (files, dist-info, RECORD
as pip writes it); the real wheel round trip is in tests/packaging/test_wheel.py."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import json
import zipfile
from pathlib import Path

import jinja2.nativetypes
import pytest
import yaml
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.provision import gateway as prov
from tpwarden.cluster.provision import repack as rp
from tpwarden.cluster.provision import wheelhouse as wh

ROOT = Path(__file__).resolve().parents[2]
DIST_INFO = "tpwarden-0.1.0.dist-info"


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _install(site: Path) -> md.Distribution:
    """What pip leaves after installing tpwarden's wheel: files, dist-info, RECORD, script."""
    wheel_files = {
        "tpwarden/cluster/__init__.py": b"",
        "tpwarden/cluster/provision/gateway.py": b"X = 1\n",
        "tpwarden/playbooks/site.yml": b"- hosts: all\n",
        "tpwarden/playbooks/roles/units/templates/a.service.j2": b"[Unit]\n",
        f"{DIST_INFO}/METADATA": (
            b"Metadata-Version: 2.4\nName: tpwarden\nVersion: 0.1.0\n"
            b"Requires-Dist: paramiko<6,>=5.1\n"
            b'Requires-Dist: ansible-core<2.22,>=2.19; extra == "control"\n'
            b"Provides-Extra: control\n"
        ),
        f"{DIST_INFO}/WHEEL": b"Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{DIST_INFO}/entry_points.txt": b"[console_scripts]\ntpwarden = tpwarden.cluster.cli:app\n",
    }
    added_by_pip = {
        f"{DIST_INFO}/INSTALLER": b"pip\n",
        f"{DIST_INFO}/REQUESTED": b"",
        f"{DIST_INFO}/direct_url.json": json.dumps({"url": "file:///w.whl", "archive_info": {}}),
        "tpwarden/cluster/__pycache__/provision.cpython-311.pyc": b"\x00pyc",
    }
    record = []
    for name, data in {**wheel_files, **added_by_pip}.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        hashed = name in wheel_files or name.endswith("INSTALLER")
        record.append(f"{name},{_hash(path.read_bytes()) if hashed else ''},")
    record += ["../../../bin/tpwarden,,", f"{DIST_INFO}/RECORD,,"]
    (site / DIST_INFO / "RECORD").write_text("\n".join(record) + "\n")
    return md.PathDistribution(site / DIST_INFO)


def test_repack_is_the_wheel_pip_installed_and_reproducible(tmp_path):
    dist = _install(tmp_path / "site")
    first = rp.repack(dist, tmp_path / "a", 1700000000)
    assert first.name == "tpwarden-0.1.0-py3-none-any.whl"
    names = zipfile.ZipFile(first).namelist()
    assert names == [  # package files, then dist-info, RECORD last; nothing pip added
        "tpwarden/cluster/__init__.py",
        "tpwarden/cluster/provision/gateway.py",
        "tpwarden/playbooks/roles/units/templates/a.service.j2",
        "tpwarden/playbooks/site.yml",
        f"{DIST_INFO}/METADATA",
        f"{DIST_INFO}/WHEEL",
        f"{DIST_INFO}/entry_points.txt",
        f"{DIST_INFO}/RECORD",
    ]
    with zipfile.ZipFile(first) as zf:
        record = zf.read(f"{DIST_INFO}/RECORD").decode().splitlines()
        for line in record[:-1]:
            name, digest, size = line.split(",")
            assert digest == _hash(zf.read(name)) and int(size) == len(zf.read(name)), line
        assert record[-1] == f"{DIST_INFO}/RECORD,,"
        assert {i.date_time for i in zf.infolist()} == {(2023, 11, 14, 22, 13, 20)}
    again = rp.repack(dist, tmp_path / "b", 1700000000)
    assert again.read_bytes() == first.read_bytes()
    # cached: the same installation is not packed twice
    first.write_bytes(first.read_bytes())  # same content, new mtime
    mtime = first.stat().st_mtime_ns
    assert rp.repack(dist, tmp_path / "a", 1700000000) == first
    assert first.stat().st_mtime_ns == mtime


def test_an_edited_installation_is_refused(tmp_path):
    dist = _install(tmp_path / "site")
    (tmp_path / "site/tpwarden/cluster/provision/gateway.py").write_text("X = 2  # a local fix\n")
    with pytest.raises(rp.RepackError, match="differs from the installed release"):
        rp.repack(dist, tmp_path / "out", 1700000000)


def test_data_files_outside_site_packages_are_refused(tmp_path):
    dist = _install(tmp_path / "site")
    record = tmp_path / "site" / DIST_INFO / "RECORD"
    record.write_text(record.read_text() + "../../../share/tpwarden/x.txt,,\n")
    with pytest.raises(rp.RepackError, match="outside site-packages"):
        rp.wheel_entries(dist)


def test_this_checkout_is_built_from_source_not_repacked():
    # the test environment runs from the checkout (an editable install)
    assert rp.source_checkout() == ROOT
    assert prov.SOURCE_DIR == ROOT and prov.PLAYBOOK_DIR == ROOT / "playbooks"
    with pytest.raises(rp.RepackError, match="editable"):
        rp.installed_distribution()
    # and provisioning without a source tree says why it cannot repack an editable install
    req = prov.ProvisionRequest(inventory=ROOT / "inventory.example.yml", source_dir=None)
    with pytest.raises(ConfigError, match="editable"):
        prov.prepare(req)


class _Done:
    def __init__(self, rc: int = 0) -> None:
        self.returncode, self.stdout, self.stderr = rc, "", ""


def test_wheelhouse_without_source_uses_the_installation(tmp_path):
    dist = _install(tmp_path / "site")
    calls: list[list[str]] = []

    def pip(argv, env=None):  # no network: record the downloads, build nothing
        calls.append(argv)
        assert "wheel" not in argv, "nothing is built from source here"
        return _Done(0)

    house = wh.build(wh.Target("3.11", "aarch64", "2.39"), None, tmp_path / "cache", pip, dist)
    assert not house.missing
    assert house.wheels == ["tpwarden-0.1.0-py3-none-any.whl"]  # the fake pip downloads nothing
    (download,) = calls
    # runtime requirements from the installed metadata, pinned to what this machine runs;
    # the `control` extra (Ansible) never goes to the nodes
    assert f"paramiko=={md.version('paramiko')}" in download
    assert not [a for a in download if a.startswith("ansible")]
    wheel = house.dir / house.wheels[0]
    assert "tpwarden/playbooks/site.yml" in zipfile.ZipFile(wheel).namelist()


def test_wheelhouse_role_passes_source_only_when_there_is_one():
    tasks = yaml.safe_load((ROOT / "playbooks/roles/tpwarden_install/tasks/main.yml").read_text())
    (build,) = [t for t in tasks if t["name"].startswith("Build the wheelhouse")]
    argv = jinja2.nativetypes.NativeEnvironment().from_string(
        build["ansible.builtin.command"]["argv"]
    )
    item = {"python_version": "3.11", "machine": "aarch64", "glibc": "2.39"}
    common = dict(
        tpwarden_control_python="/c/python", tpwarden_wheelhouse_cache="/cache", item=item
    )
    installed = argv.render(tpwarden_source_dir="", **common)
    assert installed == [
        "/c/python", "-m", "tpwarden.cluster.provision.wheelhouse", "--python-version", "3.11",
        "--machine", "aarch64", "--glibc", "2.39", "--cache", "/cache",
    ]  # fmt: skip
    assert argv.render(tpwarden_source_dir="/src", **common)[-2:] == ["--source", "/src"]


def test_wheelhouse_cli_defaults_to_this_checkout(monkeypatch, capsys):
    args = []

    def fake_build(target, source, cache):
        args.append(source)
        raise OSError("stop here")

    monkeypatch.setattr(wh, "build", fake_build)
    assert wh.main(["--python-version", "3.11", "--machine", "x86_64", "--cache", "/c"]) == 1
    assert args == [ROOT]
    assert "stop here" in json.loads(capsys.readouterr().out)["error"]
