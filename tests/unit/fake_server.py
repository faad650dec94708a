"""A fake serving API for cluster control's tests, as an httpx transport."""

from __future__ import annotations

import httpx

COMPLETION = {"choices": [{"index": 0, "text": "!"}]}
METRICS = (
    "vllm:num_requests_running 2\nvllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.25\n"
)


class FakeServer:
    """`/health`, `/v1/models`, `/metrics`, `/v1/completions`; `up=False` refuses every call,
    `hung=True` keeps /health at 200 while completions fail (a wedged engine)."""

    def __init__(self, up: bool = True, hung: bool = False) -> None:
        self.up = up
        self.hung = hung
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if not self.up:
            raise httpx.ConnectError("refused")
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "glm", "max_model_len": 1048576}]})
        if path == "/metrics":
            return httpx.Response(200, text=METRICS)
        if self.hung:
            return httpx.Response(500, json={"error": {"message": "engine dead"}})
        return httpx.Response(200, json=COMPLETION)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))
