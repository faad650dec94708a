"""The completion probe and the /metrics read, over real HTTP against a tiny aiohttp server."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from tpwarden.cluster.vllm.probe import Outcome, Prober, metrics_snapshot
from tpwarden.watchdog.config import WatchdogConfig
from tpwarden.watchdog.verdict import progress_signal

SAMPLE = Path("/work/shared/reference/samples/v0.11-era_v1_idle_full-dump_qwen1.5-0.5b.prom.txt")

COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "model": "m",
    "choices": [{"index": 0, "text": "!", "finish_reason": "length", "logprobs": None}],
}


def prom(gen: float, prompt: float, running: float = 0) -> str:
    return (
        "# HELP vllm:generation_tokens_total Generation tokens.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}\n'
        f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {gen}\n'
        f'vllm:generation_tokens_created{{engine="0",model_name="m"}} 1.76e9\n'
        "# TYPE vllm:prompt_tokens_total counter\n"
        f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} 2\n'
    )


class FakeVllm:
    """Behaviour chosen by the first path segment: /ok, /slow, /dead, /bad, /auth, /adv, /flat."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.release: asyncio.Event | None = None
        self.requests: list[dict] = []
        self.counter = 0.0
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        mode, _, rest = request.path.lstrip("/").partition("/")
        body = await request.json() if request.method == "POST" else None
        self.requests.append(
            {
                "mode": mode,
                "path": "/" + rest,
                "body": body,
                "auth": request.headers.get("Authorization"),
            }
        )
        if rest == "metrics":
            if mode == "adv":
                self.counter += 7
            return web.Response(text=prom(self.counter, 100, running=1))
        if rest == "v1/models":
            return web.json_response({"object": "list", "data": [{"id": "served-model"}]})
        if mode == "slow":
            assert self.release is not None
            try:
                await asyncio.wait_for(self.release.wait(), 5)
            except TimeoutError:
                pass
            return web.json_response(COMPLETION)
        if mode == "dead":
            return web.json_response({"error": {"message": "EngineCore died"}}, status=503)
        if mode == "bad":
            return web.json_response({"object": "list", "data": []})
        if mode == "auth" and request.headers.get("Authorization") != "Bearer right":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return web.json_response(COMPLETION)

    def start(self) -> None:
        ready = threading.Event()

        async def main() -> None:
            self.release = asyncio.Event()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self.runner = web.AppRunner(app, shutdown_timeout=0.5)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(main(), self.loop)
        assert ready.wait(5)

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self.release is not None
            self.release.set()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeVllm]:
    srv = FakeVllm()
    srv.start()
    yield srv
    srv.stop()


def prober(url: str, tmp_path: Path, **kw) -> Prober:
    kw.setdefault("model", "m")
    cfg = WatchdogConfig(
        probe_url=url,
        state_dir=str(tmp_path),
        timeout_s=kw.pop("timeout_s", 2.0),
        metrics_timeout_s=1.0,
        **kw,
    )
    return Prober(cfg)


def test_ok_sends_a_one_token_completion(server: FakeVllm, tmp_path: Path) -> None:
    p = prober(server.url("ok"), tmp_path)
    r = p.probe()
    assert r.outcome is Outcome.OK and r.latency_s > 0
    req = server.requests[-1]
    assert req["path"] == "/v1/completions" and req["auth"] is None
    assert req["body"]["max_tokens"] == 1 and req["body"]["temperature"] == 0
    assert req["body"]["model"] == "m"
    p.close()


def test_model_from_v1_models_and_bearer_key(server: FakeVllm, tmp_path: Path) -> None:
    p = prober(server.url("auth"), tmp_path, model=None, api_key="right")
    assert p.probe().outcome is Outcome.OK
    assert server.requests[-1]["body"]["model"] == "served-model"
    assert server.requests[-1]["auth"] == "Bearer right"
    p.close()


def test_bad_key_is_4xx(server: FakeVllm, tmp_path: Path) -> None:
    r = prober(server.url("auth"), tmp_path, api_key="wrong").probe()
    assert r.outcome is Outcome.HTTP_4XX and r.status_code == 401


def test_timeout(server: FakeVllm, tmp_path: Path) -> None:
    r = prober(server.url("slow"), tmp_path, timeout_s=0.3).probe()
    assert r.outcome is Outcome.TIMEOUT and 0.25 < r.latency_s < 2


def test_503_is_5xx(server: FakeVllm, tmp_path: Path) -> None:
    r = prober(server.url("dead"), tmp_path).probe()
    assert r.outcome is Outcome.HTTP_5XX and r.status_code == 503 and "EngineCore" in r.detail


def test_malformed_200(server: FakeVllm, tmp_path: Path) -> None:
    assert prober(server.url("bad"), tmp_path).probe().outcome is Outcome.MALFORMED


def test_refused_on_a_closed_port(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = prober(f"http://127.0.0.1:{port}", tmp_path)
    assert p.probe().outcome is Outcome.REFUSED
    snap = p.scrape_metrics()
    assert snap.error and snap.refused


def test_metrics_advancing_vs_flat(server: FakeVllm, tmp_path: Path) -> None:
    adv = prober(server.url("adv"), tmp_path)
    a, b = adv.scrape_metrics(), adv.scrape_metrics()
    assert b.get("vllm:generation_tokens_total") == a.get("vllm:generation_tokens_total") + 14
    assert progress_signal(a, b) == "vllm:generation_tokens_total"
    flat = prober(server.url("flat"), tmp_path)
    c, d = flat.scrape_metrics(), flat.scrape_metrics()
    assert c.error is None and progress_signal(c, d) is None
    assert d.get("vllm:num_requests_waiting") == 2 and d.get("vllm:num_requests_running") == 1


@pytest.mark.skipif(not SAMPLE.exists(), reason="shared reference sample not present")
def test_parse_real_metrics_dump() -> None:
    snap = metrics_snapshot(SAMPLE.read_text(), 1.0)
    assert snap.error is None
    assert snap.get("vllm:generation_tokens_total") == 0.0  # the `_created` twin is not summed
    assert snap.get("vllm:num_requests_running") == 0.0
    assert snap.get("vllm:kv_cache_usage_perc") == 0.0


def test_parse_garbage_is_an_error_not_zero() -> None:
    assert metrics_snapshot("<html>oops</html>", 1.0).error
