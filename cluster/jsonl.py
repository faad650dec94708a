"""Durable JSON-lines files and the control machine's state directory, shared by the event log,
the boot history and the rollout history: one record per line, flushed and fsynced per record,
so a process killed with -9 loses at most the line it was writing (which readers skip)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def default_state_dir() -> Path:
    """$SERVECTL_STATE_DIR, else $XDG_STATE_HOME/servectl, else ~/.local/state/servectl."""
    base = os.environ.get("SERVECTL_STATE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(xdg) / "servectl"


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(dict(record), sort_keys=True, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete record; a torn line (a writer killed mid-write) is skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
