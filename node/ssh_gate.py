"""The watchdog key's forced command on every node: run only what the watchdog runs (issue 29).

Provisioning authorizes the watchdog's SSH key on every node with
``command="<venv>/bin/python -I -m tpwarden.node.ssh_gate /etc/tpwarden/ssh-gate.json"``, so
sshd runs this gate instead of whatever the client asked for, which it finds in
``$SSH_ORIGINAL_COMMAND``. The gate splits that command (never through a shell), checks it
against the list below and ``exec``s it, or refuses it (exit 126, one ``refused:`` line on
stderr). Every decision goes to the node's auth log (syslog ``LOG_AUTH``).

What the watchdog runs, and so all the gate lets through (each optionally behind ``sudo -n --``,
as `NodeSession.wrap_sudo` adds it for a non-root SSH user):

* ``docker system dial-stdio``: the Docker Engine API over the SSH channel (stop, remove, start
  and inspect the server's container, read its logs);
* the collector: ``python3 DIR/tpwarden-collector.pyz ARGS`` (DIR: the temp dir below) when its
  sha256 is the collector that this node's own tpwarden builds (the config's
  ``collector_sha256``, written by provisioning): pre-flight, the clock cap, the incident
  dossier. Any other script is refused, so the key cannot run code of its own;
* the steps around it (`NodeSession.run_script`, `put_atomic`): making and removing that temp
  dir (``mktemp -d`` with the template ``/tmp/tpwarden.`` and eight X), ``test -d DIR``,
  ``mkdir -p -m 0700 DIR`` and ``mv -f DIR/.NAME.HEX.tmp DIR/NAME``;
* SFTP (the ``sftp`` subsystem, run as this system's ``sftp-server``): reading state and boot
  records, writing the server's key file and the uploaded collector.

An interactive login, a shell command, port-less ``ssh node`` and everything else is refused.
This bounds what a copy of the key can *run*; it is not a sandbox: the Docker API and SFTP are
what a restart needs, and both act with the SSH user's rights (docs/network.md).

Standard library only: it runs before anything else on every SSH call of the watchdog.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shlex
import stat
import sys
import syslog
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CONFIG = "/etc/tpwarden/ssh-gate.json"
REFUSED_RC = 126
COLLECTOR_NAME = "tpwarden-collector.pyz"
SFTP_SERVERS = (
    "/usr/lib/openssh/sftp-server",  # Debian, Ubuntu
    "/usr/libexec/openssh/sftp-server",  # RHEL, Fedora
    "/usr/lib/ssh/sftp-server",  # Arch
    "/usr/libexec/sftp-server",
)
_TMPDIR = re.compile(r"/tmp/tpwarden\.[A-Za-z0-9]{8}")
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class GateConfig:
    """What provisioning wrote: the sha256 of the collector this node's tpwarden builds."""

    collector_sha256: frozenset[str]


@dataclass(frozen=True)
class Verdict:
    """``argv`` to exec, or None and why not."""

    argv: tuple[str, ...] | None
    reason: str

    @property
    def allowed(self) -> bool:
        return self.argv is not None


def load_config(path: str) -> GateConfig:
    """The gate's config; ValueError (with the path) when it is missing or not what we wrote."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    digests = doc.get("collector_sha256") if isinstance(doc, dict) else None
    if not isinstance(digests, list) or not all(
        isinstance(d, str) and _HEX.fullmatch(d) for d in digests
    ):
        raise ValueError(f"{path}: collector_sha256 must be a list of sha256 hex digests")
    return GateConfig(collector_sha256=frozenset(digests))


def file_sha256(path: str) -> str | None:
    """The file's sha256, or None when it cannot be read (or is no regular file)."""
    try:
        with open(path, "rb", buffering=0) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _absolute(path: str) -> bool:
    return path.startswith("/") and "\0" not in path and "/../" not in path + "/"


def _atomic_rename(argv: Sequence[str]) -> bool:
    """``mv -f DIR/.NAME.HEX.tmp DIR/NAME``, as `NodeSession.put_atomic` renames."""
    if len(argv) != 4 or list(argv[:2]) != ["mv", "-f"] or not _absolute(argv[3]):
        return False
    directory, name = posixpath.split(argv[3])
    pattern = re.escape(posixpath.join(directory, f".{name}.")) + r"[0-9a-f]{12}\.tmp"
    return bool(name) and re.fullmatch(pattern, argv[2]) is not None


