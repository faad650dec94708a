"""Memory before a (re)start (issue 52 item 3): pure judgement of a node's memory facts.

vLLM refuses to start when the free memory is below `gpu_memory_utilization` x total ("Free
memory on device ... on startup is less than desired GPU memory utilization"; vLLM 0.33's
`request_memory` asks it whatever `--kv-cache-memory-bytes` says). On GB10 the CPU and the GPU
share one memory: recent vLLM counts available memory (page cache included) on integrated GPUs,
older builds count free memory only, and NVIDIA's GB10 playbooks drop the page cache first. The
node's figures come from the collector after it dropped the page cache (`--drop-caches`,
`tpwarden.memory.drop_page_cache`). A node whose serving container is being replaced gets back
what that engine holds: credited as its own ask (the same formula), an estimate, said as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONValue
from tpwarden.cluster.spec import ClusterSpec

VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default
_GIB = 1024**3


def utilization(spec: ClusterSpec) -> tuple[float, str]:
    """The engine's gpu_memory_utilization and where it comes from (extra_args, else vLLM's
    default)."""
    args = list(spec.serving.extra_args)
    for i, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if flag in ("--gpu-memory-utilization", "--gpu_memory_utilization"):
            text = value or (args[i + 1] if i + 1 < len(args) else "")
            try:
                return float(text), f"--gpu-memory-utilization {text}"
            except ValueError:
                break
    return VLLM_DEFAULT_UTILIZATION, f"vLLM's default {VLLM_DEFAULT_UTILIZATION}"


def gib(n: float) -> str:
    return f"{n / _GIB:.1f} GiB"


@dataclass(frozen=True)
class MemoryCheck:
    node: str
    ok: bool
    text: str  # the figures, said in full (pre-flight prints it; a refusal carries it)
    unified: bool


def _discrete(
    node: str, gpus: Sequence[Mapping[str, JSONValue]], util: float, why: str, credit: bool
) -> MemoryCheck | None:
    """A GPU with its own memory: NVML's total and used per GPU."""
    worst = None
    for g in gpus:
        total, used = g.get("memory_total_mib"), g.get("memory_used_mib")
        if not isinstance(total, int | float) or not isinstance(used, int | float):
            return None
        ask = util * total * 2**20
        free = (total - used) * 2**20 + (ask if credit else 0)
        line = (f"GPU{g.get('index')}: {gib(free)} free{' (after the stop)' if credit else ''} "
                f"of {gib(total * 2**20)}; the engine asks {gib(ask)} ({why})")  # fmt: skip
        if free < ask and worst is None:
            worst = MemoryCheck(node, False, f"{node}: {line}", False)
    return worst or MemoryCheck(node, True, f"{node}: GPU memory enough for {why}", False)


def judge_memory(
    spec: ClusterSpec, node: str, doc: Mapping[str, JSONValue], replacing: bool
) -> MemoryCheck | None:
    """Pure: the collector's `memory`, `page_cache` and `gpus` -> enough memory or not, with the
    figures. None when nothing applies (no GPU requested, the check off, no facts)."""
    if spec.serving.gpus != "all" or not spec.settings.memory.check:
        return None
    util, why = utilization(spec)
    mem = doc.get("memory") or {}
    page = doc.get("page_cache") or {}
    gpus = list(doc.get("gpus") or [])
    unified = bool(page.get("unified")) if page else False
    if not unified and gpus:
        return _discrete(node, gpus, util, why, replacing)
    total, available = mem.get("total_bytes"), mem.get("available_bytes")
    if not isinstance(total, int) or not isinstance(available, int):
        return MemoryCheck(node, True, f"{node}: memory not read ({mem.get('error')})", unified)
    ask = util * total
    credit = min(ask, total - available) if replacing else 0
    parts = [f"{gib(available)} available"]
    if credit:
        parts.append(f"+ ~{gib(credit)} the serving container being replaced holds")
    parts.append(f"of {gib(total)}; the engine asks {gib(ask)} ({why} x {gib(total)})")
    if page.get("dropped"):
        before = page.get("available_before_bytes")
        parts.append(f"[page cache dropped: {gib(before) if isinstance(before, int) else '?'} "
                     f"-> {gib(available)} available]")  # fmt: skip
    elif page.get("reason"):
        parts.append(f"[page cache not dropped: {page['reason']}]")
    ok = available + credit >= ask
    return MemoryCheck(node, ok, f"{node}: " + " ".join(parts), unified)
