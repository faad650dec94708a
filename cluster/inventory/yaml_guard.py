"""Bounds on the YAML files of an inventory, checked before Ansible reads them.

Ansible's YAML loader expands aliases and recurses into nesting without limit, so a 2.5 KB
"billion laughs" file or a value 5000 levels deep would cost minutes, gigabytes or a
RecursionError inside Ansible. This module reads the same files as a stream of YAML *events*
(no objects are built, no alias is expanded) and refuses, with file:line, a file that is too
large, expands to too many nodes, nests too deep, repeats a key, or is not YAML at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import yaml
from tpwarden.cluster.errors import ConfigError

MAX_FILE_BYTES = 1 << 20  # one inventory file; the example is 2.5 KB
MAX_TOTAL_BYTES = 8 << 20
MAX_NODES = 100_000  # scalars + collections after alias expansion, per file
MAX_DEPTH = 32  # the example nests 4 levels
YAML_SUFFIXES = (".yml", ".yaml", ".json")
_VAULT_HEADER = b"$ANSIBLE_VAULT"
# Ansible's own list of names it skips in an inventory directory (inventory/manager.py)
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig")
_IGNORED_NAMES = ("host_vars", "group_vars", "vars_plugins")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def inventory_files(source: Path) -> Iterator[tuple[Path, bool]]:
    """The files Ansible reads for `source`: (path, must_be_yaml). An inventory file may be INI,
    so only its YAML suffix makes it YAML; group_vars/host_vars files are always YAML."""
    base = source if source.is_dir() else source.parent
    if source.is_dir():
        yield from _source_dir(source)
    else:
        yield source, source.suffix in YAML_SUFFIXES
    for vars_dir in ("group_vars", "host_vars"):
        root = base / vars_dir
        if root.is_dir():
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if not name.startswith(".") and _vars_file(name):
                        yield Path(dirpath) / name, True


def _vars_file(name: str) -> bool:
    suffix = os.path.splitext(name)[1]
    return suffix in YAML_SUFFIXES or suffix == ""


def _source_dir(root: Path) -> Iterator[tuple[Path, bool]]:
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name.startswith(".") or name in _IGNORED_NAMES or name.endswith(_IGNORED_SUFFIXES):
            continue
        if entry.is_dir():
            yield from _source_dir(entry)
        elif entry.is_file():
            yield entry, entry.suffix in YAML_SUFFIXES


def check_files(source: Path) -> None:
    """Refuse (ConfigError) any file of the inventory that breaks a bound. Reads nothing twice
    and builds nothing: cost is linear in the bytes on disk."""
    total = 0
    for path, must_be_yaml in inventory_files(source):
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
        total += size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                f"file is {size} bytes, more than an inventory needs ({MAX_FILE_BYTES})",
                file=str(path),
                hint="an inventory file stays well under 1 MiB",
            )
        if total > MAX_TOTAL_BYTES:
            raise ConfigError(
                f"the inventory's files add up to more than {MAX_TOTAL_BYTES} bytes", file=str(path)
            )
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
        if data.lstrip().startswith(_VAULT_HEADER):
            continue  # a vaulted file: only Ansible, holding the password, can read it
        check_yaml(data, str(path), must_be_yaml)


def check_yaml(data: bytes | str, path: str, must_be_yaml: bool = True) -> None:
    """Scan one document's events. A syntax error is reported only for a file that must be
    YAML (an INI inventory is not YAML, and Ansible's INI parser will read it)."""
    try:
        _scan(data, path)
    except yaml.MarkedYAMLError as exc:
        if not must_be_yaml:
            return
        mark = exc.problem_mark or exc.context_mark
        if "nesting depth" in str(exc.problem):  # libyaml's own bound (1000) came first
            message = f"value nests more than {MAX_DEPTH} levels deep"
            hint = "an inventory needs a handful of levels; flatten it"
        else:
            message = f"YAML syntax error: {exc.problem or exc.context}"
            hint = "check indentation and quoting"
        line = mark.line + 1 if mark else None
        raise ConfigError(message, file=path, line=line, hint=hint) from None
    except yaml.YAMLError as exc:
        if must_be_yaml:
            raise ConfigError(f"YAML error: {exc}", file=path) from None


class _Collection:
    __slots__ = ("anchor", "keys", "line", "mapping", "nodes", "expect_key")

    def __init__(self, mapping: bool, anchor: str | None, line: int) -> None:
        self.mapping = mapping
        self.anchor = anchor
        self.line = line
        self.nodes = 1
        self.keys: set[str] = set()
        self.expect_key = mapping


def _scan(data: bytes | str, path: str) -> None:
    anchors: dict[str, int] = {}  # anchor -> node count of what it names, once expanded
    stack: list[_Collection] = []
    total = 0
    for event in yaml.parse(data, Loader=_Loader):
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            _key_or_value(stack, None, path, line)
            stack.append(
                _Collection(isinstance(event, yaml.MappingStartEvent), event.anchor, line or 0)
            )
            if len(stack) > MAX_DEPTH:
                raise ConfigError(
                    f"value nests more than {MAX_DEPTH} levels deep",
                    file=path,
                    line=line,
                    hint="an inventory needs a handful of levels; flatten it",
                )
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            done = stack.pop()
            if done.anchor:
                anchors[done.anchor] = done.nodes
            if stack:
                stack[-1].nodes += done.nodes
            else:
                total += done.nodes
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            if isinstance(event, yaml.AliasEvent):
                size = anchors.get(event.anchor or "", 1)
                key = None
            else:
                size = 1
                key = event.value
                if event.anchor:
                    anchors[event.anchor] = 1
            _key_or_value(stack, key, path, line)
            if stack:
                stack[-1].nodes += size
            else:
                total += size
        else:
            continue
        count = total + sum(c.nodes for c in stack)
        if count > MAX_NODES:
            raise ConfigError(
                f"YAML aliases expand to more than {MAX_NODES} values",
                file=path,
                line=line,
                hint="an inventory this large is an alias bomb; remove the nested aliases",
            )


def _key_or_value(stack: list[_Collection], key: str | None, path: str, line: int | None) -> None:
    """Track key/value alternation in the innermost mapping to find duplicate keys (which
    Ansible only warns about, keeping the last one)."""
    if not stack or not stack[-1].mapping:
        return
    top = stack[-1]
    if top.expect_key and key is not None and key != "<<":
        if key in top.keys:
            raise ConfigError(
                "duplicate key",
                file=path,
                line=line,
                key=key,
                hint="each key may appear once per mapping",
            )
        top.keys.add(key)
    top.expect_key = not top.expect_key
