"""Boot phases in the order vLLM goes through them, and their default weights."""

from __future__ import annotations

from enum import StrEnum


class BootPhase(StrEnum):
    """Boot phases in the order vLLM goes through them."""

    STARTING = "starting"  # container started, no engine line yet
    ENGINE_INIT = "engine_init"  # version banner, args, V1 engine config
    RENDEZVOUS = "rendezvous"  # torch.distributed world / waiting for the other ranks
    LOADING_WEIGHTS = "loading_weights"
    LOADING_DRAFTER = "loading_drafter"
    PROFILING = "profiling"  # torch.compile + profiling / warm-up run
    KV_CACHE = "kv_cache"  # KV cache sized
    WARMUP = "warmup"  # kernel autotune, CUDA graph capture
    API_STARTING = "api_starting"  # engine ready, API server binding routes
    READY = "ready"  # "Application startup complete."
    FAILED = "failed"

    @property
    def order(self) -> int:
        return _ORDER.index(self) if self in _ORDER else len(_ORDER)


_ORDER = [p for p in BootPhase if p is not BootPhase.FAILED]
TIMED_PHASES = [p for p in _ORDER if p is not BootPhase.READY]

# Seconds per phase from the reference boot (0.25.1, GB10, 49 shards, 24.5 min); only used to
# weight the progress bar before any boot has been recorded, never for the ETA.
DEFAULT_WEIGHTS_S = {
    BootPhase.STARTING: 5,
    BootPhase.ENGINE_INIT: 11,
    BootPhase.RENDEZVOUS: 2,
    BootPhase.LOADING_WEIGHTS: 575,
    BootPhase.LOADING_DRAFTER: 18,
    BootPhase.PROFILING: 755,
    BootPhase.KV_CACHE: 1,
    BootPhase.WARMUP: 115,
    BootPhase.API_STARTING: 5,
}
