"""Pure parsers for benchmark facts: `vllm bench serve --save-result` JSON, `/metrics`
spec-decode counters, and the head's KV cache boot line. No I/O; tested on recorded files.

Result files differ across vLLM versions (vllm.md section 7): v0.11-era files have no
`latencies`, `start_times`, `queue_times`, `rtfx`, older ones spell `request_goodput:` with a
colon, percentiles are `p{P}_{metric}_ms` with P as given (`p99`, `p99.9`). The parser reads
what the table needs and keeps every unknown key optional.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.vllm.metrics import sum_by_sample

SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


class ResultFormatError(ValueError):
    """The file is not a `vllm bench serve` result."""


class NoCompletedRequests(ResultFormatError):
    """A result where every request failed: its throughput and latency keys hold zeros that
    were never measured, so the file is an error, not a level of 0 tok/s."""

    def __init__(self, failed: int | None, num_prompts: int | None = None) -> None:
        self.failed = failed
        of = f" of {num_prompts}" if num_prompts else ""
        what = f"{failed}{of} requests failed" if failed is not None else "failure count unknown"
        super().__init__(f"no request completed ({what}): nothing was measured")


def load_result_text(text: str) -> JSONObject:
    """One saved result: a JSON object, or the last line of an `--append-result` file."""
    text = text.strip()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise ResultFormatError("empty result file") from None
        try:
            doc = json.loads(lines[-1])
        except json.JSONDecodeError as e:
            raise ResultFormatError(f"not JSON: {e}") from None
    if isinstance(doc, dict) and doc.get("completed") == 0:
        # checked before the layout: a run where nothing completed is an error whatever else
        # the file holds (its zeros were never measured)
        failed, prompts = doc.get("failed"), doc.get("num_prompts")
        raise NoCompletedRequests(
            failed if isinstance(failed, int) else None,
            prompts if isinstance(prompts, int) else None,
        )
    if not isinstance(doc, dict) or "completed" not in doc or "duration" not in doc:
        raise ResultFormatError("no `completed`/`duration` keys: not a vllm bench serve result")
    return doc


def _num(doc: Mapping[str, JSONValue], *keys: str) -> float | None:
    for key in keys:
        value = doc.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _pct(doc: Mapping[str, JSONValue], metric: str, p: str) -> float | None:
    if p == "50":
        return _num(doc, f"median_{metric}_ms", f"p50_{metric}_ms")
    return _num(doc, f"p{p}_{metric}_ms")


@dataclass(frozen=True, kw_only=True)
class LevelResult:
    """One `vllm bench serve` run, as the field report's table reads it.

    `per_stream_tok_s` is 1000 / median TPOT (the decode speed one stream sees, first token
    excluded); acceptance and tokens per step come from the server's /metrics deltas when
    given, else from the result file's own `spec_decode_*` keys (vLLM >= 0.11 with spec
    decode on).
    """

    concurrency: int | None
    completed: int
    failed: int | None
    duration_s: float
    total_input_tokens: int | None
    total_output_tokens: int | None
    aggregate_tok_s: float | None
    per_stream_tok_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    tpot_p50_ms: float | None
    request_goodput: float | None
    acceptance_pct: float | None
    tokens_per_step: float | None
    spec_source: str | None
    schema: str

    def to_json(self) -> JSONObject:
        return asdict(self)


def result_schema(doc: Mapping[str, JSONValue]) -> str:
    """A coarse label for the key layout (for the manifest, not for branching)."""
    if "rtfx" in doc or "queue_times" in doc:
        return "vllm>=0.12 (rtfx/queue_times)"
    if "max_concurrent_requests" in doc or "failed" in doc:
        return "vllm-0.11-era"
    return "benchmark_serving (pre-0.10)"


def parse_result(doc: Mapping[str, JSONValue], spec: SpecDelta | None = None) -> LevelResult:
    """One saved result -> the table's row. Raises `NoCompletedRequests` when nothing
    completed (vLLM still writes 0.0 for every throughput and percentile then)."""
    completed = doc.get("completed")
    if not isinstance(completed, int) or completed <= 0:
        failed = doc.get("failed")
        prompts = doc.get("num_prompts")
        raise NoCompletedRequests(
            failed if isinstance(failed, int) else None,
            prompts if isinstance(prompts, int) else None,
        )
    tpot = _pct(doc, "tpot", "50")
    conc = doc.get("max_concurrency")
    acc = tps = None
    source = None
    if spec is not None and spec.draft_tokens:
        acc, tps, source = spec.acceptance_pct, spec.tokens_per_step, "metrics"
    elif _num(doc, "spec_decode_acceptance_rate") is not None:
        acc = _num(doc, "spec_decode_acceptance_rate")
        tps = _num(doc, "spec_decode_acceptance_length")
        source = "result"
    goodput = _num(doc, "request_goodput", "request_goodput:")
    return LevelResult(
        concurrency=int(conc) if isinstance(conc, (int, float)) else None,
        completed=int(doc["completed"]),
        failed=int(doc["failed"]) if isinstance(doc.get("failed"), int) else None,
        duration_s=float(doc["duration"]),
        total_input_tokens=doc.get("total_input_tokens"),
        total_output_tokens=doc.get("total_output_tokens"),
        aggregate_tok_s=_num(doc, "output_throughput"),
        per_stream_tok_s=1000.0 / tpot if tpot else None,
        ttft_p50_ms=_pct(doc, "ttft", "50"),
        ttft_p99_ms=_pct(doc, "ttft", "99"),
        itl_p50_ms=_pct(doc, "itl", "50"),
        itl_p99_ms=_pct(doc, "itl", "99"),
        tpot_p50_ms=tpot,
        request_goodput=goodput,
        acceptance_pct=acc,
        tokens_per_step=tps,
        spec_source=source,
        schema=result_schema(doc),
    )


@dataclass(frozen=True)
class SpecCounters:
    """Spec-decode counters of one /metrics page; a counter the page does not export is None
    (V0 servers, before 0.10, have no `num_drafts`), never 0."""

    drafts: float | None
    draft_tokens: float | None
    accepted_tokens: float | None


def spec_counters(metrics_text: str) -> SpecCounters | None:
    """The spec-decode counters of a /metrics page; None when it has none (no drafter)."""
    try:
        m = sum_by_sample(metrics_text)
    except ValueError:  # not a /metrics page: no counters to read
        m = {}
    values = {k: m.get(name) for k, name in SPEC_COUNTERS.items()}
    if all(v is None for v in values.values()):
        return None
    return SpecCounters(**values)


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


@dataclass(frozen=True)
class SpecDelta:
    drafts: float | None
    draft_tokens: float | None
    accepted_tokens: float | None

    @property
    def acceptance_pct(self) -> float | None:
        if self.accepted_tokens is None or not self.draft_tokens:
            return None
        return 100.0 * self.accepted_tokens / self.draft_tokens

    @property
    def tokens_per_step(self) -> float | None:
        if self.accepted_tokens is None or not self.drafts:
            return None
        return 1.0 + self.accepted_tokens / self.drafts

    def to_json(self) -> JSONObject:
        return {
            **asdict(self),
            "acceptance_pct": self.acceptance_pct,
            "tokens_per_step": self.tokens_per_step,
        }


def spec_delta(before: SpecCounters | None, after: SpecCounters | None) -> SpecDelta | None:
    if before is None or after is None:
        return None
    return SpecDelta(
        _sub(after.drafts, before.drafts),
        _sub(after.draft_tokens, before.draft_tokens),
        _sub(after.accepted_tokens, before.accepted_tokens),
    )


def kv_cache_facts(log_text: str) -> JSONObject:
    """The head's boot log -> KV cache facts (last occurrence wins: the latest boot)."""
    out: JSONObject = {"kv_cache_tokens": None, "kv_cache_gib": None, "max_concurrency": None}
    for m in _KV_TOKENS.finditer(log_text):
        out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
    for m in _KV_GIB.finditer(log_text):
        out["kv_cache_gib"] = float(m.group(1))
    for m in _MAX_CONC.finditer(log_text):
        out["max_concurrency"] = {
            "tokens_per_request": int(m.group(1).replace(",", "")),
            "x": float(m.group(2)),
        }
    if out["kv_cache_tokens"] is None and out["kv_cache_gib"] is None:
        out["reason"] = "no KV cache line in the head's log (rotated or not yet booted)"
    return out


def parse_size_token(value: str) -> int:
    """`32k` -> 32768, `128K` -> 131072, `4096` -> 4096 (input lengths are powers of two)."""
    v = value.strip().lower()
    mult = 1024 if v.endswith("k") else 1
    return int(float(v.rstrip("k")) * mult)
