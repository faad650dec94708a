"""What actually runs, as key/value rows: pure functions from what the nodes and the engine said.

A fingerprint is a set of `KeyValue` rows, per node (the node's name) or for the cluster and the
engine (`CLUSTER`, '*'). Keys (docs/ledger.md lists them):

* per rank, from `docker inspect` of its serving container: `argv.command` (what runs, e.g.
  `vllm serve /models/glm`), `argv.wrapper` (the API key wrapper, if any), `flag.--NAME` (each
  flag's value, "true" for a switch), `env.NAME` (secrets redacted as the plan redacts them: a
  secret the plan injects reads `<secret from file ...>`, anything else that looks like one
  `<redacted>`), `image.id`, `image.digest`;
* per node, from the collector (NVML, /proc): `gpu.name`, `gpu.clock_cap_mhz` (the node's
  record of the lock call's answer: NVML has no read-back), `gpu.sm_clock_max_mhz`,
  `gpu.power_limit_w`, `nvidia.driver`, `nvidia.cuda`, `kernel`, `os`, `memory.total_bytes`,
  `cpu.count`;
* for the engine ('*'): `vllm.version` (GET /version), `engine.kv.<label>` (every label of
  `vllm:cache_config_info`) and `engine.kv.tokens` (blocks x block size), `engine.drafter.method`
  and `engine.drafter.k` (from the head's `--speculative-config`), `flag_table.sha256`,
  `setting.<path>` (the inventory's serving settings as applied, for revert plans).

`config_id` hashes every row: `cfg:` and 12 hex digits names a configuration. Values are text
(`value_text`); None is a reading that failed (its reason goes in the record's `missing`).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.ledger.tables import KeyValue
from tpwarden.cluster.secrets import redact_argv

CLUSTER = "*"


def value_text(value: JSONValue) -> str | None:
    """One value as the ledger stores it: text; numbers without a spurious `.0`; lists and
    objects as compact sorted JSON; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_id(rows: Iterable[KeyValue]) -> str:
    """`cfg:` + 12 hex of the sorted rows: the name of a configuration."""
    blob = json.dumps([[r.node, r.key, r.value] for r in sorted(rows)], separators=(",", ":"))
    return "cfg:" + hashlib.sha256(blob.encode()).hexdigest()[:12]


def _serve_index(argv: Sequence[str]) -> int | None:
    for i in range(1, len(argv)):
        if argv[i] == "serve" and posixpath.basename(argv[i - 1]) == "vllm":
            return i - 1
    return None


def argv_rows(argv: Sequence[str]) -> dict[str, str | None]:
    """A rank's argv as rows: the command, the wrapper before `vllm serve`, and each flag with
    its value (`--flag value`, `--flag=value`, or "true" for a switch). Secret values are
    redacted first (`redact_argv`); a flag given twice keeps every value, as a JSON list."""
    argv = redact_argv(argv)
    start = _serve_index(argv)
    rows: dict[str, str | None] = {}
    if start is not None and start > 0:
        rows["argv.wrapper"] = value_text(list(argv[:start]))
    body = list(argv[start or 0 :])
    first_flag = next((i for i, a in enumerate(body) if a.startswith("-")), len(body))
    rows["argv.command"] = " ".join(body[:first_flag])
    flags: dict[str, list[str]] = {}
    i = first_flag
    while i < len(body):
        arg = body[i]
        if not arg.startswith("-"):  # a stray positional after the flags
            flags.setdefault("argv.positional", []).append(arg)
            i += 1
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            nxt = body[i + 1] if i + 1 < len(body) else None
            if nxt is not None and not (
                nxt.startswith("--") or (nxt.startswith("-") and nxt[1:2].isalpha())
            ):
                value, i = nxt, i + 1
            else:
                value = "true"
        flags.setdefault(f"flag.{name}", []).append(value)
        i += 1
    for key, values in flags.items():
        rows[key] = values[0] if len(values) == 1 else value_text(values)
    return rows


def env_rows(env: Sequence[str], secret_text: Mapping[str, str]) -> dict[str, str | None]:
    """`NAME=VALUE` entries as `env.NAME` rows. A variable the plan fills from a secret reads as
    the plan shows it (`secret_text`: name -> `<secret from ...>`); any other value that looks
    like a secret is `<redacted>` (`redact_argv`, the plan's and the dossier's rules)."""
    rows: dict[str, str | None] = {}
    for item in env:
        name, eq, _ = item.partition("=")
        if not eq:
            continue
        if name in secret_text:
            rows[f"env.{name}"] = secret_text[name]
        else:
            rows[f"env.{name}"] = redact_argv([item])[0].partition("=")[2]
    return rows


