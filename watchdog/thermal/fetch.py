"""Pull agent files from every node (SFTP through cluster.ssh) into a local directory, so the
report runs on local files. Thin on purpose: the SSH gateway owns connections and host keys."""

from __future__ import annotations

import os
import posixpath
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REMOTE_DIR = "/var/log/servectl/thermal"


def _days(since: float | None, until: float | None) -> set[str] | None:
    """UTC days (YYYYMMDD) the window touches; None means every file."""
    if since is None or until is None:
        return None
    days, t = set(), since - since % 86400
    while t <= until:
        days.add(datetime.fromtimestamp(t, tz=UTC).strftime("%Y%m%d"))
        t += 86400
    return days


def fetch_files(
    spec: Any,
    since: float | None,
    until: float | None,
    dest_dir: str | os.PathLike[str],
    remote_dir: str = REMOTE_DIR,
) -> list[Path]:
    """Copy each node's ``thermal-<node>-YYYYMMDD*.jsonl`` for the window into ``dest_dir``
    (``spec`` is a cluster.spec.ClusterSpec). cluster.ssh is imported here, lazily, so the
    report itself needs no paramiko. Untested against the lab (no SFTP in unit tests)."""
    from cluster.ssh import SshPool  # noqa: PLC0415 - lazy on purpose

    days = _days(since, until)
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    got: list[Path] = []
    with SshPool(spec.ssh) as pool:
        for node in spec.nodes:
            sess = pool.session(node)
            prefix = f"thermal-{node.name}-"
            for fname in sorted(sess.sftp().listdir(remote_dir)):
                if not (fname.startswith(prefix) and fname.endswith(".jsonl")):
                    continue
                if days is not None and fname[len(prefix) : len(prefix) + 8] not in days:
                    continue
                local = dest / fname
                sess.get(posixpath.join(remote_dir, fname), str(local))
                got.append(local)
    return got
