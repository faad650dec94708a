"""Ansible-format YAML inventory -> `ClusterSpec`, validated once.

Every error names the file, the line, the key and a fix, and is raised before anything touches a
node. The inventory is an ordinary Ansible inventory: group `head` holds exactly one host, group
`workers` the others; serving settings live under `all.vars.servectl`.
"""

from __future__ import annotations

import difflib
import ipaddress
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError
from servectl.cluster.errors import ConfigError
from servectl.cluster.spec import (
    ClusterSpec,
    NodeSpec,
    ServectlSettings,
    looks_like_secret,
    serving_from_settings,
)

# Flag tables of `vllm serve`, one per vLLM version (also read by launch.flag_table).
_FLAG_TABLES = Path(__file__).parent / "data"
_HOST_KEYS_USED = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_ssh_private_key_file",
    "vllm_host_ip",
)


class _Doc:
    """The parsed YAML plus a way to find the line of any key path."""

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        self.data = data

    def line_of(self, node: Any, key: Any = None) -> int | None:
        try:
            if key is None:
                return node.lc.line + 1
            if isinstance(node, CommentedMap):
                return node.lc.key(key)[0] + 1
            if isinstance(node, CommentedSeq):
                return node.lc.item(key)[0] + 1
        except (AttributeError, KeyError, IndexError, TypeError):
            return None
        return None

    def error(
        self,
        message: str,
        node: Any = None,
        key: Any = None,
        *,
        dotted: str | None = None,
        hint: str | None = None,
    ) -> ConfigError:
        return ConfigError(
            message,
            file=self.path,
            line=self.line_of(node, key) if node is not None else None,
            key=dotted,
            hint=hint,
        )


