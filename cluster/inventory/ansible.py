"""The Ansible gateway for inventories: Ansible's own engine resolves what the inventory means.

Why in-process (InventoryManager + VariableManager + DataLoader) rather than
`ansible-inventory --list` in a subprocess: ansible-core >= 2.19 tags every value it loads with
its `Origin` (file, line), through group_vars, host_vars and templating, so an error can name the
line the value came from; `--list` prints bare JSON and loses that. It also templates, which
`--list` does not. What this module returns is plain Python plus a map from each setting's path
to its (file, line): nothing outside this module imports Ansible, and the watchdog on a node never
loads an inventory.

Ansible errors become `ConfigError`s with file:line; Ansible's console output (warnings about
files it could not parse) is collected and folded into the error instead of printed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.yaml_guard import MAX_DEPTH

if TYPE_CHECKING:  # Ansible comes with tpwarden[control], imported where used
    from ansible.parsing.dataloader import DataLoader

log = logging.getLogger(__name__)

Loc = tuple[str | None, int | None]  # (file, line)
PathKey = tuple[str | int, ...]  # ("tpwarden", "model", "path") or ("node3", "ansible_port")

HOST_VARS = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_ssh_private_key_file",
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_become",
    # refused when they turn checking off (inventory.values.check_host_key_checking)
    "ansible_host_key_checking",
    "ansible_ssh_host_key_checking",
    "vllm_host_ip",
    # read by `tpwarden prometheus config` (and by the unit templates)
    "tpwarden_thermal_metrics_host",
    "tpwarden_thermal_metrics_port",
    "tpwarden_watchdog_host",
)


@dataclass(kw_only=True)
class Resolved:
    """An inventory as Ansible resolves it, reduced to what tpwarden reads."""

    source: str
    groups: dict[str, list[str]]  # head/workers -> host names, in inventory order
    host_vars: dict[str, JSONObject]  # host -> HOST_VARS present for it (templated)
    settings: JSONValue  # the tpwarden value of group all (templated), None if absent
    settings_by_host: JSONObject  # host -> its tpwarden value, when it differs from all's
    locs: dict[PathKey, Loc] = field(default_factory=dict)

    def loc(self, path: PathKey) -> Loc:
        """(file, line) of a setting, or of the closest enclosing one that has a line."""
        for end in range(len(path), 0, -1):
            found = self.locs.get(tuple(path[:end]))
            if found and found[1] is not None:
                return found
        for end in range(len(path), 0, -1):
            found = self.locs.get(tuple(path[:end]))
            if found and found[0]:
                return found
        return (self.source, None)


def resolve(source: Path) -> Resolved:
    """Load `source` (file or directory) through Ansible and template what tpwarden uses."""
    engine = _Engine(source)
    with engine.quiet():
        return engine.resolve()


class _Ignore(Protocol):
    def __call__(self, *args: object, **kwargs: object) -> None: ...


class _Collector:
    """Stands in for Ansible's Display while we load: keeps messages, prints nothing."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def warning(self, msg: str, *args: object, **kwargs: object) -> None:
        self.messages.append(str(msg))

    def error_as_warning(
        self, msg: str | None = None, exception: object = None, **kw: object
    ) -> None:
        self.messages.append(f"{msg} {_reason(exception)}" if exception else str(msg))

    def __getattr__(self, name: str) -> _Ignore:
        return lambda *args, **kwargs: None  # debug, vvv, deprecated, ...


