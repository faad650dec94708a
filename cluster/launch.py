"""ClusterSpec -> what must run on each node. Pure: no I/O except reading the flag table
(tpwarden.cluster.flag_tables: fetched from the image, else shipped for the exact version).

The vLLM command line is rendered here and nowhere else, as an argument list (never a shell
string). Secrets appear only as references (`secret_env`, `secret_files`, `SecretRef`); their
values are resolved on apply and never enter a plan. The API key reaches vLLM as a file: apply
writes it on the head (mode 0600), the container mounts it read-only and a `sh -c` prefix reads
it into VLLM_API_KEY at exec time, so neither `docker inspect` (Config.Env, Cmd) nor `ps` shows it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tpwarden.cluster.container_settings import DeviceSpec, UlimitSpec
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.flag_tables import FlagTable
from tpwarden.cluster.labels import (
    LABEL_CLUSTER,
    LABEL_COMPONENT,
    LABEL_CONFIG_HASH,
    LABEL_NODE,
    LABEL_RANK,
    LABEL_ROLE,
)
from tpwarden.cluster.settings import SecretRef
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

HF_TOKEN_MOUNT = "/run/secrets/hf_token"
# The CPU-only client containers (bench, eval) run CUDA/NGC images, which set
# NVIDIA_VISIBLE_DEVICES=all: where `nvidia` is Docker's default runtime such a container sees
# every GPU without asking for one. The NVIDIA Container Toolkit's `void` exposes neither GPUs
# nor driver capabilities (`none` still injects the driver); with no device request either.
CPU_ONLY_ENV = {"NVIDIA_VISIBLE_DEVICES": "void"}
# Every rank prints NCCL's INIT and NET lines (which HCAs, which network: IB, a plugin's IBext,
# or sockets), read after each boot by tpwarden.cluster.vllm.nccl_log; a few dozen lines at
# start. The inventory's env overrides either (NCCL_DEBUG: WARN turns them off).
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
API_KEY_MOUNT = "/run/tpwarden/api_key"
# vLLM reads its key from VLLM_API_KEY (vllm/envs.py) or --api-key (argv: shown by `ps`); this
# prefix reads the mounted file into the variable and execs the rest, refusing to serve without
# a key. The images need a POSIX sh (the lab's and vLLM's images are Debian/Ubuntu based).
KEY_WRAPPER = (
    "sh",
    "-c",
    f'VLLM_API_KEY="$(cat {API_KEY_MOUNT})" && [ -n "$VLLM_API_KEY" ] || '
    f'{{ echo "tpwarden: no API key in {API_KEY_MOUNT}" >&2; exit 78; }}; '
    'export VLLM_API_KEY; exec "$@"',
    "sh",
)


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True
    extra: bool = False  # from tpwarden.container.mounts (not one tpwarden needs)


@dataclass(frozen=True)
class SecretFile:
    """A secret apply writes on the node (mode 0600) before the container starts."""

    path: str
    ref: SecretRef
    what: str


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
    # tpwarden.container: docker run's --device, --cap-add, --ulimit, --privileged
    devices: tuple[DeviceSpec, ...] = ()
    cap_add: tuple[str, ...] = ()
    ulimits: tuple[tuple[str, UlimitSpec], ...] = ()
    privileged: bool = False
    stop_timeout_s: int = 2  # docker's StopTimeout: SIGTERM, then SIGKILL after this
    secret_files: tuple[SecretFile, ...] = ()
    # KEY_WRAPPER where the API key file is mounted: put before the argv that runs vLLM
    key_wrapper: tuple[str, ...] = ()

    @property
    def container_command(self) -> tuple[str, ...]:
        """The container's Cmd: `command`, behind the key wrapper when it runs vLLM itself."""
        return self.command if self.exec_after_start else self.key_wrapper + self.command

    def options_lines(self) -> list[str]:
        """The container options set (tpwarden.container), one line each, for `plan`."""
        lines = []
        if self.devices:
            lines.append("devices: " + ", ".join(str(d) for d in self.devices))
        if self.cap_add:
            lines.append("cap_add: " + ", ".join(self.cap_add))
        if self.ulimits:
            lines.append("ulimits: " + ", ".join(f"{n}={u}" for n, u in self.ulimits))
        extra = [m for m in self.mounts if m.extra]
        if extra:
            lines.append(
                "mounts: "
                + ", ".join(f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}" for m in extra)
            )
        if self.privileged:
            lines.append("privileged: true")
        return lines

    @property
    def exec_argv(self) -> tuple[str, ...] | None:
        """Ray head: what is exec'd once the ranks joined (behind the key wrapper)."""
        return self.key_wrapper + self.exec_after_start if self.exec_after_start else None

    @property
    def vllm_argv(self) -> tuple[str, ...]:
        """The `vllm serve ...` argv this node runs (the exec'd one on the Ray head; a Ray
        worker runs only `ray start`)."""
        return self.exec_after_start or self.command

    def to_json(self) -> JSONObject:
        env = dict(self.env)
        for name, ref in self.secret_env.items():
            env[name] = _ref_text(ref)
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
            "key_wrapper": list(self.key_wrapper) or None,
            "env": env,
            "mounts": [
                {"source": m.source, "target": m.target, "read_only": m.read_only}
                for m in self.mounts
            ],
            "secret_files": [{"path": f.path, "from": _ref_text(f.ref)} for f in self.secret_files],
            "network_mode": self.network_mode,
            "ipc_mode": self.ipc_mode,
            "shm_size": self.shm_size,
            "gpus": self.gpus,
            "devices": [str(d) for d in self.devices],
            "cap_add": list(self.cap_add),
            "ulimits": {name: str(limit) for name, limit in self.ulimits},
            "privileged": self.privileged,
            "stop_timeout_s": self.stop_timeout_s,
            "restart_policy": self.restart_policy,
            "labels": dict(self.labels),
        }