def _plain(argv: Sequence[str]) -> bool:
    """The fixed commands and the steps around the collector."""
    match list(argv):
        case ["docker", "system", "dial-stdio"] | ["mktemp", "-d", "/tmp/tpwarden.XXXXXXXX"]:
            return True
        case ["rm", "-rf", "--", path]:
            return _TMPDIR.fullmatch(path) is not None
        case ["test", "-d", path] | ["mkdir", "-p", "-m", "0700", path]:
            return _absolute(path)
    return _atomic_rename(argv)


def _collector(
    argv: Sequence[str], config: GateConfig, digest_of: Callable[[str], str | None]
) -> str | None:
    """None when ``argv`` runs the collector this node builds, else why not."""
    script = argv[1] if len(argv) > 1 else ""
    if posixpath.dirname(script) == "" or not _TMPDIR.fullmatch(posixpath.dirname(script)):
        return "python3 runs only the collector uploaded to /tmp/tpwarden.*"
    if posixpath.basename(script) != COLLECTOR_NAME:
        return f"python3 runs only {COLLECTOR_NAME}"
    digest = digest_of(script)
    if digest is None or digest not in config.collector_sha256:
        return f"{script} is not the collector this node's tpwarden builds (sha256 {digest})"
    return None


def decide(
    command: str | None,
    config: GateConfig,
    digest_of: Callable[[str], str | None] = file_sha256,
    sftp_server: str | None = None,
) -> Verdict:
    """Allow ``command`` (sshd's ``SSH_ORIGINAL_COMMAND``) as an argv, or say why not."""
    if not command:
        return Verdict(None, "no interactive login with this key")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return Verdict(None, f"cannot split the command: {exc}")
    sudo: tuple[str, ...] = ()
    if argv[:3] == ["sudo", "-n", "--"]:
        sudo, argv = tuple(argv[:3]), argv[3:]
    if not argv:
        return Verdict(None, "empty command")
    if len(argv) == 1 and (argv[0] == "internal-sftp" or argv[0].endswith("/sftp-server")):
        if sftp_server is None:
            return Verdict(None, f"no sftp-server on this node (looked in {SFTP_SERVERS})")
        return Verdict((*sudo, sftp_server), "sftp")
    if _plain(argv):
        return Verdict((*sudo, *argv), argv[0])
    if argv[0] == "python3":
        why = _collector(argv, config, digest_of)
        return Verdict(None, why) if why else Verdict((*sudo, *argv), "collector")
    return Verdict(None, "not a command the tpwarden watchdog runs")


def _log(message: str) -> None:
    try:
        syslog.openlog("tpwarden-ssh-gate", syslog.LOG_PID, syslog.LOG_AUTH)
        syslog.syslog(syslog.LOG_NOTICE, message)
    except OSError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    try:
        config = load_config(args[0] if args else DEFAULT_CONFIG)
    except ValueError as exc:  # fail closed: no config, nothing runs
        verdict = Verdict(None, f"gate config unreadable ({exc}); provision the node again")
    else:
        sftp = next((p for p in SFTP_SERVERS if os.access(p, os.X_OK)), None)
        verdict = decide(command, config, sftp_server=sftp)
    client = os.environ.get("SSH_CLIENT", "?").split(" ")[0]
    if not verdict.allowed or verdict.argv is None:
        _log(f"refused from {client}: {command!r}: {verdict.reason}")
        print(f"tpwarden-ssh-gate: refused: {command!r}: {verdict.reason}", file=sys.stderr)
        return REFUSED_RC
    _log(f"allowed from {client}: {verdict.reason}: {shlex.join(verdict.argv)}")
    try:
        os.execvp(verdict.argv[0], list(verdict.argv))
    except OSError as exc:  # e.g. no docker on this node: one line, as a shell would say it
        print(f"tpwarden-ssh-gate: {verdict.argv[0]}: {exc.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    raise SystemExit(main())
