"""A minimal SSH client for the lab's own checks, verifying host keys with the lab known_hosts.

(The toolkit's gateway is cluster/ssh/gateway.py; the lab keeps its own tiny one so that bringing the
world up does not depend on the code under test.)
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko
from tpwarden.cluster.errors import LabError


@dataclass(frozen=True)
class Completed:
    rc: int
    stdout: str
    stderr: str


def connect(host: str, key: Path, known_hosts: Path, timeout_s: float = 5) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            host,
            22,
            username="root",
            key_filename=str(key),
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            allow_agent=False,
            look_for_keys=False,
        )
    except (TimeoutError, paramiko.SSHException, OSError) as exc:
        client.close()
        raise LabError(f"ssh root@{host}: {exc}") from exc
    return client


def run(client: paramiko.SSHClient, argv: Sequence[str], timeout_s: float = 30) -> Completed:
    try:
        _, out, err = client.exec_command(shlex.join(argv), timeout=timeout_s)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        rc = out.channel.recv_exit_status()
    except (TimeoutError, paramiko.SSHException, OSError) as exc:
        raise LabError(f"ssh {argv[0]}: {exc}") from exc
    return Completed(rc, stdout, stderr)


def run_once(
    host: str, key: Path, known_hosts: Path, argv: Sequence[str], timeout_s: float = 10
) -> Completed:
    client = connect(host, key, known_hosts, timeout_s)
    try:
        return run(client, argv, timeout_s)
    finally:
        client.close()
