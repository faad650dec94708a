"""The node's record of its GPU clock cap: what the lock call answered, when, for each GPU.

NVML has no getter for locked clocks (nvml.h declares ``nvmlDeviceSetGpuLockedClocks`` and
``nvmlDeviceResetGpuLockedClocks`` and nothing that reads the range back; ``nvidia-smi -lgc``
"will supersede application clocks", so the application clock target does not show it either).
The only proof a cap is in force is the lock call's own answer. The collector's ``cap`` and
``reset`` actions (``tpwarden clocks``, pre-flight, the boot-time ``tpwarden-clock-cap`` unit)
write that answer here; ``show`` and the thermal agent read it back.

The record lives under ``/run`` (``$TPWARDEN_CLOCK_CAP_RECORD`` overrides it): a tmpfs emptied
at every boot, which is exactly how long a lock lasts ("After system reboot or driver reload GPU
clocks go back to their default value", nvml.h), so a record never outlives its lock across a
reboot. (A driver reload without a reboot is not seen; the unit re-applies the cap at boot.)

The pure reading of a collector report (:func:`read_cap`, :func:`annotate_gpus`) is here too,
next to the record it reads; ``tpwarden clocks``, pre-flight, ``status`` and the bench manifest
use it. Standard library only (plus the durable writer): it ships in the node zipapps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_json, read_json

RECORD_VERSION = 1
DEFAULT_RECORD_PATH = "/run/tpwarden/clock-cap.json"
NO_READ_BACK = "NVML has no read-back"
# Clock steps and the averaging of a sampled SM clock: a reading this far above the cap is noise.
CLOCK_CAP_TOLERANCE_MHZ = 50


def record_path() -> Path:
    """Where the record lives: ``$TPWARDEN_CLOCK_CAP_RECORD``, else ``/run/tpwarden/...``."""
    return Path(os.environ.get("TPWARDEN_CLOCK_CAP_RECORD") or DEFAULT_RECORD_PATH)


@dataclass(frozen=True, kw_only=True)
class LockAnswer:
    """One GPU's answer to a lock (or reset) call: ``answer`` is NVML's return code name
    without ``NVML_ERROR_`` (``SUCCESS``, ``NOT_SUPPORTED``, ``NO_PERMISSION``, ...)."""

    index: int
    answer: str
    code: int
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == 0


def refusal_text(a: LockAnswer) -> str:
    """The driver's answer, said for an operator (NO_PERMISSION: needs root)."""
    said = f"NVML answered {a.answer} ({a.message})"
    if a.answer == "NO_PERMISSION":
        return f"{said}; setting clocks needs root (run tpwarden's clock step as root or via sudo)"
    if a.answer == "NOT_SUPPORTED":
        return f"{said}; this GPU/driver does not support locked clocks"
    return said


def make_record(
    action: str,
    mhz: int | None,
    answers: Sequence[LockAnswer],
    now: float,
) -> JSONObject:
    """The JSON record of one ``cap``/``reset``: ``ok`` only if every GPU answered SUCCESS."""
    return {
        "version": RECORD_VERSION,
        "action": action,
        "mhz": mhz if action == "cap" else None,
        "time_unix_s": now,
        "ok": bool(answers) and all(a.ok for a in answers),
        "gpus": [asdict(a) for a in answers],
    }


def write_record(record: Mapping[str, JSONValue], path: Path | None = None) -> None:
    """Atomically replace the record (world-readable: ``clocks show`` runs unprivileged)."""
    atomic_write_json(path or record_path(), dict(record), mode=0o644)


def read_record(path: Path | None = None) -> tuple[JSONObject | None, str | None]:
    """``(record, None)``, or ``(None, reason)`` when there is none or it cannot be read."""
    where = path or record_path()
    try:
        doc = read_json(where)
    except (OSError, ValueError) as e:
        return None, f"clock-cap record {where} unreadable: {type(e).__name__}: {e}"
    if doc is None:
        return None, "no lock call recorded since boot (clock-cap unit or `tpwarden clocks cap`)"
    if not isinstance(doc, dict) or doc.get("version") != RECORD_VERSION:
        return None, f"clock-cap record {where} has an unknown format"
    return doc, None


