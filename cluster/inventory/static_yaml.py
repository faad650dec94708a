"""One plain YAML inventory file, resolved without loading Ansible, to exactly Ansible's answer.

Importing Ansible costs more CPU than `ansible-inventory --list` leaves room for (issue 30:
`inventory check` <= 1.0x of it). Most inventories are one YAML file with no templates, vault,
group_vars/ or host_vars/, host ranges or Ansible configuration. For those, what Ansible does
is the YAML inventory plugin's few rules (ansible/plugins/inventory/yaml.py: groups, `hosts`,
`vars`, `children`) and the VariableManager's precedence (group `all`, then the host's groups by
depth, priority and name, then the host itself), with templating the identity.

`resolve_static` applies those rules and returns None the moment the inventory steps outside
that subset (a config file or ANSIBLE_* variable that could change any rule, a tag, an alias, a
nested group, a host pattern, a warning Ansible would print): the caller then asks Ansible,
which also words every error. A differential test holds both to one answer, lines included
(tests/unit/test_inventory_static.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.ansible import (
    HOST_VARS,
    Loc,
    PathKey,
    Resolved,
    canonical,
    check_depth,
    shown_as_given,
)

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TAG = "tag:yaml.org,2002:"
# the scalar kinds Ansible's loader builds as the same Python values (dates, binary... are not)
_SCALAR_TAGS = {_TAG + name for name in ("str", "int", "float", "bool", "null")}
# what Ansible's yaml plugin reads with the defaults; anything else may be a warning or a pattern
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_TEMPLATE_MARKS = ("{{", "{%", "{#")
# localhost-like names Ansible treats apart (inventory/data.py, C.LOCALHOST), and its own groups
_RESERVED_HOSTS = ("localhost", "127.0.0.1", "all", "ungrouped")
_SECTIONS = ("hosts", "vars", "children")
# where Ansible looks for its configuration (ansible/config/manager.py find_ini_config_file)
_CONFIG_FILES = ("ansible.cfg", "~/.ansible.cfg", "/etc/ansible/ansible.cfg")


class _Outside(Exception):
    """The inventory uses something only Ansible resolves."""


@dataclass
class _Value:
    """A loaded value with what Ansible's Origin tag would say of it (bool and null carry none)."""

    plain: JSONValue
    line: int | None
    keys: dict[str, tuple[int, _Value]] = field(default_factory=dict)  # mapping: key line, value
    items: list[_Value] = field(default_factory=list)  # sequence


@dataclass
class _Group:
    name: str
    depth: int
    vars: dict[str, tuple[int, _Value]] = field(default_factory=dict)


def resolve_static(source: Path, environ: Mapping[str, str] | None = None) -> Resolved | None:
    """Ansible's answer for a plain one-file YAML inventory, or None where only Ansible knows."""
    env = os.environ if environ is None else environ
    if not _plain_setting(source, env):
        return None
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # Ansible words it
    if any(mark in text for mark in _TEMPLATE_MARKS) or "$ANSIBLE_VAULT" in text:
        return None
    try:
        return _Reader(source, text).resolve()
    except (_Outside, yaml.YAMLError, RecursionError):
        return None


def _plain_setting(source: Path, env: Mapping[str, str]) -> bool:
    """No Ansible configuration, no vars directories, a file only the yaml plugin reads."""
    if any(name.startswith("ANSIBLE_") for name in env):
        return False
    if any(Path(os.path.expanduser(name)).exists() for name in _CONFIG_FILES):
        return False
    if source.suffix not in (".yml", ".yaml") or not source.is_file():
        return False
    if os.access(source, os.X_OK):
        return False  # Ansible's script plugin would run it first
    base = source.parent
    return not any((base / name).exists() for name in ("group_vars", "host_vars"))


