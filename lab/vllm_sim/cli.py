"""`vllm serve` command line: argparse built from the flags file, plus typed config.

The flags file (``vllm_serve_flags.json`` next to this module, or ``VLLM_SIM_FLAGS_FILE``) lists
every option of the real v0.33.0 parser; anything not in it exits 2 like vLLM does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

VLLM_VERSION = "0.33.0"
FLAGS_FILE = Path(__file__).with_name("vllm_serve_flags.json")

_HR = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])$")
_DEC = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BIN = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(value: str) -> int:
    """vLLM's ``human_readable_int``: '1k'->1000, '1K'->1024, '25.6k'->25600."""
    value = value.strip()
    m = _HR.match(value)
    if m:
        number, suffix = m.groups()
        if suffix in _DEC:
            return int(float(number) * _DEC[suffix])
        if "." in number:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to "
                f"use {number}{suffix.lower()} instead?"
            )
        return int(number) * _BIN[suffix]
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid human-readable integer: {value!r}") from None


def human_readable_int_or_auto(value: str) -> int:
    if value.strip().lower() in ("auto", "-1"):
        return -1
    return human_readable_int(value)


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from None


# dest -> converter, for the options the simulator honours (the rest stay strings).
_TYPES = {
    "tensor_parallel_size": int,
    "pipeline_parallel_size": int,
    "data_parallel_size": int,
    "nnodes": int,
    "node_rank": int,
    "master_port": int,
    "port": int,
    "max_logprobs": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": human_readable_int,
    "seed": int,
    "gpu_memory_utilization": float,
    "api_server_count": int,
    "max_model_len": human_readable_int_or_auto,
    "kv_cache_memory_bytes": human_readable_int,
    "speculative_config": _json,
    "default_chat_template_kwargs": _json,
    "compilation_config": _json,
    "hf_overrides": _json,
    "override_generation_config": _json,
}
_JSON_DESTS = {
    "speculative_config",
    "default_chat_template_kwargs",
    "compilation_config",
    "hf_overrides",
    "override_generation_config",
    "watchdog_config",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # same shape as argparse / vLLM
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def load_flags(path: Path | None = None) -> dict:
    path = Path(os.environ.get("VLLM_SIM_FLAGS_FILE") or path or FLAGS_FILE)
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def build_parser(spec: dict) -> argparse.ArgumentParser:
    p = _Parser(
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",
        add_help=True,
        allow_abbrev=False,
    )
    for name in spec.get("positional", ["model_tag"]):
        p.add_argument(name, nargs="?", default=None)
    for opt in spec["options"]:
        flags = [f for f in opt["flags"] if f not in ("-h", "--help")]
        if not flags:
            continue
        kw: dict[str, Any] = {"dest": opt["dest"], "default": None}
        if opt.get("boolean_optional"):
            flags = [f for f in flags if not f.startswith("--no-")]
            kw["action"] = argparse.BooleanOptionalAction
        elif not opt.get("takes_value"):
            kw["action"] = "store_true"
            kw["default"] = False
        else:
            choices = opt.get("choices")
            conv = _TYPES.get(opt["dest"])
            if choices:
                conv = type(choices[0]) if not isinstance(choices[0], str) else None
                kw["choices"] = choices
            if conv is not None:
                kw["type"] = conv
            if opt.get("nargs") is not None:
                kw["nargs"] = opt["nargs"]
        p.add_argument(*flags, **kw)
    return p


def normalize_argv(argv: list[str], spec: dict) -> list[str]:
    """vLLM's FlexibleArgumentParser niceties: ``--a_b`` == ``--a-b`` and ``--json.key value``."""
    json_flags = {f for o in spec["options"] if o["dest"] in _JSON_DESTS for f in o["flags"]}
    out: list[str] = []
    dotted: dict[str, dict] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and not arg.startswith("---"):
            name, eq, val = arg.partition("=")
            head, dot, rest = name.partition(".")
            head = "--" + head[2:].replace("_", "-")
            if dot and head in json_flags:
                if not eq:
                    i += 1
                    val = argv[i] if i < len(argv) else ""
                target = dotted.setdefault(head, {})
                keys = rest.split(".")
                for k in keys[:-1]:
                    target = target.setdefault(k, {})
                try:
                    target[keys[-1]] = json.loads(val)
                except json.JSONDecodeError:
                    target[keys[-1]] = val
                i += 1
                continue
            arg = head + (eq + val if eq else "")
        out.append(arg)
        i += 1
    for flag, obj in dotted.items():
        out += [flag, json.dumps(obj)]
    return out


@dataclass(kw_only=True)
class ServeConfig:
    """The settings the simulator acts on (all others are accepted and ignored)."""

    model: str
    served_model_name: str
    host: str | None
    port: int
    tp: int
    pp: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    headless: bool
    max_model_len: int
    kv_cache_dtype: str
    kv_cache_memory_bytes: int | None
    gpu_memory_utilization: float
    spec: dict | None
    default_chat_template_kwargs: dict
    api_keys: list[str]
    enforce_eager: bool
    backend: str | None
    max_logprobs: int
    max_num_seqs: int
    max_num_batched_tokens: int
    seed: int
    access_log: bool
    non_default: dict = field(default_factory=dict)

    @property
    def num_spec_tokens(self) -> int:
        return int((self.spec or {}).get("num_speculative_tokens") or 0)


def parse(argv: list[str], env: dict[str, str] | None = None) -> ServeConfig:
    env = dict(os.environ if env is None else env)
    spec = load_flags()
    parser = build_parser(spec)
    ns = parser.parse_args(normalize_argv(argv, spec))
    model = ns.model_tag or getattr(ns, "model", None)
    if not model:
        parser.error("the following arguments are required: model_tag")
    non_default = {k: v for k, v in vars(ns).items() if v not in (None, False)}
    if ns.model_tag:
        non_default["model"] = ns.model_tag
    names = getattr(ns, "served_model_name", None) or [model]
    if isinstance(names, str):
        names = [names]
    keys = getattr(ns, "api_key", None) or []
    if isinstance(keys, str):
        keys = [keys]
    if not keys and env.get("VLLM_API_KEY"):
        keys = [env["VLLM_API_KEY"]]
    spec_cfg = getattr(ns, "speculative_config", None)
    if spec_cfg is not None and not isinstance(spec_cfg, dict):
        parser.error("argument --speculative-config/-sc: expected a JSON object")
    mml = getattr(ns, "max_model_len", None)
    return ServeConfig(
        model=model,
        served_model_name=names[0],
        host=getattr(ns, "host", None),
        port=ns.port if getattr(ns, "port", None) is not None else 8000,
        tp=getattr(ns, "tensor_parallel_size", None) or 1,
        pp=getattr(ns, "pipeline_parallel_size", None) or 1,
        nnodes=getattr(ns, "nnodes", None) or 1,
        node_rank=getattr(ns, "node_rank", None) or 0,
        master_addr=getattr(ns, "master_addr", None) or "127.0.0.1",
        master_port=getattr(ns, "master_port", None) or 29501,
        headless=bool(getattr(ns, "headless", False)),
        max_model_len=mml if mml and mml > 0 else 0,
        kv_cache_dtype=getattr(ns, "kv_cache_dtype", None) or "auto",
        kv_cache_memory_bytes=getattr(ns, "kv_cache_memory_bytes", None),
        gpu_memory_utilization=getattr(ns, "gpu_memory_utilization", None) or 0.92,
        spec=spec_cfg,
        default_chat_template_kwargs=getattr(ns, "default_chat_template_kwargs", None) or {},
        api_keys=list(keys),
        enforce_eager=bool(getattr(ns, "enforce_eager", False)),
        backend=getattr(ns, "distributed_executor_backend", None),
        max_logprobs=getattr(ns, "max_logprobs", None) or 20,
        max_num_seqs=getattr(ns, "max_num_seqs", None) or 256,
        max_num_batched_tokens=getattr(ns, "max_num_batched_tokens", None) or 8192,
        seed=getattr(ns, "seed", None) or 0,
        access_log=not getattr(ns, "disable_uvicorn_access_log", False),
        non_default=non_default,
    )


def validate(cfg: ServeConfig, gpus_per_node: int) -> str | None:
    """vLLM's own startup checks; returns the error text or None."""
    world = cfg.tp * cfg.pp
    if cfg.nnodes > 1 and cfg.backend not in (None, "mp", "uni", "external_launcher"):
        return (
            "nnodes > 1 can only be set when distributed executor backend is mp, uni or "
            "external_launcher."
        )
    if world % cfg.nnodes:
        return f"world_size ({world}) must be divisible by nnodes ({cfg.nnodes})."
    if not 0 <= cfg.node_rank < cfg.nnodes:
        return f"node_rank ({cfg.node_rank}) must be in [0, nnodes={cfg.nnodes})."
    if world > cfg.nnodes * gpus_per_node and cfg.backend != "ray":
        return (
            f"World size ({world}) is larger than the number of available GPUs "
            f"({gpus_per_node}) in this node. If this is intentional and you are using:\n"
            "- ray, set '--distributed-executor-backend ray'.\n"
            "- multiprocessing, set '--nnodes' appropriately."
        )
    if (
        cfg.spec is not None
        and cfg.num_spec_tokens <= 0
        and cfg.spec.get("method") not in ("ngram", "suffix")
    ):
        return "num_speculative_tokens must be > 0"
    return None
