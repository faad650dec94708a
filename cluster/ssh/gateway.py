"""The SSH gateway: one paramiko connection per node, reused for everything one command does.

Rules this module enforces (design principle 4, "remote execution is safe"):
- host keys are verified against the inventory's known_hosts file (or the user's
  ~/.ssh/known_hosts); an unknown or changed key is a `HostKeyError` naming the node and the
  fix. Unknown keys are accepted (in memory only, never written back) only when the inventory
  sets `allow_unknown_hosts`.
- commands are argument lists, joined with `shlex.join`; there is no string-built shell.
- scripts travel as files over SFTP to a private temp dir and run from there (no heredocs).
- paramiko and socket errors become `NodeUnreachable` / `HostKeyError` / `CommandFailed`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import secrets
import select
import shlex
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import paramiko
from tpwarden.cluster.errors import CommandFailed, NodeUnreachable
from tpwarden.cluster.ssh.connect import SshOptions, SshTarget, connect

if TYPE_CHECKING:
    from tpwarden.cluster.settings import SshSpec
    from tpwarden.cluster.spec import NodeSpec

log = logging.getLogger(__name__)
# paramiko's transport thread logs connect failures with tracebacks; with no handler installed
# Python's last-resort handler would print them. We translate those errors ourselves.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_TIMEOUT_S = 60.0
SFTP_TIMEOUT_S = 30.0  # each SFTP operation (open, read, write, stat) on a frozen node


class CommandTimeout(CommandFailed):
    """A remote command did not finish within its timeout (reported as rc 124, like timeout(1))."""

    def __init__(self, node: str, argv: Sequence[str], timeout_s: float) -> None:
        super().__init__(node, list(argv), 124, f"timed out after {timeout_s:g} s")
        self.timeout_s = timeout_s


@dataclass(frozen=True)
class Result:
    """What a remote command did. `argv` is the command as run (after any sudo prefix)."""

    node: str
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def check(self) -> Result:
        """Return self, or raise `CommandFailed` if the command exited non-zero."""
        if self.rc != 0:
            raise CommandFailed(self.node, list(self.argv), self.rc, self.stderr)
        return self


class NodeSession:
    """One verified SSH connection to one node. Thread-safe: channels are opened per call."""

    def __init__(
        self,
        target: SshTarget,
        options: SshOptions,
        client_factory: type[paramiko.SSHClient] = paramiko.SSHClient,
    ) -> None:
        self.target = target
        self.options = options
        self._client_factory = client_factory
        self._client: paramiko.SSHClient | None = None
        self._jumps: list[paramiko.SSHClient] = []  # open jump-host connections, first hop first
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()

    @property
    def node(self) -> str:
        return self.target.node

    # -- connection -------------------------------------------------------------------------
    def client(self) -> paramiko.SSHClient:
        """The connected paramiko client (connects on first use; reconnects if dropped)."""
        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is not None and transport.is_active():
                    return self._client
                self._close_client()
            self._client = self._connect()
            return self._client

    def _connect(self) -> paramiko.SSHClient:
        client, self._jumps = connect(self.target, self.options, self._client_factory)
        return client

    def _close_client(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # noqa: BLE001 - closing a dead channel
                pass
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None
        self._close_jumps()

    def _close_jumps(self) -> None:
        for jump in reversed(self._jumps):
            jump.close()
        self._jumps = []

    def close(self) -> None:
        with self._lock:
            self._close_client()

    # -- commands ---------------------------------------------------------------------------
    def wrap_sudo(self, argv: Sequence[str], sudo: bool) -> list[str]:
        """Prefix `sudo -n --` when root is needed and we do not log in as root."""
        if sudo and self.target.user != "root":
            return ["sudo", "-n", "--", *argv]
        return list(argv)

    def run(
        self,
        argv: Sequence[str],
        timeout: float = DEFAULT_TIMEOUT_S,
        sudo: bool = False,
        check: bool = False,
    ) -> Result:
        """Run `argv` on the node (quoted with shlex.join) and collect rc, stdout and stderr.

        Raises NodeUnreachable if the node cannot be reached, CommandTimeout after `timeout`,
        and CommandFailed on a non-zero exit if `check` is true.
        """
        if not argv:
            raise ValueError("empty argv")
        full = self.wrap_sudo(argv, sudo)
        command = shlex.join(full)
        chan = self._open_channel()
        try:
            chan.exec_command(command)
            chan.shutdown_write()
            rc, out, err = self._collect(chan, full, timeout)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise NodeUnreachable(
                self.node, f"connection lost while running {full[0]}: {e or type(e).__name__}"
            ) from None
        finally:
            chan.close()
        result = Result(
            self.node,
            tuple(full),
            rc,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )
        return result.check() if check else result

    def _open_channel(self) -> paramiko.Channel:
        client = self.client()
        try:
            transport = client.get_transport()
            assert transport is not None
            return transport.open_session(timeout=self.options.connect_timeout_s)
        except (paramiko.SSHException, EOFError, OSError, AssertionError) as e:
            self.close()
            raise NodeUnreachable(self.node, f"cannot open a channel: {e}") from None

    def _collect(
        self, chan: paramiko.Channel, argv: list[str], timeout: float
    ) -> tuple[int, bytes, bytes]:
        out: list[bytes] = []
        err: list[bytes] = []
        deadline = time.monotonic() + timeout
        fd = chan.fileno()
        while True:
            moved = False
            while chan.recv_ready():
                out.append(chan.recv(65536))
                moved = True
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(65536))
                moved = True
            # OpenSSH may send exit-status before the last (window-limited) output: stop only
            # when the output has ended (EOF or close) and the buffers are drained
            if (
                (chan.eof_received or chan.closed)
                and chan.exit_status_ready()
                and not chan.recv_ready()
                and not chan.recv_stderr_ready()
            ):
                break
            if moved:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CommandTimeout(self.node, argv, timeout)
            select.select([fd], [], [], min(remaining, 0.2))
        return chan.recv_exit_status(), b"".join(out), b"".join(err)

    def stream(
        self, argv: Sequence[str], sudo: bool = False, stop: threading.Event | None = None
    ) -> Iterator[str]:
        """Yield stdout lines of a long-running command (e.g. a log follower) until it ends or
        `stop` is set."""
        full = self.wrap_sudo(argv, sudo)
        chan = self._open_channel()
        try:
            chan.set_combine_stderr(True)
            chan.exec_command(shlex.join(full))
            buf = b""
            fd = chan.fileno()
            while not (stop and stop.is_set()):
                if chan.recv_ready():
                    data = chan.recv(65536)
                    if not data:
                        break
                    buf += data
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        yield line.decode("utf-8", "replace")
                    continue
                if chan.exit_status_ready() and not chan.recv_ready():
                    break
                select.select([fd], [], [], 0.2)
            if buf:
                yield buf.decode("utf-8", "replace")
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise NodeUnreachable(self.node, f"connection lost: {e}") from None
        finally:
            chan.close()

    # -- files ------------------------------------------------------------------------------
    def sftp(self) -> paramiko.SFTPClient:
        """The session's SFTP client. Its channel is opened with the connect timeout and every
        operation on it waits at most SFTP_TIMEOUT_S (paramiko's defaults: an hour to open,
        then no limit); the session lock is not held while the channel opens."""
        with self._lock:
            if self._sftp is not None and _sftp_open(self._sftp):
                return self._sftp
        transport = self.client().get_transport()
        try:
            if transport is None:
                raise paramiko.SSHException("no transport")
            chan = transport.open_session(timeout=self.options.connect_timeout_s)
            chan.settimeout(SFTP_TIMEOUT_S)
            chan.invoke_subsystem("sftp")
            sftp = paramiko.SFTPClient(chan)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise NodeUnreachable(self.node, f"cannot open SFTP: {e}") from None
        with self._lock:
            if self._sftp is None or not _sftp_open(self._sftp):
                self._sftp = sftp
                return sftp
            mine, sftp = sftp, self._sftp
        mine.close()  # another thread opened one meanwhile
        return sftp

    def _sftp_timed_out(self, op: str, remote: str) -> NodeUnreachable:
        """Close the stuck SFTP session (the next call opens a fresh one) and say so."""
        with self._lock:
            stuck, self._sftp = self._sftp, None
        if stuck is not None:
            try:
                stuck.close()
            except Exception:  # noqa: BLE001 - closing a stuck channel
                pass
        return NodeUnreachable(
            self.node, f"SFTP {op} {remote}: no answer within {SFTP_TIMEOUT_S:g} s"
        )

    @contextlib.contextmanager
    def _sftp_errors(self, op: str, remote: str) -> Iterator[None]:
        """SFTP's errors on `remote` as ours: no answer in time (the stuck session closed),
        refused by the node (CommandFailed `sftp-<op>`), the connection lost."""
        try:
            yield
        except TimeoutError:
            raise self._sftp_timed_out(op, remote) from None
        except OSError as e:
            raise CommandFailed(self.node, [f"sftp-{op}", remote], 1, str(e)) from None
        except (paramiko.SSHException, EOFError) as e:
            raise NodeUnreachable(self.node, f"SFTP {op} {remote}: {e}") from None

    def put(self, local: str, remote: str, mode: int = 0o600) -> None:
        """Copy a local file to the node and set its mode (the mode is applied before any data
        is written, so a secret is never world-readable, even briefly)."""
        with open(local, "rb") as f:
            self.put_bytes(f.read(), remote, mode)

    @contextlib.contextmanager
    def _sftp_put(self, remote: str, mode: int) -> Iterator[paramiko.SFTPFile]:
        """`remote` opened for writing with its mode set before any data, SFTP's errors as ours
        (no answer in time, refused by the node, the connection lost)."""
        sftp = self.sftp()
        with self._sftp_errors("put", remote), sftp.open(remote, "wb") as f:
            f.chmod(mode)
            yield f

    def put_bytes(self, data: bytes, remote: str, mode: int = 0o600) -> None:
        with self._sftp_put(remote, mode) as f:
            f.write(data)

    def put_file(self, local: str, remote: str, mode: int = 0o600) -> None:
        """Stream a large local file to the node (in SFTP's chunks, never whole in memory)."""
        with open(local, "rb") as src:  # a local OSError is the caller's, not the node's
            with self._sftp_put(remote, mode) as f:
                f.set_pipelined(True)
                while chunk := src.read(1 << 20):
                    f.write(chunk)

    def put_atomic(
        self, data: bytes, remote: str, mode: int = 0o600, timeout: float = DEFAULT_TIMEOUT_S
    ) -> None:
        """Replace `remote` so that the node's readers see the old file or the new one, never a
        torn one: the bytes go to a unique hidden temp name beside it (as
        `durable.atomic_write_bytes` does locally), then `mv -f` renames it into place."""
        directory, name = posixpath.split(remote)
        tmp = posixpath.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        self.put_bytes(data, tmp, mode)
        self.run(["mv", "-f", tmp, remote], check=True, timeout=timeout)

    def get(self, remote: str, local: str) -> None:
        data = self.read_bytes(remote)
        with open(local, "wb") as f:
            f.write(data)

    def read_bytes(self, remote: str) -> bytes:
        """Read a file on the node (e.g. a secret's file: the value never touches argv)."""
        sftp = self.sftp()
        with self._sftp_errors("get", remote), sftp.open(remote, "rb") as f:
            return f.read()

    def exists(self, remote: str) -> bool:
        try:
            self.sftp().stat(remote)
            return True
        except TimeoutError:
            raise self._sftp_timed_out("stat", remote) from None
        except OSError:
            return False

    def run_script(
        self,
        local_path: str,
        args: Sequence[str] = (),
        *,
        interpreter: Sequence[str] = (),
        timeout: float = DEFAULT_TIMEOUT_S,
        sudo: bool = False,
        check: bool = False,
    ) -> Result:
        """Copy a script to a private temp dir on the node by SFTP, run it there, remove it.

        `interpreter` (e.g. `["python3"]`) runs the file through a program instead of its
        shebang. Never a heredoc: the field report lost an hour to one.
        """
        tmp = self.run(["mktemp", "-d", "/tmp/tpwarden.XXXXXXXX"], timeout=30, check=True)
        tmpdir = tmp.stdout.strip()
        remote = posixpath.join(tmpdir, os.path.basename(local_path))
        try:
            self.put(local_path, remote, mode=0o700)
            return self.run([*interpreter, remote, *args], timeout=timeout, sudo=sudo, check=check)
        finally:
            try:
                self.run(["rm", "-rf", "--", tmpdir], timeout=30)
            except (NodeUnreachable, CommandFailed):
                log.warning("%s: could not remove %s", self.node, tmpdir)


class SshPool:
    """One `NodeSession` per node for the duration of one tpwarden command.

    Use as a context manager; `close()` closes every connection. Constructing it connects to
    nothing: sessions connect lazily on first use.
    """

    def __init__(
        self,
        options: SshOptions | SshSpec | None = None,
        client_factory: type[paramiko.SSHClient] = paramiko.SSHClient,
    ) -> None:
        if not isinstance(options, SshOptions):
            options = SshOptions.from_spec(options)
        self.options = options
        self._sessions: dict[str, NodeSession] = {}
        self._lock = threading.Lock()
        self._client_factory = client_factory

    def session(self, node: NodeSpec | SshTarget) -> NodeSession:
        target = node if isinstance(node, SshTarget) else SshTarget.from_node(node)
        with self._lock:
            sess = self._sessions.get(target.node)
            if sess is None or sess.target != target:
                sess = NodeSession(target, self.options, self._client_factory)
                self._sessions[target.node] = sess
            return sess

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for s in sessions:
            s.close()

    def __enter__(self) -> SshPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sftp_open(sftp: paramiko.SFTPClient) -> bool:
    """Whether an SFTP client's channel is still open (a client made from a channel has one)."""
    chan = sftp.get_channel()
    return chan is not None and not chan.closed