class _Reader:
    def __init__(self, source: Path, text: str) -> None:
        self.source = source
        self.file = os.path.abspath(source)  # what Ansible's Origin names (links kept)
        self.loader = _Loader(text)
        self.seen: set[int] = set()
        self.groups: dict[str, _Group] = {}
        self.host_vars: dict[str, dict[str, tuple[int, _Value]]] = {}
        self.host_groups: dict[str, list[str]] = {}
        self.host_lines: dict[str, int] = {}
        self.members: dict[str, list[str]] = {}  # group -> its hosts, in the order added

    def resolve(self) -> Resolved:
        try:
            root = self.loader.get_single_node()
            if root is None:
                raise _Outside
            data = self._value(root)
        finally:
            self.loader.dispose()
        if not data.keys or "plugin" in data.keys or not isinstance(data.plain, dict):
            raise _Outside
        for name, (_, group) in data.keys.items():
            self._group(name, group, depth=0 if name == "all" else 1)
        if set(self.groups) & set(self.host_groups):
            raise _Outside  # Ansible warns: "Found both group and host with same name"
        try:
            return self._resolved()
        except ConfigError as exc:  # named as the operator named the file, as Ansible's path does
            raise ConfigError(
                exc.message,
                file=shown_as_given(self.source, exc.file),
                line=exc.line,
                key=exc.key,
                hint=exc.hint,
            ) from None

    def _value(self, node: yaml.Node) -> _Value:
        if id(node) in self.seen:
            raise _Outside  # an alias: Ansible's loader shares or copies; not worth telling
        self.seen.add(id(node))
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode) and node.tag == _TAG + "map":
            out = _Value(plain=None, line=line)
            for key_node, value_node in node.value:
                key = self._value(key_node)
                if not isinstance(key.plain, str) or key.plain in out.keys:
                    raise _Outside
                out.keys[key.plain] = (key_node.start_mark.line + 1, self._value(value_node))
            out.plain = {k: v.plain for k, (_, v) in out.keys.items()}
            return out
        if isinstance(node, yaml.SequenceNode) and node.tag == _TAG + "seq":
            items = [self._value(item) for item in node.value]
            return _Value(plain=[i.plain for i in items], line=line, items=items)
        if isinstance(node, yaml.ScalarNode) and node.tag in _SCALAR_TAGS:
            value = self.loader.construct_object(node)
            untagged = isinstance(value, bool) or value is None
            return _Value(plain=value, line=None if untagged else line)
        raise _Outside

    def _group(self, name: str, data: _Value, depth: int) -> None:
        """The yaml plugin's _parse_group, for groups at most one level under `all`."""
        if not _GROUP_NAME.match(name) or name in self.groups or name == "ungrouped":
            raise _Outside
        if (name == "all") != (depth == 0) or not isinstance(data.plain, (dict, type(None))):
            raise _Outside  # Ansible warns and skips a group that is not a mapping
        group = self.groups[name] = _Group(name, depth)
        for key, (_, section) in data.keys.items():
            if section.plain is None:
                continue  # Ansible skips an empty key, whatever its name
            if key not in _SECTIONS or not isinstance(section.plain, dict):
                raise _Outside  # a warning, or a string shorthand, in Ansible
            if key == "vars":
                if "ansible_group_priority" in section.keys:
                    raise _Outside
                group.vars.update(section.keys)
            elif key == "children":
                if depth > 0:
                    raise _Outside  # nested groups: depth and order rules we leave to Ansible
                for child, (_, child_data) in section.keys.items():
                    self._group(child, child_data, depth + 1)
            else:
                self._hosts(name, section)

    def _hosts(self, group: str, section: _Value) -> None:
        for host, (line, host_data) in section.keys.items():
            if not _HOST_NAME.match(host) or host in _RESERVED_HOSTS:
                raise _Outside  # a range, a port, an address Ansible parses
            if not isinstance(host_data.plain, (dict, type(None))):
                raise _Outside
            self.host_lines.setdefault(host, line)
            self.host_groups.setdefault(host, []).append(group)
            self.members.setdefault(group, []).append(host)
            self.host_vars.setdefault(host, {}).update(host_data.keys)

    def _host_view(self, host: str) -> dict[str, tuple[int, _Value]]:
        """VariableManager.get_vars: all, the host's groups by (depth, priority 1, name), host."""
        merged = dict(self.groups["all"].vars) if "all" in self.groups else {}
        mine = {self.groups[g].name: self.groups[g] for g in self.host_groups[host] if g != "all"}
        for group in sorted(mine.values(), key=lambda g: (g.depth, g.name)):
            merged.update(group.vars)
        merged.update(self.host_vars[host])
        return merged

    def _resolved(self) -> Resolved:
        out = Resolved(source=str(self.source), groups={}, host_vars={}, settings=None,
                       settings_by_host={})  # fmt: skip
        for group in ("head", "workers"):
            hosts = out.groups[group] = list(self.members.get(group, []))
            for host in hosts:
                out.locs[(host,)] = (self.file, self.host_lines[host])
        all_vars = self.groups["all"].vars if "all" in self.groups else {}
        for host in out.groups["head"] + out.groups["workers"]:
            view = self._host_view(host)
            out.host_vars[host] = {
                key: self._plain(view[key][1], (host, key), out.locs, None)
                for key in HOST_VARS
                if key in view
            }
            if "tpwarden" in view:
                before = dict(out.locs)
                value = self._plain(view["tpwarden"][1], (host, "tpwarden"), out.locs, None)
                out.locs = {**out.locs, **before}
                out.settings_by_host[host] = value
        if "tpwarden" in all_vars:
            out.settings = self._plain(all_vars["tpwarden"][1], ("tpwarden",), out.locs, None)
        same = canonical(out.settings)
        out.settings_by_host = {
            h: v for h, v in out.settings_by_host.items() if canonical(v) != same
        }
        out.locs = {
            key: (shown_as_given(self.source, file), line) for key, (file, line) in out.locs.items()
        }
        return out

    def _plain(
        self, value: _Value, path: PathKey, locs: dict[PathKey, Loc], here: Loc | None
    ) -> JSONValue:
        """What ansible._plain records for a value: its own line, else the enclosing one."""
        loc = (self.file, value.line) if value.line is not None else here
        if loc:
            locs.setdefault(path, loc)
        check_depth(path, loc)
        if value.keys or isinstance(value.plain, dict):
            plain: JSONObject = {}
            for key, (key_line, item) in value.keys.items():
                key_loc: Loc = (self.file, key_line)
                locs[(*path, key)] = key_loc
                plain[key] = self._plain(item, (*path, key), locs, key_loc)
            return plain
        if value.items or isinstance(value.plain, list):
            return [self._plain(item, (*path, i), locs, loc) for i, item in enumerate(value.items)]
        return value.plain
