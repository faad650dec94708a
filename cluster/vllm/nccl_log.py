"""Which network NCCL chose, from a rank's own log (issue 52 item 2). Pure.

The serving containers run with `NCCL_DEBUG=INFO` and `NCCL_DEBUG_SUBSYS=INIT,NET` unless the
inventory's env says otherwise (`tpwarden.cluster.launch.NCCL_DEBUG_ENV`), so each rank prints
NCCL's INIT/NET lines. Their formats differ across NCCL versions and net plugins (real lines in
tests/fixtures/real/nccl/):

    NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>
    NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} ... ; OOB bond0:...   (fused NICs)
    NET/IB : Using [0]mlx5_3:1/IB [1]mlx5_2:1/IB ; OOB ib0:11.5.5.50<0>              (older)
    Using network IB | IBext_v8 | Socket          P2P plugin IBext_v8
    NET/IB : No device found.      NCCL_IB_DISABLE set by environment to 1.
    NET/Socket : Using [0]ens3:172.31.12.210<0>
    Channel 00/0 : 1[0] -> 2[0] [receive] via NET/IBext_v8/1      (Ring 00 : ... via NET/Socket/0)

RDMA is any IB network (the internal `IB` or a plugin's `IBext*`); sockets are `Socket`. A
fall-back to sockets names its cause when the log has one (no IB device, IB disabled).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONObject

_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_IB_USING = re.compile(r"NCCL INFO NET/IB : Using (.*)$")
_IB_DEVICE = re.compile(r"([A-Za-z][\w.-]*:\d+/(?:RoCE|IB))")
_SOCKET_USING = re.compile(r"NCCL INFO NET/Socket : Using (.*)$")
_SOCKET_IF = re.compile(r"\[\d+\]([^\s:]+):")
_VIA = re.compile(r"via NET/([\w.]+)/\d+")
_VERSION = re.compile(r"NCCL version (\S+)")
_PLUGIN = re.compile(r"NCCL INFO P2P plugin (\S+)")


def is_rdma(network: str) -> bool:
    return network == "IB" or network.startswith("IBext")


@dataclass(frozen=True)
class NcclTransport:
    """What one rank's log says about NCCL's network."""

    network: str | None = None  # "IB", "IBext_v8", "Socket": `Using network X` or the channels
    devices: tuple[str, ...] = ()  # "mlx5_10:1/RoCE" (NET/IB) or socket interfaces
    channels: Mapping[str, int] = field(default_factory=dict)  # "IBext_v8" -> channel lines
    version: str | None = None
    plugin: str | None = None
    ib_missing: bool = False  # NET/IB : No device found.
    ib_disabled: bool = False  # NCCL_IB_DISABLE set by environment to 1.
    lines: int = 0  # NCCL lines read
    silent: bool = False  # the boot finished and NCCL said nothing (NCCL_DEBUG not INFO?)

    @property
    def kind(self) -> str | None:
        """ "rdma", "socket", or None when the log says nothing yet (before NCCL's init)."""
        if self.network is not None:
            return "rdma" if is_rdma(self.network) else "socket"
        return None

    @property
    def cause(self) -> str | None:
        """Why sockets, as the log says it."""
        if self.kind != "socket":
            return None
        if self.ib_disabled:
            return "NCCL_IB_DISABLE=1"
        if self.ib_missing:
            return (
                "NET/IB : No device found: no usable HCA in the container (/dev/infiniband "
                "not passed, NCCL_IB_HCA matching nothing, ports down)"
            )
        return "the log names no cause (NCCL_NET? NCCL_IB_HCA matching nothing?)"

    def describe(self) -> str:
        if self.kind is None and self.silent:
            return "NCCL printed no INIT/NET line by the end of the boot (NCCL_DEBUG is not INFO?)"
        if self.kind is None:
            return "NCCL has not chosen a network yet (no NCCL INIT/NET line)"
        devices = ", ".join(self.devices) or "-"
        text = f"{self.network} ({devices})"
        return text if self.kind == "rdma" else f"{text}: sockets, {self.cause}"

    def to_json(self) -> JSONObject:
        return {"network": self.network, "kind": self.kind, "devices": list(self.devices),
                "channels": dict(self.channels), "version": self.version, "plugin": self.plugin,
                "ib_missing": self.ib_missing, "ib_disabled": self.ib_disabled,
                "cause": self.cause, "lines": self.lines, "silent": self.silent}  # fmt: skip

    @classmethod
    def from_json(cls, doc: JSONObject) -> NcclTransport:
        """What `to_json` wrote (the kept answer per container)."""

        def text(key: str) -> str | None:
            value = doc.get(key)
            return str(value) if value is not None else None

        channels = doc.get("channels")
        return cls(
            network=text("network"),
            devices=tuple(str(d) for d in doc.get("devices") or ()),
            channels={str(k): int(v) for k, v in channels.items()}
            if isinstance(channels, dict) else {},
            version=text("version"),
            plugin=text("plugin"),
            ib_missing=bool(doc.get("ib_missing")),
            ib_disabled=bool(doc.get("ib_disabled")),
            lines=int(doc.get("lines") or 0),
            silent=bool(doc.get("silent")),
        )  # fmt: skip


def parse_nccl(lines: Iterable[str]) -> NcclTransport:
    """A rank's log lines (any prefix: vLLM's `(Worker pid=...)`, docker timestamps)."""
    network = version = plugin = None
    devices: list[str] = []
    sockets: list[str] = []
    via: Counter[str] = Counter()
    ib_missing = ib_disabled = False
    count = 0
    for line in lines:
        if "NCCL" not in line and "via NET/" not in line:
            continue
        count += 1
        if m := _NETWORK.search(line):
            network = m.group(1)
        elif m := _IB_USING.search(line):
            devices = _IB_DEVICE.findall(m.group(1).split("; OOB")[0].split(" ; OOB")[0])
        elif m := _SOCKET_USING.search(line):
            sockets = _SOCKET_IF.findall(m.group(1)) or ["?"]
        elif "NET/IB : No device found" in line:
            ib_missing = True
        elif "NCCL_IB_DISABLE set by environment to 1" in line:
            ib_disabled = True
        elif m := _PLUGIN.search(line):
            plugin = m.group(1)
        elif m := _VERSION.search(line):
            version = m.group(1)
        if m := _VIA.search(line):
            via[m.group(1)] += 1
    if network is None and via:
        network = via.most_common(1)[0][0]
    elif network is None and devices:
        network = "IB"  # NET/IB found its devices (a log cut before `Using network`)
    elif network is None and (sockets or ib_missing or ib_disabled):
        network = "Socket"  # no IB device or IB disabled: NCCL's next network is sockets
    if network is not None and not is_rdma(network):
        devices = sockets
    return NcclTransport(network, tuple(devices), dict(via), version, plugin, ib_missing,
                         ib_disabled, count)  # fmt: skip


@dataclass(frozen=True)
class TransportSummary:
    text: str
    warnings: tuple[str, ...]


def summarize(per_node: Mapping[str, NcclTransport], rdma_expected: bool) -> TransportSummary:
    """All ranks in one line; a rank on sockets while RDMA is expected is a warning that names
    the cause, and so is a rank whose NCCL has not said (after a boot)."""
    kinds = Counter(t.kind for t in per_node.values())
    warnings = []
    for node, t in sorted(per_node.items()):
        if t.kind == "socket" and rdma_expected:
            warnings.append(f"{node}: NCCL fell back to sockets ({t.cause}): collectives run "
                            "over TCP, about half the speed or worse")  # fmt: skip
        elif t.silent and rdma_expected:
            warnings.append(f"{node}: cannot tell which network NCCL uses: {t.describe()}")
    networks = Counter(t.network for t in per_node.values() if t.network)
    if not networks:
        return TransportSummary("NCCL: no network chosen yet on any rank", tuple(warnings))
    parts = [f"{net} on {n}/{len(per_node)} rank(s)" for net, n in networks.most_common()]
    devices = sorted({d for t in per_node.values() for d in t.devices})
    text = "NCCL: " + ", ".join(parts) + (f" ({', '.join(devices)})" if devices else "")
    if kinds.get(None):
        text += f"; {kinds[None]} rank(s) not said yet"
    return TransportSummary(text, tuple(warnings))
