"""Issue 52 on the lab: what the field's pre-flight says where there is no RDMA device and no
GPU engine, and the CPU-only client read back from a real client container on the head.

The lab declares its fabric (`fabric: {transport: socket, note: lab}` in lab/inventory.py): its
nodes have no HCA and NCCL (gloo for the CPU engine) talks over sockets, so pre-flight passes
each node as "sockets (lab)". The serving containers request no GPU (`gpus: none`), so there is
no memory figure to check. Nothing is started: pre-flight and `inventory check --nodes` only."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from tpwarden.cluster.bench.plan import BenchOptions, client_plan
from tpwarden.cluster.bench.runner import run_client
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory

from .conftest import tpwarden

pytestmark = pytest.mark.lab


@pytest.fixture
def ctl(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("TPWARDEN_API_KEY", os.environ.get("TPWARDEN_API_KEY", "lab-key"))
    with Controller(load_inventory(lab.inventory), state_dir=tmp_path, node_timeout_s=5) as c:
        yield c


def test_preflight_on_the_lab_passes_as_sockets_lab(ctl):
    events = []
    ctl.emit = lambda kind, node, message, progress=None: events.append((node, message))
    report = ctl.preflight(ctl.plan_up(replace=True))
    assert report.ok, report.problems
    names = [n.name for n in ctl.spec.nodes]
    for name in names:
        fabric = report.facts["fabric"][name]
        assert fabric["transport"] == "sockets" and not fabric["problems"]
        assert fabric["summary"].startswith(f"sockets (lab): no RDMA device on {name}")
    assert report.facts["memory"] == {}  # gpus: none, no engine asks for GPU memory
    printed = sorted(m for n, m in events if n and m.startswith("fabric: "))
    assert len(printed) == len(names)
    print("\n".join(f"{n}: {m}" for n, m in events))  # the closing note's lab output


def test_inventory_check_nodes_on_the_lab(lab):
    done = tpwarden("inventory", "check", "-i", str(lab.inventory), "--nodes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    fabric = json.loads(done.stdout)["fabric"]
    assert all(f["ok"] and f["summary"].startswith("sockets (lab)") for f in fabric.values())


def test_the_bench_client_container_reads_back_void_on_the_head(ctl):
    spec = ctl.spec
    plan = client_plan(spec, BenchOptions(kind="sweep", levels=(1,)), 1, 0, "void-check")
    env_only = dataclasses.replace(plan, entrypoint=("/usr/bin/env",), command=())
    rc, logs, _, facts = run_client(ctl.docker(spec.head), env_only, {}, {}, timeout_s=120)
    assert rc == 0, logs
    env = dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not facts["device_requests"] and not facts["devices"]
