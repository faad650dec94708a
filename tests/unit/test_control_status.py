"""The pure status verdict and the /metrics reader."""

from __future__ import annotations

from tpwarden.cluster.control.clocks import gpu_problems
from tpwarden.cluster.control.status_model import (
    NodeStatus,
    ServerStatus,
    Verdict,
    derive_verdict,
    server_gauges,
)
from tpwarden.cluster.vllm.metrics import sum_by_sample


def _nodes(**over):
    out = []
    for i, n in enumerate(("node1", "node2", "node3", "node4")):
        kw = dict(
            node=n,
            role="head" if i == 0 else "worker",
            reachable=True,
            container=f"c-{n}",
            state="running",
            config_hash="h",
        )
        kw.update(over.get(n, {}))
        out.append(NodeStatus(**kw))
    return out


OK = ServerStatus("http://h:8000", 200, probe_ok=True, probe_latency_ms=40.0)
DEAD = ServerStatus("http://h:8000", None, "ConnectError", probe_error="server not answering")
HUNG = ServerStatus("http://h:8000", 200, probe_ok=False, probe_error="ReadTimeout")


def test_healthy():
    assert derive_verdict(_nodes(), OK)[0] is Verdict.HEALTHY


def test_unreachable_node_while_answering_is_degraded_and_named():
    v, notes = derive_verdict(
        _nodes(node3=dict(reachable=False, reason="timed out", state=None)), OK
    )
    assert v is Verdict.DEGRADED and "node3 unreachable" in notes


def test_unreachable_node_and_no_answer_is_broken():
    v, _ = derive_verdict(_nodes(node3=dict(reachable=False, state=None)), DEAD)
    assert v is Verdict.BROKEN


def test_every_node_unreachable_and_no_answer_is_unreachable_not_broken():
    gone = {n: dict(reachable=False, state=None) for n in ("node1", "node2", "node3", "node4")}
    v, notes = derive_verdict(_nodes(**gone), DEAD)
    assert v is Verdict.UNREACHABLE and "node1 unreachable" in notes


def test_health_200_but_probe_fails_is_hung():
    v, notes = derive_verdict(_nodes(node2=dict(state="paused")), HUNG)
    assert v is Verdict.HUNG and any("paused" in n for n in notes)


def test_booting_down_and_drift():
    assert derive_verdict(_nodes(), DEAD)[0] is Verdict.BOOTING
    none = {n: dict(state=None, container=None) for n in ("node1", "node2", "node3", "node4")}
    assert derive_verdict(_nodes(**none), DEAD)[0] is Verdict.DOWN
    drift = {n: dict(drift=True) for n in ("node1", "node2", "node3", "node4")}
    assert derive_verdict(_nodes(**drift), OK)[0] is Verdict.DRIFT


def test_thermal_clock_event_degrades():
    hot = dict(gpus=({"index": 0, "clock_event_reasons": ["sw_thermal_slowdown"]},))
    v, notes = derive_verdict(_nodes(node1=hot), OK)
    assert v is Verdict.DEGRADED and any("sw_thermal_slowdown" in n for n in notes)


def test_metrics_parsing():
    text = (
        '# HELP x\nvllm:num_requests_running{model_name="m",engine="0"} 3.0\n'
        'vllm:num_requests_waiting{model_name="m",engine="0"} 1.0\n'
        'vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.125\n'
    )
    g = server_gauges(sum_by_sample(text))
    assert g == {"requests_running": 3.0, "requests_waiting": 1.0, "kv_cache_usage_pct": 12.5}


def test_gpu_problems_from_collector_json():
    doc = {
        "ok": True,
        "action": "cap",
        "nvml": {"available": True},
        "gpus": [{"index": 0, "locked_clock_max_mhz": 2000}],
    }
    assert gpu_problems("n", doc) == []
    # NVML reads no cap back: a missing cap is no longer a problem (it used to be "reads None")
    doc["gpus"][0]["locked_clock_max_mhz"] = None
    assert gpu_problems("n", doc) == []
    doc.update(ok=False, error="cannot lock GPU clocks on GPU 0: NVML answered NOT_SUPPORTED (x)")
    assert gpu_problems("n", doc) == [
        "n: cap: cannot lock GPU clocks on GPU 0: NVML answered NOT_SUPPORTED (x)"
    ]
    assert (
        "no GPU visible"
        in gpu_problems("n", {"ok": True, "nvml": {"available": False, "reason": "x"}})[0]
    )
