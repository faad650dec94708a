"""Fault injection: a JSON file polled every ~0.2 s (schema in README.md).

``{"all": {...}, "node_rank": {"1": {...}}}``; a rank's faults are ``all`` overlaid with its own.
Kinds: boot_stuck_at, boot_crash_at (phase names), http_5xx (true or a status code),
engine_dead (true), hang (true), slow_steps (factor >= 1). Optional ``when_argv``: a list of
strings that must all occur in this process's command line for the faults to apply (so a fault
can hit one config, e.g. ``["num_speculative_tokens\":5"]``, and spare a rollback to another).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.2


@dataclass(frozen=True, kw_only=True)
class Faults:
    boot_stuck_at: str | None = None
    boot_crash_at: str | None = None
    http_5xx: int | None = None
    engine_dead: bool = False
    hang: bool = False
    slow_steps: float = 1.0


def fault_path(model: str, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("VLLM_SIM_FAULT_FILE"):
        return Path(env["VLLM_SIM_FAULT_FILE"])
    return Path(model) / ".vllm-sim" / "faults.json"


def parse_faults(doc: object, rank: int, argv: list[str] | None = None) -> Faults:
    if not isinstance(doc, dict):
        return Faults()
    merged: dict = {}
    if isinstance(doc.get("all"), dict):
        merged.update(doc["all"])
    per = doc.get("node_rank")
    if isinstance(per, dict) and isinstance(per.get(str(rank)), dict):
        merged.update(per[str(rank)])
    when = merged.get("when_argv")
    if isinstance(when, list) and argv is not None:
        joined = " ".join(argv)
        if not all(isinstance(w, str) and w in joined for w in when):
            return Faults()
    http = merged.get("http_5xx")
    if http is True:
        http = 500
    elif not isinstance(http, int) or isinstance(http, bool) or not 500 <= http <= 599:
        http = None
    try:
        slow = max(1.0, float(merged.get("slow_steps") or 1.0))
    except (TypeError, ValueError):
        slow = 1.0
    return Faults(
        boot_stuck_at=merged.get("boot_stuck_at") or None,
        boot_crash_at=merged.get("boot_crash_at") or None,
        http_5xx=http,
        engine_dead=bool(merged.get("engine_dead")),
        hang=bool(merged.get("hang")),
        slow_steps=slow,
    )


class FaultWatcher:
    """Holds the current faults for one rank; ``poll()`` re-reads the file."""

    def __init__(self, path: Path, rank: int, argv: list[str] | None = None) -> None:
        self.path = path
        self.rank = rank
        self.argv = list(sys.argv if argv is None else argv)
        self.current = Faults()
        self._stamp: tuple[int, int] | None = None

    def poll(self) -> Faults:
        try:
            st = self.path.stat()
        except OSError:
            self.current, self._stamp = Faults(), None
            return self.current
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8") or "{}")
            except (OSError, ValueError):
                return self.current  # half-written file: keep the last good state
            self._stamp = stamp
            self.current = parse_faults(doc, self.rank, self.argv)
        return self.current

    async def run(self) -> None:
        while True:
            self.poll()
            await asyncio.sleep(POLL_S)
