"""Reading a fingerprint and a state sample from the cluster, through cluster control: every
node in parallel (`docker inspect` of its serving container, the image's digests, the
collector's `show` or `state`), then the engine (`/version`, `/metrics`). A part that cannot be
read is a None row and a reason in `missing`, never a failed record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx
from tpwarden.cluster.containers.info import ContainerInfo
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.ledger import fingerprint as fp
from tpwarden.cluster.ledger.tables import KeyValue
from tpwarden.cluster.secrets import redact_argv
from tpwarden.cluster.spec import ClusterSpec, NodeSpec, _jsonable
from tpwarden.cluster.vllm.metrics import info_labels

NODE_TIMEOUT_S = 60.0
CACHE_CONFIG = "vllm:cache_config_info"


@dataclass
class Collected:
    rows: list[KeyValue] = field(default_factory=list)
    missing: JSONObject = field(default_factory=dict)
    doc: JSONObject = field(default_factory=dict)  # what the rows came from, for `show`

    def add(self, node: str, values: Mapping[str, str | None]) -> None:
        self.rows.extend(fp.rows_of(node, values))


def serving_container(
    spec: ClusterSpec, node: NodeSpec, found: Sequence[ContainerInfo]
) -> ContainerInfo | None:
    """The node's running serving container: the plan's name, else the only running one."""
    name = plan_cluster(spec).for_node(node.name).name
    running = [c for c in found if c.running]
    return next((c for c in running if c.name == name), running[0] if len(running) == 1 else None)


def _node_part(ctl: Controller, node: NodeSpec) -> JSONObject:
    """One node: its serving container as the engine reports it, its image's digests, and the
    collector's facts. Each part fails on its own."""
    out: JSONObject = {}
    try:
        found = ctl.docker(node).list_tpwarden(ctl.spec.name)
        c = serving_container(ctl.spec, node, found)
        out["container"] = c
        if c is not None:
            out["digests"] = list(ctl.docker(node).repo_digests(c.image_id or c.image))
    except TpwardenError as e:
        out["container_error"] = str(e)
    try:
        out["shown"] = ctl.collector(node, ["show"], timeout=30)
    except TpwardenError as e:
        out["shown_error"] = str(e)
    return out


def _rank_rows(
    spec: ClusterSpec, node: NodeSpec, part: Mapping[str, JSONValue], got: Collected
) -> None:
    c = part.get("container")
    if not isinstance(c, ContainerInfo):
        got.missing[f"{node.name}.container"] = part.get("container_error") or (
            "no running serving container"
        )
        return
    planned = plan_cluster(spec).for_node(node.name)
    secret_text = {k: v for k, v in planned.to_json()["env"].items() if k in planned.secret_env}
    flags = fp.argv_rows(c.argv)
    got.add(node.name, flags)
    got.add(node.name, fp.env_rows(c.env, secret_text))
    digests = part.get("digests") or []
    got.add(node.name, {"image.id": c.image_id or None,
                        "image.digest": fp.value_text(sorted(digests)) if digests else None})  # fmt: skip
    got.doc.setdefault("argv", {})[node.name] = redact_argv(c.argv)
    if node.role == "head":
        got.add(fp.CLUSTER, fp.drafter_rows(flags))


def _node_rows(node: NodeSpec, part: Mapping[str, JSONValue], got: Collected) -> None:
    shown = part.get("shown")
    if not isinstance(shown, Mapping):
        got.missing[f"{node.name}.facts"] = part.get("shown_error") or "collector gave nothing"
        return
    gpus = [dict(g) for g in shown.get("gpus") or []]
    for extra in shown.get("gpu_extras") or []:
        for g in gpus:
            if g.get("index") == extra.get("index"):
                g["power_limit_w"] = extra.get("power_limit_w")
                g.setdefault("missing", {}).update(extra.get("missing") or {})
    merged = {**shown, "gpus": gpus}
    got.add(node.name, fp.node_fact_rows(merged))
    for k, v in fp.missing_of(merged).items():
        got.missing[f"{node.name}.{k}"] = v


def _engine_rows(ctl: Controller, got: Collected, http: httpx.Client) -> None:
    spec = ctl.spec
    try:
        version = http.get(f"{spec.api_base}/version", timeout=10).json().get("version")
    except (httpx.HTTPError, ValueError, AttributeError) as e:
        version = None
        got.missing["*.vllm.version"] = f"GET /version: {type(e).__name__}: {e}"
    got.add(fp.CLUSTER, {"vllm.version": fp.value_text(version)})
    try:
        status, page = ctl.metrics_page(timeout_s=10)
        labels = info_labels(page, CACHE_CONFIG) if status == 200 else []
        if status != 200:
            got.missing["*.engine.kv"] = f"GET /metrics answered HTTP {status}"
        elif not labels:
            got.missing["*.engine.kv"] = f"/metrics has no {CACHE_CONFIG}"
        got.add(fp.CLUSTER, fp.cache_config_rows(labels[0] if labels else {}))
    except (TpwardenError, ValueError) as e:
        got.missing["*.engine.kv"] = f"/metrics: {e}"
    table, why = spec.flag_table
    got.add(fp.CLUSTER, {"flag_table.sha256": fp.flag_table_hash(table.options if table else None)})
    if table is None:
        got.missing["*.flag_table.sha256"] = why
    got.add(fp.CLUSTER, fp.flatten(_jsonable(spec.serving), "setting"))


