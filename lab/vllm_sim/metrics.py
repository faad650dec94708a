"""vLLM's Prometheus metrics, written in the text exposition format by hand.

Names, HELP texts, labels (``engine="0"``, ``model_name``) and histogram buckets follow a real
vLLM V1 ``/metrics`` dump; spec-decode families only appear when a drafter is configured.
This is also the lab's load-reporting hook: the lab reads the head's /metrics to drive the
simulated GPU temperatures (running requests, generation_tokens_total rate).
"""

from __future__ import annotations

import bisect
import time

GAUGES = {
    "num_requests_running": "Number of requests in model execution batches.",
    "num_requests_waiting": "Number of requests waiting to be processed.",
    "kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
}
COUNTERS = {
    "num_preemptions": "Cumulative number of preemption from the engine.",
    "prompt_tokens": "Number of prefill tokens processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "request_success": "Count of successfully processed requests.",
}
SPEC_COUNTERS = {
    "spec_decode_num_drafts": "Number of spec decoding drafts.",
    "spec_decode_num_draft_tokens": "Number of draft tokens.",
    "spec_decode_num_accepted_tokens": "Number of accepted tokens.",
    "spec_decode_num_accepted_tokens_per_pos": "Accepted tokens per draft position.",
}
HISTOGRAMS: dict[str, tuple[str, list[float]]] = {
    # real vLLM V1 observes it once per engine step (prefill + decode tokens scheduled); the
    # watchdog reads its _count as a progress counter
    "iteration_tokens_total": (
        "Histogram of number of tokens per engine_step.",
        [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    ),
    "time_to_first_token_seconds": (
        "Histogram of time to first token in seconds.",
        [
            0.001,
            0.005,
            0.01,
            0.02,
            0.04,
            0.06,
            0.08,
            0.1,
            0.25,
            0.5,
            0.75,
            1.0,
            2.5,
            5.0,
            7.5,
            10.0,
            20.0,
            40.0,
            80.0,
            160.0,
            640.0,
            2560.0,
        ],
    ),
    "inter_token_latency_seconds": (
        "Histogram of inter-token latency in seconds.",
        [
            0.01,
            0.025,
            0.05,
            0.075,
            0.1,
            0.15,
            0.2,
            0.3,
            0.4,
            0.5,
            0.75,
            1.0,
            2.5,
            5.0,
            7.5,
            10.0,
            20.0,
            40.0,
            80.0,
        ],
    ),
    "e2e_request_latency_seconds": (
        "Histogram of e2e request latency in seconds.",
        [
            0.3,
            0.5,
            0.8,
            1.0,
            1.5,
            2.0,
            2.5,
            5.0,
            10.0,
            15.0,
            20.0,
            30.0,
            40.0,
            50.0,
            60.0,
            120.0,
            240.0,
            480.0,
            960.0,
            1920.0,
            7680.0,
        ],
    ),
}


def _fmt(v: float) -> str:
    return repr(float(v))


class Metrics:
    def __init__(self, model_name: str, spec_k: int) -> None:
        self.model_name = model_name
        self.spec_k = spec_k
        self.created = time.time()
        self.gauges = {name: 0.0 for name in GAUGES}
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for reason in ("stop", "length", "abort", "error"):
            self.counters[("request_success", (("finished_reason", reason),))] = 0.0
        for name in ("num_preemptions", "prompt_tokens", "generation_tokens"):
            self.counters[(name, ())] = 0.0
        if spec_k:
            for name in SPEC_COUNTERS:
                if name != "spec_decode_num_accepted_tokens_per_pos":
                    self.counters[(name, ())] = 0.0
            for pos in range(spec_k):
                self.counters[
                    ("spec_decode_num_accepted_tokens_per_pos", (("position", str(pos)),))
                ] = 0.0
        self.hist = {name: ([0] * (len(b) + 1), [0.0]) for name, (_, b) in HISTOGRAMS.items()}
        self.cache_config: dict[str, str] | None = None  # vllm:cache_config_info's labels

    def set(self, name: str, value: float) -> None:
        self.gauges[name] = float(value)

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0.0) + value

    def get(self, name: str, **labels: str) -> float:
        return self.counters.get((name, tuple(sorted(labels.items()))), 0.0)

    def observe(self, name: str, value: float) -> None:
        buckets = HISTOGRAMS[name][1]
        counts, total = self.hist[name]
        counts[bisect.bisect_left(buckets, value)] += 1
        total[0] += value

    def _labels(self, extra: tuple[tuple[str, str], ...] = ()) -> str:
        pairs = [("engine", "0"), *extra, ("model_name", self.model_name)]
        pairs.sort(key=lambda kv: kv[0])
        return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"

    def render(self) -> str:
        out: list[str] = []
        if self.cache_config is not None:
            info = sorted({**self.cache_config, "engine": "0"}.items())
            out += [
                "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                "# TYPE vllm:cache_config_info gauge",
                "vllm:cache_config_info{" + ",".join(f'{k}="{v}"' for k, v in info) + "} 1.0",
            ]
        for name, help_text in GAUGES.items():
            out += [
                f"# HELP vllm:{name} {help_text}",
                f"# TYPE vllm:{name} gauge",
                f"vllm:{name}{self._labels()} {_fmt(self.gauges[name])}",
            ]
        families = dict(COUNTERS)
        if self.spec_k:
            families.update(SPEC_COUNTERS)
        for name, help_text in families.items():
            out += [f"# HELP vllm:{name}_total {help_text}", f"# TYPE vllm:{name}_total counter"]
            for (cname, labels), value in self.counters.items():
                if cname == name:
                    out.append(f"vllm:{name}_total{self._labels(labels)} {_fmt(value)}")
            out += [f"# HELP vllm:{name}_created {help_text}", f"# TYPE vllm:{name}_created gauge"]
            for (cname, labels), _ in self.counters.items():
                if cname == name:
                    out.append(f"vllm:{name}_created{self._labels(labels)} {_fmt(self.created)}")
        for name, (help_text, buckets) in HISTOGRAMS.items():
            counts, total = self.hist[name]
            out += [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} histogram"]
            cum = 0
            for le, c in zip([*map(str, buckets), "+Inf"], counts, strict=True):
                cum += c
                out.append(f"vllm:{name}_bucket{self._labels((('le', le),))} {_fmt(cum)}")
            out.append(f"vllm:{name}_count{self._labels()} {_fmt(cum)}")
            out.append(f"vllm:{name}_sum{self._labels()} {_fmt(total[0])}")
        return "\n".join(out) + "\n"


BLOCK_SIZE = 16  # vLLM's default KV block size


def cache_config_labels(cfg: object, kv_tokens: int) -> dict[str, str]:
    """The labels real vLLM V1 gives `vllm:cache_config_info` (a subset of its CacheConfig,
    as in a real 0.11 dump: tests/fixtures/real/metrics/), from the serve config and the KV
    capacity the boot computed."""
    kv_bytes = getattr(cfg, "kv_cache_memory_bytes", None)
    return {
        "block_size": str(BLOCK_SIZE),
        "cache_dtype": str(getattr(cfg, "kv_cache_dtype", "auto")),
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": str(getattr(cfg, "gpu_memory_utilization", 0.92)),
        "kv_cache_memory_bytes": str(kv_bytes) if kv_bytes else "None",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(kv_tokens // BLOCK_SIZE),
        "num_gpu_blocks_override": "None",
    }
