"""Check `vllm serve` argv lists against vLLM 0.33.0's real parser and its model-free checks.

Run with the interpreter of the venv made by tools/vllm/install-cpu.sh:

    /opt/tpwarden-vllm-0.33.0/bin/python tools/vllm/check_argv.py [FILE]   # else stdin

Input: JSON, a list whose items are argv lists (["vllm", "serve", MODEL, ...]) or objects with
an "argv" key (and optionally "name"), as in `tpwarden plan --json`. Output on stdout: one JSON
document with a verdict per argv. Exit 0 only if every argv passes every stage; 1 if one fails;
2 if the input itself is unusable.

Stages, in the order `vllm serve` runs them (each is vLLM's own code, nothing re-implemented):
  parse            FlexibleArgumentParser.parse_args(["serve", ...]) as in vllm/entrypoints/cli/main.py
  serve_validate   ServeSubcommand.validate -> validate_parsed_serve_args
  launch           ServeSubcommand.cmd with the launchers stubbed: the headless / API-server
                   decision and its checks (e.g. --headless with --api-server-count > 0)
  engine_args      AsyncEngineArgs.from_cli_args (EngineArgs.__post_init__)
  cache_config     CacheConfig(...) from the engine args (kv cache dtype, memory bytes)
  parallel_config  ParallelConfig(...) from the engine args (tp, nnodes, node rank, master)
Not run: EngineArgs.create_engine_config, which needs the model's config.json on disk. It is
where vLLM checks `0 <= --node-rank < --nnodes` and `world_size % nnodes == 0`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import Any

# The dump script ships in the package (cluster/vllm/dump_serve_flags.py, self-contained). Loaded by
# path: putting cluster/ on sys.path would shadow stdlib modules (cluster/secrets.py).
_DUMP = Path(__file__).resolve().parents[2] / "cluster" / "vllm" / "dump_serve_flags.py"
_spec = importlib.util.spec_from_file_location("dump_serve_flags", _DUMP)
assert _spec is not None and _spec.loader is not None
_dump = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dump)
VLLM_VERSION, build_serve_parser = _dump.VLLM_VERSION, _dump.build_serve_parser

REPORTED = (
    "model_tag",
    "tensor_parallel_size",
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "headless",
    "api_server_count",
    "host",
    "port",
    "speculative_config",
    "kv_cache_dtype",
    "kv_cache_memory_bytes",
    "max_model_len",
    "enforce_eager",
    "default_chat_template_kwargs",
    "served_model_name",
    "distributed_executor_backend",
    "quantization",
)


class StageError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        if hasattr(value, "model_dump"):
            return value.model_dump(mode="json")
        return str(value)


def _launch_mode(cmd: Any, args: argparse.Namespace) -> tuple[str, argparse.Namespace]:
    """Run ServeSubcommand.cmd with every launcher replaced by a recorder; start nothing."""
    import vllm.entrypoints.cli.serve as serve_mod

    chosen: list[str] = []

    def recorder(mode: str) -> Any:
        return lambda *a, **k: chosen.append(mode)

    class _Loop:
        @staticmethod
        def run(coro: Any) -> None:
            if hasattr(coro, "close"):
                coro.close()

    names = ("run_headless", "run_multi_api_server", "run_dp_supervisor", "run_server", "uvloop")
    saved = {n: getattr(serve_mod, n) for n in names}
    try:
        serve_mod.run_headless = recorder("headless")
        serve_mod.run_multi_api_server = recorder("multi_api_server")
        serve_mod.run_dp_supervisor = recorder("dp_supervisor")
        serve_mod.run_server = recorder("api_server")
        serve_mod.uvloop = _Loop
        launched = copy.copy(args)
        cmd.cmd(launched)
    finally:
        for name, value in saved.items():
            setattr(serve_mod, name, value)
    return (chosen[0] if chosen else "grpc"), launched


def _configs(args: argparse.Namespace) -> None:
    from vllm import AsyncEngineArgs
    from vllm.config import CacheConfig, ParallelConfig

    try:
        ea = AsyncEngineArgs.from_cli_args(args)
    except Exception as exc:  # vLLM raises ValueError, TypeError, pydantic errors...
        raise StageError("engine_args", f"{type(exc).__name__}: {exc}") from exc
    try:
        # block_size and enable_prefix_caching stay None until create_engine_config picks
        # model-dependent defaults; leave them to CacheConfig's own defaults here.
        optional = {"block_size": ea.block_size, "enable_prefix_caching": ea.enable_prefix_caching}
        CacheConfig(
            gpu_memory_utilization=ea.gpu_memory_utilization,
            kv_cache_memory_bytes=ea.kv_cache_memory_bytes,
            cache_dtype=ea.kv_cache_dtype,
            **{k: v for k, v in optional.items() if v is not None},
        )
    except Exception as exc:
        raise StageError("cache_config", f"{type(exc).__name__}: {exc}") from exc
    try:
        ParallelConfig(
            pipeline_parallel_size=ea.pipeline_parallel_size,
            tensor_parallel_size=ea.tensor_parallel_size,
            data_parallel_size=ea.data_parallel_size,
            master_addr=ea.master_addr,
            master_port=ea.master_port,
            nnodes=ea.nnodes,
            node_rank=ea.node_rank,
            distributed_executor_backend=ea.distributed_executor_backend,
        )
    except Exception as exc:
        raise StageError("parallel_config", f"{type(exc).__name__}: {exc}") from exc


def check_one(top: Any, cmd: Any, argv: list[str]) -> dict[str, Any]:
    """Verdict for one argv; `argv` starts with "vllm", "serve"."""
    result: dict[str, Any] = {"argv": argv, "ok": False, "stage": None, "error": None}
    if argv[:2] != ["vllm", "serve"]:
        result.update(stage="input", error='argv must start with "vllm", "serve"')
        return result
    stderr = io.StringIO()
    try:
        try:
            with contextlib.redirect_stderr(stderr):
                args = top.parse_args(["serve", *argv[2:]])
        except SystemExit as exc:
            msg = stderr.getvalue().strip().splitlines()
            raise StageError("parse", msg[-1] if msg else f"exit {exc.code}") from None
        except Exception as exc:
            raise StageError("parse", f"{type(exc).__name__}: {exc}") from exc
        result["values"] = {k: _jsonable(getattr(args, k, None)) for k in REPORTED}
        try:
            cmd.validate(args)
        except Exception as exc:
            raise StageError("serve_validate", f"{type(exc).__name__}: {exc}") from exc
        try:
            mode, launched = _launch_mode(cmd, args)
        except Exception as exc:
            raise StageError("launch", f"{type(exc).__name__}: {exc}") from exc
        result["launch_mode"] = mode
        _configs(launched)
        result["ok"] = True
    except StageError as err:
        result.update(stage=err.stage, error=err.message)
    return result


def _load(source: str | None) -> list[tuple[str | None, list[str]]]:
    text = Path(source).read_text(encoding="utf-8") if source else sys.stdin.read()
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("expected a JSON list of argv lists or {'argv': [...]} objects")
    items = []
    for item in data:
        name, argv = (
            (item.get("name"), item.get("argv")) if isinstance(item, dict) else (None, item)
        )
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"not an argv list of strings: {argv!r}")
        items.append((name, argv))
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check vllm serve argv lists with vLLM's parser.")
    ap.add_argument("file", nargs="?", help="JSON input file (default: stdin)")
    opts = ap.parse_args(argv)
    try:
        items = _load(opts.file)
    except (OSError, ValueError) as exc:
        print(f"check_argv: {exc}", file=sys.stderr)
        return 2
    top, _, cmd = build_serve_parser()
    results = []
    for name, one in items:
        verdict = check_one(top, cmd, one)
        if name is not None:
            verdict = {"name": name, **verdict}
        results.append(verdict)
    all_ok = all(r["ok"] for r in results)
    out = {"vllm_version": VLLM_VERSION, "all_ok": all_ok, "results": results}
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
