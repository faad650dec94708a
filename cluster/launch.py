"""ClusterSpec -> what must run on each node. Pure: no I/O except reading the flag table
(tpwarden.cluster.flag_tables: fetched from the image, else shipped for the exact version).

The vLLM command line is rendered here and nowhere else, as an argument list (never a shell
string). Secrets appear only as references (`secret_env`, `SecretRef`); their values are resolved
on apply, on the node, and never enter a plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.flag_tables import FlagTable, resolve
from tpwarden.cluster.settings import SecretRef
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

LABEL_PREFIX = "io.tpwarden."
LABEL_CLUSTER = LABEL_PREFIX + "cluster"
LABEL_COMPONENT = LABEL_PREFIX + "component"
LABEL_NODE = LABEL_PREFIX + "node"
LABEL_ROLE = LABEL_PREFIX + "role"
LABEL_RANK = LABEL_PREFIX + "rank"
LABEL_CONFIG_HASH = LABEL_PREFIX + "config-hash"

HF_TOKEN_MOUNT = "/run/secrets/hf_token"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True, kw_only=True)
class ContainerPlan:
    node: str
    role: str
    rank: int
    name: str
    image: str
    command: tuple[str, ...]
    entrypoint: tuple[str, ...] | None
    env: dict[str, str]
    secret_env: dict[str, SecretRef]
    mounts: tuple[Mount, ...]
    network_mode: str = "host"
    ipc_mode: str = "host"
    shm_size: str = "10g"
    gpus: str | None = "all"
    # The whole TP group must restart together (a lone rank cannot rejoin), so Docker never
    # restarts one container on its own: the watchdog or the operator restarts the server.
    restart_policy: str = "no"
    labels: dict[str, str] = field(default_factory=dict)
    # Ray path only: the `vllm serve` argv exec'd in the head container once all ranks joined.
    exec_after_start: tuple[str, ...] | None = None

    @property
    def vllm_argv(self) -> tuple[str, ...]:
        """The `vllm serve ...` argv this node runs (the exec'd one on the Ray head; a Ray
        worker runs only `ray start`)."""
        return self.exec_after_start or self.command

    def to_json(self) -> dict[str, Any]:
        env = dict(self.env)
        for name, ref in self.secret_env.items():
            env[name] = f"<secret from {'env ' + ref.env if ref.env else 'file ' + str(ref.file)}>"
        return {
            "node": self.node,
            "role": self.role,
            "rank": self.rank,
            "container": self.name,
            "image": self.image,
            "argv": list(self.vllm_argv),
            "command": list(self.command),
            "entrypoint": list(self.entrypoint) if self.entrypoint else None,
            "exec_after_start": list(self.exec_after_start) if self.exec_after_start else None,
            "env": env,
            "mounts": [
                {"source": m.source, "target": m.target, "read_only": m.read_only}
                for m in self.mounts
            ],
            "network_mode": self.network_mode,
            "ipc_mode": self.ipc_mode,
            "shm_size": self.shm_size,
            "gpus": self.gpus,
            "restart_policy": self.restart_policy,
            "labels": dict(self.labels),
        }


@dataclass(frozen=True)
class ClusterPlan:
    cluster: str
    config_hash: str
    backend: str
    containers: tuple[ContainerPlan, ...]
    warnings: tuple[str, ...] = ()

    def for_node(self, node: str) -> ContainerPlan:
        return next(c for c in self.containers if c.node == node)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "config_hash": self.config_hash,
            "backend": self.backend,
            "nodes": [c.to_json() for c in self.containers],
            "warnings": list(self.warnings),
        }


def plan_cluster(spec: ClusterSpec) -> ClusterPlan:
    """Render the container plan of every node, head first."""
    config_hash = spec.config_hash()
    backend = spec.serving.parallel.backend
    containers = tuple(_container(spec, node, config_hash) for node in spec.nodes)
    warnings: list[str] = []
    if backend == "ray":
        warnings.append(
            "backend ray: the serving image must include Ray (`ray` on PATH, importable by "
            "vLLM); vLLM >= 0.18 no longer installs it"
        )
    table, problem = resolve(spec.serving.vllm_version, spec.serving.image)
    if table is not None:
        for container in containers:
            if container.vllm_argv[:2] == ("vllm", "serve"):
                _check_flags(container.vllm_argv, table, spec.source_file)
    else:
        warnings.append(
            f"{problem}: argv not checked against its parser; fetch the table with "
            f"`tpwarden flags fetch -i {spec.source_file}`"
        )
    return ClusterPlan(spec.name, config_hash, backend, containers, tuple(warnings))


def container_name(spec: ClusterSpec, node: NodeSpec) -> str:
    return f"{spec.name}-vllm-{node.name}"


def vllm_serve_argv(spec: ClusterSpec, node: NodeSpec) -> list[str]:
    """`vllm serve` argv for one node (native multi-node path) or the Ray head."""
    s = spec.serving
    native = s.parallel.backend == "native"
    argv = ["vllm", "serve", s.model.path, "--tensor-parallel-size", str(s.parallel.tensor)]
    if native and len(spec.nodes) > 1:
        argv += [
            "--nnodes", str(len(spec.nodes)),
            "--node-rank", str(node.rank),
            "--master-addr", spec.head.vllm_host_ip,
            "--master-port", str(s.parallel.master_port),
        ]  # fmt: skip
    if not native:
        argv += ["--distributed-executor-backend", "ray"]
    if s.model.quantization:
        argv += ["--quantization", s.model.quantization]
    if s.model.tokenizer:
        argv += ["--tokenizer", s.model.tokenizer]
    if s.drafter:
        config: dict[str, Any] = {"method": s.drafter.method}
        if s.drafter.path:
            config["model"] = s.drafter.path
        config["num_speculative_tokens"] = s.drafter.num_speculative_tokens
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if getattr(s.drafter, key) is not None:
                config[key] = getattr(s.drafter, key)
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if s.kv_cache.dtype != "auto":
        argv += ["--kv-cache-dtype", s.kv_cache.dtype]
    if s.kv_cache.memory_bytes:
        argv += ["--kv-cache-memory-bytes", str(s.kv_cache.memory_bytes)]
    if s.max_model_len:
        argv += ["--max-model-len", str(s.max_model_len)]
    if s.enforce_eager:
        argv += ["--enforce-eager"]
    if node.role == "head":
        argv += ["--served-model-name", s.model.served_name]
        if s.chat_template_kwargs:
            argv += [
                "--default-chat-template-kwargs",
                json.dumps(s.chat_template_kwargs, separators=(",", ":")),
            ]
        argv += ["--host", s.host, "--port", str(s.port)]
    else:
        argv += ["--headless"]
    argv += list(s.extra_args)
    return argv


def _container(spec: ClusterSpec, node: NodeSpec, config_hash: str) -> ContainerPlan:
    s = spec.serving
    env = {"VLLM_HOST_IP": node.vllm_host_ip, **s.env}
    secret_env: dict[str, SecretRef] = {}
    mounts = [Mount(s.model.path, s.model.path, True)]
    if s.drafter and s.drafter.path:
        mounts.append(Mount(s.drafter.path, s.drafter.path, True))
    if spec.secrets.hf_token:
        ref = spec.secrets.hf_token
        if ref.file:
            # The token file is mounted; huggingface_hub reads HF_TOKEN_PATH. No value in env.
            mounts.append(Mount(ref.file, HF_TOKEN_MOUNT, True))
            env["HF_TOKEN_PATH"] = HF_TOKEN_MOUNT
        else:
            secret_env["HF_TOKEN"] = ref
    if spec.secrets.api_key and node.role == "head":
        # vLLM reads VLLM_API_KEY; passing --api-key would show the key in `ps`.
        secret_env["VLLM_API_KEY"] = spec.secrets.api_key
    labels = {
        LABEL_CLUSTER: spec.name,
        LABEL_COMPONENT: "vllm",
        LABEL_NODE: node.name,
        LABEL_ROLE: node.role,
        LABEL_RANK: str(node.rank),
        LABEL_CONFIG_HASH: config_hash,
    }
    serve = tuple(vllm_serve_argv(spec, node))
    if s.parallel.backend == "ray":
        ray = ["ray", "start", "--block", f"--node-ip-address={node.vllm_host_ip}"]
        if node.role == "head":
            ray += ["--head", f"--port={s.parallel.master_port}"]
        else:
            ray += [f"--address={spec.head.vllm_host_ip}:{s.parallel.master_port}"]
        command: tuple[str, ...] = tuple(ray)
        exec_after = serve if node.role == "head" else None
    else:
        command, exec_after = serve, None
    return ContainerPlan(
        node=node.name,
        role=node.role,
        rank=node.rank,
        name=container_name(spec, node),
        image=s.image,
        command=command,
        entrypoint=None,
        env=env,
        secret_env=secret_env,
        mounts=tuple(mounts),
        shm_size=s.shm_size,
        ipc_mode=s.ipc_mode,
        gpus="all" if s.gpus == "all" else None,
        labels=labels,
        exec_after_start=exec_after,
    )


def _check_flags(argv: tuple[str, ...], table: FlagTable, source: str) -> None:
    args = list(argv[2:]) if argv[:2] == ("vllm", "serve") else list(argv)
    i = 1 if args and not args[0].startswith("-") else 0  # the model positional
    while i < len(args):
        token = args[i]
        flag = token.split("=", 1)[0]
        option = table.get(flag)  # the dotted JSON form too: --speculative-config.method x
        if option is None:
            raise ConfigError(
                f"vLLM {table.version} `vllm serve` has no flag {flag}",
                file=source,
                key="tpwarden.extra_args",
                hint="check the flag's spelling for this vLLM version",
            )
        i += 1
        if option["takes_value"] and "=" not in token:
            if option.get("nargs") in ("+", "*"):
                while i < len(args) and not args[i].startswith("--"):
                    i += 1
            else:
                i += 1
