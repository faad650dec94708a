"""The head's dataset cache (`tpwarden.eval.hf_cache`, mounted as HF_HOME in the eval client)
through the head's SSH session: read its index, load a datasets archive into it.

The archive is checked here before a byte is sent (`tpwarden.cluster.eval.datasets.read_archive`), streamed
by SFTP to a hidden name in the cache folder, unpacked there with the head's `tar`, removed; the
index is merged and replaced atomically. The folder must be writable by the SSH user.
"""

from __future__ import annotations

import json
import posixpath
import secrets
from pathlib import Path
from typing import Protocol

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.eval.datasets import CACHE_PREFIX, INDEX_NAME, merge_index, read_archive
from tpwarden.cluster.eval.presets import EvalError
from tpwarden.cluster.ssh.gateway import Result

UNPACK_TIMEOUT_S = 3600.0


class HeadSession(Protocol):
    """What this module needs of `ssh.NodeSession` (a fake in tests)."""

    @property
    def node(self) -> str: ...

    def run(
        self, argv: list[str], timeout: float = ..., sudo: bool = ..., check: bool = ...
    ) -> Result: ...

    def exists(self, remote: str) -> bool: ...

    def read_bytes(self, remote: str) -> bytes: ...

    def put_file(self, local: str, remote: str, mode: int = ...) -> None: ...

    def put_atomic(
        self, data: bytes, remote: str, mode: int = ..., timeout: float = ...
    ) -> None: ...


def read_index(session: HeadSession, hf_cache: str) -> JSONObject | None:
    """The cache's index of loaded tasks, None when nothing was ever loaded there."""
    path = posixpath.join(hf_cache, INDEX_NAME)
    if not session.exists(path):
        return None
    try:
        doc = json.loads(session.read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise EvalError(
            f"{session.node}:{path} is not JSON: load a datasets archive again"
        ) from None
    return doc if isinstance(doc, dict) else None


def load_to_head(session: HeadSession, archive: Path, hf_cache: str, loaded_at: str) -> JSONObject:
    """Unpack `archive` into the head's cache and merge its tasks into the index."""
    doc = read_archive(archive)
    session.run(["mkdir", "-p", hf_cache], check=True)
    upload = posixpath.join(hf_cache, f".upload-{secrets.token_hex(6)}.tar.gz")
    session.put_file(str(archive), upload, 0o600)
    try:
        session.run(
            ["tar", "-xzf", upload, "-C", hf_cache, "--strip-components=1", CACHE_PREFIX],
            timeout=UNPACK_TIMEOUT_S,
            check=True,
        )
    finally:
        session.run(["rm", "-f", upload])
    merged = merge_index(read_index(session, hf_cache), doc, archive.name, loaded_at)
    data = json.dumps(merged, indent=2, ensure_ascii=False).encode()
    session.put_atomic(data, posixpath.join(hf_cache, INDEX_NAME), mode=0o644)
    return merged
