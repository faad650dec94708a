"""The `tpwarden` settings (under `all.vars.tpwarden`), validated once: pydantic models with
`extra="forbid"` and strict types, so a typo or a wrong type is an error at load time, never a
surprise on a node; and the value parsers they use (sizes, paths, secret-looking values).

`tpwarden.cluster.spec` builds the frozen `ClusterSpec` from them and the per-host facts.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from tpwarden.cluster.container_settings import ContainerSpec
from tpwarden.cluster.durable import (
    THERMAL_BUDGET_MB,
    THERMAL_DIR,
    THERMAL_METRICS_HOST,
    THERMAL_METRICS_PORT,
    JSONObject,
)
from tpwarden.cluster.flag_tables import parse_version
from tpwarden.cluster.ledger_settings import LedgerSpec
from tpwarden.cluster.preflight_settings import FabricSpec, MemorySpec
from tpwarden.cluster.report_settings import ReportSpec

# --- value parsers -------------------------------------------------------------------------

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[kmgt]i?b?|B|b)?\s*$")
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}


def parse_size(value: object) -> int:
    """Parse a byte size: 17179869184, "16GiB", "16Gi", "16G" (binary, as vLLM reads "16G"),
    "16g" (decimal, as vLLM reads it), "16GB" (decimal, SI)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 16GiB, got a boolean")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("size must be positive")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a size such as 16GiB, got {type(value).__name__}")
    match = _SIZE_RE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a size (examples: 16GiB, 16G, 17179869184)")
    number, unit = match.group(1), (match.group(2) or "")
    if "i" in unit.lower():
        binary = True  # KiB, GiB, Gi
    elif len(unit) > 1 and unit[-1] in "Bb":
        binary = False  # kB, GB: SI
    else:
        binary = unit[:1].isupper()  # vLLM's human_readable_int: K/M/G/T binary, k/m/g/t decimal
    prefix = unit[:1].lower() if unit[:1].lower() in "kmgt" else ""
    key = prefix + ("i" if binary and prefix else "")
    size = float(number) * _SIZE_UNITS[key]
    if size <= 0 or size != int(size):
        raise ValueError(f"{value!r} is not a whole positive number of bytes")
    return int(size)


ByteSize = Annotated[int, BeforeValidator(parse_size)]

BENCH_OUTPUT_LEN = 512  # output tokens per benchmark request (bench.output_len, `--output-len`)

_SECRET_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]
_SECRETISH_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY)", re.IGNORECASE)


def looks_like_secret(value: str) -> bool:
    return any(p.search(value) for p in _SECRET_PATTERNS)


class _Model(BaseModel):
    # allow_inf_nan=False: `.inf` or `.nan` as a timeout or interval is never meant
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def not_a_flag(value: str | None) -> str | None:
    """A value that becomes one argv element must not start with '-': vLLM's parser would read
    `--trust-remote-code` given as a model path as a flag (argument injection)."""
    if value is not None and value.startswith("-"):
        raise ValueError(f"{value!r} starts with '-' and would be read as a flag")
    return value


def absolute_path(value: str | None) -> str | None:
    """Paths resolved on the nodes and mounted into containers must not depend on a cwd."""
    not_a_flag(value)
    if value is not None and not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (start it with /)")
    return value


_HOST_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


def host_or_address(value: str) -> str:
    """A host name (DNS labels) or an IP address, nothing else: the value reaches ssh argv,
    ProxyCommand templates and listen sockets, so no spaces, options or shell characters."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    name = value.removesuffix(".")
    if ":" in value and value.count(":") == 1 and value.rpartition(":")[2].isdigit():
        raise ValueError(f"{value!r} has a port: give only the host here")
    if not name or len(name) > 253 or not all(_HOST_LABEL.match(p) for p in name.split(".")):
        raise ValueError(f"{value!r} is not a host name or IP address")
    return value


def http_url(value: str) -> str:
    """An http(s) URL with a host and nothing a client would refuse later (httpx.InvalidURL)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number or too big
    except ValueError as exc:
        raise ValueError(f"the URL is not valid ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http:// or https:// URL with a host")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("the URL contains spaces or control characters")
    return value


_UNIT_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")


def unit_path(value: str) -> str:
    """A directory a systemd unit names (StateDirectory=, LogsDirectory=, ReadWritePaths=): a
    space would split it into two and `%` is a unit specifier, so only a plain charset."""
    absolute_path(value)
    if not _UNIT_PATH.match(value) or ".." in value.split("/"):
        raise ValueError(
            f"{value!r} may hold only letters, digits, '.', '_', '-' and '/' (no spaces, '%', "
            "'$', quotes or '..'): systemd units name this directory"
        )
    return value