def _ref_text(ref: SecretRef) -> str:
    return f"<secret from {'env ' + ref.env if ref.env else 'file ' + str(ref.file)}>"


@dataclass(frozen=True)
class ClusterPlan:
    cluster: str
    config_hash: str
    backend: str
    containers: tuple[ContainerPlan, ...]
    warnings: tuple[str, ...] = ()

    def for_node(self, node: str) -> ContainerPlan:
        return next(c for c in self.containers if c.node == node)

    def to_json(self) -> JSONObject:
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
    _check_mounts(spec, containers)
    if spec.serving.container.privileged:
        warnings.append(
            "container.privileged: the serving containers get every capability and every "
            "device of the node (prefer devices + cap_add, e.g. /dev/infiniband + IPC_LOCK)"
        )
    if backend == "ray":
        warnings.append(
            "backend ray: the serving image must include Ray (`ray` on PATH, importable by "
            "vLLM); vLLM >= 0.18 no longer installs it"
        )
    table, problem = spec.flag_table  # chosen once, when the inventory was loaded
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


def _check_mounts(spec: ClusterSpec, containers: tuple[ContainerPlan, ...]) -> None:
    """An extra mount may not land on a target tpwarden mounts (docker: duplicate mount point)."""
    for c in containers:
        targets = [m.target.rstrip("/") for m in c.mounts]
        for extra in spec.serving.container.mounts:
            if targets.count(extra.target.rstrip("/")) > 1:
                raise ConfigError(
                    f"container.mounts: target {extra.target} is also the model or drafter mount",
                    file=spec.source_file,
                    key="tpwarden.container.mounts",
                    hint="mount it elsewhere in the container",
                )


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
        config: JSONObject = {"method": s.drafter.method}
        if s.drafter.path:
            config["model"] = s.drafter.path
        config["num_speculative_tokens"] = s.drafter.num_speculative_tokens
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if getattr(s.drafter, key) is not None:
                config[key] = getattr(s.drafter, key)
        config.update(s.drafter.extra)  # its keys never repeat the ones above (settings)
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


def _api_key_file(spec: ClusterSpec, node: NodeSpec) -> tuple[SecretFile, ...]:
    """The head's API key as a file, not env: Config.Env is what `docker inspect` shows; the
    container mounts it at API_KEY_MOUNT and KEY_WRAPPER reads it when vLLM starts."""
    if not spec.secrets.api_key or node.role != "head":
        return ()
    path = f"{spec.serving.container.secrets_dir}/{spec.name}-api_key"
    return (SecretFile(path, spec.secrets.api_key, "the API key"),)


def _container(spec: ClusterSpec, node: NodeSpec, config_hash: str) -> ContainerPlan:
    s = spec.serving
    env = {"VLLM_HOST_IP": node.vllm_host_ip, **NCCL_DEBUG_ENV, **s.env}
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
    opts = s.container
    mounts += [Mount(m.source, m.target, m.read_only, extra=True) for m in opts.mounts]
    secret_files = _api_key_file(spec, node)
    mounts += [Mount(f.path, API_KEY_MOUNT, True) for f in secret_files]
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
        devices=tuple(opts.devices),
        cap_add=tuple(opts.cap_add),
        ulimits=tuple(sorted(opts.ulimits.items())),
        privileged=opts.privileged,
        stop_timeout_s=opts.stop_timeout_s,
        secret_files=secret_files,
        key_wrapper=KEY_WRAPPER if secret_files else (),
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
