"""Reading a known_hosts file the way tpwarden's SSH client trusts it (pure, no network).

paramiko's own reader raises a bare traceback on OpenSSH marker lines (`@cert-authority`,
`@revoked`: the marker shifts the fields, so the key type is read as base64) and skips other
malformed lines silently. Here each line is one of:

- a plain entry (`hosts keytype base64 [comment]`, hashed host names too): trusted;
- `@revoked hosts keytype base64`: that key is refused for every host, even where a plain line
  lists it (stricter than OpenSSH, which scopes the line to its host patterns);
- `@cert-authority patterns keytype base64`: a CA for host certificates. tpwarden's client
  checks plain host keys only, so such a line grants nothing; a node it would have vouched for
  is refused with the file and line named (`authority_for`).

Any other malformed line is a `KnownHostsError` naming the file and line; a key type paramiko
cannot read is skipped (as paramiko does): it can never match what a node offers.
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass

import paramiko


class KnownHostsError(ValueError):
    """A known_hosts line tpwarden cannot read; the message names the file and line."""


@dataclass(frozen=True)
class Authority:
    line: int
    patterns: tuple[str, ...]


@dataclass(frozen=True)
class KnownHosts:
    path: str
    entries: tuple[paramiko.hostkeys.HostKeyEntry, ...] = ()
    revoked: frozenset[tuple[str, str]] = frozenset()  # (key type, base64)
    authorities: tuple[Authority, ...] = ()

    def is_revoked(self, key: paramiko.PKey) -> bool:
        return (key.get_name(), key.get_base64()) in self.revoked

    def authority_for(self, host: str, port: int = 22) -> Authority | None:
        """The first @cert-authority line whose host patterns match this host, if any."""
        name = host.lower() if port == 22 else f"[{host.lower()}]:{port}"
        for authority in self.authorities:
            if _matches(name, authority.patterns):
                return authority
        return None

    def load_into(self, keys: paramiko.HostKeys) -> None:
        """Add the trusted entries to a paramiko client's host keys, revoked keys left out."""
        for entry in self.entries:
            if self.is_revoked(entry.key):
                continue
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)


def read_known_hosts(path: str) -> KnownHosts:
    """Parse `path` (OSError when it cannot be read; KnownHostsError for a bad line)."""
    entries: list[paramiko.hostkeys.HostKeyEntry] = []
    revoked: set[tuple[str, str]] = set()
    authorities: list[Authority] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{number}"
            marker = None
            if line.startswith("@"):
                marker, _, line = line.partition(" ")
                line = line.strip()
                if marker not in ("@revoked", "@cert-authority"):
                    raise KnownHostsError(f"{where}: unknown marker {marker}")
            entry = _entry(line, where)
            if entry is None:
                continue
            if marker == "@revoked":
                revoked.add((entry.key.get_name(), entry.key.get_base64()))
            elif marker == "@cert-authority":
                authorities.append(Authority(number, tuple(entry.hostnames)))
            else:
                entries.append(entry)
    return KnownHosts(path, tuple(entries), frozenset(revoked), tuple(authorities))


def _entry(line: str, where: str) -> paramiko.hostkeys.HostKeyEntry | None:
    """One entry; None for a key type paramiko cannot read (skipped, as paramiko does)."""
    words = line.split()  # OpenSSH allows any run of blanks; paramiko one space or tab
    if len(words) < 3:
        raise KnownHostsError(f"{where}: not a known_hosts line (expected: hosts keytype key)")
    try:
        return paramiko.hostkeys.HostKeyEntry.from_line(" ".join(words))
    except (paramiko.hostkeys.InvalidHostKey, paramiko.SSHException, binascii.Error) as exc:
        raise KnownHostsError(f"{where}: not a known_hosts line ({exc})") from None


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """OpenSSH host patterns: `*` and `?` wildcards, `!pattern` excludes."""
    hit = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = re.escape(pattern.removeprefix("!").lower()).replace(r"\*", ".*").replace(r"\?", ".")
        if re.fullmatch(glob, name):
            if negated:
                return False
            hit = True
    return hit