class _Engine:
    def __init__(self, source: Path) -> None:
        self.source = source
        self.collector = _Collector()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Ansible's Display is a process-wide singleton that prints; shadow its methods on the
        instance for the duration of one load (the library never prints)."""
        # deferred: Ansible comes with tpwarden[control]; a node (the watchdog) never loads it
        from ansible.utils.display import Display

        display = Display()
        names = ("warning", "error_as_warning", "deprecated", "display", "banner")
        for name in names:
            setattr(display, name, getattr(self.collector, name))
        try:
            yield
        finally:
            for name in names:
                display.__dict__.pop(name, None)

    def resolve(self) -> Resolved:
        # deferred: Ansible comes with tpwarden[control]; a node (the watchdog) never loads it
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager
        from ansible.vars.plugins import get_vars_from_inventory_sources

        loader = DataLoader()
        _setup_vault(loader)
        path = os.path.abspath(self.source)  # as ansible-inventory does (unfrackpath)
        try:
            inventory = InventoryManager(loader=loader, sources=None)
            self.collector.messages.clear()  # "no inventory was parsed": none was given yet
            inventory._sources = [path]
            if not inventory.parse_source(path):
                raise self._unparsed()
            inventory._inventory.reconcile_inventory()
            variables = VariableManager(loader=loader, inventory=inventory)
            all_group = inventory.groups["all"]
            all_vars = dict(all_group.get_vars())
            all_vars.update(get_vars_from_inventory_sources(loader, [path], [all_group], "task"))
            resolved = Resolved(
                source=path, groups={}, host_vars={}, settings=None, settings_by_host={}
            )
            self._refuse_warnings()
            for group in ("head", "workers"):
                found = inventory.groups.get(group)
                hosts = found.get_hosts() if found else []
                resolved.groups[group] = ["".join([h.name]) for h in hosts]
                for host in hosts:
                    if _origin(host.name):
                        resolved.locs[(host.name,)] = _origin(host.name)  # type: ignore[assignment]
            for name in resolved.groups["head"] + resolved.groups["workers"]:
                hvars = variables.get_vars(host=inventory.get_host(name), include_hostvars=False)
                self._host(resolved, name, hvars, loader)
            if "tpwarden" in all_vars:
                resolved.settings = self._template(
                    resolved, ("tpwarden",), all_vars["tpwarden"], all_vars, loader
                )
            same = canonical(resolved.settings)
            resolved.settings_by_host = {
                host: value
                for host, value in resolved.settings_by_host.items()
                if canonical(value) != same
            }
            resolved.source = str(self.source)
            resolved.locs = {k: (self.shown(f), line) for k, (f, line) in resolved.locs.items()}
            return resolved
        except AnsibleError as exc:
            raise self.shown_error(_translate(exc, path)) from None
        except ConfigError as exc:
            raise self.shown_error(exc) from None

    def shown(self, file: str | None) -> str | None:
        return shown_as_given(self.source, file)

    def shown_error(self, exc: ConfigError) -> ConfigError:
        file = self.shown(exc.file)
        if file == exc.file:
            return exc
        return ConfigError(exc.message, file=file, line=exc.line, key=exc.key, hint=exc.hint)

    def _host(
        self, resolved: Resolved, name: str, hvars: Mapping[str, JSONValue], loader: DataLoader
    ) -> None:
        picked = {}
        for key in HOST_VARS:
            if key in hvars:
                picked[key] = self._template(resolved, (name, key), hvars[key], hvars, loader)
        resolved.host_vars[name] = picked
        if "tpwarden" in hvars:
            locs_before = dict(resolved.locs)
            value = self._template(resolved, (name, "tpwarden"), hvars["tpwarden"], hvars, loader)
            resolved.locs = {**resolved.locs, **locs_before}
            resolved.settings_by_host[name] = value

    def _template(
        self,
        resolved: Resolved,
        path: PathKey,
        raw: JSONValue,
        variables: Mapping[str, JSONValue],
        loader: DataLoader,
    ) -> JSONValue:
        # deferred: Ansible comes with tpwarden[control]; a node (the watchdog) never loads it
        from ansible.template import Templar

        templar = Templar(loader=loader, variables=variables)
        value = templar.template(raw)
        return _plain(value, path, resolved.locs, _origin(raw))

    def _refuse_warnings(self) -> None:
        """What Ansible only warns about (a misspelt group key it skips, a name it rewrites)
        would silently change the cluster: refuse it."""
        if self.collector.messages:
            raise ConfigError(
                f"Ansible: {self.collector.messages[0]}",
                file=str(self.source),
                hint="fix the inventory until ansible-inventory --list prints no warning",
            )

    def _unparsed(self) -> ConfigError:
        # each plugin that tried says why; the one matching the file's kind is the useful one
        plugin = "'yaml' plugin" if self.source.suffix in (".yml", ".yaml", ".json") else "'ini'"
        reasons = [m for m in self.collector.messages if plugin in m] or self.collector.messages
        why = reasons[0] if reasons else "no inventory plugin accepted it"
        why = re.sub(r"<class '[\w.]*?(?:_AnsibleTagged)?(\w+)'>", lambda m: m[1].lower(), why)
        why = why.replace("Failed to parse inventory with ", "").replace(". ", ": ", 1)
        return ConfigError(
            f"Ansible could not parse this inventory: {why}",
            file=str(self.source),
            hint="write it as YAML (all: children: ...) or INI ([head] ...), as ansible-inventory "
            "--list accepts",
        )


def _setup_vault(loader: DataLoader) -> None:
    """Vault passwords from the usual Ansible settings (ansible.cfg, ANSIBLE_VAULT_PASSWORD_FILE,
    ANSIBLE_VAULT_IDENTITY_LIST); never prompts."""
    # deferred: Ansible comes with tpwarden[control]; a node (the watchdog) never loads it
    from ansible import constants as C
    from ansible.cli import CLI
    from ansible.parsing.vault import VaultSecretsContext

    # read the settings now, not at import, so the environment of this call counts
    files = C.config.get_config_value("DEFAULT_VAULT_PASSWORD_FILE")
    files = [files] if isinstance(files, str) else list(files or [])
    ids = C.config.get_config_value("DEFAULT_VAULT_IDENTITY_LIST")
    secrets = CLI.setup_vault_secrets(
        loader,
        vault_ids=list(ids or []),
        vault_password_files=files,
        ask_vault_pass=False,
        auto_prompt=False,
        initialize_context=False,
    )
    loader.set_vault_secrets(secrets)
    # Ansible's CLIs set this process-wide context once; a library loads many inventories
    VaultSecretsContext._current = VaultSecretsContext(secrets)


def _origin(value: object) -> Loc | None:
    # deferred: Ansible comes with tpwarden[control]; a node (the watchdog) never loads it
    from ansible._internal._datatag._tags import Origin

    origin = Origin.get_tag(value)
    if origin is None or not origin.path:
        return None
    return (str(origin.path), origin.line_num)


def _plain(value: object, path: PathKey, locs: dict[PathKey, Loc], here: Loc | None) -> JSONValue:
    """Tagged Ansible values -> exact builtin types, recording each path's origin."""
    loc = _origin(value) or here
    if loc:
        locs.setdefault(path, loc)
    check_depth(path, loc)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            key_loc = _origin(key)
            if key_loc:
                locs[(*path, str(key))] = key_loc
            out[str(key)] = _plain(item, (*path, str(key)), locs, key_loc or loc)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, (*path, i), locs, loc) for i, item in enumerate(value)]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)  # inf/nan pass through: the spec refuses them with their line
    if isinstance(value, str):
        return "".join([value])  # a plain str, not Ansible's tagged subclass
    return str(value)


