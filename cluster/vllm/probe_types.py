"""The probe's plain types: outcomes, results, /metrics snapshots and the notion of healthy.

Split out of ``tpwarden.cluster.vllm.probe`` (issue 30) so that the state file, the observation and
the verdict rules (read by `tpwarden watchdog ...` and its TAB completion) do not import httpx:
only the prober itself talks HTTP.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tpwarden.cluster.durable import JSONObject

# Sample names read from /metrics (exact sample names: `*_created` twins are ignored). These
# counters move only when the engine does work. `request_success_total` is deliberately absent: the
# front end counts aborts (our own timed-out probe) there even when the engine is parked.
COUNTERS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:iteration_tokens_total_count",
)
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
# Names older servers export for the same series (vllm.md section 5): before 0.10 the KV gauge
# was `vllm:gpu_cache_usage_perc` (deprecated in 0.9.2). Read under the current name so the
# policy's busy signal (KV growth during a prefill) works on those servers too.
ALIASES = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}


class Outcome(enum.StrEnum):
    OK = "ok"
    TIMEOUT = "timeout"
    REFUSED = "refused"
    HTTP_5XX = "http_5xx"
    HTTP_4XX = "http_4xx"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class ProbeResult:
    outcome: Outcome
    latency_s: float
    detail: str = ""
    status_code: int | None = None
    model: str | None = None

    def to_json(self) -> JSONObject:
        return {
            "outcome": self.outcome.value,
            "latency_s": round(self.latency_s, 4),
            "detail": self.detail,
            "status_code": self.status_code,
            "model": self.model,
        }


@dataclass(frozen=True)
class MetricsSnapshot:
    """Sums over label sets of the engine's counters and gauges; `None` = not exported.

    `error` is set (and the values empty) when the scrape itself failed; `refused` tells a closed
    port apart from a slow or broken endpoint.
    """

    taken_at: float
    values: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    refused: bool = False

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def to_json(self) -> JSONObject:
        return {
            "taken_at": self.taken_at,
            "values": dict(self.values),
            "error": self.error,
            "refused": self.refused,
        }

    @classmethod
    def from_json(cls, data: JSONObject) -> MetricsSnapshot:
        return cls(
            taken_at=float(data["taken_at"]),
            values=dict(data.get("values") or {}),
            error=data.get("error"),
            refused=bool(data.get("refused", False)),
        )


def is_healthy(result: ProbeResult) -> bool:
    """THE notion of healthy, the same for `tpwarden status`, `up`'s boot following, rollouts
    and the watchdog: a 1-token completion (`completion_payload`) answered within the probe's
    timeout with HTTP 200 and a valid completion body (`choices[0].text`, no error object), that
    is `Outcome.OK`. `/health` or `/v1/models` answering is not enough: both stay 200 while a
    TP engine is wedged. A timeout is not healthy either (the watchdog then asks /metrics
    whether the engine is busy or stalled; a status just reports it)."""
    return result.outcome is Outcome.OK