NoFlag = Annotated[str, AfterValidator(not_a_flag)]
UnitPath = Annotated[str, AfterValidator(unit_path)]
HostOrAddress = Annotated[str, AfterValidator(host_or_address)]
AbsPath = Annotated[str, AfterValidator(absolute_path)]


# --- serving settings --------------------------------------------------------------------------


class ModelSpec(_Model):
    path: AbsPath = Field(
        min_length=1, description="Model directory on every node (and in the container)."
    )
    served_name: NoFlag = Field(min_length=1, description="Name clients use in the `model` field.")
    quantization: NoFlag | None = Field(
        None, description="vLLM --quantization, e.g. compressed-tensors."
    )
    tokenizer: NoFlag | None = Field(None, description="Tokenizer path if not the model directory.")


SPEC_METHODS = (
    "dflash",
    "eagle",
    "eagle3",
    "mtp",
    "deepseek_mtp",
    "draft_model",
    "ngram",
    "suffix",
)


# --speculative-config keys tpwarden renders from drafter's own fields (launch.vllm_serve_argv)
DRAFTER_SETS = {
    "method": "drafter.method",
    "model": "drafter.path",
    "num_speculative_tokens": "drafter.num_speculative_tokens",
    "prompt_lookup_min": "drafter.prompt_lookup_min",
    "prompt_lookup_max": "drafter.prompt_lookup_max",
}


class DrafterSpec(_Model):
    method: Literal[
        "dflash", "eagle", "eagle3", "mtp", "deepseek_mtp", "draft_model", "ngram", "suffix"
    ] = Field(description="vLLM speculative method.")
    path: AbsPath | None = Field(
        None, description="Drafter model directory (not needed for ngram/suffix/mtp)."
    )
    num_speculative_tokens: int = Field(ge=1, le=16, description="Draft length k.")
    prompt_lookup_min: int | None = Field(
        None, ge=1, le=64, description="ngram only: shortest n-gram matched in the prompt."
    )
    prompt_lookup_max: int | None = Field(
        None, ge=1, le=64, description="ngram only: longest n-gram matched in the prompt."
    )
    extra: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="More vLLM --speculative-config keys, passed through as given, e.g. "
        "{draft_tensor_parallel_size: 1}; not the ones tpwarden sets ("
        + ", ".join(DRAFTER_SETS)
        + ").",
    )

    @field_validator("extra")
    @classmethod
    def _extra(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        for key in value:
            if key in DRAFTER_SETS:
                raise ValueError(
                    f"{key} is set by tpwarden: use {DRAFTER_SETS[key]} (tpwarden sets "
                    f"{', '.join(DRAFTER_SETS)} itself)"
                )
            if not re.fullmatch(r"[a-z_][a-z0-9_]*", key):
                raise ValueError(f"{key!r} is not a --speculative-config key (lower_snake_case)")
        return value

    @model_validator(mode="after")
    def _lookup(self) -> DrafterSpec:
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max)
        if self.method != "ngram" and lookup != (None, None):
            raise ValueError("prompt_lookup_min/max apply to method ngram only")
        if None not in lookup and lookup[0] > lookup[1]:  # type: ignore[operator]
            raise ValueError("prompt_lookup_min must not exceed prompt_lookup_max")
        return self


class ParallelSpec(_Model):
    tensor: int = Field(ge=1, le=1024, description="Tensor-parallel size: nodes x gpus_per_node.")
    gpus_per_node: int = Field(1, ge=1, le=16, description="GPUs on each node.")
    backend: Literal["native", "ray"] = Field(
        "native", description="native: vLLM --nnodes/--headless; ray: ray start + ray backend."
    )
    master_port: int = Field(
        29501, ge=1, le=65535, description="torch.distributed / Ray port on the head."
    )


class KvCacheSpec(_Model):
    dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"] = Field(
        "auto", description="vLLM --kv-cache-dtype."
    )
    memory: ByteSize | None = Field(
        None, description="KV cache per GPU (--kv-cache-memory-bytes), e.g. 16GiB."
    )

    @property
    def memory_bytes(self) -> int | None:
        return self.memory


class SecretRef(_Model):
    """Where a secret lives: an env var on the control machine or a root-only file on each node.
    Never the value itself."""

    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: str | None = Field(None, pattern=r"^/")

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: NAME or file: /absolute/path")
        return self


