"""Kernel log lines that matter to a GPU server: NVIDIA Xid errors, other NVRM errors, the OOM
killer (issue 32).

`match_line` is pure and tested on real lines from public issue threads
(tests/fixtures/kernlog/public-lines.txt names the source of each). The Xid numbers are NVIDIA's
(https://docs.nvidia.com/deploy/xid-errors/). `read_kernel_log` is the one reader of the
node's kernel log: `journalctl -k --since`, else `dmesg`; a missing tool or a refusal is a
finding in the result, never an exception. Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from tpwarden.cluster.durable import JSONObject

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+),"
    r"(?: pid=(?P<pid>'<unknown>'|\d+),)?(?: name=(?P<name>[^,]*),)?\s*(?P<message>.*)$"
)
_NVRM = re.compile(r"NVRM: (?P<message>.*)$")
_OOM_KILLED = re.compile(r"(?:Out of memory: )?Killed process (?P<pid>\d+) \((?P<name>.*?)\)")
_OOM_INVOKED = re.compile(r"(?P<name>\S+) invoked oom-killer:")
_NVRM_ERROR_WORDS = ("fallen off the bus", "failed", "error", "fault", "timeout", "ecc")
# NVIDIA's Xid catalogue names, for the ones a hung or dead rank is most often tied to
XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to a previous error",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}
KERNLOG_TIMEOUT_S = 2.0
MAX_LINES = 200


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # "xid" | "nvrm" | "oom"
    line: str
    xid: int | None = None
    pci: str | None = None
    pid: int | None = None
    name: str | None = None
    message: str | None = None

    def to_json(self) -> JSONObject:
        return asdict(self)


def match_line(line: str) -> KernelEvent | None:
    """One kernel log line -> the event it records, or None when it is not one we want."""
    text = line.rstrip("\n")
    if m := _XID.search(text):
        pid = m.group("pid")
        name = m.group("name")
        return KernelEvent(
            "xid",
            text.strip(),
            xid=int(m.group("xid")),
            pci=m.group("pci"),
            pid=int(pid) if pid and pid.isdigit() else None,
            name=None if name in (None, "<unknown>") else name,
            message=m.group("message").strip() or None,
        )
    if m := _NVRM.search(text):
        message = m.group("message").strip()
        if any(word in message.lower() for word in _NVRM_ERROR_WORDS):
            return KernelEvent("nvrm", text.strip(), message=message)
        return None
    if m := _OOM_KILLED.search(text):
        return KernelEvent("oom", text.strip(), pid=int(m.group("pid")), name=m.group("name"))
    if m := _OOM_INVOKED.search(text):
        return KernelEvent("oom", text.strip(), name=m.group("name"), message="invoked oom-killer")
    return None


def match_lines(lines: Iterable[str], limit: int = MAX_LINES) -> list[KernelEvent]:
    """The events of ``lines``, the LAST ``limit`` of them (the newest matter most)."""
    events = [e for e in (match_line(ln) for ln in lines) if e is not None]
    return events[-limit:]


def xid_name(xid: int) -> str | None:
    return XID_NAMES.get(xid)


def _run(argv: list[str], timeout_s: float) -> tuple[str | None, str | None]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]}: no answer within {timeout_s:g} s"
    except OSError as e:
        return None, f"{argv[0]}: {e}"
    if proc.returncode != 0:
        return None, f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()[-200:]}"
    return proc.stdout, None


def read_kernel_log(since_s: float, timeout_s: float = KERNLOG_TIMEOUT_S) -> JSONObject:
    """Matching kernel log lines of the last ``since_s`` seconds: ``{"source", "events",
    "reason"}``. journalctl filters by time; dmesg cannot, so with it every line still in the
    ring buffer is read (``source`` says which)."""
    reasons: list[str] = []
    if shutil.which("journalctl"):
        argv = ["journalctl", "-k", "--no-pager", "-q", "--since", f"-{int(since_s)}s"]
        out, why = _run(argv, timeout_s)
        if out is not None:
            return {"source": "journalctl -k", "events": _json(out), "reason": None}
        reasons.append(str(why))
    else:
        reasons.append("journalctl: not installed")
    if shutil.which("dmesg"):
        out, why = _run(["dmesg"], timeout_s)
        if out is not None:
            return {"source": "dmesg (whole ring buffer)", "events": _json(out), "reason": None}
        reasons.append(str(why))
    else:
        reasons.append("dmesg: not installed")
    return {"source": None, "events": [], "reason": "; ".join(reasons)}


def _json(text: str) -> list[JSONObject]:
    return [e.to_json() for e in match_lines(text.splitlines())]
