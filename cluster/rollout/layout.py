"""Which file a `--set` change edits, on every inventory layout Ansible reads, and the inventory
as it would be with edited files.

The value changes where Ansible took it from: its origin (file, line), as
`inventory.ansible.resolve` records it. The settings are the variable `tpwarden` of group `all`:
`all.vars.tpwarden` in a YAML inventory, or top-level `tpwarden` in `group_vars/all.yml` or a file
of `group_vars/all/`. An INI inventory cannot hold that mapping inline, so there the origin is a
group_vars file; an origin in an INI file or in host_vars is refused with its file and line.

A rollout's files are kept as a mapping from a path relative to the inventory's home (the
inventory directory, or the directory holding an inventory file) to the file's exact text, so
a rollback restores each file byte for byte.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tpwarden.cluster.durable import atomic_write_bytes
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.ansible import resolve
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.rollout.edit import Change
from tpwarden.cluster.rollout.yaml_edit import set_value
from tpwarden.cluster.spec import ClusterSpec

Files = dict[str, str]  # path relative to the inventory's home -> exact text
IN_INVENTORY = ("all", "vars", "tpwarden")
IN_GROUP_VARS = ("tpwarden",)
VARS_DIRS = ("group_vars", "host_vars")


@dataclass(frozen=True)
class InventoryEdit:
    old: Files  # each edited file as it is now
    new: Files  # the same files with the changes applied


def home(inventory: str) -> Path:
    """The directory relative paths are taken from: the inventory directory, or the one holding
    the inventory file (where Ansible looks for group_vars/ and host_vars/)."""
    source = Path(inventory)
    return source if source.is_dir() else source.parent


def shown(inventory: str, rel: str) -> str:
    """A file of the inventory as the user named the inventory (relative stays relative)."""
    return os.path.normpath(os.path.join(str(home(inventory)), rel))


def read_files(inventory: str, rels: list[str]) -> Files:
    out = {}
    for rel in rels:
        path = home(inventory) / rel
        try:
            out[rel] = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise ConfigError("file not found", file=shown(inventory, rel)) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"not UTF-8 text: {exc.reason}", file=shown(inventory, rel)) from None
    return out


def plan_edit(inventory: str, changes: list[Change]) -> InventoryEdit:
    """Apply each change to the file its value (or its closest enclosing section) came from.
    The result is not validated here: `spec_with` loads it."""
    load_inventory(inventory)  # the current inventory is valid, or its own error says why
    resolved = resolve(Path(inventory))
    base = home(inventory).resolve()
    old: Files = {}
    new: Files = {}
    for change in changes:
        file, line = resolved.loc(("tpwarden", *change.key.split(".")))
        rel = os.path.relpath(Path(file or inventory).resolve(), base)
        root = _root(inventory, rel, change.key, line)
        if rel not in old:
            old.update(read_files(inventory, [rel]))
        text = new.get(rel, old[rel])
        new[rel] = set_value(text, root, change.key, change.value, shown(inventory, rel))
    return InventoryEdit(old, new)


def _root(inventory: str, rel: str, key: str, line: int | None) -> tuple[str, ...]:
    """Where the settings mapping sits in that file."""
    where = shown(inventory, rel)

    def refused(why: str, fix: str) -> ConfigError:
        """This `--set` refused at the value's origin (its file and line), with the fix."""
        return ConfigError(f"--set {key}: {why}", file=where, line=line, hint=fix)

    first = Path(rel).parts[0]
    if rel.startswith(".."):
        raise refused("the value comes from outside the inventory", "edit that file by hand")
    if first == "host_vars":
        raise refused(
            "tpwarden is set in host_vars",
            "tpwarden settings belong to group all: all.vars.tpwarden or group_vars/all.yml",
        )
    if first == "group_vars":
        return IN_GROUP_VARS
    text = (home(inventory) / rel).read_bytes().decode("utf-8", "replace")
    body = [ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip()[0] not in "#;"]
    if rel.endswith(".ini") or (body and body[0].startswith("[")):
        raise refused(
            "the value comes from an INI inventory, which cannot hold the tpwarden mapping",
            "move tpwarden to group_vars/all.yml beside the inventory",
        )
    return IN_INVENTORY


def spec_with(inventory: str, files: Files) -> ClusterSpec:
    """The inventory as it would load with `files` in place of those on disk (a copy is loaded;
    nothing is written). Errors name the real files."""
    if not files:
        return load_inventory(inventory)
    source = Path(inventory)
    with tempfile.TemporaryDirectory(prefix="tpwarden-rollout-") as tmp:
        base = Path(tmp) / "home"
        if source.is_dir():
            shutil.copytree(source, base)
            target = base
        else:
            base.mkdir()
            shutil.copy2(source, base / source.name)
            for name in VARS_DIRS:
                if (source.parent / name).is_dir():
                    shutil.copytree(source.parent / name, base / name)
            target = base / source.name
        for rel, text in files.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_bytes(text.encode("utf-8"))
        try:
            spec = load_inventory(target)
        except ConfigError as exc:
            raise _renamed(exc, str(base), inventory) from None
    return dataclasses.replace(spec, source_file=inventory)


def _renamed(exc: ConfigError, base: str, inventory: str) -> ConfigError:
    def real(text: str) -> str:
        return text.replace(base + os.sep, shown(inventory, ".") + os.sep).replace(
            base, shown(inventory, ".")
        )

    file = exc.file
    if file and file.startswith(base):
        file = shown(inventory, os.path.relpath(file, base))
    return ConfigError(real(exc.message), file=file, line=exc.line, key=exc.key, hint=exc.hint)


def write_files(inventory: str, files: Files) -> None:
    """Each file replaced atomically, keeping its mode, with exactly the given text."""
    for rel, text in files.items():
        target = home(inventory) / rel
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
        atomic_write_bytes(target, text.encode("utf-8"), mode=mode)
