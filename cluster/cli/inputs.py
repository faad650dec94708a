"""What commands check before they act: the files they will write, the files they read and
`INDEX=ROLE` items. A bad one is bad input (exit 2, one `error:` line) before anything is read
from a node or written (issue 30 item 6, issue 52 item 11)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import typer
from tpwarden.cluster.errors import ConfigError

# An input file's option: a usage error (exit 2) before the command runs when it is missing.
READABLE_FILE = {"exists": True, "dir_okay": False, "readable": True}


def check_output_path(path: Path, option: str) -> None:
    """A file the command will write: its folder must exist and take a new file (tried, not
    guessed from permissions: root may "write" in /proc), and it must not be a folder."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"{path}: no such directory {folder}", key=option)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory", key=option, hint="give a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{path}: cannot write it", key=option)
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tpwarden-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot write in {folder} ({exc.strerror or exc})", key=option
        ) from None


def output_file(param: typer.CallbackParam, value: Path | str | None) -> Path | str | None:
    """An option's callback: the file it names can be written (`check_output_path`), checked
    while the command line is parsed, before the command runs. `-` (stdout) passes."""
    if value is None or str(value) == "-":
        return value
    try:
        check_output_path(Path(value), (param.opts or [""])[0])
    except ConfigError as exc:
        raise typer.BadParameter(exc.message) from None
    return value


def output_dir(param: typer.CallbackParam, value: Path | None) -> Path | None:
    """An option's callback: a folder the command will write files into; it may be missing
    (it is made) if its parent takes a new entry."""
    if value is None:
        return value
    folder = value if value.is_dir() else value.parent if str(value.parent) else Path(".")
    try:
        if value.exists() and not value.is_dir():
            raise OSError(f"{value} is not a directory")
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tpwarden-check-"):
            pass
    except OSError as exc:
        raise typer.BadParameter(f"{value}: cannot write there ({exc.strerror or exc})") from None
    return value


def zone_roles(items: list[str]) -> dict[str, str]:
    """``--zone-role INDEX=ROLE`` items as a map (ConfigError naming a malformed one)."""
    out = {}
    for item in items:
        key, sep, role = item.partition("=")
        if not sep or not key.strip() or not role.strip():
            raise ConfigError(f"--zone-role {item!r}", key="--zone-role", hint="INDEX=ROLE")
        out[key.strip()] = role.strip()
    return out
