"""What a fingerprint or state key is about, for `why` (pure): its subject (rows about one thing
grouped into one difference: the KV cache's flag, setting and engine rows), the category of the
fixed prior, and what could revert it (issue 54's `why --plan` reads `setting`).

The fixed prior, in order (`CATEGORIES`): serving settings, clocks and power, co-tenants,
driver and kernel, then the image and environment, then the node's hardware.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Category(enum.StrEnum):
    SERVING = "serving settings"
    CLOCKS = "clocks and power"
    COTENANTS = "co-tenants"
    DRIVER = "driver and kernel"
    IMAGE = "image and environment"
    NODE = "node hardware"


CATEGORIES: tuple[Category, ...] = tuple(Category)  # the prior's order


@dataclass(frozen=True)
class Subject:
    name: str
    category: Category
    setting: str | None = None  # the inventory setting that reverts it (`rollout --set`)
    advice: str | None = None  # what the operator can do when tpwarden cannot revert it

    @property
    def revertable(self) -> bool:
        return self.setting is not None


_KV_FLAGS = (
    "--kv-cache-memory-bytes", "--kv-cache-dtype", "--gpu-memory-utilization",
    "--num-gpu-blocks-override", "--block-size",
)  # fmt: skip
_SERVING: tuple[tuple[tuple[str, ...], str, str], ...] = (
    # (keys or prefixes, subject, setting)
    (tuple(f"flag.{f}" for f in _KV_FLAGS) + ("engine.kv.", "setting.kv_cache"), "KV cache",
     "kv_cache"),
    (("flag.--speculative-config", "engine.drafter.", "setting.drafter"), "drafter", "drafter"),
    (("flag.--max-model-len", "setting.max_model_len"), "max model len", "max_model_len"),
    (("flag.--enforce-eager", "setting.enforce_eager"), "enforce eager (no CUDA graphs)",
     "enforce_eager"),
    (("flag.--default-chat-template-kwargs", "setting.chat_template_kwargs"),
     "chat template defaults", "chat_template_kwargs"),
    (("setting.gpu_clock_cap_mhz",), "GPU clock cap", "gpu_clock_cap_mhz"),
)  # fmt: skip
_GPU = re.compile(r"^gpu\d*\.")


def _matches(key: str, keys: tuple[str, ...]) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) or key.startswith(k + ".")
               for k in keys)  # fmt: skip


def subject_of(key: str) -> Subject:
    """The subject of a fingerprint or state-sample key."""
    for keys, name, setting in _SERVING:
        if _matches(key, keys):
            category = Category.CLOCKS if setting == "gpu_clock_cap_mhz" else Category.SERVING
            return Subject(name, category, setting)
    if _GPU.match(key):
        return _gpu_subject(key.split(".", 1)[1])
    if key.startswith("cotenant."):
        comm = key[len("cotenant.") :].rsplit(".", 1)[0]
        return Subject(f"co-tenant {comm}", Category.COTENANTS,
                       advice=f"stop {comm} or move it off the serving node")  # fmt: skip
    if key == "gpu_users.others":
        return Subject("GPU users outside the server", Category.COTENANTS,
                       advice="stop the other GPU users (the serving containers need the GPU)")  # fmt: skip
    if key.startswith("flag."):
        flag = key[len("flag.") :]
        return Subject(f"vLLM flag {flag}", Category.SERVING, "extra_args")
    if key.startswith("setting."):
        path = key[len("setting.") :]
        return Subject(f"setting {path}", Category.SERVING, path.split(".", 1)[0])
    if key.startswith("argv."):
        return Subject("serving command", Category.SERVING)
    if key in ("nvidia.driver", "nvidia.cuda"):
        return Subject("NVIDIA driver", Category.DRIVER, advice="the driver is the node's: "
                       "reinstall the one recorded before")  # fmt: skip
    if key in ("kernel", "os"):
        return Subject("kernel and OS", Category.DRIVER,
                       advice="boot the kernel recorded before")  # fmt: skip
    if key in ("vllm.version", "flag_table.sha256") or key.startswith("image."):
        return Subject("serving image", Category.IMAGE, "image")
    if key.startswith("env."):
        return Subject(f"environment {key[len('env.') :]}", Category.IMAGE, "env")
    return Subject(key, Category.NODE)


def _gpu_subject(field: str) -> Subject:
    if field == "clock_cap_mhz":
        return Subject("GPU clock cap", Category.CLOCKS, "gpu_clock_cap_mhz")
    if field == "power_limit_w":
        return Subject("GPU power limit", Category.CLOCKS,
                       advice="set the power limit back (nvidia-smi -pl)")  # fmt: skip
    if field in ("sm_clock_mhz", "clock_event_reasons"):
        return Subject("GPU clocks under load", Category.CLOCKS)
    if field == "temp_c":
        return Subject("GPU temperature", Category.CLOCKS)
    return Subject(f"GPU {field}", Category.NODE)
