"""Checks on the values of a resolved inventory, and errors located at the line they came from.

Split from `load.py`: these are the rules about *values* (what may reach a command line,
what a secret looks like, which `vllm serve` flags tpwarden manages), the other module is about
*structure* (groups, hosts, where settings live).
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ValidationError
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.flag_tables import FlagChoice, FlagTable, fetch_hint
from tpwarden.cluster.inventory.ansible import PathKey, Resolved, dotted
from tpwarden.cluster.settings import TpwardenSettings, host_or_address, looks_like_secret
from tpwarden.cluster.ssh.route import parse_ssh_args

# Docker container names are [a-zA-Z0-9][a-zA-Z0-9_.-]*; tpwarden names containers
# <cluster>-vllm-<host>, so a host name must fit that alphabet.
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

# `vllm serve` options that tpwarden renders itself from a setting (by argparse dest, so aliases
# such as -tp are caught too). Giving one in extra_args would override or contradict it.
MANAGED_FLAGS = {
    "model": "tpwarden.model.path",
    "tensor_parallel_size": "tpwarden.parallel.tensor",
    "nnodes": "the head and workers groups (tpwarden sets it)",
    "node_rank": "the head and workers groups (tpwarden sets it)",
    "master_addr": "the head's vllm_host_ip (tpwarden sets it)",
    "master_port": "tpwarden.parallel.master_port",
    "headless": "the workers group (tpwarden sets it)",
    "distributed_executor_backend": "tpwarden.parallel.backend",
    "quantization": "tpwarden.model.quantization",
    "tokenizer": "tpwarden.model.tokenizer",
    "speculative_config": "tpwarden.drafter (more keys: tpwarden.drafter.extra)",
    "kv_cache_dtype": "tpwarden.kv_cache.dtype",
    "kv_cache_memory_bytes": "tpwarden.kv_cache.memory",
    "max_model_len": "tpwarden.max_model_len",
    "enforce_eager": "tpwarden.enforce_eager",
    "served_model_name": "tpwarden.model.served_name",
    "default_chat_template_kwargs": "tpwarden.chat_template_kwargs",
    "host": "tpwarden.host",
    "port": "tpwarden.port",
}
SECRET_FLAGS = {"api_key": "tpwarden.secrets.api_key", "hf_token": "tpwarden.secrets.hf_token"}
# Any other option whose value is a token or key (by argparse dest: --hf-token, --api-key, a
# future --foo-secret) is refused too; --ssl-keyfile (a path) and --max-num-batched-tokens are not.
_SECRET_DEST = re.compile(r"(^|_)(token|key|secret|password|passwd)$")


def located(
    inv: Resolved,
    path: PathKey,
    message: str,
    *,
    key: str | None = None,
    hint: str | None = None,
) -> ConfigError:
    """A ConfigError at the file and line the value at `path` came from."""
    file, line = inv.loc(path)
    return ConfigError(message, file=file, line=line, key=key or dotted(path), hint=hint)


def check_host_name(inv: Resolved, name: str) -> None:
    if not _HOST_NAME.match(name):
        raise located(
            inv,
            (name,),
            f"host name {name!r} cannot be part of a container name",
            key=name,
            hint="use letters, digits, '.', '_' and '-', starting with a letter or digit; "
            "put the address in ansible_host",
        )


def check_address(inv: Resolved, path: PathKey, value: JSONValue, *, hint: str) -> None:
    """A host var that must be a host name or IP address (it reaches ssh argv and sockets)."""
    try:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a host name or IP address")
        host_or_address(value)
    except ValueError as exc:
        raise located(inv, path, str(exc), hint=hint) from None


_CHECKING_OFF = ("no", "off", "false", "accept-new")


def check_host_key_checking(inv: Resolved, name: str, hvars: Mapping[str, JSONValue]) -> None:
    """Refuse host vars that would make Ansible accept unknown host keys: `tpwarden provision`
    turns checking on (ANSIBLE_HOST_KEY_CHECKING=True), but inventory variables outrank it."""
    for var in ("ansible_host_key_checking", "ansible_ssh_host_key_checking"):
        value = hvars.get(var)
        if value is not None and str(value).strip().lower() in (*_CHECKING_OFF, "0"):
            raise located(
                inv,
                (name, var),
                f"{var} turns host-key checking off",
                hint="remove it and list the nodes' keys in a known_hosts file "
                "(docs/real-cluster.md, section 2)",
            )
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        value = str(hvars.get(var) or "")
        strict = parse_ssh_args(value).get("stricthostkeychecking", "")
        if strict.lower() in _CHECKING_OFF:
            raise located(
                inv,
                (name, var),
                f"StrictHostKeyChecking={strict} accepts unknown host keys",
                hint="use StrictHostKeyChecking=yes (or leave it out) and list the nodes' keys "
                "in a known_hosts file (docs/real-cluster.md, section 2)",
            )


def check_strings(inv: Resolved, node: JSONValue, path: PathKey) -> None:
    """Reject values that would break a command line or that are secrets written inline."""
    if isinstance(node, dict):
        items: Iterable[tuple[str | int, JSONValue]] = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for key, value in items:
        here = (*path, key)
        if isinstance(value, (dict, list)):
            check_strings(inv, value, here)
        elif isinstance(value, str):
            if "\n" in value or "\r" in value or "\x00" in value:
                raise located(
                    inv,
                    here,
                    "value contains a newline or NUL, which would break a command line",
                    hint="use a single-line value",
                )
            if looks_like_secret(value):
                raise located(
                    inv,
                    here,
                    "value looks like a secret written inline",
                    hint="store it in a file or env var and reference it under tpwarden.secrets",
                )


def flag_table_of(inv: Resolved, choice: FlagChoice, required_by: str | None) -> FlagTable | None:
    """The flag table chosen for this image and version (`flag_tables.resolve`). None when there
    is none or it contradicts the version, unless `required_by` (the inventory path, for the
    fetch command): then a one-line error at the vllm_version line."""
    table, problem = choice
    if problem is None or required_by is None:
        return table  # None: `plan` warns that argv is unchecked
    where = ("tpwarden", "vllm_version")
    raise located(inv, where, problem, key="tpwarden.vllm_version", hint=fetch_hint(required_by))


def check_extra_args(
    inv: Resolved, settings: TpwardenSettings, choice: FlagChoice, required_by: str | None
) -> None:
    """Parse extra_args with the flag table of this image (as `plan` does), refusing unknown
    flags, stray values, flags tpwarden manages, and secrets on the command line."""
    table = flag_table_of(inv, choice, required_by)
    if table is None:
        return
    args = settings.extra_args
    i = 0
    while i < len(args):
        token, where = args[i], ("tpwarden", "extra_args", i)
        if not token.startswith("-"):
            raise located(
                inv,
                where,
                f"{token!r} is not a flag (a value must follow the flag that takes it)",
                hint="write extra_args as flags, e.g. ['--max-num-seqs', '8']",
            )
        flag = token.split("=", 1)[0]
        option = table.get(flag)
        if option is None:
            close = difflib.get_close_matches(flag, list(table.options), n=1)
            raise located(
                inv,
                where,
                f"vLLM {table.version} `vllm serve` has no flag {flag}",
                hint=f"did you mean {close[0]}?" if close else "check the flag's spelling",
            )
        dest = str(option.get("dest"))
        if option["takes_value"] and _SECRET_DEST.search(dest):
            home = SECRET_FLAGS.get(dest, "tpwarden.secrets")
            raise located(
                inv,
                where,
                f"{flag} would put a secret on the command line (visible in ps and plans)",
                hint=f"reference it under {home} as env: NAME or file: /path",
            )
        if dest in MANAGED_FLAGS:
            raise located(
                inv,
                where,
                f"{flag} is managed by tpwarden",
                hint=f"set {MANAGED_FLAGS[dest]} instead",
            )
        i += 1
        if option["takes_value"] and "=" not in token:
            if i >= len(args):
                raise located(inv, where, f"{flag} needs a value", hint="add it after the flag")
            i += 1
            if option.get("nargs") in ("+", "*"):
                while i < len(args) and not args[i].startswith("-"):
                    i += 1


# --- pydantic errors -> located errors ------------------------------------------------------


def translate(inv: Resolved, raw: JSONObject, exc: ValidationError) -> ConfigError:
    errors = exc.errors()
    # An unknown key often also makes a required one "missing": report the typo, it is the cause.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    loc = _real_path(raw, loc)
    path = ("tpwarden", *loc)
    kind = err["type"]
    hint: str | None
    if kind == "extra_forbidden":
        fields = _fields_at(TpwardenSettings, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(fields)}"
        return located(inv, path, "unknown key", hint=hint)
    if kind == "missing":
        return located(inv, path, "required key is missing", hint="see inventory.example.yml")
    message = err["msg"].removeprefix("Value error, ")
    hint = None
    if kind.endswith("_type"):
        hint = _hint_for(err)
    elif kind == "string_pattern_mismatch":
        hint = "see inventory.example.yml for the expected form"
    elif kind == "finite_number":
        hint = "use a finite number of seconds"
    if kind == "string_type" and dotted(path).startswith("tpwarden.env."):
        hint = 'environment values are strings: quote it, e.g. "0"'
    return located(inv, path, message, hint=hint)


_TYPE_TAGS = {"str", "int", "float", "bool", "list[str]", "dict[str,any]", "none", "literal"}


def _real_path(raw: JSONValue, loc: list[JSONValue]) -> list[JSONValue]:
    """Drop the union-member names pydantic adds to a location ('str', 'int'...)."""
    path: list[JSONValue] = []
    node = raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and part not in _TYPE_TAGS:
            path.append(part)  # a missing or unknown key: the last element
            break
    return path


def _fields_at(model: type[BaseModel], loc: list[JSONValue]) -> list[str]:
    current: object = model
    for part in loc:
        if (
            not (isinstance(current, type) and issubclass(current, BaseModel))
            or part not in current.model_fields
        ):
            return []
        current = _model_in(current.model_fields[part].annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _hint_for(err: Mapping[str, JSONValue]) -> str | None:
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        return f"expected {ctx['expected']}"
    return {
        "int_type": "expected a whole number (no quotes)",
        "string_type": "expected a string",
        "bool_type": "expected true or false",
        "float_type": "expected a number",
        "list_type": "expected a list",
        "dict_type": "expected a mapping",
        "model_type": "expected a mapping",
    }.get(err["type"])
