"""The RDMA fabric before a boot (issue 52 item 2): pure judgement of a node's `rdma` facts
(`tpwarden.node.rdma`, from the collector) against what the inventory asks of NCCL.

On GB10 each QSFP port is two PCIe x4 links, so two HCAs (`rocep1s0f1` and `roceP2p1s0f1`, each
on its own subnet); NCCL reaches the port's full bandwidth only with both in `NCCL_IB_HCA`.
Checked here, each with its cause: /dev/infiniband on the node and passed into the containers,
each HCA `NCCL_IB_HCA` names present, its port ACTIVE (and its rate), a RoCE v2 GID with an
IPv4 address (at `NCCL_IB_GID_INDEX` when set), and whether the node's `vllm_host_ip` is one of
those addresses. RDMA is expected when `tpwarden.fabric.transport` says `rdma`, or (`auto`)
when the inventory names HCAs or passes /dev/infiniband; otherwise NCCL uses sockets, and a node
with no RDMA device passes as "sockets" (with the inventory's `fabric.note`, "sockets (lab)").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

DEV_INFINIBAND = "/dev/infiniband"


@dataclass(frozen=True)
class HcaSelection:
    """`NCCL_IB_HCA` as NCCL reads it: `^` excludes, `=` matches names exactly (else by
    prefix), each entry `name[:port]`."""

    entries: tuple[tuple[str, int | None], ...] = ()
    exclude: bool = False
    exact: bool = False

    @classmethod
    def parse(cls, text: str | None) -> HcaSelection:
        value = (text or "").strip()
        exclude = value.startswith("^")
        value = value.lstrip("^")
        exact = value.startswith("=")
        value = value.lstrip("=")
        entries = []
        for item in filter(None, (p.strip() for p in value.split(","))):
            name, _, port = item.partition(":")
            entries.append((name, int(port) if port.isdigit() else None))
        return cls(tuple(entries), exclude, exact)

    def matches(self, entry: str, hca: str) -> bool:
        return hca == entry if self.exact else hca.startswith(entry)


@dataclass(frozen=True)
class FabricCheck:
    node: str
    transport: str  # what the pre-flight expects NCCL to use: "rdma" or "sockets"
    summary: str
    problems: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()
    hcas: tuple[Mapping[str, JSONValue], ...] = field(default_factory=tuple)

    def to_json(self) -> JSONObject:
        return {"node": self.node, "transport": self.transport, "summary": self.summary,
                "problems": list(self.problems), "notices": list(self.notices),
                "hcas": [dict(h) for h in self.hcas]}  # fmt: skip


def passes_infiniband(spec: ClusterSpec) -> bool:
    """The serving containers get the verbs devices (as /dev/infiniband inside)."""
    c = spec.serving.container
    return c.privileged or any(d.container == DEV_INFINIBAND for d in c.devices)


def expects_rdma(spec: ClusterSpec) -> tuple[bool, str]:
    """(expected, why) from `tpwarden.fabric.transport` and the serving env/devices."""
    fabric, env = spec.settings.fabric, spec.serving.env
    if fabric.transport != "auto":
        return fabric.transport == "rdma", f"tpwarden.fabric.transport: {fabric.transport}"
    if env.get("NCCL_IB_DISABLE", "0").strip() == "1" or env.get("NCCL_NET") == "Socket":
        return False, "NCCL_IB_DISABLE=1 / NCCL_NET=Socket"
    hca = HcaSelection.parse(env.get("NCCL_IB_HCA"))
    if hca.entries and not hca.exclude:
        return True, f"NCCL_IB_HCA={env['NCCL_IB_HCA']}"
    if any(d.container == DEV_INFINIBAND for d in spec.serving.container.devices):
        return True, f"container.devices has {DEV_INFINIBAND}"
    return False, "no NCCL_IB_HCA and no /dev/infiniband in the inventory"


def container_problems(spec: ClusterSpec) -> list[str]:
    """Once per cluster: RDMA expected but the containers would not get the verbs devices."""
    expected, why = expects_rdma(spec)
    if not expected or passes_infiniband(spec):
        return []
    return [
        f"RDMA is expected ({why}) but the serving containers do not get {DEV_INFINIBAND}: "
        f"NCCL would fall back to sockets; add it to tpwarden.container.devices"
    ]


def _port_text(hca: str, port: Mapping[str, JSONValue], gid: Mapping[str, JSONValue] | None) -> str:
    rate = port.get("rate_gbps")
    text = f"{hca} port {port.get('port')} {port.get('state') or '?'}"
    text += f" {rate:g} Gb/s" if isinstance(rate, int | float) else ""
    if gid is not None:
        text += f" GID {gid.get('index')} {gid.get('ipv4')} ({gid.get('type')})"
    return text


def _roce_gid(
    port: Mapping[str, JSONValue], gid_index: int | None
) -> tuple[Mapping[str, JSONValue] | None, str | None]:
    """The GID NCCL will use on a RoCE port, or why there is none fit for it."""
    gids = list(port.get("gids") or [])
    if gid_index is not None:
        found = next((g for g in gids if g.get("index") == gid_index), None)
        if found is None:
            return None, f"NCCL_IB_GID_INDEX={gid_index} is an empty slot"
        if found.get("type") != "RoCE v2":
            return found, None if found.get("ipv4") else f"GID {gid_index} has no IPv4 address"
        return found, None
    v2 = [g for g in gids if g.get("type") == "RoCE v2" and g.get("ipv4")]
    if not v2:
        return None, "no RoCE v2 GID with an IPv4 address (no address on its netdev?)"
    return v2[0], None


def _selected(
    node: str, hcas: Sequence[Mapping[str, JSONValue]], selection: HcaSelection
) -> tuple[list[tuple[Mapping[str, JSONValue], int | None]], list[str]]:
    names = [str(h.get("name")) for h in hcas]
    if not selection.entries or selection.exclude:
        excluded = {e for e, _ in selection.entries}
        return [(h, None) for h in hcas if not any(str(h.get("name")).startswith(e)
                                                   for e in excluded)], []  # fmt: skip
    chosen, problems = [], []
    for entry, port in selection.entries:
        found = [h for h in hcas if selection.matches(entry, str(h.get("name")))]
        if not found:
            have = ", ".join(names) or "none"
            problems.append(
                f"{node}: HCA {entry} (NCCL_IB_HCA) is not on the node (it has: {have})"
            )
        chosen += [(h, port) for h in found]
    return chosen, problems


def judge_fabric(spec: ClusterSpec, node: NodeSpec, rdma: Mapping[str, JSONValue]) -> FabricCheck:
    """Pure: one node's `rdma` facts -> what NCCL will find, problems (stop a start) first."""
    expected, why = expects_rdma(spec)
    hcas = list(rdma.get("hcas") or [])
    dev = rdma.get("dev_infiniband") or {}
    if not expected:
        note = spec.settings.fabric.note
        label = f"sockets ({note})" if note else "sockets"
        if not hcas:
            return FabricCheck(node.name, "sockets", f"{label}: no RDMA device on {node.name}, "
                               f"none expected ({why})")  # fmt: skip
        names = ", ".join(str(h.get("name")) for h in hcas)
        return FabricCheck(
            node.name, "sockets", f"{label}: RDMA devices {names} unused ({why})",
            notices=(f"{node.name}: has RDMA devices ({names}) that NCCL is not asked to use "
                     f"({why})",), hcas=tuple(hcas),
        )  # fmt: skip
    problems: list[str] = []
    if not dev.get("present") or not any(
        str(e).startswith("uverbs") for e in dev.get("entries") or []
    ):
        problems.append(f"{node.name}: {DEV_INFINIBAND} has no uverbs devices on the node (RDMA "
                        "driver not loaded: ib_uverbs, rdma_cm)")  # fmt: skip
    env = spec.serving.env
    chosen, missing = _selected(node.name, hcas, HcaSelection.parse(env.get("NCCL_IB_HCA")))
    problems += missing
    gid_index = (
        int(env["NCCL_IB_GID_INDEX"]) if env.get("NCCL_IB_GID_INDEX", "").isdigit() else None
    )
    parts, addresses = [], set()
    for hca, want_port in chosen:
        name = str(hca.get("name"))
        for port in hca.get("ports") or []:
            if want_port is not None and port.get("port") != want_port:
                continue
            gid, gid_problem = (None, None)
            if port.get("state") != "ACTIVE":
                problems.append(f"{node.name}: {name} port {port.get('port')} is "
                                f"{port.get('state') or 'unreadable'}, not ACTIVE (cable, peer "
                                f"or netdev {', '.join(hca.get('netdevs') or []) or '?'} down)")  # fmt: skip
            elif port.get("link_layer") == "Ethernet":
                gid, gid_problem = _roce_gid(port, gid_index)
                if gid_problem:
                    problems.append(f"{node.name}: {name} port {port.get('port')}: {gid_problem}")
                elif gid is not None and gid.get("ipv4"):
                    addresses.add(str(gid["ipv4"]))
            parts.append(_port_text(name, port, gid))
    if not chosen and not missing:
        problems.append(f"{node.name}: no RDMA HCA on the node ({why})")
    notices = []
    if addresses and node.vllm_host_ip not in addresses:
        notices.append(f"{node.name}: vllm_host_ip {node.vllm_host_ip} is on none of the HCAs "
                       f"NCCL uses (their RoCE addresses: {', '.join(sorted(addresses))})")  # fmt: skip
    summary = "RDMA " + ("; ".join(parts) if parts else "none usable")
    return FabricCheck(node.name, "rdma", summary, tuple(problems), tuple(notices), tuple(hcas))