def load_inventory(path: str | Path) -> ClusterSpec:
    """Read and validate an inventory file. Raises ConfigError (exit status 2) on any problem."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "file not found", file=path, hint="pass -i with an existing inventory"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=path) from None
    return parse_inventory(text, path)


def parse_inventory(text: str, path: str = "<inventory>") -> ClusterSpec:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        data = yaml.load(text)
    except DuplicateKeyError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        key = _duplicate_key_name(exc)
        raise ConfigError(
            "duplicate key",
            file=path,
            line=line,
            key=key,
            hint="each key may appear once per mapping",
        ) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(
            f"YAML syntax error: {exc.problem or exc.context}",
            file=path,
            line=line,
            hint="check indentation and quoting",
        ) from None
    doc = _Doc(path, data)
    if not isinstance(data, CommentedMap):
        raise ConfigError(
            "the inventory must be a YAML mapping of groups (start with `all:`)", file=path, line=1
        )
    groups = _collect_groups(doc)
    settings, settings_node = _settings(doc)
    nodes = _nodes(doc, groups, settings)
    if settings.parallel.tensor != len(nodes) * settings.parallel.gpus_per_node:
        raise doc.error(
            f"tensor size {settings.parallel.tensor} does not match {len(nodes)} nodes x "
            f"{settings.parallel.gpus_per_node} GPU(s) per node",
            settings_node["parallel"],
            "tensor",
            dotted="servectl.parallel.tensor",
            hint=f"set it to {len(nodes) * settings.parallel.gpus_per_node} or change the node list",
        )
    return ClusterSpec(
        name=settings.cluster_name,
        nodes=tuple(nodes),
        serving=serving_from_settings(settings),
        secrets=settings.secrets,
        ssh=settings.ssh,
        watchdog=settings.watchdog,
        thermal=settings.thermal,
        source_file=path,
        settings=settings,
    )


def _duplicate_key_name(exc: DuplicateKeyError) -> str | None:
    problem = str(exc.problem or "")
    if '"' in problem:
        return problem.split('"')[1]
    return None


# --- groups and hosts --------------------------------------------------------------------------


class _Group:
    def __init__(self, name: str, node: CommentedMap | None) -> None:
        self.name = name
        self.node = node
        self.hosts: dict[str, Any] = {}
        self.host_nodes: dict[str, CommentedMap] = {}
        self.vars: CommentedMap | dict = {}
        self.children: list[str] = []
        self.parents: list[str] = []


def _collect_groups(doc: _Doc) -> dict[str, _Group]:
    groups: dict[str, _Group] = {}

    def visit(name: str, node: Any, parent: str | None, container: Any) -> None:
        if node is not None and not isinstance(node, CommentedMap):
            raise doc.error(
                "a group must be a mapping with hosts/children/vars", container, name, dotted=name
            )
        group = groups.setdefault(name, _Group(name, node))
        if parent:
            group.parents.append(parent)
        if node is None:
            return
        for key in node:
            if key not in ("hosts", "children", "vars"):
                close = difflib.get_close_matches(str(key), ["hosts", "children", "vars"], n=1)
                raise doc.error(
                    f"unknown group key {key!r}",
                    node,
                    key,
                    dotted=f"{name}.{key}",
                    hint=f"did you mean {close[0]!r}?"
                    if close
                    else "a group has hosts, children and vars",
                )
        hosts = node.get("hosts") or {}
        if not isinstance(hosts, dict):
            raise doc.error(
                "hosts must be a mapping of host names", node, "hosts", dotted=f"{name}.hosts"
            )
        for host, hvars in hosts.items():
            if hvars is not None and not isinstance(hvars, dict):
                raise doc.error(
                    "host vars must be a mapping", hosts, host, dotted=f"{name}.hosts.{host}"
                )
            group.hosts[str(host)] = hvars or {}
            group.host_nodes[str(host)] = hosts
        gvars = node.get("vars") or {}
        if not isinstance(gvars, dict):
            raise doc.error("vars must be a mapping", node, "vars", dotted=f"{name}.vars")
        group.vars = gvars
        if "servectl" in gvars and name != "all":
            raise doc.error(
                "servectl settings belong under all.vars",
                gvars,
                "servectl",
                dotted=f"{name}.vars.servectl",
                hint="move this block to all.vars.servectl",
            )
        children = node.get("children") or {}
        if not isinstance(children, dict):
            raise doc.error(
                "children must be a mapping of groups", node, "children", dotted=f"{name}.children"
            )
        for child, cnode in children.items():
            group.children.append(str(child))
            visit(str(child), cnode, name, children)

    for top, node in doc.data.items():
        visit(str(top), node, None, doc.data)
    return groups


def _settings(doc: _Doc) -> tuple[ServectlSettings, CommentedMap]:
    all_node = doc.data.get("all")
    all_vars = all_node.get("vars") if isinstance(all_node, CommentedMap) else None
    raw = all_vars.get("servectl") if isinstance(all_vars, CommentedMap) else None
    if raw is None:
        raise ConfigError(
            "missing the servectl settings",
            file=doc.path,
            line=doc.line_of(all_node) if all_node is not None else 1,
            key="all.vars.servectl",
            hint="copy the block from inventory.example.yml",
        )
    if not isinstance(raw, CommentedMap):
        raise doc.error("must be a mapping", all_vars, "servectl", dotted="all.vars.servectl")
    _check_strings(doc, raw, "servectl")
    try:
        settings = ServectlSettings.model_validate(_plain(raw))
    except ValidationError as exc:
        raise _translate(doc, raw, exc) from None
    _cross_checks(doc, raw, settings)
    return settings, raw


def known_vllm_versions() -> list[str]:
    """Versions with a `vllm serve` flag table in cluster/data (tools/vllm/dump_serve_flags.py)."""
    names = _FLAG_TABLES.glob("vllm_serve_flags_*.json")
    return sorted(p.stem.removeprefix("vllm_serve_flags_") for p in names)


def _cross_checks(doc: _Doc, raw: CommentedMap, s: ServectlSettings) -> None:
    if s.port == s.parallel.master_port:
        raise doc.error(
            f"port {s.port} is also parallel.master_port",
            raw if "port" in raw else raw["parallel"],
            "port" if "port" in raw else "master_port",
            dotted="servectl.port",
            hint="the API port and the rendezvous port must differ",
        )
    if (
        s.drafter
        and s.drafter.method in ("dflash", "eagle", "eagle3", "draft_model")
        and not s.drafter.path
    ):
        raise doc.error(
            f"drafter.path is required for method {s.drafter.method}",
            raw,
            "drafter",
            dotted="servectl.drafter.path",
            hint="point it at the drafter's model directory",
        )

    known = known_vllm_versions()
    if s.vllm_version not in known:
        # The plan checks every rendered flag against this version's own parser; without its
        # table nothing could be checked, so refuse rather than start an unchecked argv.
        raise doc.error(
            f"vLLM {s.vllm_version} has no flag table",
            raw,
            "vllm_version",
            dotted="servectl.vllm_version",
            hint=f"one of {', '.join(known)}, or make its table with "
            "tools/vllm/dump_serve_flags.py from that version's parser",
        )


def _nodes(doc: _Doc, groups: dict[str, _Group], settings: ServectlSettings) -> list[NodeSpec]:
    head = groups.get("head")
    workers = groups.get("workers")
    if head is None or not head.hosts:
        raise ConfigError(
            "no head node",
            file=doc.path,
            line=1,
            key="head",
            hint="add a group `head` with exactly one host under all.children",
        )
    if len(head.hosts) > 1:
        extra = list(head.hosts)[1]
        raise doc.error(
            f"group head has {len(head.hosts)} hosts ({', '.join(head.hosts)})",
            head.host_nodes[extra],
            extra,
            dotted="head.hosts",
            hint="exactly one host is the head; move the others to workers",
        )
    head_name = next(iter(head.hosts))
    worker_names = list(workers.hosts) if workers else []
    if head_name in worker_names:
        raise doc.error(
            f"{head_name} is both head and worker",
            workers.host_nodes[head_name],
            head_name,
            dotted=f"workers.hosts.{head_name}",
            hint="list it only under head",
        )
    all_vars = groups["all"].vars if "all" in groups else {}
    nodes = []
    seen_addresses: dict[tuple[str, int], str] = {}
    for rank, name in enumerate([head_name, *worker_names]):
        group = head if rank == 0 else workers
        hvars = group.hosts[name]
        where = group.host_nodes[name]
        _check_strings(doc, hvars, f"{group.name}.hosts.{name}")

        def var(key: str, default: Any = None, hvars: Any = hvars, group: Any = group) -> Any:
            if isinstance(hvars, dict) and key in hvars:
                return hvars[key]
            for gname in (group.name, "all"):
                gvars = groups[gname].vars if gname in groups else {}
                if isinstance(gvars, dict) and key in gvars:
                    return gvars[key]
            return default

        host = var("ansible_host", name)
        port = var("ansible_port", 22)
        user = var("ansible_user", "root")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise doc.error(
                f"ansible_port {port!r} is not a port (1-65535)",
                hvars if "ansible_port" in hvars else where,
                "ansible_port" if "ansible_port" in hvars else name,
                dotted=f"{name}.ansible_port",
            )
        if not isinstance(host, str) or not host:
            raise doc.error(
                "ansible_host must be a host name or address",
                hvars,
                "ansible_host",
                dotted=f"{name}.ansible_host",
            )
        vllm_ip = var("vllm_host_ip", host)
        try:
            ipaddress.ip_address(vllm_ip)
        except ValueError:
            line_node, line_key = (
                (hvars, "vllm_host_ip") if "vllm_host_ip" in hvars else (where, name)
            )
            raise doc.error(
                f"vllm_host_ip {vllm_ip!r} is not an IP address",
                line_node,
                line_key,
                dotted=f"{name}.vllm_host_ip",
                hint="set vllm_host_ip to the address NCCL and vLLM should use",
            ) from None
        if (host, port) in seen_addresses:
            raise doc.error(
                f"{name} has the same address as {seen_addresses[(host, port)]}",
                hvars if "ansible_host" in hvars else where,
                "ansible_host" if "ansible_host" in hvars else name,
                dotted=f"{name}.ansible_host",
            )
        seen_addresses[(host, port)] = name
        key_file = var("ansible_ssh_private_key_file")
        become = bool(var("ansible_become", False))
        nodes.append(
            NodeSpec(
                name=name,
                role="head" if rank == 0 else "worker",
                rank=rank,
                ssh_host=str(host),
                ssh_port=int(port),
                ssh_user=str(user),
                ssh_key_file=str(key_file) if key_file else None,
                vllm_host_ip=str(vllm_ip),
                become=become,
            )
        )
    del all_vars
    return nodes


# --- validation helpers --------------------------------------------------------------------------


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _check_strings(doc: _Doc, node: Any, dotted: str) -> None:
    """Reject values that would break a command line or that are secrets written inline."""
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else []
    )
    for key, value in items:
        path = f"{dotted}.{key}"
        if isinstance(value, (dict, list)):
            _check_strings(doc, value, path)
        elif isinstance(value, str):
            if "\n" in value or "\r" in value or "\x00" in value:
                raise doc.error(
                    "value contains a newline or NUL, which would break a command line",
                    node,
                    key,
                    dotted=path,
                    hint="use a single-line value",
                )
            if looks_like_secret(value):
                raise doc.error(
                    "value looks like a secret written inline",
                    node,
                    key,
                    dotted=path,
                    hint="store it in a file or env var and reference it under servectl.secrets",
                )


def _translate(doc: _Doc, raw: CommentedMap, exc: ValidationError) -> ConfigError:
    errors = exc.errors()
    # An unknown key often also makes a required one "missing": report the typo, it is the cause.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    # Union members add their type name to loc (e.g. 'str', 'int'); keep only real keys.
    loc = _real_path(raw, loc)
    node, key = _locate(raw, loc)
    dotted = "servectl" + "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        fields = _fields_at(ServectlSettings, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(fields)}"
        return doc.error("unknown key", node, key, dotted=dotted, hint=hint)
    if kind == "missing":
        return doc.error(
            "required key is missing", node, key, dotted=dotted, hint="see inventory.example.yml"
        )
    message = err["msg"].removeprefix("Value error, ")
    hint = None
    if kind.endswith("_type"):
        hint = _hint_for(err)
    elif kind == "string_pattern_mismatch":
        hint = "see inventory.example.yml for the expected form"
    if kind == "string_type" and dotted.startswith("servectl.env."):
        hint = 'environment values are strings: quote it, e.g. "0"'
    return doc.error(message, node, key, dotted=dotted, hint=hint)


def _real_path(raw: Any, loc: list[Any]) -> list[Any]:
    path: list[Any] = []
    node = raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
        elif (
            isinstance(node, dict)
            and isinstance(part, str)
            and part not in node
            and part == loc[len(path)]
        ):
            # a missing or unknown key: keep it as the last element
            if part in _TYPE_TAGS:
                continue
            path.append(part)
            break
    return path


_TYPE_TAGS = {
    "str",
    "int",
    "float",
    "bool",
    "list[str]",
    "dict[str,any]",
    "none",
    "literal",
    "function-after",
}


def _locate(raw: CommentedMap, loc: list[Any]) -> tuple[Any, Any]:
    node: Any = raw
    parent, key = raw, None
    for part in loc:
        if isinstance(node, (dict, list)) and (
            part in node if isinstance(node, dict) else isinstance(part, int) and part < len(node)
        ):
            parent, key = node, part
            node = node[part]
        else:
            return node, None
    return parent, key


def _fields_at(model: type[BaseModel], loc: list[Any]) -> list[str]:
    current: Any = model
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


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _hint_for(err: dict[str, Any]) -> str | None:
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        return f"expected {ctx['expected']}"
    kind = err["type"]
    return {
        "int_type": "expected a whole number (no quotes)",
        "string_type": "expected a string",
        "bool_type": "expected true or false",
        "float_type": "expected a number",
        "list_type": "expected a list",
        "dict_type": "expected a mapping",
        "model_type": "expected a mapping",
    }.get(kind)
