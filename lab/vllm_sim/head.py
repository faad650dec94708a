"""The head (node rank 0): boot, rendezvous server, engine, HTTP API."""

from __future__ import annotations

import asyncio
import os

from aiohttp import web

from .api import ROUTES, Api, make_access_logger
from .boot import DUR, Boot, SimEnv, banner, bind_http, engine_config_line, kv_plan, model_facts
from .cli import ServeConfig
from .engine import Engine
from .faults import FaultWatcher, fault_path
from .gpuclock import ClockFactor
from .logfmt import VllmLog
from .metrics import Metrics, cache_config_labels
from .rendezvous import RendezvousServer


async def run_head(cfg: ServeConfig, sim: SimEnv, log: VllmLog) -> int:
    faults = FaultWatcher(fault_path(cfg.model), cfg.node_rank)
    fault_task = asyncio.ensure_future(faults.run())
    worker_proc = "Worker_TP0" if cfg.tp * cfg.pp > 1 else "EngineCore"
    boot = Boot(cfg, sim, log, faults, "EngineCore")
    shards, ckpt_gib, hf_config = model_facts(cfg.model, sim.num_shards)
    if not cfg.max_model_len:
        cfg.max_model_len = int(hf_config.get("max_position_embeddings") or 131072)
    try:
        sock = bind_http(cfg)
    except OSError as exc:
        banner(log, cfg)
        log.error("APIServer", "launcher.py:112", f"OSError: {exc}")
        return 1

    await boot.at("start")
    banner(log, cfg)
    await boot.sleep(DUR["start"] / 2)
    arch = (hf_config.get("architectures") or ["GlmMoeDsaForCausalLM"])[0]
    log.info("APIServer", "model.py:619", f"Resolved architecture: {arch}")
    log.info("APIServer", "model.py:1776", f"Using max model len {cfg.max_model_len}")
    await boot.sleep(DUR["start"] / 2)

    await boot.at("engine_init")
    log.info("EngineCore", "core.py:140", engine_config_line(cfg))
    rdv = None
    if cfg.nnodes > 1:
        rdv = RendezvousServer(cfg.master_addr, cfg.master_port, cfg.nnodes)
        await rdv.start()
        asyncio.ensure_future(rdv.heartbeat())
        log.info(
            "EngineCore",
            "multiproc_executor.py:132",
            f"DP group leader: node_rank=0, node_rank_within_dp=0, "
            f"master_addr={cfg.master_addr}, mq_connect_ip={cfg.master_addr} "
            f"(local), world_size={cfg.tp * cfg.pp}, local_world_size="
            f"{cfg.tp * cfg.pp // cfg.nnodes}",
        )
    await boot.sleep(DUR["engine_init"])

    await boot.at("rendezvous")
    world = cfg.tp * cfg.pp
    log.info(
        worker_proc,
        "parallel_state.py:1607",
        f"world_size={world} rank=0 local_rank=0 distributed_init_method=tcp://"
        f"{cfg.master_addr}:{cfg.master_port} backend=nccl",
    )
    if rdv is not None:
        interval = max(0.5, 30.0 * sim.time_scale)
        while not rdv.all_connected():
            rdv.changed.clear()
            try:
                await asyncio.wait_for(rdv.changed.wait(), interval)
            except TimeoutError:
                log.info(
                    worker_proc,
                    "multiproc_executor.py:158",
                    f"Waiting for {cfg.nnodes - 1 - len(rdv.connected())} remote node(s) to "
                    f"join tcp://{cfg.master_addr}:{cfg.master_port} (connected node ranks: "
                    f"{[0] + rdv.connected()})",
                )
    await boot.sleep(DUR["rendezvous"])
    log.info(
        worker_proc,
        "parallel_state.py:1942",
        f"rank 0 in world size {world} is assigned as DP rank 0, PP rank 0, PCP rank 0, "
        f"TP rank 0, EP rank 0, EPLB rank N/A",
    )

    await boot.at("load_weights")
    log.info(worker_proc, "gpu_model_runner.py:4979", f"Starting to load model {cfg.model}...")
    took = await boot.load_shards(worker_proc, shards, DUR["load_weights"], bars=True)
    log.info(worker_proc, "default_loader.py:507", f"Loading weights took {took:.2f} seconds")
    total_load = took
    if cfg.spec:
        await boot.at("load_drafter")
        log.info(worker_proc, "gpu_model_runner.py:5003", "Loading drafter model...")
        d_shards, _, _ = model_facts(str(cfg.spec.get("model") or ""), 1)
        d_took = await boot.load_shards(worker_proc, d_shards, DUR["load_drafter"], bars=True)
        log.info(worker_proc, "default_loader.py:507", f"Loading weights took {d_took:.2f} seconds")
        total_load += d_took
    weights_gib = ckpt_gib / max(1, cfg.tp) + (0.52 if cfg.spec else 0.0)
    log.info(
        worker_proc,
        "gpu_model_runner.py:5089",
        f"Model loading took {weights_gib:.2f} GiB memory and {total_load + 1.3:.6f} seconds",
    )

    init_unscaled = 0.0
    if not cfg.enforce_eager:
        await boot.at("compile")
        log.info(worker_proc, "backends.py:1148", "Dynamo bytecode transform time: 9.87 s")
        await boot.sleep(DUR["compile"])
        log.info(
            worker_proc,
            "backends.py:393",
            "Compiling a graph for compile range (1, 8192) takes 48.21 s",
        )
        init_unscaled += DUR["compile"]
    await boot.at("profile")
    if rdv is not None:
        await rdv.collective("profile", 0.0)
    await boot.sleep(DUR["profile"])
    init_unscaled += DUR["profile"]
    kv_gib, kv_tokens = kv_plan(cfg, weights_gib)
    log.info(worker_proc, "gpu_worker.py:773", f"Available KV cache memory: {kv_gib:.2f} GiB")
    log.info(
        "EngineCore",
        "kv_cache_utils.py:1149",
        f"GPU KV cache size: {kv_tokens:,} tokens, Maximum concurrency for "
        f"{cfg.max_model_len:,} tokens per request: {kv_tokens / cfg.max_model_len:.2f}x",
    )
    if not cfg.enforce_eager:
        await boot.at("cuda_graphs")
        for label in ("mixed prefill-decode, PIECEWISE", "decode, FULL"):
            log.raw(
                worker_proc,
                f"Capturing CUDA graphs ({label}):   0%|          | 0/67 [00:00<?, ?it/s]",
                stderr=True,
            )
            await boot.sleep(DUR["cuda_graphs"] / 2)
            log.raw(
                worker_proc,
                f"Capturing CUDA graphs ({label}): 100%|██████████| 67/67 [00:20<00:00,  3.31it/s]",
                stderr=True,
            )
        log.info(
            worker_proc,
            "gpu_model_runner.py:6517",
            f"Graph capturing finished in {DUR['cuda_graphs']:.0f} secs, took 2.08 GiB",
        )
        init_unscaled += DUR["cuda_graphs"]
    log.info(
        "EngineCore",
        "core.py:396",
        f"init engine (profile, create kv cache, warmup model) took {init_unscaled:.2f} s",
    )

    metrics = Metrics(cfg.served_model_name, cfg.num_spec_tokens)
    metrics.cache_config = cache_config_labels(cfg, kv_tokens)

    async def collective(kind: str, dur: float) -> None:
        if rdv is not None:
            await rdv.collective(kind, dur)

    engine = Engine(
        k=cfg.num_spec_tokens,
        max_num_seqs=cfg.max_num_seqs,
        max_batched=cfg.max_num_batched_tokens,
        kv_capacity=kv_tokens,
        collective=collective,
        faults=faults,
        metrics=metrics,
        log=log,
        step_scale=sim.step_scale,
        timeout_s=sim.timeout_s,
        ring_warn_s=sim.ring_warn_s,
        seed=sim.seed,
        expected_acceptance=sim.expected_acceptance,
        clock=ClockFactor.from_env(),
    )

    await boot.at("api_server")
    await boot.sleep(DUR["api_server"] / 2)
    log.info("APIServer", "entry.py:135", "Supported tasks: ['generate']")
    shown_host = cfg.host or "0.0.0.0"
    log.info("APIServer", "entry.py:139", f"Starting vLLM server on http://{shown_host}:{cfg.port}")
    log.info("APIServer", "launcher.py:188", "Available routes are:")
    for path, methods in ROUTES:
        log.info("APIServer", "launcher.py:196", f"Route: {path}, Methods: {methods}")
    await boot.sleep(DUR["api_server"] / 2)

    await boot.at("ready")
    api = Api(cfg, engine, metrics, faults, log)
    kwargs = (
        {"access_log_class": make_access_logger(log)} if cfg.access_log else {"access_log": None}
    )
    runner = web.AppRunner(api.app(), handle_signals=False, **kwargs)
    await runner.setup()
    log.raw("APIServer", f"INFO:     Started server process [{os.getpid()}]")
    log.raw("APIServer", "INFO:     Waiting for application startup.")
    site = web.SockSite(runner, sock)
    await site.start()
    log.raw("APIServer", "INFO:     Application startup complete.")
    engine_task = asyncio.ensure_future(engine.run())
    try:
        await engine.dead_event.wait()
        if sim.keep_alive:
            await asyncio.Event().wait()
        await asyncio.sleep(sim.exit_delay_s)
        log.log(
            "APIServer",
            "CRITICAL",
            "launcher.py:120",
            "AsyncLLMEngine has failed, terminating server process",
        )
        log.raw("APIServer", "INFO:     Shutting down")
        log.raw("APIServer", f"INFO:     Finished server process [{os.getpid()}]")
        return 1
    finally:
        engine_task.cancel()
        fault_task.cancel()
        await runner.cleanup()
