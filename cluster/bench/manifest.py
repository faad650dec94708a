"""What a benchmark run must record to be explained later, and how two runs differ.

A manifest is plain JSON in the run directory. `collect_*` functions do I/O through the
Controller (SSH, Docker, collector) and httpx; everything else here is pure: the server's
effective defaults from the plan, secret redaction, the summary facts and the diff that
`tpwarden bench compare` prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from tpwarden.cluster import __version__
from tpwarden.cluster.bench.parse import kv_cache_facts
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.secrets import redact_argv
from tpwarden.cluster.spec import ClusterSpec, NodeSpec, _jsonable
from tpwarden.node import bench_facts
from tpwarden.node.clockcap import annotate_gpus

if TYPE_CHECKING:
    from tpwarden.cluster.control.controller import Controller

MANIFEST_VERSION = 1
# run on each node as a script (sent over SSH); standard library only
NODE_SCRIPT = Path(bench_facts.__file__)


# --- pure ------------------------------------------------------------------------------------


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def defaults_from_plan(spec: ClusterSpec) -> JSONObject:
    """The defaults the head's `vllm serve` argv sets: chat template kwargs (thinking on or
    off: vLLM chat templates default to thinking on when nothing says otherwise), drafter, k."""
    argv = plan_cluster(spec).for_node(spec.head.name).vllm_argv
    kwargs_raw = _flag(argv, "--default-chat-template-kwargs")
    kwargs = json.loads(kwargs_raw) if kwargs_raw else {}
    spec_raw = _flag(argv, "--speculative-config")
    drafter = json.loads(spec_raw) if spec_raw else None
    return {
        "chat_template_kwargs": kwargs,
        "thinking": bool(kwargs.get("enable_thinking", True)),
        "thinking_source": "server argv" if "enable_thinking" in kwargs else "template default",
        "drafter_method": drafter.get("method") if drafter else None,
        "drafter_k": drafter.get("num_speculative_tokens") if drafter else None,
        "max_model_len_arg": _flag(argv, "--max-model-len"),
        "kv_cache_dtype": _flag(argv, "--kv-cache-dtype"),
        "kv_cache_memory_bytes": _flag(argv, "--kv-cache-memory-bytes"),
        "enforce_eager": "--enforce-eager" in argv,
        "head_argv": redact_argv(argv),
    }


def summary_facts(manifest: Mapping[str, JSONValue]) -> JSONObject:
    """The facts that explain a change in throughput, flattened to named values."""
    d = manifest.get("server_defaults") or {}
    srv = manifest.get("server") or {}
    facts: JSONObject = {
        "config hash": (manifest.get("cluster") or {}).get("config_hash"),
        "vLLM version (server)": srv.get("version"),
        "client image": (manifest.get("client") or {}).get("image"),
        "thinking": d.get("thinking"),
        "chat template kwargs": json.dumps(d.get("chat_template_kwargs"), sort_keys=True),
        "drafter": d.get("drafter_method"),
        "drafter k": d.get("drafter_k"),
        "max model len": srv.get("max_model_len"),
        "enforce eager": d.get("enforce_eager"),
        "KV cache dtype": d.get("kv_cache_dtype"),
        "KV cache per GPU (bytes, argv)": d.get("kv_cache_memory_bytes"),
        "KV cache tokens (boot log)": (manifest.get("kv_cache") or {}).get("kv_cache_tokens"),
        "KV cache GiB (boot log)": (manifest.get("kv_cache") or {}).get("kv_cache_gib"),
        # sockets instead of RDMA halves the collectives' speed: a cause, when it changed
        "NCCL network": (manifest.get("nccl_transport") or {}).get("summary"),
    }
    for node, n in sorted((manifest.get("nodes") or {}).items()):
        gpus = n.get("gpus") or []
        facts[f"{node} GPU clock cap (MHz)"] = (
            ",".join(str(g.get("locked_clock_max_mhz")) for g in gpus) or None
        )
        for phase in ("start", "end"):
            temps = [g.get("temp_c") for g in (n.get(f"gpus_{phase}") or gpus) if g]
            temps = [t for t in temps if isinstance(t, (int, float))]
            facts[f"{node} GPU temp at {phase} (C, max)"] = max(temps) if temps else None
        busy = sorted({p.get("comm", "?") for p in (n.get("processes") or []) if not p.get("own")})
        facts[f"{node} other busy processes"] = ", ".join(busy) or "-"
    opts = manifest.get("options") or {}
    for key in ("prompts_sha256", "output_len", "ignore_eos", "num_prompts", "backend"):
        facts[f"option {key}"] = opts.get(key)
    # --chat-template-kwargs (no "template" in the name: "temp" facts are not causes)
    kwargs = opts.get("chat_template_kwargs")
    facts["option per-request chat kwargs"] = (
        json.dumps(kwargs, sort_keys=True) if kwargs is not None else None
    )
    return facts


# Facts whose change can move throughput numbers by itself (shown first, marked).
_CAUSAL = (
    "clock cap",
    "NCCL network",
    "drafter",
    "KV cache",
    "thinking",
    "chat template",
    "vLLM version",
    "enforce eager",
    "busy processes",
    "max model len",
    "option",
    "config hash",
)


@dataclass(frozen=True)
class Difference:
    fact: str
    a: JSONValue
    b: JSONValue
    likely_cause: bool


def manifest_diff(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[Difference]:
    fa, fb = summary_facts(a), summary_facts(b)
    out = []
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key) != fb.get(key):
            causal = any(c in key for c in _CAUSAL) and "temp" not in key
            out.append(Difference(key, fa.get(key), fb.get(key), causal))
    # also the serving settings, flattened (anything the hash saw)
    sa = _flatten((a.get("cluster") or {}).get("serving") or {}, "serving")
    sb = _flatten((b.get("cluster") or {}).get("serving") or {}, "serving")
    for key in sorted(set(sa) | set(sb)):
        if sa.get(key) != sb.get(key):
            out.append(Difference(key, sa.get(key), sb.get(key), True))
    out.sort(key=lambda d: (not d.likely_cause, d.fact))
    return out


def _flatten(doc: JSONValue, prefix: str) -> JSONObject:
    if isinstance(doc, Mapping):
        out: JSONObject = {}
        for k, v in doc.items():
            out.update(_flatten(v, f"{prefix}.{k}"))
        return out
    return {prefix: json.dumps(doc, sort_keys=True) if isinstance(doc, list) else doc}


def mark_own(node_doc: JSONObject, own_markers: Sequence[str]) -> JSONObject:
    """Mark the processes that belong to the benchmark itself or the server (by argv)."""
    for p in node_doc.get("processes") or []:
        text = " ".join(p.get("argv") or [])
        p["own"] = any(m in text for m in own_markers)
    return node_doc


# --- collection (I/O) ---------------------------------------------------------------------------


def collect_server(http: httpx.Client, base: str, timeout: float = 10.0) -> JSONObject:
    out: JSONObject = {"api_base": base}
    try:
        out["health_status"] = http.get(f"{base}/health", timeout=timeout).status_code
    except httpx.HTTPError as e:
        out["health_status"], out["health_error"] = None, f"{type(e).__name__}: {e}"
        return out
    try:
        out["version"] = http.get(f"{base}/version", timeout=timeout).json().get("version")
    except (httpx.HTTPError, ValueError, AttributeError):
        out["version"] = None
    try:
        data = http.get(f"{base}/v1/models", timeout=timeout).json()["data"][0]
        out["model_id"], out["max_model_len"] = data.get("id"), data.get("max_model_len")
        out["model_root"] = data.get("root")
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        out["model_id"] = out["max_model_len"] = None
    return out


def collect_node(ctl: Controller, node: NodeSpec, sample_s: float = 1.0) -> JSONObject:
    """Clocks, GPU temps (collector) and busy processes + thermal zones (node script)."""
    doc: JSONObject = {}
    try:
        shown = ctl.collector(node, ["show"], timeout=30)
        # clock_cap: "2000 MHz set at T; NVML has no read-back" (the node's record of the lock call)
        doc["gpus"] = [_gpu_row(g) for g in annotate_gpus(shown)]
        nv = shown.get("nvml") or {}
        if not nv.get("available", False):
            doc["gpu_reason"] = nv.get("reason") or nv.get("state")
    except TpwardenError as e:
        doc["gpus"], doc["gpu_reason"] = [], str(e)
    try:
        r = ctl.session(node).run_script(
            str(NODE_SCRIPT), ["--sample-s", str(sample_s)], interpreter=["python3"], timeout=60
        )
        facts = json.loads(r.stdout)
        for p in facts.get("processes") or []:
            p["argv"] = redact_argv(p.get("argv") or [])
        doc.update(facts)
    except (TpwardenError, ValueError) as e:
        doc["processes_reason"] = str(e)
    return doc


def _gpu_row(g: Mapping[str, JSONValue]) -> JSONObject:
    keys = (
        "index",
        "name",
        "temp_c",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "locked_clock_max_mhz",
        "clock_cap",
        "clock_cap_violation",
        "power_w",
        "util_pct",
        "clock_event_reasons",
    )
    return {k: g.get(k) for k in keys}


def collect_temps(ctl: Controller) -> dict[str, list[JSONObject]]:
    def one(node: NodeSpec) -> list[JSONObject]:
        return [_gpu_row(g) for g in annotate_gpus(ctl.collector(node, ["show"], timeout=30))]

    return {
        name: ([] if isinstance(v, TpwardenError) else v)
        for name, v in ctl.fan_out(list(ctl.spec.nodes), one, timeout=60).items()
    }


def collect_kv_cache(ctl: Controller) -> JSONObject:
    head = ctl.spec.head
    name = plan_cluster(ctl.spec).for_node(head.name).name
    try:
        text = ctl.docker(head).logs(name, tail="all")
    except TpwardenError as e:
        return {"kv_cache_tokens": None, "kv_cache_gib": None, "reason": str(e)}
    facts = kv_cache_facts(text)
    facts["configured_bytes"] = ctl.spec.serving.kv_cache.memory_bytes
    return facts


def cluster_section(spec: ClusterSpec) -> JSONObject:
    return {
        "name": spec.name,
        "config_hash": spec.config_hash(),
        "inventory": spec.source_file,
        "serving": _jsonable(spec.serving),
        "nodes": [
            {"name": n.name, "role": n.role, "rank": n.rank, "vllm_host_ip": n.vllm_host_ip}
            for n in spec.nodes
        ],
        "plan": plan_cluster(spec).to_json(),
    }


def run_manifest(
    run_id: str,
    kind: str,
    started_at: datetime,
    spec: ClusterSpec,
    options: JSONObject,
    pre: Mapping[str, JSONValue],
    versions: Mapping[str, str] | None = None,
) -> JSONObject:
    """The start every run's manifest.json shares (bench and eval): the run and when it began,
    tpwarden's version then `versions` (the other tools'), the options, the cluster, and what
    pre-flight saw of the server; each runner adds its own sections after it."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "run_id": run_id,
        "kind": kind,
        "started_at": started_at.isoformat(),
        "tpwarden_version": __version__,
        **(versions or {}),
        "options": options,
        "cluster": cluster_section(spec),
        "server": pre["server"],
        "server_defaults": pre["server_defaults"],
        "preflight": {k: pre[k] for k in ("verdict", "notes", "probe_ok", "ok")},
        "nccl_transport": pre.get("transport"),
    }
