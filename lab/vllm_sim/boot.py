"""What the simulated head and worker share: phase durations, the simulation's environment, the
boot sequence and the start-up lines vLLM prints.

Its own module so that ``head`` and ``worker`` need not import ``server``, which imports them to
pick one (no import cycle).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .cli import VLLM_VERSION, ServeConfig
from .faults import FaultWatcher
from .logfmt import VllmLog, tqdm_line

# Unscaled phase durations (seconds): 18.5 min from launch to ready with --enforce-eager,
# most of it weight loading, as in the field report.
DUR = {
    "start": 8.0,
    "engine_init": 10.0,
    "rendezvous": 6.0,
    "load_weights": 800.0,
    "load_drafter": 25.0,
    "compile": 60.0,
    "profile": 240.0,
    "cuda_graphs": 40.0,
    "api_server": 18.0,
}
PHASES = [
    "start",
    "engine_init",
    "rendezvous",
    "load_weights",
    "load_drafter",
    "compile",
    "profile",
    "cuda_graphs",
    "api_server",
    "ready",
]
GPU_TOTAL_GIB = 119.7
CRASH_TEXT = {
    "start": "OSError: Can't load the configuration of '{model}'. Make sure the path is correct.",
    "engine_init": "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO "
    "for details)",
    "rendezvous": "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for "
    "clients. 1/{nnodes} clients joined.",
    "load_weights": "safetensors_rust.SafetensorError: Error while deserializing header: "
    "MetadataIncompleteBuffer",
    "load_drafter": "safetensors_rust.SafetensorError: Error while deserializing header: "
    "MetadataIncompleteBuffer",
    "compile": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "profile": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
    "a total capacity of 119.70 GiB of which 1.02 GiB is free.",
    "cuda_graphs": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "api_server": "OSError: [Errno 98] Address already in use",
    "ready": "OSError: [Errno 98] Address already in use",
}


@dataclass(frozen=True, kw_only=True)
class SimEnv:
    """Simulator knobs (environment variables, see README.md)."""

    time_scale: float
    step_scale: float
    timeout_s: float
    ring_warn_s: float
    gpus_per_node: int
    exit_delay_s: float
    keep_alive: bool
    seed: int
    num_shards: int
    expected_acceptance: bool

    @classmethod
    def from_env(cls, env: dict[str, str]) -> SimEnv:
        def f(name: str, default: float) -> float:
            try:
                return float(env.get(name, default))
            except ValueError:
                return default

        return cls(
            time_scale=f("VLLM_SIM_TIME_SCALE", 1.0),
            step_scale=f("VLLM_SIM_STEP_SCALE", 1.0),
            timeout_s=f("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 300.0),
            ring_warn_s=f("VLLM_RINGBUFFER_WARNING_INTERVAL", 60.0),
            gpus_per_node=int(f("VLLM_SIM_GPUS_PER_NODE", 1)),
            exit_delay_s=f("VLLM_SIM_EXIT_DELAY_S", 5.0),
            keep_alive=env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") in ("1", "true"),
            seed=int(f("VLLM_SIM_SEED", 0)),
            num_shards=int(f("VLLM_SIM_NUM_SHARDS", 40)),
            expected_acceptance=env.get("VLLM_SIM_SPEC_ACCEPTANCE", "sampled") == "expected",
        )


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def model_facts(model: str, default_shards: int) -> tuple[int, float, dict]:
    """(shard count, checkpoint GiB, config.json) from a local model dir, with defaults."""
    index = _read_json(Path(model) / "model.safetensors.index.json")
    shards = len(set((index.get("weight_map") or {}).values())) or default_shards
    size = (index.get("metadata") or {}).get("total_size")
    gib = float(size) / 2**30 if size else 172.3
    return shards, gib, _read_json(Path(model) / "config.json")


class Boot:
    """Runs phases; honours boot_stuck_at / boot_crash_at faults at each phase entry."""

    def __init__(
        self, cfg: ServeConfig, sim: SimEnv, log: VllmLog, faults: FaultWatcher, proc: str
    ) -> None:
        self.cfg, self.sim, self.log, self.faults, self.proc = cfg, sim, log, faults, proc
        self.t0 = time.monotonic()

    async def sleep(self, unscaled: float) -> None:
        await asyncio.sleep(max(0.0, unscaled * self.sim.time_scale))

    async def at(self, phase: str) -> None:
        f = self.faults.poll()
        if f.boot_stuck_at == phase:
            await asyncio.Event().wait()  # stuck forever, logging nothing further
        if f.boot_crash_at == phase:
            self.crash(phase)

    def crash(self, phase: str) -> None:
        text = CRASH_TEXT.get(phase, "RuntimeError: simulated failure").format(
            model=self.cfg.model, nnodes=self.cfg.nnodes
        )
        where = "core.py:1108"
        for line in [
            "EngineCore failed to start.",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
            "line 1099, in run_engine_core",
            "    engine_core = EngineCoreProc(*args, **kwargs)",
            text,
        ]:
            self.log.error(self.proc, where, line)
        if self.cfg.headless:
            sys.exit(1)
        self.log.error("APIServer", "launcher.py:112", "Traceback (most recent call last):")
        self.log.error(
            "APIServer",
            "launcher.py:112",
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore_DP0': 1}",
        )
        sys.exit(1)

    async def load_shards(self, desc_proc: str, n: int, total_s: float, bars: bool) -> float:
        rng = random.Random(f"{self.cfg.model}:{n}")
        weights = [0.85 + 0.3 * rng.random() for _ in range(n)]
        per = [total_s * w / sum(weights) for w in weights]
        desc = "Loading safetensors checkpoint shards"
        if bars:
            self.log.raw(desc_proc, tqdm_line(desc, 0, n, 0.0), stderr=True)
        elapsed_unscaled = 0.0
        for i, dt in enumerate(per, 1):
            await self.sleep(dt)
            elapsed_unscaled += dt
            if bars:
                self.log.raw(desc_proc, tqdm_line(desc, i, n, elapsed_unscaled), stderr=True)
        if bars:
            self.log.raw(desc_proc, tqdm_line(desc, n, n, elapsed_unscaled), stderr=True)
            self.log.raw(desc_proc, "", stderr=True)
        return elapsed_unscaled


def banner(log: VllmLog, cfg: ServeConfig) -> None:
    if os.environ.get("VLLM_DISABLE_LOG_LOGO", "0") in ("1", "true"):
        log.info(
            "APIServer",
            "startup.py:88",
            f"vLLM server version {VLLM_VERSION}, serving model {cfg.model}",
        )
    else:
        for line in [
            "",
            "       █     █     █▄   ▄█",
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VLLM_VERSION}",
            f"  █▄█▀ █     █     █     █  model   {cfg.model}",
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
            "",
        ]:
            log.info("APIServer", "startup.py:88", line)
    shown = {k: ("***" if k == "api_key" else v) for k, v in cfg.non_default.items()}
    log.info("APIServer", "startup.py:96", f"non-default args: {shown}")


def engine_config_line(cfg: ServeConfig) -> str:
    spec = "None"
    if cfg.spec:
        spec = (
            f"SpeculativeConfig(method='{cfg.spec.get('method')}', "
            f"model='{cfg.spec.get('model')}', num_spec_tokens={cfg.num_spec_tokens})"
        )
    return (
        f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model='{cfg.model}', "
        f"speculative_config={spec}, tokenizer='{cfg.model}', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=False, "
        f"dtype=torch.bfloat16, max_seq_len={cfg.max_model_len}, download_dir=None, "
        f"load_format=auto, tensor_parallel_size={cfg.tp}, "
        f"pipeline_parallel_size={cfg.pp}, data_parallel_size=1, "
        f"disable_custom_all_reduce=False, quantization=compressed-tensors, "
        f"enforce_eager={cfg.enforce_eager}, kv_cache_dtype={cfg.kv_cache_dtype}, "
        f"device_config=cuda, seed={cfg.seed}, served_model_name={cfg.served_model_name}, "
        f"enable_prefix_caching=True, enable_chunked_prefill=True"
    )


def kv_plan(cfg: ServeConfig, weights_gib: float) -> tuple[float, int]:
    """(available KV GiB per GPU, KV capacity in tokens)."""
    if cfg.kv_cache_memory_bytes:
        kv_gib = cfg.kv_cache_memory_bytes / 2**30
    else:
        kv_gib = max(1.0, GPU_TOTAL_GIB * cfg.gpu_memory_utilization - weights_gib - 8.0)
    per_token = (14336 if cfg.kv_cache_dtype.startswith("fp8") else 28672) * 4 // max(1, cfg.tp)
    return kv_gib, int(kv_gib * 2**30 // per_token)


def bind_http(cfg: ServeConfig) -> socket.socket:
    """Bind early but listen only when ready: connections are refused until then (like vLLM)."""
    host = cfg.host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, cfg.port))
    sock.setblocking(False)
    return sock
