"""Benchmark plans, pure: the options, the client's node and image, the `vllm bench serve` argv
per level, and a `ContainerPlan` per level (the prompt set as ShareGPT JSON: `dataset`).

`tpwarden.cluster.bench.runner` applies them (plan, then apply).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.labels import LABEL_BENCH_RUN, LABEL_CLUSTER, LABEL_COMPONENT, LABEL_NODE
from tpwarden.cluster.launch import CPU_ONLY_ENV, ContainerPlan, Mount
from tpwarden.cluster.settings import BENCH_OUTPUT_LEN
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

# package data, so an installed tpwarden has it too (it lived in the checkout's bench/ before)
DEFAULT_PROMPTS = Path(__file__).with_name("prompts") / "ko-mixed-20.jsonl"
CONTAINER_DIR = "/bench"


class BenchError(TpwardenError):
    """A benchmark could not start or a level failed."""


@dataclass(frozen=True)
class BenchOptions:
    kind: str  # sweep | prefill
    levels: tuple[int, ...]  # concurrency levels (sweep) or input lengths (prefill)
    prompts: Path = DEFAULT_PROMPTS
    output_len: int = BENCH_OUTPUT_LEN
    ignore_eos: bool = True
    num_prompts: int = 20
    backend: str = "openai-chat"
    seed: int = 0
    temperature: float | None = None
    client_image: str | None = None
    level_timeout_s: float = 3600.0
    # Where the client container runs. The head by default; on a worker it keeps the client's
    # CPU load off the node that runs the API server and the scheduler (the field report's
    # head P-cores peaked 82 C vs 68-75 C on workers).
    client_node: str | None = None
    dataset: str = "prompts"  # sweep input: "prompts" (the prompt set) or "random" tokens
    random_input_len: int = 256  # sweep with dataset "random": input tokens per request
    # Per request, beside the server's default (vLLM's chat_template_kwargs request field): the
    # thinking-on question costs one run, not a restart. Chat endpoint only.
    chat_template_kwargs: JSONObject | None = None

    def to_json(self) -> JSONObject:
        doc = {k: getattr(self, k) for k in self.__dataclass_fields__}
        prompts = self.kind == "sweep" and self.dataset == "prompts"
        doc["prompts"] = str(self.prompts) if prompts else None
        doc["levels"] = list(self.levels)
        if prompts:
            doc["prompts_sha256"] = hashlib.sha256(self.prompts.read_bytes()).hexdigest()[:16]
        return doc


def parse_chat_template_kwargs(text: str) -> JSONObject:
    """`--chat-template-kwargs JSON` -> the object vLLM takes as a request's
    `chat_template_kwargs`; ValueError for anything else."""
    example = """e.g. '{"enable_thinking": true}'"""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not JSON ({exc}); {example}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{text!r} is not a JSON object; {example}")
    return value


def client_image(spec: ClusterSpec, override: str | None = None) -> str:
    """The CLI flag, else `tpwarden.bench.client_image`, else the serving image."""
    return override or spec.bench.client_image or spec.serving.image


def client_node(spec: ClusterSpec, opts: BenchOptions) -> NodeSpec:
    """The node the client container runs on (the head unless --client-node says otherwise)."""
    if not opts.client_node:
        return spec.head
    names = [n.name for n in spec.nodes]
    if opts.client_node not in names:
        raise ConfigError(
            f"--client-node {opts.client_node!r} is not in the inventory",
            key="--client-node",
            hint=f"one of {', '.join(names)}",
        )
    return spec.node(opts.client_node)


def client_base_url(spec: ClusterSpec, node: NodeSpec | None = None) -> str:
    """From the client's node (host network). On the head: loopback when the API listens on
    all addresses. On another node: the head's cluster address (vllm_host_ip)."""
    host = spec.serving.host
    client = spec.head if node is None else node
    on_head = client.name == spec.head.name
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if on_head else spec.head.vllm_host_ip
    elif not on_head and host in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError(
            f"the API listens on {host} only: a client on {client.name} cannot reach it",
            key="--client-node",
            hint="run the client on the head, or serve on 0.0.0.0",
        )
    return f"http://{host}:{spec.serving.port}"


def level_name(opts: BenchOptions, level: int) -> str:
    return f"c{level}" if opts.kind == "sweep" else f"in{level}"


