"""`tpwarden thermal zones`: each node's zones as the samples show them, to help write the
inventory's ``thermal.zone_roles``. GB10 zones all say ``acpitz``; what tells them apart is how
each one moves: the GPU zone follows the GPU's own temperature, the P-cores climb most on the
head (API server, scheduler, bench client). Pure over sample records."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.node.thermal.roles import zone_role
from tpwarden.node.thermal.zones import _natural_key


@dataclass(frozen=True, kw_only=True)
class ZoneSurvey:
    node: str
    zone: str
    type: str | None
    role: str | None  # from the current map, if any
    current_c: float | None  # the newest sample's reading
    min_c: float | None
    max_c: float | None
    trips: dict[str, float]  # trip type -> °C (critical, hot, passive, active0...)
    gpu_corr: float | None  # Pearson correlation with the node's GPU temperature

    @property
    def rise_c(self) -> float | None:
        return (
            None if self.min_c is None or self.max_c is None else round(self.max_c - self.min_c, 3)
        )


def _corr(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return None  # a flat line says nothing about what the zone follows
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / (sx * sy), 3)


def survey(
    records: Iterable[Mapping[str, JSONValue]], zone_roles: Mapping[str, str] | None = None
) -> list[ZoneSurvey]:
    """One row per (node, zone), nodes and zones in natural order."""
    by_node: dict[str, list[Mapping[str, JSONValue]]] = {}
    for r in sorted(records, key=lambda r: r.get("ts", 0)):
        by_node.setdefault(str(r.get("node")), []).append(r)
    out: list[ZoneSurvey] = []
    for node in sorted(by_node, key=_natural_key):
        rs = by_node[node]
        names = sorted({z["name"] for r in rs for z in r.get("zones") or []}, key=_natural_key)
        for name in names:
            trips: JSONObject = {}
            temps, pairs, ztype, current = [], [], None, None
            for r in rs:
                gpu = max(
                    (g["temp_c"] for g in r.get("gpus") or [] if g.get("temp_c") is not None),
                    default=None,
                )
                for z in r.get("zones") or []:
                    if z["name"] != name:
                        continue
                    ztype = z.get("type") or ztype
                    trips = {t["type"]: t["temp_c"] for t in z.get("trips") or []
                             if t.get("type") and t.get("temp_c") is not None} or trips  # fmt: skip
                    current = z.get("temp_c")
                    if current is not None:
                        temps.append(current)
                        if gpu is not None:
                            pairs.append((current, gpu))
            out.append(
                ZoneSurvey(
                    node=node, zone=name, type=ztype, role=zone_role(name, ztype, zone_roles), current_c=current,
                    min_c=min(temps) if temps else None, max_c=max(temps) if temps else None, trips=trips,
                    gpu_corr=_corr([p[0] for p in pairs], [p[1] for p in pairs]),
                )
            )  # fmt: skip
    return out
