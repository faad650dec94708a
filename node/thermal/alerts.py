"""Threshold alerts over sample records: pure and edge-triggered (one event when a condition
starts, one when it clears), so an overnight run near a limit does not log every 10 s."""

from __future__ import annotations

from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONObject
from tpwarden.node.thermal.records import THERMAL_REASONS
from tpwarden.node.thermal.zones import critical_trip_c


@dataclass
class AlertPolicy:
    """``zone_margin_c``: raise when a zone is within this many C of its critical trip (None:
    off). ``clock_events``: raise on any thermal clock-event reason of a GPU."""

    zone_margin_c: float | None = None
    clock_events: bool = True
    _active: dict[tuple[str, str], JSONObject] = field(default_factory=dict)

    def evaluate(self, record: JSONObject) -> list[JSONObject]:
        """Events (state "raised" or "cleared") that this record starts or ends."""
        now: dict[tuple[str, str], JSONObject] = {}
        if self.zone_margin_c is not None:
            for z in record.get("zones", []):
                crit = _critical(z)
                temp = z.get("temp_c")
                if crit is None or temp is None or crit - temp > self.zone_margin_c:
                    continue
                now[("zone_near_critical", z["name"])] = {
                    "event": "zone_near_critical",
                    "zone": z["name"],
                    "type": z.get("type"),
                    "temp_c": temp,
                    "critical_c": crit,
                    "margin_c": round(crit - temp, 3),
                }
        if self.clock_events:
            for g in record.get("gpus", []):
                active = sorted(set(g.get("clock_event_reasons") or ()) & THERMAL_REASONS)
                if active:
                    now[("gpu_thermal_clock_event", str(g.get("index")))] = {
                        "event": "gpu_thermal_clock_event",
                        "gpu": g.get("index"),
                        "uuid": g.get("uuid"),
                        "reasons": active,
                        "temp_c": g.get("temp_c"),
                        "sm_clock_mhz": g.get("sm_clock_mhz"),
                    }
        events = [{**ev, "state": "raised"} for k, ev in now.items() if k not in self._active]
        events += [{**ev, "state": "cleared"} for k, ev in self._active.items() if k not in now]
        self._active = now
        return events


def _critical(zone: JSONObject) -> float | None:
    return critical_trip_c(zone.get("trips") or [])