def bench_argv(spec: ClusterSpec, opts: BenchOptions, level: int, index: int) -> list[str]:
    """`vllm bench serve` for one level. A different seed per level so the prefix cache
    does not flatter later levels (vllm#52884)."""
    s = spec.serving
    name = level_name(opts, level)
    chat = opts.backend == "openai-chat"
    argv = [
        "vllm", "bench", "serve",
        "--backend", opts.backend,
        "--base-url", client_base_url(spec, client_node(spec, opts)),
        "--endpoint", "/v1/chat/completions" if chat else "/v1/completions",
        "--model", s.model.served_name,
        "--tokenizer", s.model.tokenizer or s.model.path,
        "--seed", str(opts.seed + index),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", f"{CONTAINER_DIR}/results",
        "--result-filename", f"{name}.json",
        "--label", f"tpwarden-{opts.kind}",
    ]  # fmt: skip
    if opts.kind == "sweep" and opts.dataset == "random":
        # random tokens: the field report's drafter accepted 10% of them vs 20% on Korean prose
        argv += [
            "--dataset-name", "random",
            "--random-input-len", str(opts.random_input_len),
            "--random-output-len", str(opts.output_len),
            "--num-prompts", str(opts.num_prompts),
            "--max-concurrency", str(level),
        ]  # fmt: skip
    elif opts.kind == "sweep":
        # ShareGPT layout, not `custom`: the custom loader needs pandas (vllm[bench]), which
        # a serving image may lack; the sharegpt loader is plain json. Prompts go raw; with
        # openai-chat the server applies its own template and default kwargs, as users see it.
        argv += [
            "--dataset-name", "sharegpt",
            "--dataset-path", f"{CONTAINER_DIR}/prompts.json",
            "--sharegpt-output-len", str(opts.output_len),
            "--num-prompts", str(opts.num_prompts),
            "--max-concurrency", str(level),
        ]  # fmt: skip
    else:
        argv += [
            "--dataset-name", "random",
            "--random-input-len", str(level),
            "--random-output-len", str(opts.output_len),
            "--num-prompts", str(opts.num_prompts),
            "--max-concurrency", "1",
        ]  # fmt: skip
    if opts.ignore_eos:
        argv += ["--ignore-eos"]
    if opts.temperature is not None:
        argv += ["--temperature", str(opts.temperature)]
    if opts.chat_template_kwargs is not None:
        if not chat:
            raise ConfigError(
                "chat_template_kwargs apply to the chat endpoint only",
                key="--chat-template-kwargs",
                hint="use --backend openai-chat",
            )
        # every request's body (vllm bench serve --extra-body), beside the server's defaults
        body = {"chat_template_kwargs": opts.chat_template_kwargs}
        argv += ["--extra-body", json.dumps(body, ensure_ascii=False, sort_keys=True)]
    return argv


def client_plan(
    spec: ClusterSpec, opts: BenchOptions, level: int, index: int, run_id: str
) -> ContainerPlan:
    s = spec.serving
    node = client_node(spec, opts)
    tok = s.model.tokenizer or s.model.path
    mounts = [Mount(s.model.path, s.model.path, True)]
    if tok != s.model.path:
        mounts.append(Mount(tok, tok, True))
    argv = bench_argv(spec, opts, level, index)
    return ContainerPlan(
        node=node.name,
        role="bench",
        rank=-1,
        name=f"{spec.name}-bench-{run_id}-{level_name(opts, level)}"[:120],
        image=client_image(spec, opts.client_image),
        command=tuple(argv[1:]),
        entrypoint=("vllm",),
        env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_TARGET_DEVICE": "cpu",
            **CPU_ONLY_ENV,
        },
        secret_env={},
        mounts=tuple(mounts),
        network_mode="host",
        ipc_mode="private",
        shm_size="1g",
        gpus=None,  # CPU only: never a device request, never seen by the GPU guard
        restart_policy="no",
        labels={
            LABEL_CLUSTER: spec.name,
            LABEL_COMPONENT: "bench",
            LABEL_NODE: node.name,
            LABEL_BENCH_RUN: run_id,
        },
    )


def run_id_for(kind: str, now: datetime) -> str:
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{kind}"
