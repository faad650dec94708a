"""`inventory check --nodes` (issue 52 item 2): every node's HCAs, from the real ConnectX-7
sysfs tree (tests/fixtures/real/rdma/), judged as pre-flight judges them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from tpwarden.cluster.cli import app
from tpwarden.cluster.inventory.load import load_inventory
from typer.testing import CliRunner

from tests.unit.fake_nodes import FakeNodes
from tests.unit.test_preflight_field import TREE, fabric_of

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "cluster/data/cli-envelope.schema.json").read_text())


def _fake(monkeypatch, tree_for: dict[str, Path | None]) -> None:
    spec = load_inventory(ROOT / "inventory.example.yml")
    nodes = FakeNodes(spec)
    empty = {"hcas": [], "dev_infiniband": {"present": False, "entries": []}}

    def collect(node, args, sudo):
        tree = tree_for.get(node.name, TREE)
        return {"ok": True, "action": args[0], "rdma": fabric_of(tree) if tree else empty}

    nodes.collect = collect
    monkeypatch.setattr("tpwarden.cluster.control.nodes.NodeConnector", lambda ssh: nodes)


def test_the_hcas_of_every_node_are_shown(monkeypatch) -> None:
    _fake(monkeypatch, {})
    inv = str(ROOT / "inventory.example.yml")
    result = CliRunner().invoke(
        app, ["inventory", "check", "-i", inv, "--nodes"], terminal_width=160
    )
    assert result.exit_code == 0, result.output
    assert "RDMA HCAs per node" in result.output
    assert "roceP2p1s0f1" in result.output and "192.168.200.17" in result.output
    assert "node1: RDMA rocep1s0f1 port 1 ACTIVE 200 Gb/s GID 3 192.168.100.11" in result.output


def test_a_node_without_its_hcas_fails_the_check(monkeypatch) -> None:
    _fake(monkeypatch, {"node3": None})
    inv = str(ROOT / "inventory.example.yml")
    result = CliRunner().invoke(app, ["inventory", "check", "-i", inv, "--nodes", "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["error"]["exit_code"] == 1 and "node3" in doc["error"]["message"]
    fabric = doc["fabric"]
    assert fabric["node1"]["ok"] and fabric["node1"]["transport"] == "rdma"
    assert not fabric["node3"]["ok"]
    assert any(
        "HCA rocep1s0f1 (NCCL_IB_HCA) is not on the node" in p for p in fabric["node3"]["problems"]
    )
