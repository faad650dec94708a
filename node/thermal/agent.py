"""The thermal agent: one sample per wall-clock grid slot, one JSON line per sample.

Slot k is due at ``t0 + k * interval_s``. A tick taken after its slot is recorded with its
lateness (``late_s``); slots that passed entirely are skipped and counted, never made up with a
burst of samples. ``tick()`` is the whole job; ``run()`` is the thin scheduler around it. Time
and sleeping are injected, so tests drive hours of grid in microseconds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject
from tpwarden.node.gpu_access import DeviceDenial
from tpwarden.node.memory import NodeMemory
from tpwarden.node.thermal.alerts import AlertPolicy
from tpwarden.node.thermal.records import (
    GpuSampler,
    RecordWriter,
    ZoneReader,
    gpu_to_record,
    iso_utc,
)
from tpwarden.node.thermal.zones import hwmon_to_record, zone_to_record

log = logging.getLogger(__name__)

# Slack in seconds so that a tick exactly on its slot is not counted in the previous slot
# (epoch floats near 1.7e9 carry ~2e-7 s of rounding).
_EPS = 1e-5


@dataclass(kw_only=True)
class AgentStats:
    samples: int = 0
    late_ticks: int = 0  # ticks later than late_threshold_s after their slot
    skipped_slots: int = 0  # grid slots that got no sample at all
    written: int = 0
    dropped: int = 0  # records the writer could not store


class ThermalAgent:
    """Samples GPUs and thermal zones of one node. Constructing it starts nothing."""

    def __init__(
        self,
        node: str,
        interval_s: float,
        gpu_sampler: GpuSampler,
        zone_reader: ZoneReader,
        writer: RecordWriter,
        clock: Callable[[], float],
        sleeper: Callable[[float], object],
        *,
        role: str | None = None,
        alerts: AlertPolicy | None = None,
        late_threshold_s: float | None = None,
        align: bool = True,
        memory: Callable[[], NodeMemory] | None = None,
        gpu_access: Callable[[], DeviceDenial | None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.node = node
        self.role = role
        self.interval_s = float(interval_s)
        self.gpu_sampler = gpu_sampler
        self.zone_reader = zone_reader
        self.writer = writer
        self.clock = clock
        self.sleeper = sleeper
        self.alerts = alerts or AlertPolicy()
        # Late means later than 10% of the interval (capped at 1 s): scheduler noise is not late.
        self.late_threshold_s = (
            late_threshold_s if late_threshold_s is not None else min(1.0, 0.1 * self.interval_s)
        )
        self.align = align
        # The node's memory (cluster.memory.memory_reader: psutil; GB10's is the GPU's too).
        self.memory = memory
        # When NVML gives no GPU reading: is a GPU device node denied to this process (a unit's
        # DeviceAllow)? Then that is the error recorded, never "no GPU" (node/gpu_access.py).
        self.gpu_access = gpu_access
        self.stats = AgentStats()
        self.latest: JSONObject | None = None
        self.t0: float | None = None
        self._next_k = 0
        self._seq = 0
        self._stopped = False

    # -- grid ---------------------------------------------------------------------------------------
    def anchor(self, t0: float) -> None:
        """Put slot 0 at ``t0`` (epoch s)."""
        self.t0 = float(t0)
        self._next_k = 0

    def first_slot_after(self, now: float) -> float:
        """With ``align``, slots fall on multiples of the interval (nodes sample together)."""
        if not self.align:
            return now
        return math.ceil((now - _EPS) / self.interval_s) * self.interval_s

    def next_due(self) -> float | None:
        return None if self.t0 is None else self.t0 + self._next_k * self.interval_s

    # -- the job ----------------------------------------------------------------------------------
    def tick(self) -> JSONObject | None:
        """Take the sample for the latest due slot, write it, return the record.

        Returns None (and samples nothing) when called before the next slot is due. The first
        call on an unanchored agent anchors the grid at that moment.
        """
        now = self.clock()
        if self.t0 is None:
            self.anchor(now)
        assert self.t0 is not None
        errors: list[dict[str, str]] = []
        if now < self.t0 + (self._next_k - 1) * self.interval_s - _EPS:
            # Wall clock went backwards past the previous slot: re-anchor, say so in the record.
            errors.append(
                {"source": "clock", "error": f"wall clock stepped back to {iso_utc(now)}"}
            )
            log.warning("thermal agent: wall clock stepped back; re-anchoring the grid")
            self.anchor(now)
        k = math.floor((now - self.t0 + _EPS) / self.interval_s)
        if k < self._next_k:
            return None
        skipped = k - self._next_k
        slot_ts = self.t0 + k * self.interval_s
        late_s = max(0.0, now - slot_ts)
        self._next_k = k + 1

        record = self._sample(now, slot_ts, late_s, skipped, errors)
        self.stats.samples += 1
        self.stats.skipped_slots += skipped
        if late_s > self.late_threshold_s:
            self.stats.late_ticks += 1
            log.info("thermal tick late by %.3f s (slot %s)", late_s, iso_utc(slot_ts))
        if skipped:
            log.warning("thermal agent skipped %d slot(s) before %s", skipped, iso_utc(slot_ts))
        if self.writer.write(record):
            self.stats.written += 1
        else:
            self.stats.dropped += 1
        self.latest = record
        return record

    def _sample(
        self, now: float, slot_ts: float, late_s: float, skipped: int, errors: list[dict[str, str]]
    ) -> JSONObject:
        gpus: list[JSONObject] = []
        try:
            gpus = [gpu_to_record(s) for s in self.gpu_sampler.sample_all()]
            errors += self._gpu_errors(gpus)
        except Exception as exc:  # noqa: BLE001 - a broken GPU must never stop zone logging
            errors.append({"source": "gpu", "error": f"{type(exc).__name__}: {exc}"})
        zones: list[JSONObject] = []
        hwmon: list[JSONObject] = []
        try:
            snap = self.zone_reader.read()
            zones = [zone_to_record(z) for z in snap.zones]
            hwmon = [hwmon_to_record(h) for h in snap.hwmon]
            errors += [{"source": "sysfs", "error": e} for e in snap.errors]
        except Exception as exc:  # noqa: BLE001
            errors.append({"source": "sysfs", "error": f"{type(exc).__name__}: {exc}"})
        memory: JSONObject | None = None
        if self.memory is not None:
            try:
                memory = self.memory().to_json()
            except Exception as exc:  # noqa: BLE001 - memory is one reading among many
                errors.append({"source": "memory", "error": f"{type(exc).__name__}: {exc}"})
        self._seq += 1
        record: JSONObject = {
            "node": self.node,
            "ts": round(now, 3),
            "ts_iso": iso_utc(now),
            "seq": self._seq,
            "slot_ts": round(slot_ts, 3),
            "late_s": round(late_s, 6),
            "skipped_slots": skipped,
            "interval_s": self.interval_s,
            "gpus": gpus,
            "zones": zones,
            "hwmon": hwmon,
            "events": [],
            "errors": errors,
        }
        if memory is not None:
            record["memory"] = memory
        if self.role:
            record["role"] = self.role
        events = self.alerts.evaluate(record)
        for ev in events:
            level = logging.WARNING if ev["state"] == "raised" else logging.INFO
            log.log(level, "thermal alert %s %s: %s", ev["event"], ev["state"], ev)
        record["events"] = events
        return record

    def _gpu_errors(self, gpus: list[JSONObject]) -> list[dict[str, str]]:
        """Why there is no GPU reading: a denied device node first (cause and unit), else
        NVML's own state; nothing when the GPUs answered."""
        status = getattr(self.gpu_sampler, "status", None)
        st = status() if callable(status) and not gpus else None
        denied = any(
            "insufficient permissions" in str((g.get("null_reasons") or {}).get("temp_c", ""))
            for g in gpus
        )
        if gpus and not denied:
            return []
        denial = self.gpu_access() if self.gpu_access is not None else None
        if denial is not None:
            found = {"source": "gpu", "error": denial.text(), "cause": denial.cause}
            return [{**found, "unit": denial.unit} if denial.unit else found]
        if st is not None and not getattr(st, "available", True):
            return [{"source": "gpu", "error": f"NVML {st.state}: {st.reason}"}]
        if st is not None and not gpus:
            return [{"source": "gpu", "error": "NVML answers but counts no GPU (0 devices)"}]
        return []

    # -- the thin scheduler -----------------------------------------------------------------------
    def stop(self) -> None:
        self._stopped = True

    def run(self, max_samples: int | None = None) -> AgentStats:
        """Sleep to each slot and tick, until :meth:`stop` or ``max_samples`` samples."""
        if self.t0 is None:
            self.anchor(self.first_slot_after(self.clock()))
        taken = 0
        while not self._stopped and (max_samples is None or taken < max_samples):
            due = self.next_due()
            assert due is not None
            wait = due - self.clock()
            if wait > 0:
                self.sleeper(wait)
                if self._stopped:
                    break
            if self.tick() is not None:
                taken += 1
        return self.stats
