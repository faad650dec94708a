"""The canary, planned (pure): a small fixed benchmark through the bench client.

`CanaryOptions` come from `tpwarden.ledger.canary` (cluster/ledger_settings.py); a level is one
client container that runs `vllm bench serve` warm-ups + repeats times in a row (one `sh -c`
script: the client image loads vLLM once per run, not the server), each with its own result file
and request ids `tpwarden-canary-<run>-c<level>-r<i>-<n>` (`--request-id-prefix`, sent as
`x-request-id`: the server's request log tells the canary's requests from users').

The canary's definition (`definition`) names what makes two canaries comparable: the prompt
set's hash, requests per repeat, output length, seed, API and model. Levels and repeat counts
are not in it: a concurrency-1 canary stays comparable when the higher level changes.

User load (`user_load`): a request beyond the canary's own (running + waiting above its
concurrency) in two consecutive samples, or two such requests in one. The watchdog's 1-token
probe lasts one sample at most, so it is not taken for a user; a user's stream lasts longer.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tpwarden.cluster.bench.plan import (
    DEFAULT_PROMPTS,
    BenchOptions,
    bench_argv,
    client_plan,
)
from tpwarden.cluster.canary_lease import REQUEST_ID_PREFIX
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.flag_tables import parse_version
from tpwarden.cluster.launch import ContainerPlan
from tpwarden.cluster.spec import ClusterSpec

CANARY_PROMPTS = DEFAULT_PROMPTS.with_name("canary-ko-en.jsonl")
# `vllm bench serve --request-id-prefix` (and its x-request-id header) exists from vLLM 0.11
REQUEST_ID_SINCE = "0.11.0"


@dataclass(frozen=True, kw_only=True)
class CanaryOptions:
    levels: tuple[int, ...] = (1, 4)
    repeats: int = 5
    warmups: int = 1
    num_prompts: int = 4
    output_len: int = 64
    seed: int = 0
    prompts: Path = CANARY_PROMPTS
    client_node: str | None = None
    timeout_s: float = 1800.0
    idle_window_s: float = 3.0
    backend: str = "openai-chat"

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> CanaryOptions:
        c = spec.settings.ledger.canary
        return cls(
            levels=tuple(c.levels), repeats=c.repeats, warmups=c.warmups,
            num_prompts=c.num_prompts, output_len=c.output_len, seed=c.seed,
            prompts=Path(c.prompts) if c.prompts else CANARY_PROMPTS,
            client_node=c.client_node, timeout_s=c.timeout_s, idle_window_s=c.idle_window_s,
        )  # fmt: skip

    def bench_options(self) -> BenchOptions:
        return BenchOptions(
            kind="sweep", levels=self.levels, prompts=self.prompts, output_len=self.output_len,
            ignore_eos=True, num_prompts=self.num_prompts, backend=self.backend, seed=self.seed,
            client_node=self.client_node, level_timeout_s=self.timeout_s,
        )  # fmt: skip

    def definition(self, spec: ClusterSpec) -> str:
        """`canary:` + 12 hex naming what makes two canaries comparable (module docstring)."""
        doc = {
            "prompts_sha256": hashlib.sha256(self.prompts.read_bytes()).hexdigest(),
            "num_prompts": self.num_prompts, "output_len": self.output_len, "seed": self.seed,
            "backend": self.backend, "ignore_eos": True, "model": spec.serving.model.served_name,
        }  # fmt: skip
        blob = json.dumps(doc, sort_keys=True).encode()
        return "canary:" + hashlib.sha256(blob).hexdigest()[:12]

    def to_json(self) -> JSONObject:
        return {
            "levels": list(self.levels), "repeats": self.repeats, "warmups": self.warmups,
            "num_prompts": self.num_prompts, "output_len": self.output_len, "seed": self.seed,
            "prompts": str(self.prompts), "client_node": self.client_node,
            "timeout_s": self.timeout_s, "idle_window_s": self.idle_window_s,
            "backend": self.backend,
        }  # fmt: skip


def result_name(level: int, repeat: int) -> str:
    return f"c{level}-r{repeat}.json"


def _with_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def sends_request_ids(spec: ClusterSpec) -> bool:
    try:
        return parse_version(spec.serving.vllm_version) >= parse_version(REQUEST_ID_SINCE)
    except ValueError:
        return False


def level_plan(spec: ClusterSpec, opts: CanaryOptions, level: int, run_id: str) -> ContainerPlan:
    """The client container of one level: warm-ups, then the measured repeats, each a
    `vllm bench serve` with its own result file; the first failure ends the script."""
    bopts = opts.bench_options()
    base = client_plan(spec, bopts, level, 0, run_id)
    argv = bench_argv(spec, bopts, level, 0)  # the same seed every level and repeat
    lines = []
    for i in range(opts.warmups + opts.repeats):
        one = _with_flag(argv, "--result-filename", result_name(level, i))
        one = _with_flag(one, "--label", "tpwarden-canary")
        if sends_request_ids(spec):
            one = _with_flag(
                one, "--request-id-prefix", f"{REQUEST_ID_PREFIX}{run_id}-c{level}-r{i}-"
            )
        lines.append(shlex.join(one))
    script = "set -e\n" + "\n".join(lines) + "\n"
    return replace(
        base,
        name=f"{spec.name}-canary-{run_id}-c{level}"[:120],
        entrypoint=("sh", "-c"),
        command=(script,),
    )


@dataclass(frozen=True)
class LoadSample:
    at: float
    running: float
    waiting: float


def foreign(sample: LoadSample, own: int) -> float:
    """Requests in the engine beyond the canary's own `own` (0 before it starts)."""
    return max(0.0, sample.running + sample.waiting - own)


def user_load(samples: Sequence[LoadSample], own: int) -> str | None:
    """Why these samples show users' load (module docstring), or None."""
    prev = 0.0
    for s in samples:
        now = foreign(s, own)
        if now >= 2 or (now >= 1 and prev >= 1):
            return (
                f"user load: {s.running:g} running and {s.waiting:g} waiting "
                f"beyond the canary's own {own}"
            )
        prev = now
    return None
