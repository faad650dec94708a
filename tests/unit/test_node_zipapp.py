"""The one node zipapp builder: each app carries exactly its entry's import closure (nothing
control-side), stub packages, the third-party packages it names, and reproducible bytes.
The zipapps' runs on an isolated python3 are in test_status_memory and test_thermal_remote."""

from __future__ import annotations

import hashlib
import zipfile

import pytest
from tpwarden.cluster.node_zipapp import (
    COLLECTOR,
    THERMAL_AGENT,
    NodeApp,
    NodeZipappError,
    build_node_zipapp,
    imports_of,
    node_closure,
    node_zipapp_bytes,
    node_zipapp_files,
)

CONTROL_SIDE = ("ssh", "docker", "control", "provision", "ansible", "remote", "fetch", "cli")
STUB = b'"""tpwarden (node-side subset)."""\n'


def _control_side(module: str) -> bool:
    leaf = module.rsplit(".", 1)[-1]
    return any(leaf.startswith(word) for word in CONTROL_SIDE) or ".cli" in module


def test_the_collector_carries_its_closure_and_nothing_more() -> None:
    assert set(node_closure(COLLECTOR)) == {
        "tpwarden.node.collector",
        "tpwarden.cluster.durable",
        "tpwarden.cluster.errors",
        "tpwarden.node.clockcap",
        "tpwarden.node.cotenants",
        "tpwarden.node.dossier",
        "tpwarden.node.freezer",
        "tpwarden.node.gpu",
        "tpwarden.node.kernlog",
        "tpwarden.node.ledger_state",
        "tpwarden.node.memory",
        "tpwarden.node.procfacts",
        "tpwarden.node.pyspy",
        "tpwarden.node.rdma",  # the HCAs pre-flight checks (issue 52)
    }
    assert sorted(node_zipapp_files(COLLECTOR)) == [
        "__main__.py",
        "pynvml.py",  # bundled: the node's system python3 has only the standard library
        "tpwarden/__init__.py",
        "tpwarden/cluster/__init__.py",
        "tpwarden/cluster/durable.py",
        "tpwarden/cluster/errors.py",
        "tpwarden/node/__init__.py",
        "tpwarden/node/clockcap.py",
        "tpwarden/node/collector.py",
        "tpwarden/node/cotenants.py",
        "tpwarden/node/dossier.py",
        "tpwarden/node/freezer.py",
        "tpwarden/node/gpu.py",
        "tpwarden/node/kernlog.py",
        "tpwarden/node/ledger_state.py",
        "tpwarden/node/memory.py",
        "tpwarden/node/procfacts.py",
        "tpwarden/node/pyspy.py",
        "tpwarden/node/rdma.py",
    ]


def test_the_thermal_agent_carries_its_closure_and_prometheus_client() -> None:
    thermal = "tpwarden.node.thermal"
    assert set(node_closure(THERMAL_AGENT)) == {
        "tpwarden.cluster.durable",
        "tpwarden.cluster.errors",
        "tpwarden.node.clockcap",
        "tpwarden.node.gpu",
        "tpwarden.node.gpu_access",  # a denied /dev/nvidia<N> said as such (issue 52)
        "tpwarden.node.memory",
        *(f"{thermal}.{m}" for m in ("agent", "alerts", "metrics", "metrics_gpu", "app")),
        *(f"{thermal}.{m}" for m in ("records", "roles", "writer", "zones")),
    }
    files = node_zipapp_files(THERMAL_AGENT)
    assert "prometheus_client/__init__.py" in files
    assert not any(
        n.startswith(("prometheus_client/twisted", "prometheus_client/django")) for n in files
    )
    # the operator's side of thermal logging (tpwarden.cluster.reports.thermal) stays home
    assert not any(n.startswith("tpwarden/watchdog/") for n in files)


@pytest.mark.parametrize("app", [COLLECTOR, THERMAL_AGENT], ids=["collector", "thermal"])
def test_no_control_side_module_and_only_stub_packages(app: NodeApp) -> None:
    assert not [m for m in node_closure(app) if _control_side(m)]
    files = node_zipapp_files(app)
    assert all(data == STUB for name, data in files.items() if name.endswith("__init__.py")
               and name.startswith("tpwarden/"))  # fmt: skip
    main = files["__main__.py"].decode()
    assert f"from {app.entry} import main" in main


@pytest.mark.parametrize("app", [COLLECTOR, THERMAL_AGENT], ids=["collector", "thermal"])
def test_bytes_are_reproducible_and_the_sha_is_theirs(app: NodeApp, tmp_path) -> None:
    first = node_zipapp_bytes(app)
    assert node_zipapp_bytes(app) == first
    built = build_node_zipapp(app, tmp_path / "a.pyz")
    assert built.path.read_bytes() == first
    assert built.sha256 == hashlib.sha256(first).hexdigest()
    assert built.path.stat().st_mode & 0o777 == 0o600
    with zipfile.ZipFile(built.path) as z:
        infos = z.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos)
    assert {i.date_time for i in infos} == {(2020, 1, 1, 0, 0, 0)}


def test_a_control_side_entry_fails_the_build() -> None:
    # cluster.nodes reaches paramiko and docker through the SSH and Docker gateways
    with pytest.raises(NodeZipappError, match="not the standard library"):
        node_closure(NodeApp(entry="tpwarden.cluster.control.nodes"))


def test_imports_include_function_level_and_skip_type_checking() -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from tpwarden.node import gpu\n"
        "from .memory import read_node_memory\n"
        "if TYPE_CHECKING:\n    from tpwarden.cluster.ssh.gateway import SshPool\n"
        "else:\n    import json\n"
        "def f():\n    import tpwarden.cluster.durable\n"
    )
    got = imports_of(source, "tpwarden.node.collector")
    assert {"tpwarden.node.gpu", "tpwarden.node.memory", "json"} <= got
    assert "tpwarden.cluster.durable" in got
    assert not any("ssh" in name for name in got)
