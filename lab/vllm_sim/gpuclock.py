"""The GPUs' speed, as the NVML stand-in's state says (the engine's steps follow the clock).

The load model (`loadmodel.py`) is fitted to the field report, measured with the GPU clocks
capped at `VLLM_SIM_REF_CLOCK_MHZ` (2000). A real GPU that runs at another clock takes its steps
that much faster or slower, and a tensor-parallel step waits for the slowest rank. With
`VLLM_SIM_GPU_STATES` (the state file of each node rank's NVML stand-in, comma-separated, in rank
order; the lab mounts them), every step is scaled by REF / the slowest rank's clock under load:
its locked maximum (`tpwarden clocks cap`) when that is below the load clock
(`VLLM_SIM_LOAD_CLOCK_MHZ`, 2411: GB10 under load), else the load clock. A file that cannot be
read counts as the load clock. Read at most once a second.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence


def _env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        return default if raw is None or not raw.strip() else float(raw)
    except ValueError:
        return default


def locked_max(text: str) -> int:
    """`locked_clock_max_mhz` of a stand-in state file (0: none)."""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "locked_clock_max_mhz" and value.strip():
            try:
                return int(value.strip(), 0)
            except ValueError:
                return 0
    return 0


class ClockFactor:
    def __init__(
        self,
        paths: Sequence[str],
        ref_mhz: float | None = None,
        load_mhz: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = [p for p in paths if p]
        self.ref = ref_mhz or _env("VLLM_SIM_REF_CLOCK_MHZ", 2000.0)
        self.load = load_mhz or _env("VLLM_SIM_LOAD_CLOCK_MHZ", 2411.0)
        self._monotonic = monotonic
        self._at = -1e9
        self._factor = 1.0

    @classmethod
    def from_env(cls) -> ClockFactor:
        return cls((os.environ.get("VLLM_SIM_GPU_STATES") or "").split(","))

    def clock_mhz(self, path: str) -> float:
        try:
            with open(path, encoding="utf-8") as f:
                cap = locked_max(f.read())
        except OSError:
            return self.load
        return float(cap) if 0 < cap < self.load else self.load

    def __call__(self) -> float:
        """The factor on every step's time (1.0 without state files)."""
        if not self.paths:
            return 1.0
        now = self._monotonic()
        if now - self._at >= 1.0:
            self._at = now
            self._factor = self.ref / min(self.clock_mhz(p) for p in self.paths)
        return self._factor