class SecretsSpec(_Model):
    hf_token: SecretRef | None = Field(
        None, description="Hugging Face token (container env HF_TOKEN)."
    )
    api_key: SecretRef | None = Field(
        None,
        description="API key clients must send (a 0600 file on the head, mounted read-only "
        "and read into VLLM_API_KEY when vLLM starts: never in the container's env).",
    )


class SshSpec(_Model):
    known_hosts: str | None = Field(
        None,
        description="known_hosts file for every hop (default: UserKnownHostsFile from "
        "ansible_ssh_common_args, else ~/.ssh/known_hosts).",
    )
    connect_timeout_s: float = Field(5.0, ge=0.5, le=120, description="SSH connect timeout.")
    allow_unknown_hosts: bool = Field(
        False, description="Accept unknown host keys (not recommended)."
    )


class WatchdogSpec(_Model):
    interval_s: float = Field(120, ge=1, le=86400, description="Seconds between probes.")
    timeout_s: float = Field(120, ge=1, le=3600, description="Probe timeout.")
    failures: int = Field(
        3, ge=1, le=100, description="Consecutive counted failures before a restart."
    )
    boot_deadline_s: float = Field(
        2400, ge=10, le=86400, description="Boot grace after a restart (extended by progress)."
    )
    max_restarts: int = Field(2, ge=0, le=100, description="Automatic restarts allowed per window.")
    restart_window_s: float = Field(
        21600, ge=1, le=30 * 86400, description="Window for max_restarts (>= boot_deadline_s)."
    )
    alert_command: list[str] | None = Field(
        None, description="argv run once per incident (JSON on stdin)."
    )
    alert_webhook: str | SecretRef | None = Field(
        None,
        repr=False,  # the URL often carries a token
        description="http(s) URL POSTed once per incident, or where to read it (env: NAME or "
        "file: /path, read where the watchdog runs) when the URL carries a token.",
    )
    alert_webhook_format: Literal["tpwarden", "alertmanager"] = Field(
        "tpwarden",
        description="Body of the webhook POST: tpwarden's incident record, or Alertmanager's "
        "webhook payload (version 4; same alertname/severity as the Prometheus rules).",
    )
    alert_on_restart: bool = Field(
        False,
        description="Also alert (once per incident, category restarted) when the watchdog "
        "restarts the server, not only when it gives up or a restart fails.",
    )
    metrics_host: HostOrAddress = Field(
        "127.0.0.1", description="Listen address of the watchdog's /metrics."
    )
    metrics_port: int = Field(9410, ge=1, le=65535, description="Port of the watchdog's /metrics.")
    state_dir: UnitPath = Field(
        "/var/lib/tpwarden/watchdog", description="State, lock and event log."
    )

    @field_validator("alert_webhook", mode="before")
    @classmethod
    def _webhook_url(cls, value: object) -> object:
        # one message for the form given (a union would report both members' errors)
        if isinstance(value, dict):
            try:
                return SecretRef.model_validate(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                message = first["msg"].removeprefix("Value error, ")
                raise ValueError(f"{where}: {message}" if where else message) from None
        return http_url(value) if isinstance(value, str) else value

    @field_validator("restart_window_s")
    @classmethod
    def _window_covers_a_boot(cls, value: float, info: ValidationInfo[object]) -> float:
        # max_restarts per window is the restart budget; a window shorter than one boot lets
        # every restart leave the window before the next, so the budget would never run out
        deadline = info.data.get("boot_deadline_s")
        if deadline is not None and value < deadline:
            raise ValueError(
                f"{value:g} s is shorter than boot_deadline_s ({deadline:g} s), so "
                f"max_restarts would never be reached; make it at least {deadline:g}"
            )
        return value


class ThermalSpec(_Model):
    interval_s: float = Field(10, ge=1, le=3600, description="Sampling interval.")
    dir: UnitPath = Field(THERMAL_DIR, description="Where each node's agent writes samples.")
    disk_budget_mb: int = Field(
        THERMAL_BUDGET_MB, ge=1, description="Most disk the samples may use per node."
    )
    metrics_host: HostOrAddress = Field(
        THERMAL_METRICS_HOST, description="Listen address of the agent's /metrics."
    )
    metrics_port: int = Field(
        THERMAL_METRICS_PORT, ge=1, le=65535, description="Port of the agent's /metrics."
    )
    alert_margin_c: float = Field(
        10, ge=0, description="Alert when a zone is this close to its critical trip."
    )
    # Zone roles (issue 20): every GB10 zone reports type "acpitz", so the report cannot tell
    # the GPU zone from the P-cores without a map. No public source documents GB10's zone
    # layout (docs/reference thermal.md), so there is no default: `tpwarden thermal zones`
    # helps write one. Keys: a zone index ("3"), a zone name ("thermal_zone3") or a type.
    zone_roles: dict[str, str] = Field(
        default_factory=dict,
        description='Zone index, name or type -> role name, e.g. {"3": "P-cores", "5": "GPU zone"}.',
    )


class BenchSpec(_Model):
    client_image: NoFlag | None = Field(
        None, description="Image of the CPU-only benchmark client (default: the serving image)."
    )
    num_prompts: int = Field(20, ge=1, description="Prompts per concurrency level.")
    output_len: int = Field(
        BENCH_OUTPUT_LEN, ge=1, description="Output tokens per request (--ignore-eos)."
    )


class EvalSpec(_Model):
    """`tpwarden eval` (lm-evaluation-harness from the client container)."""

    num_concurrent: int = Field(16, ge=1, le=256, description="Concurrent requests per task.")
    client_image: str | None = Field(
        None, description="Client image with lm_eval 0.4.13 (default: the bench client image)."
    )
    hf_cache: str | None = Field(
        None, description="Head-side HF cache with pre-fetched datasets (mounted as HF_HOME)."
    )


class TpwardenSettings(_Model):
    """Everything under `all.vars.tpwarden` in the inventory."""

    cluster_name: str = Field(
        "tpwarden", pattern=r"^[a-z0-9][a-z0-9-]{0,30}$", description="Label and name prefix."
    )
    image: NoFlag = Field(
        min_length=1, description="Serving container image (the custom vLLM build)."
    )
    vllm_version: str = Field(
        min_length=1,
        description="vLLM version inside the image, PEP 440 (0.33.0, 0.33.0+sm121, "
        "0.34.0.dev12+g1234abc). Flags are checked against the table fetched from the image "
        "(`tpwarden flags fetch`, also run by provision), else the shipped table of exactly "
        "this version (0.32.0, 0.33.0).",
    )
    model: ModelSpec
    drafter: DrafterSpec | None = Field(None, description="Speculative drafter; null for none.")
    parallel: ParallelSpec
    kv_cache: KvCacheSpec = KvCacheSpec()
    max_model_len: int | None = Field(None, ge=1, description="--max-model-len.")
    enforce_eager: bool = Field(
        False, description="--enforce-eager (no CUDA graphs, no torch.compile)."
    )
    chat_template_kwargs: JSONObject = Field(
        default_factory=dict,
        description="--default-chat-template-kwargs, e.g. {enable_thinking: false}.",
    )
    gpu_clock_cap_mhz: int | None = Field(
        None, ge=200, le=5000, description="GPU clock cap applied via NVML."
    )
    host: str = Field("127.0.0.1", description="Address the head's API server listens on.")
    port: int = Field(8000, ge=1, le=65535, description="API port on the head.")
    shm_size: str = Field(
        "10g", pattern=r"^\d+[bkmg]?$", description="Container /dev/shm size (docker syntax)."
    )
    ipc_mode: Literal["host", "private"] = Field(
        "host",
        description="Container IPC namespace: host (the node's /dev/shm) or private (its own, "
        "shm_size). Use private when several 'nodes' share one kernel (the lab's real engine).",
    )
    gpus: Literal["all", "none"] = Field("all", description="GPU request of the serving container.")
    env: dict[str, str | int] = Field(
        default_factory=dict, description="Extra container environment."
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra `vllm serve` flags.")
    container: ContainerSpec = Field(
        default_factory=ContainerSpec,
        description="Devices, capabilities, ulimits, mounts of the serving containers.",
    )
    secrets: SecretsSpec = SecretsSpec()
    ssh: SshSpec = SshSpec()
    watchdog: WatchdogSpec = WatchdogSpec()
    thermal: ThermalSpec = ThermalSpec()
    bench: BenchSpec = BenchSpec()
    eval: EvalSpec = EvalSpec()
    report: ReportSpec = ReportSpec()
    memory: MemorySpec = MemorySpec()
    fabric: FabricSpec = FabricSpec()
    ledger: LedgerSpec = LedgerSpec()

    @field_validator("vllm_version")
    @classmethod
    def _pep440(cls, value: str) -> str:
        parse_version(value)  # ValueError says the accepted forms
        return value

    @field_validator("host")
    @classmethod
    def _ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IP address (e.g. 0.0.0.0 or 127.0.0.1)") from exc
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
            if _SECRETISH_NAME.search(name):
                raise ValueError(
                    f"{name} looks like a secret: reference it under tpwarden.secrets instead"
                )
        return value
