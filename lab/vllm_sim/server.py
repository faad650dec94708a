"""`vllm serve` main: boot phases with vLLM's log lines, then the API (head) or a worker loop."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from . import rendezvous
from .boot import (
    DUR,
    PHASES,
    Boot,
    SimEnv,
    banner,
    bind_http,
    engine_config_line,
    kv_plan,
    model_facts,
)
from .cli import parse, validate
from .faults import fault_path
from .head import run_head
from .logfmt import VllmLog
from .worker import run_worker


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "serve":
        sys.stderr.write(
            "usage: vllm serve [model_tag] [options]\n"
            "vllm: error: only the 'serve' subcommand is simulated\n"
        )
        return 2
    cfg = parse(argv[1:])
    sim = SimEnv.from_env(dict(os.environ))
    log = VllmLog()
    err = validate(cfg, sim.gpus_per_node)
    if err:
        banner(log, cfg)
        log.error("APIServer", "arg_utils.py:1890", "Traceback (most recent call last):")
        log.error("APIServer", "arg_utils.py:1890", f"ValueError: {err}")
        return 1
    if cfg.backend == "ray":
        banner(log, cfg)
        log.error(
            "APIServer",
            "ray_utils.py:60",
            "Failed to import Ray, which is required for "
            "the Ray executor. Please install Ray with `pip install ray`.",
        )
        return 1
    runner = run_worker if cfg.headless else run_head
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main_task = loop.create_task(runner(cfg, sim, log))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main_task.cancel)
    try:
        return loop.run_until_complete(main_task)
    except asyncio.CancelledError:
        if not cfg.headless:
            log.raw("APIServer", "INFO:     Shutting down")
            log.raw("APIServer", "INFO:     Waiting for application shutdown.")
            log.raw("APIServer", "INFO:     Application shutdown complete.")
            log.raw("APIServer", f"INFO:     Finished server process [{os.getpid()}]")
        return 0
    finally:
        loop.close()


__all__ = [
    "Boot",
    "SimEnv",
    "PHASES",
    "DUR",
    "main",
    "model_facts",
    "kv_plan",
    "bind_http",
    "banner",
    "engine_config_line",
    "rendezvous",
    "fault_path",
]
