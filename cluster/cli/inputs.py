"""What commands check before they act: the files they will write, the files they read and
`INDEX=ROLE` items. A bad one is bad input (exit 2, one `error:` line) before anything is read
from a node or written (issue 30 item 6, issue 52 item 11)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tpwarden.cluster.errors import ConfigError


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


def zone_roles(items: list[str]) -> dict[str, str]:
    """``--zone-role INDEX=ROLE`` items as a map (ConfigError naming a malformed one)."""
    out = {}
    for item in items:
        key, sep, role = item.partition("=")
        if not sep or not key.strip() or not role.strip():
            raise ConfigError(f"--zone-role {item!r}", key="--zone-role", hint="INDEX=ROLE")
        out[key.strip()] = role.strip()
    return out