def shown_as_given(source: Path, file: str | None) -> str | None:
    """A file the reader names (absolute) as the user named the inventory `source` (maybe
    relative): the inventory itself, a file inside an inventory folder, or one beside it."""
    given = str(source)
    if file is None or os.path.isabs(given):
        return file
    base = os.path.abspath(given)
    if file == base:
        return given
    if source.is_dir() and file.startswith(base + os.sep):
        return os.path.join(given, os.path.relpath(file, base))
    parent = os.path.dirname(base)
    if file.startswith(parent + os.sep):
        return os.path.join(os.path.dirname(given), os.path.relpath(file, parent))
    return file


def check_depth(path: PathKey, loc: Loc | None) -> None:
    """Refuse a value nested deeper than an inventory needs (Ansible's loader has no bound)."""
    if len(path) > MAX_DEPTH:
        file, line = loc or (None, None)
        raise ConfigError(
            f"value nests more than {MAX_DEPTH} levels deep", file=file, line=line, key=dotted(path)
        )


def canonical(value: JSONValue) -> str:
    """Equality that holds for NaN too (NaN != NaN would make equal settings differ)."""
    return json.dumps(value, sort_keys=True, default=repr)


def dotted(path: PathKey) -> str:
    """A key path as the operator writes it: `tpwarden.watchdog.interval_s`."""
    return ".".join(str(p) for p in path)


def _reason(exc: object) -> str:
    text = str(getattr(exc, "message", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _translate(exc: BaseException, source: str) -> ConfigError:
    """An AnsibleError -> ConfigError at the origin Ansible attached to it."""
    origin = None
    obj = getattr(exc, "obj", None)
    if obj is not None:
        origin = _origin(obj)
        if origin is None and getattr(obj, "path", None):
            origin = (str(obj.path), getattr(obj, "line_num", None))
    file, line = origin or (source, None)
    message = _reason(exc)
    hint = None
    if "undefined" in message.lower():
        hint = "define the variable in the inventory, group_vars or host_vars"
    elif "vault" in message.lower():
        hint = "set ANSIBLE_VAULT_PASSWORD_FILE or vault_password_file in ansible.cfg"
    return ConfigError(message, file=file, line=line, hint=hint)
