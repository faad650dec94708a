"""Secret resolution: a `SecretRef` (env var or file) -> its value, the one way tpwarden does it.

Where the file is read depends on who asks, so the reader is injected: cluster control reads a
node's root-only file over SFTP, the watchdog reads it where it runs (the head node). The value
is never logged and never part of a plan or an argv. `redact_argv` hides what looks like one in
a command line that is stored or shown (a bench manifest's, an incident dossier's).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.settings import SecretRef, looks_like_secret


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


_SECRET_FLAG = re.compile(r"^--?[\w.-]*(token|secret|password|passwd|api[-_]?key|key)$", re.I)
_SECRET_ASSIGN = re.compile(
    r"^(--?)?([\w.-]*(token|secret|password|passwd|api[-_]?key)[\w.-]*)=(.+)$", re.I
)
REDACTED = "<redacted>"


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Hide secret values in a command line: `--api-key X`, `--token=X`, `HF_TOKEN=X`, and
    anything that looks like a token by itself (hf_..., sk-..., ghp_...)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        m = _SECRET_ASSIGN.match(arg)
        if m:
            out.append(f"{m.group(1) or ''}{m.group(2)}={REDACTED}")
        elif _SECRET_FLAG.match(arg):
            out.append(arg)
            hide_next = True
        elif looks_like_secret(arg):
            out.append(REDACTED)
        else:
            out.append(arg)
    return out
