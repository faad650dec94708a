"""One error root for the whole toolkit.

Every gateway (SSH, Docker, NVML, sysfs, HTTP, Ansible) translates its library's exceptions into
one of these, so callers and the CLI handle a small, known set of failures.
"""

from __future__ import annotations


class TpwardenError(Exception):
    """Root of every error tpwarden raises on purpose."""

    exit_code = 1


class ConfigError(TpwardenError):
    """Invalid inventory or setting. Names the file, line, key and a fix; nothing has run."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        # no file: the error is about an argument or a setting, not a place in the inventory
        text = ""
        if self.file:
            text = self.file + (f":{self.line}" if self.line is not None else "") + ": "
        if self.key:
            text += f"{self.key}: "
        text += self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class NodeUnreachable(TpwardenError):
    """A node could not be reached (connect refused, timeout, DNS, auth, unknown host key)."""

    def __init__(self, node: str, reason: str) -> None:
        self.node = node
        self.reason = reason
        super().__init__(f"{node}: unreachable: {reason}")


class HostKeyError(NodeUnreachable):
    """The node's SSH host key is unknown or changed: refused, never auto-accepted."""


class CommandFailed(TpwardenError):
    """A command on a node ran and exited non-zero."""

    def __init__(self, node: str, argv: list[str] | tuple[str, ...], rc: int, stderr: str = ""):
        self.node = node
        self.argv = list(argv)
        self.rc = rc
        self.stderr = stderr
        tail = stderr.strip().splitlines()[-1:] if stderr else []
        super().__init__(
            f"{node}: {argv[0] if argv else '?'} exited {rc}" + (f": {tail[0]}" if tail else "")
        )


class DockerError(TpwardenError):
    """The Docker engine refused or failed a request."""


class NvmlError(TpwardenError):
    """NVML (the GPU management library) failed in a way that is not a normal 'not supported'."""


class ProbeError(TpwardenError):
    """An HTTP probe of the server could not be made or understood."""


class LabError(TpwardenError):
    """The simulated lab could not be set up, changed or torn down."""