def utc(t: object) -> str:
    """A record's time for people: ``2026-12-04T03:20:11Z`` (``?`` when missing)."""
    if not isinstance(t, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def recorded_cap(
    record: Mapping[str, JSONValue] | None, reason: str | None, index: int
) -> tuple[int | None, str]:
    """The cap GPU ``index`` runs under by the record: ``(mhz, why)`` or ``(None, why)``."""
    if record is None:
        return None, f"{NO_READ_BACK}; {reason}"
    when = utc(record.get("time_unix_s"))
    if record.get("action") != "cap":
        return None, f"{NO_READ_BACK}; clocks reset at {when}"
    mine = [g for g in record.get("gpus") or () if g.get("index") == index]
    if not mine:
        return None, f"{NO_READ_BACK}; no answer from GPU{index} recorded"
    if mine[0].get("code") != 0:
        return None, f"{NO_READ_BACK}; lock call at {when} answered {mine[0].get('answer')}"
    mhz = record.get("mhz")
    return (mhz if isinstance(mhz, int) else None), f"set at {when}; {NO_READ_BACK}"


# ---- the pure reading of a collector report (control side: clocks, pre-flight, status, bench) --
@dataclass(frozen=True)
class CapReading:
    """A node's clock cap by its record: ``state`` in set/refused/reset/none; ``violations``:
    GPUs whose SM clock is above ``mhz`` + :data:`CLOCK_CAP_TOLERANCE_MHZ`."""

    state: str
    mhz: int | None
    text: str
    violations: dict[int, str] = field(default_factory=dict)
    time_unix_s: float | None = None


def _refusal(gpus: Sequence[Mapping[str, JSONValue]]) -> str:
    bad = [g for g in gpus if g.get("code") != 0]
    return "; ".join(
        f"GPU{g.get('index')}: NVML answered {g.get('answer')} ({g.get('message')})" for g in bad
    )


def read_cap(doc: Mapping[str, JSONValue]) -> CapReading:
    """Pure: the collector's JSON (``clock_cap`` and ``gpus``) -> what the record proves."""
    cap = doc.get("clock_cap") or {}
    record = cap.get("record")
    if not isinstance(record, Mapping):
        why = cap.get("reason") or "the collector sent no clock-cap record"
        return CapReading("none", None, f"no cap recorded ({why}); {NO_READ_BACK}")
    t = record.get("time_unix_s") if isinstance(record.get("time_unix_s"), (int, float)) else None
    when = utc(t)
    gpus = [g for g in record.get("gpus") or () if isinstance(g, Mapping)]
    if record.get("action") == "reset":
        return CapReading("reset", None, f"clocks reset at {when}; {NO_READ_BACK}", {}, t)
    if not record.get("ok"):
        said = _refusal(gpus) or "no GPU answered"
        return CapReading("refused", None, f"lock call at {when} refused: {said}", {}, t)
    mhz = record.get("mhz")
    mhz = mhz if isinstance(mhz, int) and not isinstance(mhz, bool) else None
    text = f"{mhz} MHz set at {when}; {NO_READ_BACK}"
    if cap.get("reason"):  # answered, but not stored on the node
        text += f" ({cap['reason']})"
    return CapReading("set", mhz, text, _violations(doc.get("gpus") or (), mhz), t)


def _violations(gpus: Sequence[Mapping[str, JSONValue]], mhz: int | None) -> dict[int, str]:
    out: dict[int, str] = {}
    if mhz is None:
        return out
    for g in gpus:
        sm = g.get("sm_clock_mhz")
        if isinstance(sm, (int, float)) and sm > mhz + CLOCK_CAP_TOLERANCE_MHZ:
            out[int(g.get("index") or 0)] = (
                f"GPU{g.get('index')} SM clock {sm} MHz above the {mhz} MHz cap "
                f"(+{CLOCK_CAP_TOLERANCE_MHZ} MHz tolerance)"
            )
    return out


def annotate_gpus(doc: Mapping[str, JSONValue]) -> tuple[JSONObject, ...]:
    """The collector's GPU rows, each with ``clock_cap`` (the reading's text),
    ``clock_cap_state``, ``clock_cap_time_unix_s`` (of the lock call) and
    ``clock_cap_violation`` (text or None) added; nothing removed."""
    reading = read_cap(doc)
    return tuple(
        {
            **g,
            "clock_cap": reading.text,
            "clock_cap_state": reading.state,
            "clock_cap_time_unix_s": reading.time_unix_s,
            "clock_cap_violation": reading.violations.get(int(g.get("index") or 0)),
        }
        for g in doc.get("gpus") or ()
    )
