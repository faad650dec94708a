"""The OpenAI-compatible HTTP API subset with vLLM's shapes (aiohttp 3.8 .. 3.14)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from .cli import VLLM_VERSION, ServeConfig
from .engine import Delta, Engine, Request
from .faults import FaultWatcher
from .logfmt import VllmLog
from .metrics import Metrics
from .oracle import LogprobOracle
from .textgen import Generator, TokenChoice, prompt_logprobs, token_of_id, tokenize

ROUTES = [
    ("/openapi.json", "HEAD, GET"),
    ("/docs", "HEAD, GET"),
    ("/load", "GET"),
    ("/version", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/ping", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
]


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, etype: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.etype, self.param = status, message, etype, param

    def response(self) -> web.Response:
        body = {
            "error": {
                "message": self.message,
                "type": self.etype,
                "param": self.param,
                "code": self.status,
            }
        }
        return web.json_response(body, status=self.status)


def make_access_logger(log: VllmLog) -> type[AbstractAccessLogger]:
    class UvicornStyle(AbstractAccessLogger):
        def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:  # noqa: A002 - aiohttp's signature
            peer = request.remote or "-"
            port = ""
            transport = request.transport
            if transport is not None:
                info = transport.get_extra_info("peername")
                if info:
                    port = f":{info[1]}"
            try:
                phrase = HTTPStatus(response.status).phrase
            except ValueError:
                phrase = ""
            path = request.path_qs
            log.raw(
                "APIServer",
                f'INFO:     {peer}{port} - "{request.method} {path} '
                f'HTTP/{request.version.major}.{request.version.minor}" '
                f"{response.status} {phrase}",
            )

    return UvicornStyle


class Api:
    def __init__(
        self, cfg: ServeConfig, engine: Engine, metrics: Metrics, faults: FaultWatcher, log: VllmLog
    ) -> None:
        self.cfg, self.engine, self.metrics, self.faults, self.log = (
            cfg,
            engine,
            metrics,
            faults,
            log,
        )
        self.max_stop = int(os.environ.get("VLLM_MAX_STOP_STRINGS", "4"))
        self.created = int(time.time())
        self.oracle = LogprobOracle.from_env()  # VLLM_SIM_LOGPROB_ORACLE: scripted label logprobs

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=1 << 30)
        r = app.router
        r.add_get("/health", self.health)
        r.add_route("*", "/ping", self.health)
        r.add_get("/version", self.version)
        r.add_get("/load", self.load)
        r.add_get("/v1/models", self.models)
        r.add_get("/metrics", self.metrics_view)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.cfg.api_keys and request.path.startswith("/v1") and request.method != "OPTIONS":
            if request.headers.get("Authorization", "") not in {
                f"Bearer {k}" for k in self.cfg.api_keys
            }:
                return web.json_response({"error": "Unauthorized"}, status=401)
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()

    # ---- simple routes -----------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self.engine.dead else 200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VLLM_VERSION})

    async def load(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"server_load": len(self.engine.running) + len(self.engine.waiting)}
        )

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.cfg.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.cfg.model,
            "parent": None,
            "max_model_len": self.cfg.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": self.created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def metrics_view(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain", charset="utf-8")

    # ---- request parsing ---------------------------------------------------------------------
    async def _body(self, request: web.Request) -> dict:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(
                400, "Expecting value: line 1 column 1 (char 0)", "Bad Request"
            ) from None
        if not isinstance(body, dict):
            raise ApiError(400, "Input should be a valid dictionary", "Bad Request")
        model = body.get("model")
        if model not in (None, "", self.cfg.served_model_name, self.cfg.model):
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        if self.faults.current.http_5xx:
            raise ApiError(
                self.faults.current.http_5xx,
                "The server had an error while processing your request.",
                "InternalServerError",
            )
        if self.engine.dead:
            raise ApiError(500, str(self.engine.dead), "InternalServerError")
        return body

    def _stops(self, body: dict, kind: str) -> list[str]:
        stop = body.get("stop")
        if stop is None:
            return []
        if isinstance(stop, str):
            return [stop]
        if isinstance(stop, list) and len(stop) > self.max_stop:
            shown = json.dumps(stop)[:80]
            raise ApiError(
                400,
                f"1 validation error for {kind}\nstop.list[str]\n  List should "
                f"have at most {self.max_stop} items after validation, not "
                f"{len(stop)} [type=too_long, input_value={shown}, "
                "input_type=list]",
                "Bad Request",
                "stop",
            )
        return [str(s) for s in stop]

    def _check_logprobs(self, n: int | None) -> None:
        if n is not None and n > self.cfg.max_logprobs:
            raise ApiError(
                400,
                f"Requested sample logprobs of {n}, which is greater than max "
                f"allowed: {self.cfg.max_logprobs}",
                param="logprobs",
            )

    def _new_request(
        self, tokens: list[str], text: str, body: dict, max_tokens: int, n_top: int, stop: list[str]
    ) -> Request:
        if len(tokens) + max_tokens > self.cfg.max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is "
                f"{self.cfg.max_model_len} tokens. However, you requested "
                f"{len(tokens) + max_tokens} tokens ({len(tokens)} in the "
                f"messages, {max_tokens} in the completion). Please reduce the "
                "length of the messages or completion.",
                param="input_tokens",
            )
        temp = body.get("temperature")
        temp = 1.0 if temp is None else float(temp)
        gen = Generator(
            text,
            temp,
            body.get("seed"),
            self.engine.sample_rng,
            bool(body.get("ignore_eos")),
            self.oracle,
        )
        return Request(
            rid=uuid.uuid4().hex,
            prompt_tokens=tokens,
            max_tokens=max_tokens,
            gen=gen,
            n_top=n_top,
            stop=stop,
            arrival=time.monotonic(),
        )

    async def _run(self, request: web.Request, reqs: list[Request]) -> None:
        for r in reqs:
            self.engine.add(r)

    # ---- /v1/completions ---------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        stop = self._stops(body, "CompletionRequest")
        n_lp = body.get("logprobs")
        if n_lp is not None:
            n_lp = int(n_lp)
            if n_lp < 0:
                n_lp = self.cfg.max_logprobs
        self._check_logprobs(n_lp)
        echo = bool(body.get("echo"))
        max_tokens = body.get("max_tokens")
        max_tokens = 16 if max_tokens is None else int(max_tokens)
        if max_tokens < (0 if echo else 1):
            raise ApiError(
                400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens"
            )
        prompts = body.get("prompt")
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts:
            raise ApiError(
                400,
                "Either prompt or prompt_embeds must be provided and non-empty.",
                "Bad Request",
                "prompt",
            )
        tok_lists = [
            tokenize(p) if isinstance(p, str) else [token_of_id(int(t)) for t in p] for p in prompts
        ]
        reqs = [
            self._new_request(t, "".join(t), body, max_tokens, n_lp or 0, stop) for t in tok_lists
        ]
        rid = f"cmpl-{reqs[0].rid}"
        model = self.cfg.served_model_name
        created = int(time.time())
        await self._run(request, reqs)
        if body.get("stream"):
            return await self._stream_completion(
                request, body, reqs, rid, model, created, n_lp, echo
            )
        choices = []
        try:
            for i, r in enumerate(reqs):
                last = await self._drain(r)
                lp = None
                if n_lp is not None:
                    lp = _completion_logprobs(r, n_lp, echo)
                text = ("".join(r.prompt_tokens) if echo else "") + r.text
                choices.append(
                    {
                        "index": i,
                        "text": text,
                        "logprobs": lp,
                        "finish_reason": last.finish_reason,
                        "stop_reason": last.stop_reason,
                        "token_ids": None,
                        "prompt_logprobs": None,
                        "prompt_token_ids": None,
                        "routed_experts": None,
                    }
                )
        except BaseException:
            for r in reqs:
                self.engine.abort(r)
            raise
        usage = _usage(reqs)
        return web.json_response(
            {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": choices,
                "usage": usage,
                "service_tier": None,
                "system_fingerprint": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        )

    async def _drain(self, r: Request) -> Delta:
        while True:
            d: Delta = await r.out.get()
            if d.error:
                raise ApiError(500, d.error, "InternalServerError")
            if d.finish_reason:
                return d

    async def _stream_completion(
        self,
        request: web.Request,
        body: dict,
        reqs: list[Request],
        rid: str,
        model: str,
        created: int,
        n_lp: int | None,
        echo: bool,
    ) -> web.StreamResponse:
        resp = await _sse_start(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        try:
            for i, r in enumerate(reqs):
                offset = 0
                if echo:
                    chunk = {
                        "index": i,
                        "text": "".join(r.prompt_tokens),
                        "logprobs": None,
                        "finish_reason": None,
                        "stop_reason": None,
                    }
                    await _sse(
                        resp,
                        {
                            "id": rid,
                            "object": "text_completion",
                            "created": created,
                            "model": model,
                            "choices": [chunk],
                        },
                    )
                while True:
                    d: Delta = await r.out.get()
                    if d.error:
                        await _sse(
                            resp,
                            {
                                "error": {
                                    "message": d.error,
                                    "type": "InternalServerError",
                                    "code": 500,
                                }
                            },
                        )
                        break
                    lp = None
                    if n_lp is not None and d.tokens:
                        lp = _lp_block(d.tokens, n_lp, offset)
                    offset += len(d.text)
                    if d.text or d.finish_reason or d.tokens:
                        chunk = {
                            "index": i,
                            "text": d.text,
                            "logprobs": lp,
                            "finish_reason": d.finish_reason,
                            "stop_reason": d.stop_reason,
                        }
                        await _sse(
                            resp,
                            {
                                "id": rid,
                                "object": "text_completion",
                                "created": created,
                                "model": model,
                                "choices": [chunk],
                            },
                        )
                    if d.finish_reason:
                        break
            if include_usage:
                await _sse(
                    resp,
                    {
                        "id": rid,
                        "object": "text_completion",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": _usage(reqs),
                    },
                )
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, OSError):
            pass
        finally:
            for r in reqs:
                self.engine.abort(r)
        return resp

    # ---- /v1/chat/completions ------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        stop = self._stops(body, "ChatCompletionRequest")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(
                400,
                "1 validation error for ChatCompletionRequest\nmessages\n  Field "
                "required [type=missing]",
                "Bad Request",
                "messages",
            )
        want_lp = bool(body.get("logprobs"))
        n_top = body.get("top_logprobs")
        n_top = int(n_top) if n_top is not None else (0 if want_lp else None)
        self._check_logprobs(n_top if want_lp else None)
        kwargs = dict(self.cfg.default_chat_template_kwargs)
        kwargs.update(body.get("chat_template_kwargs") or {})
        prompt = render_chat(messages, kwargs)
        tokens = tokenize(prompt)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if max_tokens is None:
            max_tokens = self.cfg.max_model_len - len(tokens)
        max_tokens = int(max_tokens)
        if max_tokens < 1:
            raise ApiError(
                400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens"
            )
        r = self._new_request(
            tokens, _gen_key(messages, kwargs), body, max_tokens, n_top or 0, stop
        )
        if kwargs.get("enable_thinking", True):
            r.gen.letters = None  # a thinking model opens with <think>, not with a letter
            r.gen.oracle = None
        rid = f"chatcmpl-{r.rid}"
        model = self.cfg.served_model_name
        created = int(time.time())
        await self._run(request, [r])
        if body.get("stream"):
            return await self._stream_chat(
                request, body, r, rid, model, created, n_top if want_lp else None
            )
        try:
            last = await self._drain(r)
        except BaseException:
            self.engine.abort(r)
            raise
        lp = {"content": _chat_lp(r.output, n_top or 0)} if want_lp else None
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": r.text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning": None,
        }
        return web.json_response(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": msg,
                        "logprobs": lp,
                        "finish_reason": last.finish_reason,
                        "stop_reason": last.stop_reason,
                        "token_ids": None,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": _usage([r]),
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "prompt_text": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        )

    async def _stream_chat(
        self,
        request: web.Request,
        body: dict,
        r: Request,
        rid: str,
        model: str,
        created: int,
        n_top: int | None,
    ) -> web.StreamResponse:
        resp = await _sse_start(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
        try:
            await _sse(
                resp,
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                },
            )
            while True:
                d: Delta = await r.out.get()
                if d.error:
                    await _sse(
                        resp,
                        {"error": {"message": d.error, "type": "InternalServerError", "code": 500}},
                    )
                    break
                lp = {"content": _chat_lp(d.tokens, n_top)} if n_top is not None else None
                if d.text or d.finish_reason:
                    await _sse(
                        resp,
                        {
                            **base,
                            "choices": [
                                {
                                    "index": 0,
                                    "delta": {"content": d.text} if d.text else {},
                                    "logprobs": lp,
                                    "finish_reason": d.finish_reason,
                                    "stop_reason": d.stop_reason,
                                }
                            ],
                        },
                    )
                if d.finish_reason:
                    break
            if include_usage:
                await _sse(resp, {**base, "choices": [], "usage": _usage([r])})
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, OSError):
            pass
        finally:
            self.engine.abort(r)
        return resp


# ---- helpers ---------------------------------------------------------------------------------
def render_chat(messages: list[dict], kwargs: dict) -> str:
    """A GLM-like chat template; ``enable_thinking`` (default True) toggles the think block."""
    parts = ["[gMASK]<sop>"]
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user')}|>\n{content or ''}")
    parts.append("<|assistant|>")
    if not kwargs.get("enable_thinking", True):
        parts.append("<think></think>\n")
    else:
        parts.append("\n")
    return "".join(parts)


def _gen_key(messages: list[dict], kwargs: dict) -> str:
    """Generation is keyed by the last user message so MC detection sees ``Answer:``."""
    last = ""
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            last = m["content"]
    return last.rstrip() + " "


def _usage(reqs: list[Request]) -> dict:
    p = sum(r.num_prompt for r in reqs)
    c = sum(len(r.output) for r in reqs)
    return {
        "prompt_tokens": p,
        "total_tokens": p + c,
        "completion_tokens": c,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def _top_dict(choice: TokenChoice, n: int) -> dict[str, float]:
    d = {t: lp for t, lp in choice.top[:n]}
    d.setdefault(choice.token, choice.logprob)  # sampled token included: up to n+1 entries
    return d


def _lp_block(tokens: Sequence[TokenChoice | None], n: int, offset: int) -> dict:
    out: dict[str, list] = {
        "text_offset": [],
        "token_logprobs": [],
        "tokens": [],
        "top_logprobs": [],
    }
    for c in tokens:
        out["text_offset"].append(offset)
        if c is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        out["tokens"].append(c.token)
        out["token_logprobs"].append(c.logprob)
        out["top_logprobs"].append(_top_dict(c, n))
        offset += len(c.token)
    return out


def _completion_logprobs(r: Request, n: int, echo: bool) -> dict:
    if not echo:
        return _lp_block(list(r.output), n, 0)
    prompt = prompt_logprobs(r.prompt_tokens, n)
    block = _lp_block(prompt + list(r.output), n, 0)
    if r.prompt_tokens:  # the first prompt token has no logprob but does have a text
        block["tokens"].insert(0, r.prompt_tokens[0])
        offsets, pos = [], 0
        for tok in r.prompt_tokens + [c.token for c in r.output]:
            offsets.append(pos)
            pos += len(tok)
        block["text_offset"] = offsets
    return block


def _chat_lp(tokens: list[TokenChoice], n: int) -> list[dict]:
    def entry(tok: str, lp: float) -> dict:
        return {"token": tok, "logprob": lp, "bytes": list(tok.encode())}

    out = []
    for c in tokens:
        e = entry(c.token, c.logprob)
        e["top_logprobs"] = [entry(t, lp) for t, lp in c.top[:n]]
        out.append(e)
    return out


async def _sse_start(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    return resp


async def _sse(resp: web.StreamResponse, obj: dict) -> None:
    await resp.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")
