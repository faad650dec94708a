"""Jinja filters for the tpwarden playbooks (loaded by Ansible from this directory)."""

from __future__ import annotations


def systemd_quote(value: object) -> str:
    """One argument of a systemd ExecStart= line, double-quoted: backslash and quote escaped,
    % and $ doubled so systemd neither expands specifiers nor variables in it."""
    text = str(value)
    if any(c in text for c in "\n\r\0"):
        raise ValueError(f"a unit argument cannot hold a newline or NUL: {text!r}")
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{text}"'


def systemd_argv(argv: list[object]) -> str:
    """An ExecStart= command line from an argv list (each argument quoted)."""
    return " ".join(systemd_quote(a) for a in argv)


def systemd_dir_under(path: str, base: str) -> str:
    """``/var/lib/tpwarden/watchdog`` under ``/var/lib`` -> ``tpwarden/watchdog``; '' if not
    under it (then the unit uses ReadWritePaths= instead of StateDirectory=/LogsDirectory=)."""
    base = base.rstrip("/") + "/"
    path = path.rstrip("/")
    return path[len(base) :] if path.startswith(base) and len(path) > len(base) else ""


def option_pairs(mapping: dict[object, object] | None, flag: str) -> list[str]:
    """``{"3": "P-cores"}`` with ``--zone-role`` -> ``["--zone-role", "3=P-cores"]`` (sorted by
    key, so the rendered unit does not change when the inventory's order does)."""
    argv: list[str] = []
    for key, value in sorted((mapping or {}).items(), key=lambda kv: str(kv[0])):
        argv += [flag, f"{key}={value}"]
    return argv


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {
            "systemd_quote": systemd_quote,
            "systemd_argv": systemd_argv,
            "systemd_dir_under": systemd_dir_under,
            "option_pairs": option_pairs,
        }