def collect_fingerprint(ctl: Controller, http: httpx.Client | None = None) -> Collected:
    """What runs now, as fingerprint rows (and what could not be read, with reasons)."""
    got = Collected()
    nodes = list(ctl.spec.nodes)
    parts = ctl.fan_out(nodes, lambda n: _node_part(ctl, n), timeout=NODE_TIMEOUT_S)
    for node in nodes:
        part = parts.get(node.name)
        if isinstance(part, TpwardenError) or part is None:
            got.missing[node.name] = str(part)
            continue
        _rank_rows(ctl.spec, node, part, got)
        _node_rows(node, part, got)
    _engine_rows(ctl, got, http or ctl.server.http)
    return got


# --- the state sample taken with each canary -----------------------------------------------------


def state_rows(state_doc: Mapping[str, JSONValue]) -> dict[str, str | None]:
    """One node's `collector state` document -> its state-sample rows (pure):
    `cotenant.<comm>.cpu_pct` / `.rss_mib`, `gpu_users.others`, `gpu.sm_clock_mhz` (None while
    the GPU reports itself idle: only a clock under load is compared), `gpu.clock_event_reasons`,
    `gpu.temp_c`, `gpu.power_w`, `gpu.util_pct`, `load1`."""
    rows: dict[str, str | None] = {}
    state = state_doc.get("state") or {}
    for c in state.get("cotenants") or []:
        rows[f"cotenant.{c.get('comm')}.cpu_pct"] = fp.value_text(c.get("cpu_pct"))
        rows[f"cotenant.{c.get('comm')}.rss_mib"] = fp.value_text(c.get("rss_mib"))
    users = state.get("gpu_users") or {}
    rows["gpu_users.others"] = fp.value_text(sorted(users.get("others") or []))
    load = state.get("loadavg") or []
    rows["load1"] = fp.value_text(round(load[0], 2)) if load else None
    gpus = [g for g in state_doc.get("gpus") or [] if isinstance(g, Mapping)]
    for g in gpus:
        tag = "gpu" if len(gpus) == 1 else f"gpu{g.get('index')}"
        reasons = g.get("clock_event_reasons")
        idle = "gpu_idle" in (reasons or [])  # an idle GPU's clock says nothing of its load clock
        rows[f"{tag}.sm_clock_mhz"] = None if idle else fp.value_text(g.get("sm_clock_mhz"))
        rows[f"{tag}.clock_event_reasons"] = (
            fp.value_text(sorted(reasons)) if reasons is not None else None
        )
        for k in ("temp_c", "power_w", "util_pct"):
            rows[f"{tag}.{k}"] = fp.value_text(g.get(k))
    return rows


def collect_state(
    ctl: Controller, exclude: Mapping[str, Sequence[str]], window_s: float = 2.0
) -> Collected:
    """Every node's state sample at once (`collector state`), co-tenants outside the containers
    in `exclude` (node -> full container IDs). Their argv is redacted here, on the control side."""
    got = Collected()

    def one(node: NodeSpec) -> JSONObject:
        args = ["state", "--window", str(window_s)]
        for cid in exclude.get(node.name, ()):
            args += ["--exclude-container", cid]
        return ctl.collector(node, args, timeout=window_s + 30)

    for name, doc in ctl.fan_out(list(ctl.spec.nodes), one, timeout=window_s + 60).items():
        if isinstance(doc, TpwardenError):
            got.missing[name] = str(doc)
            continue
        for c in (doc.get("state") or {}).get("cotenants") or []:
            c["argv"] = redact_argv(c.get("argv") or [])
        got.doc[name] = {
            "state": doc.get("state"),
            "gpus": doc.get("gpus"),
            "error": doc.get("error"),
        }
        got.add(name, state_rows(doc))
    return got


def container_ids(
    observed: Mapping[str, Sequence[ContainerInfo] | TpwardenError],
) -> dict[str, list[str]]:
    """node -> the IDs of its tpwarden containers, for `collect_state`'s exclusion."""
    return {
        node: [c.id for c in found]
        for node, found in observed.items()
        if not isinstance(found, TpwardenError)
    }
