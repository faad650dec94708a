"""The node's RDMA fabric as the kernel shows it: /sys/class/infiniband and /dev/infiniband.

Per HCA and port: state ("4: ACTIVE"), rate ("200 Gb/sec (4X HDR)"), link layer, and the GID
table (gids/N, gid_attrs/types/N "RoCE v2", gid_attrs/ndevs/N the netdev); the netdevs of the
HCA (device/net/*). Empty (all-zero) GID slots are left out. A file that cannot be read is a
`null` with the error, never a guess. Standard library only (the collector's zipapp carries it);
the roots are parameters, so tests read real trees copied under tests/fixtures.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

from tpwarden.cluster.durable import JSONObject

SYSFS = Path("/sys/class/infiniband")
DEV = Path("/dev/infiniband")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def _read(path: Path) -> tuple[str | None, str | None]:
    try:
        return path.read_text().strip(), None
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc.strerror or exc}"


def _names(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def parse_state(text: str | None) -> str | None:
    """ "4: ACTIVE" -> "ACTIVE" (ib_verbs' port states: DOWN, INIT, ARMED, ACTIVE...)."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip().upper() or None


def parse_rate_gbps(text: str | None) -> float | None:
    """ "200 Gb/sec (4X HDR)" -> 200.0."""
    m = _RATE.match(text or "")
    return float(m.group(1)) if m else None


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (0000:...:ffff:c0a8:640b -> 192.168.100.11)."""
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    mapped = addr.ipv4_mapped
    return str(mapped) if mapped is not None else None


_UNUSED = (ipaddress.IPv6Address("::"), ipaddress.IPv6Address("fe80::"))


def _empty_gid(gid: str) -> bool:
    """An unused slot: all zeros, or the bare link-local prefix (show_gids skips both)."""
    try:
        return ipaddress.IPv6Address(gid) in _UNUSED
    except ValueError:
        return True


def read_gids(port: Path) -> list[JSONObject]:
    """The port's GID table: index, GID, type (RoCE v1/v2, IB), netdev, IPv4 when mapped."""
    out: list[JSONObject] = []
    for name in sorted(_names(port / "gids"), key=lambda n: int(n) if n.isdigit() else -1):
        gid, _ = _read(port / "gids" / name)
        if gid is None or _empty_gid(gid):
            continue
        kind, _ = _read(port / "gid_attrs" / "types" / name)
        ndev, _ = _read(port / "gid_attrs" / "ndevs" / name)
        out.append({"index": int(name) if name.isdigit() else name, "gid": gid,
                    "type": kind, "ndev": ndev, "ipv4": gid_ipv4(gid)})  # fmt: skip
    return out


def read_port(port: Path) -> JSONObject:
    state, state_err = _read(port / "state")
    rate, rate_err = _read(port / "rate")
    layer, _ = _read(port / "link_layer")
    doc: JSONObject = {
        "port": int(port.name) if port.name.isdigit() else port.name,
        "state": parse_state(state),
        "state_raw": state,
        "rate": rate,
        "rate_gbps": parse_rate_gbps(rate),
        "link_layer": layer,
        "gids": read_gids(port),
    }
    errors = [e for e in (state_err, rate_err) if e]
    if errors:
        doc["errors"] = errors
    return doc


def read_fabric(sysfs: str | Path = SYSFS, dev: str | Path = DEV) -> JSONObject:
    """Every HCA with its ports and netdevs, and what /dev/infiniband holds."""
    root, devdir = Path(sysfs), Path(dev)
    hcas: list[JSONObject] = []
    for name in _names(root):
        base = root / name
        ports = [read_port(base / "ports" / p) for p in _names(base / "ports")]
        hcas.append({"name": name, "ports": ports, "netdevs": _names(base / "device" / "net")})
    entries = _names(devdir)
    return {
        "hcas": hcas,
        "dev_infiniband": {"present": devdir.is_dir(), "entries": entries},
    }