def cache_config_rows(labels: Mapping[str, str]) -> dict[str, str | None]:
    """`vllm:cache_config_info`'s labels as `engine.kv.<label>` rows ("None" is kept as vLLM
    writes it), and `engine.kv.tokens` = num_gpu_blocks x block_size when both are numbers."""
    rows: dict[str, str | None] = {
        f"engine.kv.{k}": v for k, v in sorted(labels.items()) if k not in ("engine", "model_name")
    }
    try:
        rows["engine.kv.tokens"] = str(int(labels["num_gpu_blocks"]) * int(labels["block_size"]))
    except (KeyError, ValueError):
        pass
    return rows


def drafter_rows(flags: Mapping[str, str | None]) -> dict[str, str | None]:
    """The drafter's method and k from a `--speculative-config` JSON value ('none' without)."""
    raw = flags.get("flag.--speculative-config")
    if raw is None:
        return {"engine.drafter.method": "none", "engine.drafter.k": None}
    try:
        doc = json.loads(raw)
    except ValueError:
        return {"engine.drafter.method": None, "engine.drafter.k": None}
    if not isinstance(doc, dict):
        return {"engine.drafter.method": None, "engine.drafter.k": None}
    return {
        "engine.drafter.method": value_text(doc.get("method")),
        "engine.drafter.k": value_text(doc.get("num_speculative_tokens")),
    }


def flatten(doc: JSONValue, prefix: str) -> dict[str, str | None]:
    """Nested settings -> `prefix.a.b` rows (lists stay one JSON value)."""
    if isinstance(doc, Mapping):
        out: dict[str, str | None] = {}
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}.{k}"))
        return out
    return {prefix: value_text(doc)}


def node_fact_rows(shown: Mapping[str, JSONValue]) -> dict[str, str | None]:
    """The collector's `show` document -> the node's configuration rows. One GPU per node (GB10)
    gives `gpu.<field>`; several give `gpu<i>.<field>`."""
    nvml = shown.get("nvml") or {}
    mem = shown.get("memory") or {}
    rows: dict[str, str | None] = {
        "nvidia.driver": value_text(nvml.get("driver_version")),
        "nvidia.cuda": value_text(nvml.get("cuda_driver_version")),
        "kernel": value_text(shown.get("kernel")),
        "os": value_text(shown.get("os")),
        "cpu.count": value_text(shown.get("cpu_count")),
        "memory.total_bytes": value_text(mem.get("total_bytes")),
    }
    gpus = [g for g in shown.get("gpus") or [] if isinstance(g, Mapping)]
    for g in gpus:
        tag = "gpu" if len(gpus) == 1 else f"gpu{g.get('index')}"
        rows[f"{tag}.name"] = value_text(g.get("name"))
        rows[f"{tag}.clock_cap_mhz"] = value_text(g.get("locked_clock_max_mhz"))
        rows[f"{tag}.sm_clock_max_mhz"] = value_text(g.get("sm_clock_max_mhz"))
        rows[f"{tag}.power_limit_w"] = value_text(g.get("power_limit_w"))
    return rows


def missing_of(shown: Mapping[str, JSONValue]) -> JSONObject:
    """Why node facts are absent: NVML's state and each GPU field's reason (the record's
    `missing`), so a None row says why."""
    out: JSONObject = {}
    nvml = shown.get("nvml") or {}
    if not nvml.get("available", False):
        out["nvml"] = nvml.get("reason") or nvml.get("state") or "unknown"
    for g in shown.get("gpus") or []:
        for fld, why in (g.get("missing") or {}).items():
            if fld in ("locked_clock_max_mhz", "power_limit_w", "sm_clock_max_mhz", "name"):
                out[f"gpu{g.get('index')}.{fld}"] = why
    if "error" in (shown.get("memory") or {}):
        out["memory"] = shown["memory"]["error"]
    return out


def rows_of(node: str, values: Mapping[str, str | None]) -> list[KeyValue]:
    return [KeyValue(node, k, v) for k, v in sorted(values.items())]


def flag_table_hash(options: Mapping[str, JSONValue] | None) -> str | None:
    if options is None:
        return None
    blob = json.dumps(options, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
