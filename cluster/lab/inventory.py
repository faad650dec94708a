"""The lab's Ansible inventory, in the same schema as inventory.example.yml."""

from __future__ import annotations

import io

from ruamel.yaml import YAML
from servectl.cluster.lab.images import SIM_LATEST
from servectl.cluster.lab.paths import CLUSTER_NAME, HEAD, NODE_NAMES, LabPaths, node_ip


def inventory_doc(paths: LabPaths) -> dict:
    def host(name: str) -> dict:
        return {"ansible_host": node_ip(name), "vllm_host_ip": node_ip(name)}

    ssh_args = f"-o UserKnownHostsFile={paths.known_hosts} -o StrictHostKeyChecking=yes"
    servectl = {
        "cluster_name": CLUSTER_NAME,
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
        "parallel": {"tensor": 4, "backend": "native", "master_port": 29501},
        "kv_cache": {"dtype": "fp8", "memory": "16GiB"},
        "max_model_len": 1048576,
        "enforce_eager": True,
        "chat_template_kwargs": {"enable_thinking": False},
        "gpu_clock_cap_mhz": 2000,
        "host": node_ip(HEAD),
        "port": 8000,
        "shm_size": "1g",
        "env": {
            "VLLM_SIM_TIME_SCALE": "0.005",
            "VLLM_SIM_STEP_SCALE": "0.05",
            # deterministic drafter acceptance: lab measurements compare configs, not noise
            "VLLM_SIM_SPEC_ACCEPTANCE": "expected",
        },
        "secrets": {
            # The (dummy) token file exists at the same path on the host and in every node.
            # No api_key: clients on this machine (status, watchdog, bench) would need the key's
            # value locally; the simulator's key handling is covered by tests/sim.
            "hf_token": {"file": str(paths.hf_token)},
        },
        # The lab's watchdog runs on this machine (see servectl_watchdog_host below).
        "watchdog": {
            "interval_s": 2,
            "timeout_s": 2,
            "failures": 3,
            "boot_deadline_s": 120,
            "state_dir": str(paths.watchdog_dir),
        },
        "thermal": {"interval_s": 1, "dir": "/var/log/servectl/thermal"},
        # The client image carries the real vllm 0.33.0 (cluster/lab/client_image.py).
        "bench": {
            "client_image": "servectl-lab/vllm-client:latest",
            "num_prompts": 32,
            "output_len": 48,
        },
    }
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
                # known_hosts live, so `servectl provision` installs no watchdog unit on a node.
                "servectl_watchdog_host": "control",
                "servectl": servectl,
            },
        }
    }


def render_inventory(paths: LabPaths) -> str:
    yaml = YAML()
    yaml.default_flow_style = False
    out = io.StringIO()
    out.write(
        "# servectl lab inventory (written by `servectl lab inventory`): four simulated\n"
        "# nodes on 127.0.0.11-14, same schema as inventory.example.yml.\n"
    )
    yaml.dump(inventory_doc(paths), out)
    return out.getvalue()
