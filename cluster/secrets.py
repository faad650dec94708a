"""Secret resolution: a `SecretRef` (env var or file) -> its value, the one way tpwarden does it.

Where the file is read depends on who asks, so the reader is injected: cluster control reads a
node's root-only file over SFTP, the watchdog reads it where it runs (the head node). The value
is never logged and never part of a plan or an argv.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.settings import SecretRef


def resolve_secret(
    ref: SecretRef,
    *,
    read_file: Callable[[str], str],
    environ: Mapping[str, str],
    what: str,
    where: str,
    key: str = "secrets",
    hint: str | None = None,
) -> str:
    """The secret's value, stripped (it may be empty: the caller decides whether that is fine).

    ConfigError when the variable is not set or the file is not readable (`OSError` from
    `read_file`); other errors of `read_file` (a node unreachable) pass through as they are.
    `what` and `where` make the message: "{what}: environment variable X is not set {where}".
    """
    if ref.env:
        value = environ.get(ref.env)
        if value is None:
            raise ConfigError(
                f"{what}: environment variable {ref.env} is not set {where}", key=key, hint=hint
            )
        return value
    try:
        return read_file(str(ref.file)).strip()
    except OSError as exc:
        raise ConfigError(
            f"{what}: file {ref.file} is not readable {where} ({exc.strerror or exc})",
            key=key,
            hint=hint,
        ) from None
