"""The probe: one real 1-token completion, and a `/metrics` read that tells busy from dead.

`/health` and `/v1/models` stay 200 while a TP engine is wedged (vLLM #39863, #45094, #53157), so
the liveness probe is a real `POST /v1/completions` with `max_tokens: 1`, temperature 0, its own
timeout, and a validated body. Outcomes:

| outcome   | when                                             | policy treats it as           |
|-----------|--------------------------------------------------|-------------------------------|
| OK        | 200 and a completion shape (`choices[0].text`)   | healthy                       |
| TIMEOUT   | no answer within `timeout_s` (connect or read)   | busy or stalled: see /metrics |
| REFUSED   | connect error, or connection dropped mid-request | hard failure, counted at once |
| HTTP_5XX  | 5xx (503 = EngineDeadError)                      | hard failure, counted at once |
| HTTP_4XX  | 4xx: 401 bad key, 404 unknown model, 400 ...     | misconfiguration: alert, never|
|           |                                                  | counted (429 = busy)          |
| MALFORMED | 200 but not a completion (Dynamo #9642)          | hard failure, counted at once |

A 4xx is not restart-worthy: restarting the server does not fix a wrong key or model name, and
the server *did* answer. But it blinds the watchdog, so the policy alerts once per incident.

`scrape_metrics()` reads `GET /metrics` (short timeout) and sums the engine counters over all
label sets; the pure rule that compares two snapshots lives in `tpwarden.watchdog.policy`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import httpx
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.vllm.metrics import sum_by_sample
from tpwarden.cluster.vllm.probe_types import (
    ALIASES,
    COUNTERS,
    GAUGES,
    MetricsSnapshot,
    Outcome,
    ProbeResult,
    is_healthy,
)

log = logging.getLogger(__name__)

__all__ = [  # the plain types live in probe_types (no httpx); re-exported for the prober's users
    "ALIASES",
    "COUNTERS",
    "GAUGES",
    "MetricsSnapshot",
    "Outcome",
    "ProbeResult",
    "is_healthy",
]

PROBE_PROMPT = "ping"


def metrics_snapshot(text: str, taken_at: float) -> MetricsSnapshot:
    """Pure: Prometheus text -> snapshot of the watched sample names, summed over labels (read by
    THE /metrics parser, `tpwarden.cluster.vllm.metrics`)."""
    try:
        sums = sum_by_sample(text)
    except ValueError as exc:  # the parser gives up on a bad line
        return MetricsSnapshot(taken_at=taken_at, error=f"unparseable /metrics: {exc}")
    values = {name: sums[name] for name in (*COUNTERS, *GAUGES) if name in sums}
    for old, current in ALIASES.items():
        if old in sums:
            values.setdefault(current, sums[old])  # the current name wins when both are exported
    if not values:
        seen_vllm = sorted(name for name in sums if name.startswith("vllm:"))
        if seen_vllm:
            some = ", ".join(seen_vllm[:4])
            return MetricsSnapshot(
                taken_at=taken_at,
                error=f"none of the watched vllm: series on /metrics ({len(seen_vllm)} others, "
                f"e.g. {some})",
            )
        return MetricsSnapshot(taken_at=taken_at, error="no vllm: metrics in /metrics")
    return MetricsSnapshot(taken_at=taken_at, values=values)


def completion_payload(model: str | None) -> JSONObject:
    """THE 1-token probe request: `tpwarden status`, rollouts and the watchdog all send this one
    and judge the answer with `classify_completion`, so they agree on "healthy"."""
    return {
        "model": model,
        "prompt": PROBE_PROMPT,
        "max_tokens": 1,
        "temperature": 0,
        "stream": False,
    }


def classify_completion(status: int, body: JSONValue) -> tuple[Outcome, str]:
    """Pure: HTTP status + decoded JSON body (or None) -> outcome and a short detail."""
    if status >= 500:
        return Outcome.HTTP_5XX, f"HTTP {status}: {_error_text(body)}"
    if status >= 400:
        return Outcome.HTTP_4XX, f"HTTP {status}: {_error_text(body)}"
    if status != 200:
        return Outcome.MALFORMED, f"unexpected HTTP {status}"
    if not isinstance(body, dict):
        return Outcome.MALFORMED, "200 but the body is not a JSON object"
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return Outcome.MALFORMED, "200 but no choices[]"
    if not isinstance(choices[0].get("text"), str):
        return Outcome.MALFORMED, "200 but choices[0].text is missing"
    if "error" in body:
        return Outcome.MALFORMED, f"200 with an error object: {_error_text(body)}"
    return Outcome.OK, ""


def request_failed(exc: httpx.HTTPError, timeout_s: float) -> tuple[Outcome, str]:
    """Pure: a request that got no usable response -> outcome and a short detail."""
    if isinstance(exc, httpx.TimeoutException):
        # a status probe gets what is left of its deadline (4.95885 s): one decimal is enough
        return Outcome.TIMEOUT, f"no answer within {round(timeout_s, 1):g}s ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return Outcome.REFUSED, f"connect failed: {exc}"
    if isinstance(exc, httpx.TransportError):  # dropped mid-request: the server went away
        return Outcome.REFUSED, f"connection dropped: {type(exc).__name__}: {exc}"
    # a response that could not be read (e.g. undecodable content): not a valid answer
    return Outcome.MALFORMED, f"{type(exc).__name__}: {exc}"


def probe_completion(
    http: httpx.Client,
    url: str,
    model: str | None,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    started_at: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> ProbeResult:
    """THE 1-token probe: POST `completion_payload(model)` to `url` (a completions endpoint) and
    classify the answer. Never raises for server behaviour. `timeout_s` is the probe's whole
    budget counted from `started_at` (default: now; the `Prober` counts its model lookup in);
    `latency_s` is measured from there too. Judge the result with `is_healthy`."""
    start = monotonic() if started_at is None else started_at
    remaining = max(0.001, timeout_s - (monotonic() - start))
    try:
        resp = http.post(
            url,
            json=completion_payload(model),
            headers=headers,
            timeout=httpx.Timeout(remaining),
        )
    except httpx.HTTPError as exc:
        outcome, detail = request_failed(exc, timeout_s)
        return ProbeResult(outcome, monotonic() - start, detail, None, model)
    outcome, detail = classify_completion(resp.status_code, _json(resp))
    return ProbeResult(outcome, monotonic() - start, detail, resp.status_code, model)


def _error_text(body: JSONValue) -> str:
    if isinstance(body, dict):
        err = body.get("error", body.get("message", body.get("detail")))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:200]
    return "" if body is None else str(body)[:200]


class ProbeSettings(Protocol):
    """What the probe needs to know (the watchdog's `WatchdogConfig` has it): where the server
    answers, which model (None: the first one `/v1/models` lists), its key, and the timeouts."""

    @property
    def probe_url(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def metrics_timeout_s(self) -> float: ...


class Prober:
    """Makes the completion probe and the /metrics read over httpx. Starts nothing when built.

    `transport` and `monotonic` are injectable for tests; the httpx client is created lazily and
    closed with `close()`.
    """

    def __init__(
        self,
        config: ProbeSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._transport = transport
        self._monotonic = monotonic
        self._wall = wall
        self._client: httpx.Client | None = None
        self._model: str | None = config.model

    @property
    def _http(self) -> httpx.Client:
        if self._client is None:
            headers = (
                {"Authorization": f"Bearer {self._config.api_key}"} if self._config.api_key else {}
            )
            self._client = httpx.Client(
                base_url=self._config.probe_url,
                headers=headers,
                transport=self._transport,
                follow_redirects=False,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def probe(self) -> ProbeResult:
        """One completion; never raises for server behaviour (that is what outcomes are for)."""
        start = self._monotonic()
        if self._model is None:
            try:
                resp = self._http.get("/v1/models", timeout=httpx.Timeout(self._config.timeout_s))
            except httpx.HTTPError as exc:
                outcome, detail = request_failed(exc, self._config.timeout_s)
                return ProbeResult(outcome, self._monotonic() - start, detail, None, None)
            if resp.status_code != 200:
                outcome, detail = classify_completion(resp.status_code, _json(resp))
                return ProbeResult(
                    outcome,
                    self._monotonic() - start,
                    f"/v1/models: {detail}",
                    resp.status_code,
                    None,
                )
            model = _first_model_id(_json(resp))
            if model is None:
                return ProbeResult(
                    Outcome.MALFORMED, self._monotonic() - start, "/v1/models lists no model"
                )
            self._model = model
        result = probe_completion(
            self._http,
            "/v1/completions",
            self._model,
            timeout_s=self._config.timeout_s,
            started_at=start,
            monotonic=self._monotonic,
        )
        if (
            result.outcome is Outcome.HTTP_4XX
            and result.status_code == 404
            and self._config.model is None
        ):
            self._model = None  # model list may have changed (e.g. after a restart): re-read it
        return result

    def scrape_metrics(self) -> MetricsSnapshot:
        """GET /metrics with a short timeout; failures come back as a snapshot with `error`."""
        now = self._wall()
        try:
            resp = self._http.get("/metrics", timeout=httpx.Timeout(self._config.metrics_timeout_s))
        except httpx.ConnectError as exc:
            return MetricsSnapshot(taken_at=now, error=f"connect failed: {exc}", refused=True)
        except httpx.HTTPError as exc:
            return MetricsSnapshot(taken_at=now, error=f"{type(exc).__name__}: {exc}")
        if resp.status_code != 200:
            return MetricsSnapshot(taken_at=now, error=f"/metrics answered HTTP {resp.status_code}")
        return metrics_snapshot(resp.text, now)


def _json(resp: httpx.Response) -> JSONValue:
    try:
        return resp.json()
    except ValueError:
        return None


def _first_model_id(body: JSONValue) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        for card in body["data"]:
            model_id = card.get("id") if isinstance(card, dict) else None
            if isinstance(model_id, str):
                return model_id
    return None
