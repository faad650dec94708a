"""The serving API as cluster control sees it: the 1-token probe, `/metrics`, and the server
part of `status` (health, model, gauges, probe), each bounded by a timeout."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import httpx
from tpwarden.cluster.control.nodes import Nodes
from tpwarden.cluster.control.results import ServerProbe
from tpwarden.cluster.control.status_model import ServerStatus, server_gauges
from tpwarden.cluster.errors import ProbeError, TpwardenError
from tpwarden.cluster.secrets import resolve_secret
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.vllm.metrics import sum_by_sample
from tpwarden.cluster.vllm.probe import is_healthy, probe_completion


class ServerEndpoint:
    """The head's OpenAI-compatible API over one `httpx.Client`; the API key is read from
    this machine's environment or the head node (`nodes`) when a request needs it."""

    def __init__(
        self,
        spec: ClusterSpec,
        nodes: Nodes,
        http: httpx.Client,
        *,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.spec = spec
        self.nodes = nodes
        self.http = http
        self.environ = environ

    def probe(self, timeout: float = 30.0) -> ServerProbe:
        """The watchdog's 1-token probe (`probe_completion`), judged by the same `is_healthy`."""
        key = self.api_key()
        result = probe_completion(
            self.http,
            f"{self.spec.api_base}/v1/completions",
            self.spec.serving.model.served_name,
            timeout_s=timeout,
            headers={"Authorization": f"Bearer {key}"} if key else None,
        )
        ms = None if result.status_code is None else result.latency_s * 1000
        if is_healthy(result):
            return ServerProbe(True, ms)
        return ServerProbe(False, ms, f"{result.outcome.value}: {result.detail}")

    def metrics_page(self, timeout_s: float = 5.0) -> tuple[int, str]:
        """The server's `GET /metrics` as (HTTP status, text); ProbeError when no answer."""
        try:
            r = self.http.get(f"{self.spec.api_base}/metrics", timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ProbeError(f"{type(exc).__name__}: {exc}") from exc
        return r.status_code, r.text

    def api_key(self) -> str | None:
        """The API key as the probe sends it; None when it cannot be resolved here."""
        ref = self.spec.secrets.api_key
        if ref is None:
            return None
        head = self.spec.head
        try:
            return resolve_secret(
                ref,
                read_file=lambda path: self.nodes.session(head).read_bytes(path).decode(),
                environ=self.environ,
                what="the API key",
                where="on this machine",
            )
        except TpwardenError:
            return None

    def status(self, deadline: float) -> ServerStatus:
        """Health, served model, gauges and the probe, all done by `deadline` (monotonic)."""
        base = self.spec.api_base
        s = self.spec.serving
        k = s.drafter.num_speculative_tokens if s.drafter else None

        def left(share: float = 1.0) -> float:
            return max(0.5, (deadline - time.monotonic()) * share)

        try:
            health = self.http.get(f"{base}/health", timeout=left(0.3))
        except httpx.HTTPError as e:
            return ServerStatus(
                base,
                health_error=f"{type(e).__name__}: {e}",
                drafter_k=k,
                probe_error="server not answering",
            )
        model = max_len = None
        try:
            data = self.http.get(f"{base}/v1/models", timeout=left(0.3)).json()["data"][0]
            model, max_len = data.get("id"), data.get("max_model_len")
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            pass
        gauges: dict[str, float | None] = {}
        try:
            gauges = server_gauges(
                sum_by_sample(self.http.get(f"{base}/metrics", timeout=left(0.3)).text)
            )
        except (httpx.HTTPError, ValueError):  # no page, or not exposition format: no gauges
            pass
        probe = self.probe(timeout=left())
        ms = probe.latency_ms
        return ServerStatus(
            base,
            health.status_code,
            None,
            model,
            max_len,
            probe.ok,
            None if ms is None else round(ms, 1),
            probe.error,
            gauges.get("requests_running"),
            gauges.get("requests_waiting"),
            gauges.get("kv_cache_usage_pct"),
            k,
        )
