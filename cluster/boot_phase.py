"""Boot phases in the order vLLM goes through them, and their default weights."""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
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


_ORDER = [p for p in Phase if p is not Phase.FAILED]
TIMED_PHASES = [p for p in _ORDER if p is not Phase.READY]

# Seconds per phase from the reference boot (0.25.1, GB10, 49 shards, 24.5 min); only used to
# weight the progress bar before any boot has been recorded, never for the ETA.
DEFAULT_WEIGHTS_S = {
    Phase.STARTING: 5,
    Phase.ENGINE_INIT: 11,
    Phase.RENDEZVOUS: 2,
    Phase.LOADING_WEIGHTS: 575,
    Phase.LOADING_DRAFTER: 18,
    Phase.PROFILING: 755,
    Phase.KV_CACHE: 1,
    Phase.WARMUP: 115,
    Phase.API_STARTING: 5,
}
