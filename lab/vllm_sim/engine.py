"""The engine: one step loop shared by all requests (continuous batching).

Every step is an RPC to every remote rank (``collective``); a rank that never answers makes the
step hang. After ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` the engine dies like vLLM's
(EngineDeadError): /health turns 503 and the server exits.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from . import loadmodel
from .faults import FaultWatcher
from .logfmt import VllmLog
from .metrics import Metrics
from .textgen import Generator, TokenChoice


class EngineDeadError(RuntimeError):
    """EngineCore encountered an issue. See stack trace (above) for the root cause."""


@dataclass
class Delta:
    """What one step added to a request (the unit of a streamed chunk)."""

    text: str
    tokens: list[TokenChoice]
    finish_reason: str | None = None
    stop_reason: str | None = None
    error: str | None = None


@dataclass(kw_only=True)
class Request:
    rid: str
    prompt_tokens: list[str]
    max_tokens: int
    gen: Generator
    n_top: int
    stop: list[str]
    arrival: float
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    prefilled: int = 0
    output: list[TokenChoice] = field(default_factory=list)
    text: str = ""
    first_token_t: float | None = None
    last_token_t: float | None = None
    finish_reason: str | None = None
    accept_carry: float = 0.0

    @property
    def num_prompt(self) -> int:
        return len(self.prompt_tokens)

    @property
    def kv_tokens(self) -> int:
        return self.prefilled + len(self.output)


Collective = Callable[[str, float], Awaitable[None]]


class Engine:
    def __init__(
        self,
        *,
        k: int,
        max_num_seqs: int,
        max_batched: int,
        kv_capacity: int,
        collective: Collective,
        faults: FaultWatcher,
        metrics: Metrics,
        log: VllmLog,
        step_scale: float,
        timeout_s: float,
        ring_warn_s: float,
        seed: int,
        expected_acceptance: bool = False,
        clock: Callable[[], float] = lambda: 1.0,
    ) -> None:
        self.k = k
        self.max_num_seqs = max_num_seqs
        self.max_batched = max(1, max_batched)
        self.kv_capacity = max(1, kv_capacity)
        self.collective = collective
        self.faults = faults
        self.metrics = metrics
        self.log = log
        self.step_scale = step_scale
        self.timeout_s = timeout_s
        self.ring_warn_s = ring_warn_s
        self.rng = random.Random(seed)
        self.expected_acceptance = expected_acceptance
        self.clock = clock  # the GPUs' speed: gpuclock.ClockFactor
        self.mean_accepted = loadmodel.mean_tokens_per_step(k) - 1.0
        self.sample_rng = random.Random(seed + 1)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.dead: EngineDeadError | None = None
        self.dead_event = asyncio.Event()
        self._wake = asyncio.Event()
        # when the step before ended on the scripted clock (None after an idle wait): see _pace
        self._due: float | None = None

    # ---- requests -------------------------------------------------------------------------
    def add(self, req: Request) -> None:
        if self.dead:
            raise self.dead
        self.waiting.append(req)
        self._sync_gauges()
        self._wake.set()

    def abort(self, req: Request) -> None:
        if req.finish_reason:
            return
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        req.finish_reason = "abort"
        self.metrics.inc("request_success", 1, finished_reason="abort")
        self._sync_gauges()

    def _sync_gauges(self) -> None:
        m = self.metrics
        m.set("num_requests_running", len(self.running))
        m.set("num_requests_waiting", len(self.waiting))
        m.set("kv_cache_usage_perc", sum(r.kv_tokens for r in self.running) / self.kv_capacity)

    # ---- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        watcher = asyncio.ensure_future(self._watch_faults())
        try:
            while not self.dead:
                if not self.waiting and not self.running:
                    self._due = None
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                await self._step()
        finally:
            watcher.cancel()

    async def _watch_faults(self) -> None:
        while not self.dead:
            if self.faults.current.engine_dead:
                self.die(
                    "engine_dead",
                    "RuntimeError: EngineCore process died unexpectedly "
                    "(fault injected: engine_dead)",
                )
                return
            await asyncio.sleep(0.05)

    def _admit(self) -> None:
        used = sum(r.kv_tokens for r in self.running)
        while self.waiting and len(self.running) < self.max_num_seqs:
            nxt = self.waiting[0]
            if self.running and used + nxt.num_prompt > self.kv_capacity:
                break
            self.waiting.popleft()
            self.running.append(nxt)
            used += nxt.num_prompt

    async def _step(self) -> None:
        self._admit()
        budget = self.max_batched
        chunks: list[tuple[Request, int]] = []
        seconds = 0.0
        for r in self.running:
            left = r.num_prompt - r.prefilled
            if left > 0 and budget > 0:
                chunk = min(left, budget)
                seconds += loadmodel.prefill_time(r.prefilled, chunk)
                chunks.append((r, chunk))
                budget -= chunk
        decoders = [r for r in self.running if r.prefilled >= r.num_prompt]
        seconds += loadmodel.step_time(len(decoders), self.k)
        seconds *= self.faults.current.slow_steps * self.step_scale * self.clock()
        self._sync_gauges()
        try:
            await asyncio.wait_for(self._execute(seconds), self.timeout_s)
        except TimeoutError:
            self.die("timeout", "TimeoutError: RPC call to execute_model timed out.")
            return
        if self.dead:
            return
        now = time.monotonic()
        for r, chunk in chunks:
            r.prefilled += chunk
            self.metrics.inc("prompt_tokens", chunk)
            if r.prefilled >= r.num_prompt:
                if r.max_tokens <= 0:
                    self._finish(r, "length", None, now)
                else:
                    self._emit(r, 1, now)
        for r in decoders:
            if r.finish_reason:
                continue
            accepted = 0
            if self.k:
                if self.expected_acceptance:  # no variance: exact mean tokens per step
                    r.accept_carry += self.mean_accepted
                    accepted = int(r.accept_carry)
                    r.accept_carry -= accepted
                else:
                    accepted = loadmodel.sample_accepted(self.rng, self.k)
                self.metrics.inc("spec_decode_num_drafts", 1)
                self.metrics.inc("spec_decode_num_draft_tokens", self.k)
                self.metrics.inc("spec_decode_num_accepted_tokens", accepted)
                for pos in range(accepted):
                    self.metrics.inc(
                        "spec_decode_num_accepted_tokens_per_pos", 1, position=str(pos)
                    )
            self._emit(r, 1 + accepted, now)
        step_tokens = sum(c for _, c in chunks) + len(decoders) * (1 + self.k)
        if step_tokens:
            self.metrics.observe("iteration_tokens_total", step_tokens)
        self.running = [r for r in self.running if not r.finish_reason]
        self._sync_gauges()

    def _pace(self, seconds: float, now: float) -> float:
        """How long this step still sleeps so that it ends ``seconds`` after the step before.

        In vLLM the API server is its own process: streaming a step's tokens to the clients
        overlaps the next step on the GPUs, and the step's length is the model's alone. Here both
        share one event loop, so the host's own work (emitting the tokens, writing the chunks,
        a busy machine's scheduling delay) counts against the step's scripted time, up to one
        whole step: a host slower than the step slows the engine, with no burst to catch up.
        """
        start = now if self._due is None else max(self._due, now - seconds)
        self._due = start + seconds
        return max(0.0, self._due - now)

    async def _execute(self, seconds: float) -> None:
        """Run one step on every rank; hangs while any rank (or this one) is hung."""
        warn = asyncio.ensure_future(self._ring_warnings())
        try:
            # a remote rank is told the step's whole scripted length (a slow rank answers late
            # by a share of it); only this rank's own wait is paced
            await asyncio.gather(
                asyncio.sleep(self._pace(seconds, time.monotonic())),
                self.collective("execute_model", seconds),
            )
            while self.faults.current.hang:
                await asyncio.sleep(0.05)
                self._due = time.monotonic()  # a hung step earns the next one no credit
        finally:
            warn.cancel()

    async def _ring_warnings(self) -> None:
        while True:
            await asyncio.sleep(self.ring_warn_s)
            self.log.info(
                "EngineCore",
                "shm_broadcast.py:542",
                f"No available shared memory broadcast block found in "
                f"{self.ring_warn_s:g} seconds. This typically happens when some "
                "processes are hanging or doing some time-consuming work (e.g. "
                "compilation, weight/kv cache quantization).",
            )

    # ---- outputs ---------------------------------------------------------------------------
    def _emit(self, r: Request, n: int, now: float) -> None:
        new: list[TokenChoice] = []
        start_len = len(r.text)
        finish = stop_reason = None
        for _ in range(n):
            if r.gen.finished_naturally():
                finish = "stop"
                break
            choice = r.gen.next(r.n_top)
            new.append(choice)
            r.output.append(choice)
            r.text += choice.token
            hit = next((s for s in r.stop if s and s in r.text), None)
            if hit:
                r.text = r.text[: r.text.index(hit)]
                finish, stop_reason = "stop", hit
                break
            if len(r.output) >= r.max_tokens:
                finish = "length"
                break
        if new:
            self.metrics.inc("generation_tokens", len(new))
            if r.first_token_t is None:
                r.first_token_t = now
                self.metrics.observe("time_to_first_token_seconds", now - r.arrival)
            elif r.last_token_t is not None:
                self.metrics.observe("inter_token_latency_seconds", now - r.last_token_t)
            r.last_token_t = now
        if finish is None and r.gen.finished_naturally():
            finish = "stop"
        delta = Delta(r.text[start_len:], new)
        if finish:
            self._finish(r, finish, stop_reason, now, delta)
        else:
            r.out.put_nowait(delta)

    def _finish(
        self,
        r: Request,
        reason: str,
        stop_reason: str | None,
        now: float,
        delta: Delta | None = None,
    ) -> None:
        r.finish_reason = reason
        delta = delta or Delta("", [])
        delta.finish_reason, delta.stop_reason = reason, stop_reason
        self.metrics.inc("request_success", 1, finished_reason=reason)
        self.metrics.observe("e2e_request_latency_seconds", now - r.arrival)
        r.out.put_nowait(delta)

    # ---- death -----------------------------------------------------------------------------
    def die(self, cause: str, final_line: str) -> None:
        if self.dead:
            return
        self.dead = EngineDeadError(
            "EngineCore encountered an issue. See stack trace (above) for the root cause."
        )
        where = "core.py:1015"
        lines = [
            "EngineCore encountered a fatal error.",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
            "line 1006, in run_engine_core",
            "    engine_core.run_busy_loop()",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
            "line 1041, in run_busy_loop",
            "    self._process_engine_step()",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/'
            'multiproc_executor.py", line 377, in collective_rpc',
            '    raise TimeoutError(f"RPC call to {method} timed out.") from e'
            if cause == "timeout"
            else "    raise RuntimeError(msg)",
            final_line,
        ]
        for line in lines:
            self.log.error("EngineCore", where, line)
        self.log.error("APIServer", "async_llm.py:720", "AsyncLLM output_handler failed.")
        self.log.error("APIServer", "async_llm.py:720", "Traceback (most recent call last):")
        self.log.error(
            "APIServer",
            "async_llm.py:720",
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
            "issue. See stack trace (above) for the root cause.",
        )
        for r in list(self.running) + list(self.waiting):
            r.finish_reason = "abort"
            r.out.put_nowait(Delta("", [], "abort", error=str(self.dead)))
        self.running.clear()
        self.waiting.clear()
        self.dead_event.set()
        self._wake.set()
