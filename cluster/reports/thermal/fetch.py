"""Pull agent files from every node (SFTP through cluster.ssh) into a local directory, so the
report runs on local files. Thin on purpose: the SSH gateway owns connections and host keys.
One node that cannot be reached is recorded with its reason; the others are still fetched."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tpwarden.cluster.durable import THERMAL_DIR
from tpwarden.cluster.errors import NodeUnreachable
from tpwarden.cluster.reports.thermal.remote import call_each_node
from tpwarden.cluster.spec import ClusterSpec, NodeSpec
from tpwarden.cluster.ssh.gateway import SshPool


@dataclass
class FetchResult:
    files: list[Path] = field(default_factory=list)
    per_node: dict[str, int] = field(default_factory=dict)  # node -> files copied
    unreachable: dict[str, str] = field(default_factory=dict)  # node -> reason


def _days(since: float | None, until: float | None) -> set[str] | None:
    """UTC days (YYYYMMDD) the window touches; None means every file."""
    if since is None or until is None:
        return None
    days, t = set(), since - since % 86400
    while t <= until:
        days.add(datetime.fromtimestamp(t, tz=UTC).strftime("%Y%m%d"))
        t += 86400
    return days


def wanted(
    fname: str, mtime: float | None, node: str, days: set[str] | None, since: float | None
) -> bool:
    """Pure: is this remote file one of ``node``'s and can it hold samples of the window?"""
    prefix = f"thermal-{node}-"
    if not (fname.startswith(prefix) and fname.endswith(".jsonl")):
        return False
    if days is not None and fname[len(prefix) : len(prefix) + 8] not in days:
        return False
    # A file last written before the window starts holds nothing in it.
    return not (since is not None and mtime is not None and mtime < since - 60)


def fetch_files(
    spec: ClusterSpec,
    since: float | None,
    until: float | None,
    dest_dir: str | os.PathLike[str],
    remote_dir: str | None = None,
) -> FetchResult:
    """Copy each node's ``thermal-<node>-YYYYMMDD*.jsonl`` for the window into ``dest_dir``
    (``spec`` is a cluster.spec.ClusterSpec), all nodes in parallel."""

    thermal = getattr(spec, "thermal", None)
    directory: str = remote_dir if remote_dir else getattr(thermal, "dir", THERMAL_DIR)
    days = _days(since, until)
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    timeout = float(spec.ssh.connect_timeout_s) * 4

    def one(node: NodeSpec) -> list[Path]:
        sess = pool.session(node)
        sftp = sess.sftp()
        chan = sftp.get_channel()
        if chan is not None:  # always, for a client made from a channel (Session.sftp)
            chan.settimeout(timeout)
        got: list[Path] = []
        try:
            entries = sftp.listdir_attr(directory)
        except FileNotFoundError:
            return got
        except OSError as exc:
            raise NodeUnreachable(node.name, f"SFTP list {directory}: {exc}") from None
        for e in sorted(entries, key=lambda e: e.filename):
            if wanted(e.filename, e.st_mtime, node.name, days, since):
                local = dest / e.filename
                sess.get(posixpath.join(directory, e.filename), str(local))
                got.append(local)
        return got

    result = FetchResult()
    with SshPool(spec.ssh) as pool:
        for out in call_each_node(spec.nodes, one):
            if out.ok:
                files = out.value or []
                result.files += files
                result.per_node[out.node] = len(files)
            else:
                result.unreachable[out.node] = out.error or "unknown error"
    return result
