"""The one HTTP gateway of `decide`: a 1-token request that returns the first token's top list.

Completions (`logprobs: k` -> `choices[0].logprobs.top_logprobs[0]`, a dict token -> logprob) and
chat (`logprobs: true, top_logprobs: k` -> `choices[0].logprobs.content[0].top_logprobs`, a list of
{token, logprob, bytes}). `k` is sized to the server's `--max-logprobs`; when the server answers
400 "... greater than max allowed: N" the client lowers k to N once and retries, and remembers it.
httpx errors become `DecideError`s; nothing else here knows about HTTP.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Literal

import httpx
from tpwarden.cluster.decide.labels import DecideError
from tpwarden.cluster.durable import JSONObject

VLLM_DEFAULT_MAX_LOGPROBS = 20
Path_ = Literal["completions", "chat"]
_MAX_ALLOWED = re.compile(r"max(?:imum)? allowed:?\s*(\d+)", re.I)


class ServerRejected(DecideError):
    """The server answered with an HTTP error (the message is the server's)."""

    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message
        super().__init__(f"server answered HTTP {status}: {message[:300]}")


class ServerUnreachable(DecideError):
    """No answer: connection refused, timeout, broken response."""


@dataclass(frozen=True)
class FirstToken:
    """What one request returned: the sampled token and the top list (best first)."""

    token: str
    top: tuple[tuple[str, float], ...]
    k: int


def max_logprobs_from_args(extra_args: tuple[str, ...] | list[str]) -> int:
    """`--max-logprobs N` / `--max-logprobs=N` among the inventory's extra vLLM args; else 20."""
    args = list(extra_args)
    for i, a in enumerate(args):
        if a in ("--max-logprobs", "--max_logprobs") and i + 1 < len(args):
            return int(args[i + 1])
        if a.startswith(("--max-logprobs=", "--max_logprobs=")):
            return int(a.split("=", 1)[1])
    return VLLM_DEFAULT_MAX_LOGPROBS


def parse_max_allowed(message: str) -> int | None:
    m = _MAX_ALLOWED.search(message)
    return int(m.group(1)) if m else None


class LogprobClient:
    """Thread-safe (one httpx.Client); constructing it connects to nothing."""

    def __init__(
        self,
        api_base: str,
        model: str,
        *,
        api_key: str | None = None,
        k: int = VLLM_DEFAULT_MAX_LOGPROBS,
        path: Path_ = "completions",
        thinking: bool = False,
        timeout_s: float = 60.0,
        http: httpx.Client | None = None,
    ) -> None:
        self.api_base = api_base.rstrip("/")
        self.model = model
        self.k = k
        self.path = path
        self.thinking = thinking
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = http or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0))
        self._headers = headers
        self._lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LogprobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def body(self, prompt: str, k: int) -> tuple[str, JSONObject]:
        common: JSONObject = {"model": self.model, "max_tokens": 1, "temperature": 0}
        if self.path == "completions":
            return "/v1/completions", {**common, "prompt": prompt, "logprobs": k}
        return "/v1/chat/completions", {
            **common,
            "messages": [{"role": "user", "content": prompt}],
            "logprobs": True,
            "top_logprobs": k,
            # the field report: thinking on turns a 0.4 s decision into 13.5 s and the first
            # token into <think>; the server default is recorded in the run manifest
            "chat_template_kwargs": {"enable_thinking": self.thinking},
        }

    def first_token(self, prompt: str) -> FirstToken:
        k = self.k
        for _ in range(2):
            route, body = self.body(prompt, k)
            try:
                r = self._http.post(self.api_base + route, json=body, headers=self._headers)
            except httpx.HTTPError as e:
                raise ServerUnreachable(f"{self.api_base}{route}: {type(e).__name__}: {e}") from e
            if r.status_code == 400:
                allowed = parse_max_allowed(_message(r))
                if allowed is not None and allowed < k:
                    with self._lock:
                        self.k = min(self.k, allowed)
                    k = allowed
                    continue
            if r.status_code != 200:
                raise ServerRejected(r.status_code, _message(r))
            try:
                return parse_first_token(r.json(), self.path, k)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise ServerUnreachable(f"unexpected response shape: {e}: {r.text[:200]}") from e
        raise ServerRejected(400, f"server kept refusing top_logprobs={k}")


def _message(r: httpx.Response) -> str:
    try:
        err = r.json().get("error")
        return str(err.get("message") if isinstance(err, dict) else err)
    except (ValueError, AttributeError):
        return r.text


def parse_first_token(doc: JSONObject, path: Path_, k: int) -> FirstToken:
    """Pure: vLLM's completion or chat response -> FirstToken (top list best first)."""
    choice = doc["choices"][0]
    lp = choice["logprobs"]
    if lp is None:
        raise ValueError("no logprobs in the response")
    if path == "completions":
        top = lp["top_logprobs"][0] or {}
        token = lp["tokens"][0]
        pairs = list(top.items())
    else:
        first = lp["content"][0]
        token = first["token"]
        pairs = [(e["token"], e["logprob"]) for e in first.get("top_logprobs") or []]
        if all(t != token for t, _ in pairs):
            pairs.append((token, first["logprob"]))  # the sampled token is information too
    pairs.sort(key=lambda t: -(t[1] if t[1] is not None else float("-inf")))
    if token.strip().startswith("<think"):
        raise DecideError(
            "the model opened with <think>: thinking is on; decide needs the answer as the first "
            "token (send enable_thinking false, or use --path completions)"
        )
    return FirstToken(token, tuple(pairs), k)
