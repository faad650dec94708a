"""Issue 52 items 2, 3 and 5 on the field's hardware as fixtures show it: pre-flight reads a real
ConnectX-7 sysfs tree (tests/fixtures/real/rdma/), a real arm64 `docker image inspect`
(tests/fixtures/real/docker/) and GB10 memory figures, and says what a start would trip over,
with its cause, before any container stops. The NCCL lines read after a boot are real ones
(tests/fixtures/real/nccl/)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import httpx
import pytest
from tpwarden.cluster.containers.platform import (
    ImagePlatform,
    arch_mismatch,
    go_arch,
    platform_from_inspect,
)
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.fabric import HcaSelection, container_problems, judge_fabric
from tpwarden.cluster.control.memory_check import judge_memory, utilization
from tpwarden.cluster.control.plan import plan_up
from tpwarden.cluster.control.preflight import preflight
from tpwarden.cluster.control.results import emitter
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.vllm.nccl_log import parse_nccl, summarize
from tpwarden.node.rdma import gid_ipv4, parse_rate_gbps, parse_state, read_fabric

from tests.unit.fake_nodes import GIB, FakeNodes, FixedClock, good_spec

ROOT = Path(__file__).resolve().parents[2]
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TREE = REAL / "rdma" / "gb10-cx7"
EXAMPLE = load_inventory(ROOT / "inventory.example.yml")


def fabric_of(tree: Path) -> dict:
    return read_fabric(tree / "sys/class/infiniband", tree / "dev/infiniband")


def copied(tmp_path: Path) -> Path:
    dest = tmp_path / "tree"
    shutil.copytree(TREE, dest)
    return dest


def _events_and_report(spec, nodes: FakeNodes):
    observed = {n: list(gw.containers.values()) for n, gw in nodes.engines.items()}
    events: list = []
    plan = plan_up(plan_cluster(spec), observed, replace=True)
    return events, preflight(spec, nodes, plan, emitter(events.append), 5.0)


# -- item 2: the RDMA fabric --------------------------------------------------------------------


def test_the_sysfs_tree_reads_as_the_kernel_writes_it() -> None:
    assert parse_state("4: ACTIVE") == "ACTIVE" and parse_state("1: DOWN") == "DOWN"
    assert parse_rate_gbps("200 Gb/sec (2X NDR)") == 200.0 and parse_rate_gbps(None) is None
    assert gid_ipv4("0000:0000:0000:0000:0000:ffff:c0a8:640b") == "192.168.100.11"
    assert gid_ipv4("fe80:0000:0000:0000:4ebb:47ff:fe2d:1a17") is None
    doc = fabric_of(TREE)
    by_name = {h["name"]: h for h in doc["hcas"]}
    assert sorted(by_name) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    (port,) = by_name["rocep1s0f1"]["ports"]
    assert (port["state"], port["rate_gbps"], port["link_layer"]) == ("ACTIVE", 200.0, "Ethernet")
    v2 = [g for g in port["gids"] if g["type"] == "RoCE v2" and g["ipv4"]]
    assert [(g["index"], g["ipv4"], g["ndev"]) for g in v2] == [
        (3, "192.168.100.11", "enp1s0f1np1")
    ]
    assert len(port["gids"]) == 4  # the zero slots 4 and 5 are not GIDs
    assert by_name["rocep1s0f0"]["ports"][0]["state"] == "DOWN"
    assert doc["dev_infiniband"]["present"] and "uverbs0" in doc["dev_infiniband"]["entries"]


def test_both_halves_of_the_field_port_pass_with_rate_and_gid() -> None:
    node1 = EXAMPLE.node("node1")
    check = judge_fabric(EXAMPLE, node1, fabric_of(TREE))
    assert check.transport == "rdma" and check.problems == () and check.notices == ()
    assert check.summary == (
        "RDMA rocep1s0f1 port 1 ACTIVE 200 Gb/s GID 3 192.168.100.11 (RoCE v2); "
        "roceP2p1s0f1 port 1 ACTIVE 200 Gb/s GID 3 192.168.200.17 (RoCE v2)"
    )
    assert container_problems(EXAMPLE) == []  # the example passes /dev/infiniband in
    # node2's vllm_host_ip is on neither HCA of this (node1's) tree: said, not refused
    other = judge_fabric(EXAMPLE, EXAMPLE.node("node2"), fabric_of(TREE))
    assert other.problems == () and "192.168.100.12 is on none of the HCAs" in other.notices[0]


def test_each_fabric_fault_is_refused_with_its_cause(tmp_path: Path) -> None:
    tree = copied(tmp_path)
    ib = tree / "sys/class/infiniband"
    (ib / "rocep1s0f1/ports/1/state").write_text("1: DOWN\n")  # the test's own change
    shutil.rmtree(ib / "roceP2p1s0f1")
    problems = judge_fabric(EXAMPLE, EXAMPLE.node("node1"), fabric_of(tree)).problems
    assert problems == (
        "node1: HCA roceP2p1s0f1 (NCCL_IB_HCA) is not on the node (it has: roceP2p1s0f0, "
        "rocep1s0f0, rocep1s0f1)",
        "node1: rocep1s0f1 port 1 is DOWN, not ACTIVE (cable, peer or netdev enp1s0f1np1 down)",
    )
    tree2 = copied(tmp_path / "2")
    port = tree2 / "sys/class/infiniband/rocep1s0f1/ports/1"
    for i in (2, 3):  # no address on the netdev: no IPv4 GID
        (port / f"gids/{i}").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    shutil.rmtree(tree2 / "dev/infiniband")
    problems = judge_fabric(EXAMPLE, EXAMPLE.node("node1"), fabric_of(tree2)).problems
    assert "node1: /dev/infiniband has no uverbs devices on the node" in problems[0]
    assert "rocep1s0f1 port 1: no RoCE v2 GID with an IPv4 address" in problems[1]
    gid5 = dataclasses.replace(
        EXAMPLE, serving=dataclasses.replace(
            EXAMPLE.serving, env={**EXAMPLE.serving.env, "NCCL_IB_GID_INDEX": "5"}
        ),
    )  # fmt: skip
    problems = judge_fabric(gid5, gid5.node("node1"), fabric_of(TREE)).problems
    assert problems and all("NCCL_IB_GID_INDEX=5 is an empty slot" in p for p in problems)


def test_rdma_without_the_device_in_the_containers_is_refused() -> None:
    bare = dataclasses.replace(
        EXAMPLE, serving=dataclasses.replace(
            EXAMPLE.serving, container=EXAMPLE.serving.container.model_copy(update={"devices": ()})
        ),
    )  # fmt: skip
    (problem,) = container_problems(bare)
    assert (
        "do not get /dev/infiniband" in problem and "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in problem
    )


def test_sockets_where_the_inventory_expects_them() -> None:
    lab = good_spec()
    lab = dataclasses.replace(
        lab, settings=lab.settings.model_copy(
            update={"fabric": lab.settings.fabric.model_copy(update={"transport": "socket", "note": "lab"})}
        ),
    )  # fmt: skip
    none = {"hcas": [], "dev_infiniband": {"present": False, "entries": []}}
    check = judge_fabric(lab, lab.node("node1"), none)
    assert check.transport == "sockets" and check.problems == ()
    assert check.summary.startswith("sockets (lab): no RDMA device on node1")
    plain = judge_fabric(good_spec(), good_spec().node("node1"), none)
    assert plain.summary.startswith("sockets: no RDMA device") and plain.problems == ()
    unused = judge_fabric(good_spec(), good_spec().node("node1"), fabric_of(TREE))
    assert unused.transport == "sockets" and "not asked to use" in unused.notices[0]


def test_nccl_ib_hca_is_read_as_nccl_reads_it() -> None:
    both = HcaSelection.parse("rocep1s0f1,roceP2p1s0f1")
    assert both.entries == (("rocep1s0f1", None), ("roceP2p1s0f1", None)) and not both.exclude
    assert both.matches("mlx5", "mlx5_0")  # prefix unless `=`
    exact = HcaSelection.parse("=mlx5_0:1,mlx5_1")
    assert exact.exact and exact.entries[0] == ("mlx5_0", 1) and not exact.matches("mlx5", "mlx5_0")
    assert HcaSelection.parse("^mlx5_3").exclude


def test_preflight_prints_the_fabric_per_node_from_the_tree() -> None:
    nodes = FakeNodes(EXAMPLE)
    for n in EXAMPLE.nodes:
        nodes.rdma[n.name] = fabric_of(TREE)
    events, report = _events_and_report(EXAMPLE, nodes)
    assert report.ok, report.problems
    fabric = {e.node: e.message for e in events if e.message.startswith("fabric: ")}
    assert fabric["node1"].startswith("fabric: RDMA rocep1s0f1 port 1 ACTIVE 200 Gb/s GID 3")
    assert report.facts["fabric"]["node1"]["transport"] == "rdma"
    nodes.rdma["node3"] = {"hcas": [], "dev_infiniband": {"present": False, "entries": []}}
    _, refused = _events_and_report(EXAMPLE, nodes)
    assert not refused.ok and any(p.startswith("node3: HCA rocep1s0f1") for p in refused.problems)


# -- item 2, after the boot: the network NCCL chose ------------------------------------------------


def nccl(name: str):
    text = (REAL / "nccl" / name).read_text()
    return parse_nccl(line for line in text.splitlines() if not line.startswith("#"))


def test_real_nccl_lines_of_each_format_say_the_network() -> None:
    ib = nccl("2.19.3_ib-roce_internal_nccl-tests-185.log")
    assert (ib.kind, ib.network, ib.version) == ("rdma", "IB", "2.19.3+cuda12.3")
    assert ib.devices == ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE")
    ext = nccl("2.2x_ibext-v8_plugin_nccl-tests-373.log")
    assert (ext.kind, ext.network, ext.plugin) == ("rdma", "IBext_v8", "IBext_v8")
    assert ext.devices == ("mlx5_2:1/RoCE", "mlx5_3:1/RoCE", "mlx5_0:1/RoCE", "mlx5_1:1/RoCE")
    assert ext.channels == {"IBext_v8": 3}
    old = nccl("ib_old-format_rccl-419.log")
    assert old.kind == "rdma" and old.devices[0] == "mlx5_3:1/IB"
    gone = nccl("2.14.3_socket-fallback_no-ib-device_nccl-810.log")
    assert gone.kind == "socket" and gone.ib_missing and "No device found" in (gone.cause or "")
    off = nccl("socket_lines_nccl-226_nccl-tests-188.log")
    assert off.kind == "socket" and off.cause == "NCCL_IB_DISABLE=1"
    assert off.devices == ("ibs85f0", "ib0") and off.channels == {"Socket": 2}
    assert parse_nccl(["INFO 12-01 loading weights"]).kind is None  # before NCCL's init


def test_a_fall_back_to_sockets_is_a_warning_naming_its_cause() -> None:
    ib = nccl("2.19.3_ib-roce_internal_nccl-tests-185.log")
    gone = nccl("2.14.3_socket-fallback_no-ib-device_nccl-810.log")
    mixed = summarize({"node1": ib, "node2": ib, "node3": gone}, rdma_expected=True)
    assert mixed.text.startswith("NCCL: IB on 2/3 rank(s), Socket on 1/3 rank(s)")
    (warning,) = mixed.warnings
    assert warning.startswith("node3: NCCL fell back to sockets (NET/IB : No device found")
    assert summarize({"node1": gone}, rdma_expected=False).warnings == ()  # the lab: expected


def test_status_reads_each_containers_nccl_once_and_records_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    spec = EXAMPLE
    nodes = FakeNodes.running(spec)
    ib = (REAL / "nccl/2.19.3_ib-roce_internal_nccl-tests-185.log").read_text().splitlines()
    gone = (REAL / "nccl/2.14.3_socket-fallback_no-ib-device_nccl-810.log").read_text()
    for n, gw in nodes.engines.items():
        (name,) = gw.containers
        gw.log_lines[name] = gone.splitlines() if n == "node4" else ib
    no_server = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503)))
    with Controller(
        spec, state_dir=tmp_path, nodes=nodes, clock=FixedClock(), http=no_server
    ) as ctl:
        st = ctl.status(timeout_s=5)
        assert st.transport is not None
        assert st.transport["summary"].startswith("NCCL: IB on 3/4 rank(s), Socket on 1/4")
        assert any("node4: NCCL fell back to sockets" in n for n in st.notes)
        for gw in nodes.engines.values():
            gw.log_lines.clear()  # a second status reads what was kept, not the logs
        again = ctl.status(timeout_s=5).transport
        assert again is not None and again["summary"] == st.transport["summary"]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").open()]
    recorded = [e for e in events if e["event"] == "nccl_transport"]
    assert len(recorded) == 4 and sum(1 for e in recorded if e["warning"]) == 1


# -- item 3: memory before a (re)start ---------------------------------------------------------------


def test_enough_memory_is_said_with_the_figures() -> None:
    spec = good_spec()
    doc = {"memory": {"total_bytes": int(119.7 * GIB), "available_bytes": 110 * GIB},
           "page_cache": {"dropped": True, "unified": True, "available_before_bytes": 80 * GIB},
           "gpus": [{"index": 0}]}  # fmt: skip
    check = judge_memory(spec, "node1", doc, replacing=False)
    assert check is not None and check.ok and check.unified
    assert check.text == (
        "node1: 110.0 GiB available of 119.7 GiB; the engine asks 107.7 GiB (vLLM's default 0.9 "
        "x 119.7 GiB) [page cache dropped: 80.0 GiB -> 110.0 GiB available]"
    )
    assert utilization(spec) == (0.9, "vLLM's default 0.9")


def test_a_node_short_of_memory_fails_before_any_container_stops(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    spec = good_spec()
    nodes = FakeNodes(spec)
    nodes.memory["node3"] = {"total_bytes": int(119.7 * GIB), "available_bytes": 60 * GIB}
    nodes.page_cache["node3"] = {
        "dropped": True,
        "unified": True,
        "available_before_bytes": 58 * GIB,
    }
    with Controller(spec, state_dir=tmp_path, nodes=nodes, clock=FixedClock()) as ctl:
        with pytest.raises(TpwardenError, match="pre-flight failed") as exc:
            ctl.up(wait_ready=False)
    assert nodes.actions == []  # nothing removed, nothing started
    assert "node3: 60.0 GiB available of 119.7 GiB; the engine asks 107.7 GiB" in str(exc.value)
    assert "[page cache dropped: 58.0 GiB -> 60.0 GiB available]" in str(exc.value)
    drops = [(a, sudo) for n, a, sudo in nodes.collector_calls if "--drop-caches" in a]
    assert len(drops) == 4 and all(sudo and "auto" in a for a, sudo in drops)


def test_a_running_engine_being_replaced_counts_what_it_gives_back() -> None:
    spec = good_spec()
    held = {"memory": {"total_bytes": int(119.7 * GIB), "available_bytes": 8 * GIB},
            "page_cache": {"dropped": False, "unified": True, "reason": "/proc/sys/vm/drop_caches: "
                           "PermissionError: Permission denied"}, "gpus": [{"index": 0}]}  # fmt: skip
    fresh = judge_memory(spec, "node2", held, replacing=False)
    assert fresh is not None and not fresh.ok
    restart = judge_memory(spec, "node2", held, replacing=True)
    assert restart is not None and restart.ok
    assert "+ ~107.7 GiB the serving container being replaced holds" in restart.text
    assert "[page cache not dropped: /proc/sys/vm/drop_caches: PermissionError" in restart.text


def test_discrete_gpus_and_settings_that_turn_the_check_off() -> None:
    spec = dataclasses.replace(
        good_spec(), serving=dataclasses.replace(
            good_spec().serving, extra_args=("--gpu-memory-utilization", "0.5")
        ),
    )  # fmt: skip
    assert utilization(spec) == (0.5, "--gpu-memory-utilization 0.5")
    h100 = {"gpus": [{"index": 0, "memory_total_mib": 81559.0, "memory_used_mib": 50000.0}],
            "memory": {"total_bytes": 2 * 10**12, "available_bytes": 10**12}}  # fmt: skip
    check = judge_memory(spec, "n", h100, replacing=False)
    assert check is not None and not check.ok and not check.unified
    assert check.text.startswith("n: GPU0: 30.8 GiB free of 79.6 GiB; the engine asks 39.8 GiB")
    off = dataclasses.replace(
        spec, settings=spec.settings.model_copy(
            update={"memory": spec.settings.memory.model_copy(update={"check": False})}
        ),
    )  # fmt: skip
    assert judge_memory(off, "n", h100, replacing=False) is None
    cpu = dataclasses.replace(spec, serving=dataclasses.replace(spec.serving, gpus="none"))
    assert judge_memory(cpu, "n", h100, replacing=False) is None  # the lab: no GPU engine


# -- item 5: images for the nodes' architecture ------------------------------------------------------


def test_a_real_arm64_inspect_and_the_engines_names() -> None:
    text = (REAL / "docker/image-inspect_hello-world_arm64-v8.txt").read_text()
    (attrs,) = json.loads("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")))
    found = platform_from_inspect(attrs)
    assert (found.architecture, found.variant, found.platform) == ("arm64", "v8", "linux/arm64/v8")
    assert found.digest.startswith("hello-world@sha256:6e8b6f02")
    assert go_arch("aarch64") == "arm64" and go_arch("x86_64") == "amd64"
    assert arch_mismatch("node1", "hello-world:latest", found, "aarch64") is None
    wrong = arch_mismatch("node1", "hello-world:latest", found, "x86_64")
    assert wrong is not None and "is linux/arm64/v8, the node is x86_64 (linux/amd64)" in wrong
    assert "hello-world@sha256:6e8b6f02" in wrong and "exec format error" in wrong


def test_preflight_refuses_an_image_of_the_other_architecture() -> None:
    spec = good_spec()
    nodes = FakeNodes(spec)
    amd64 = ImagePlatform(id="sha256:" + "c" * 64, architecture="amd64",
                          repo_digests=("registry.example.internal/vllm@sha256:" + "d" * 64,))  # fmt: skip
    nodes.engines["node2"].platforms[spec.serving.image] = amd64
    _, report = _events_and_report(spec, nodes)
    (problem,) = report.problems
    assert problem.startswith(f"node2: image {spec.serving.image} (registry.example.internal/vllm@")
    assert "is linux/amd64, the node is aarch64 (linux/arm64)" in problem


def test_a_boot_without_nccl_lines_is_kept_silent_and_sockets_expected_read_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "sk-test")
    nodes = FakeNodes.running(EXAMPLE)
    for gw in nodes.engines.values():
        (name,) = gw.containers
        gw.log_lines[name] = ["(APIServer pid=1) INFO 12-01 12:00:00 [launcher.py:44] "
                              "Application startup complete."]  # fmt: skip
    no_server = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503)))
    with Controller(
        EXAMPLE, state_dir=tmp_path, nodes=nodes, clock=FixedClock(), http=no_server
    ) as c:
        st = c.status(timeout_s=5)
    assert any(
        "cannot tell which network NCCL uses: NCCL printed no INIT/NET line" in n for n in st.notes
    )
    assert len(list((tmp_path / "nccl").glob("*.json"))) == 4  # kept: not reread every status
    sockets = good_spec()  # no NCCL_IB_HCA, no /dev/infiniband: nothing to warn about
    quiet = FakeNodes.running(sockets)
    with Controller(
        sockets, state_dir=tmp_path / "s", nodes=quiet, clock=FixedClock(), http=no_server
    ) as c:
        transport = c.status(timeout_s=5).transport
    assert transport is not None and transport["summary"].startswith("NCCL: sockets expected")
    assert not (tmp_path / "s" / "nccl").exists()
