"""A headless worker (node rank > 0): connects to the head and answers step RPCs.

Like vLLM (vllm#32136) it does not exit when the head goes away: it keeps logging TCPStore
errors and does not re-join a restarted head, so all nodes must be restarted together.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from . import rendezvous
from .boot import DUR, Boot, SimEnv, banner, kv_plan, model_facts
from .cli import VLLM_VERSION, ServeConfig
from .faults import FaultWatcher, fault_path
from .logfmt import VllmLog


def _torch_warning(rank: int, where: str, msg: str) -> str:
    t = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1e6):06d}"
    return f"[rank{rank}]:[W{stamp} {os.getpid()} {where}] {msg}"


async def run_worker(cfg: ServeConfig, sim: SimEnv, log: VllmLog) -> int:
    rank = cfg.node_rank
    proc = f"Worker_TP{rank}"
    faults = FaultWatcher(fault_path(cfg.model), rank)
    fault_task = asyncio.ensure_future(faults.run())
    boot = Boot(cfg, sim, log, faults, proc)
    shards, ckpt_gib, hf_config = model_facts(cfg.model, sim.num_shards)
    if not cfg.max_model_len:
        cfg.max_model_len = int(hf_config.get("max_position_embeddings") or 131072)

    await boot.at("start")
    banner(log, cfg)
    log.info(
        "APIServer",
        "serve.py:283",
        f"Launching vLLM (v{VLLM_VERSION}) headless multiproc executor, with head node "
        f"address {cfg.master_addr} for torch.distributed process group.",
    )
    await boot.sleep(DUR["start"] + DUR["engine_init"])

    await boot.at("rendezvous")
    interval = max(0.5, 30.0 * sim.time_scale)
    last_warn = 0.0
    while True:
        try:
            reader, writer = await rendezvous.connect(cfg.master_addr, cfg.master_port, rank)
            break
        except ConnectionRefusedError as exc:
            if "rejected" in str(exc) or "taken" in str(exc):
                log.error(proc, "parallel_state.py:1607", f"RuntimeError: {exc}")
                return 1
            err = "errno: 111 - Connection refused"
        except OSError as exc:
            err = f"errno: {exc.errno} - {exc.strerror}"
        if time.monotonic() - last_warn >= interval:
            last_warn = time.monotonic()
            log.plain(
                _torch_warning(
                    rank,
                    "socket.cpp:767",
                    f"[c10d] The client socket has "
                    f"failed to connect to [{cfg.master_addr}]:"
                    f"{cfg.master_port} ({err}).",
                )
            )
        await asyncio.sleep(0.2)
    world = cfg.tp * cfg.pp
    log.info(
        proc,
        "parallel_state.py:1607",
        f"world_size={world} rank={rank} local_rank=0 distributed_init_method=tcp://"
        f"{cfg.master_addr}:{cfg.master_port} backend=nccl",
    )

    loaded = asyncio.Event()
    send_lock = asyncio.Lock()

    async def answer(msg: dict) -> None:
        await loaded.wait()
        if msg.get("kind") == "profile":
            await boot.at("profile")
            weights_gib = ckpt_gib / max(1, cfg.tp)
            kv_gib, _ = kv_plan(cfg, weights_gib)
            log.info(proc, "gpu_worker.py:773", f"Available KV cache memory: {kv_gib:.2f} GiB")
        while faults.current.hang:
            await asyncio.sleep(0.05)
        extra = float(msg.get("dur") or 0.0) * (faults.current.slow_steps - 1.0)
        if extra > 0:
            await asyncio.sleep(extra)
        async with send_lock:
            await rendezvous.send(writer, {"op": "done", "id": msg["id"]})

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(rendezvous.HEARTBEAT_S)
            await rendezvous.send(writer, {"op": "hb"})

    async def die_on_fault() -> None:
        while not faults.current.engine_dead:
            await asyncio.sleep(0.05)
        log.error(proc, "multiproc_executor.py:702", "WorkerProc hit an exception.")
        log.error(
            proc,
            "multiproc_executor.py:702",
            "RuntimeError: CUDA error: unspecified launch failure (fault injected: engine_dead)",
        )
        sys.stdout.flush()
        os._exit(1)

    async def read_loop() -> None:
        while True:
            line = await reader.readline()
            if not line:
                return
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("op") == "exec":
                asyncio.ensure_future(answer(msg))

    tasks = [asyncio.ensure_future(t) for t in (heartbeat(), die_on_fault())]
    reading = asyncio.ensure_future(read_loop())

    await boot.at("load_weights")
    log.info(proc, "gpu_model_runner.py:4979", f"Starting to load model {cfg.model}...")
    took = await boot.load_shards(proc, shards, DUR["load_weights"] * 0.98, bars=False)
    log.info(proc, "default_loader.py:507", f"Loading weights took {took:.2f} seconds")
    if cfg.spec:
        await boot.at("load_drafter")
        await boot.sleep(DUR["load_drafter"])
        took += DUR["load_drafter"]
    log.info(
        proc,
        "gpu_model_runner.py:5089",
        f"Model loading took "
        f"{ckpt_gib / max(1, cfg.tp):.2f} GiB memory and {took + 1.1:.6f} seconds",
    )
    loaded.set()

    await reading  # head went away: keep running and complaining (vllm#32136)
    for t in tasks[:1]:
        t.cancel()
    while True:
        log.plain(
            _torch_warning(
                rank,
                "TCPStore.cpp:125",
                f"[c10d] recvValue failed on SocketImpl(fd=12, addr=[?]:0, "
                f"remote=[{cfg.master_addr}]:{cfg.master_port}): Connection "
                "was likely closed. Did the remote server shutdown or crash?",
            )
        )
        await asyncio.sleep(max(0.5, 30.0 * sim.time_scale))
    fault_task.cancel()  # pragma: no cover
