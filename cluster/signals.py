"""Which signal ended a process, and what it means: one vocabulary for the boot reader (vLLM's
`Worker proc VllmWorker-1 died unexpectedly (exit code: -4)`), a container's exit status (docker's
`State.ExitCode` 132 is 128 + 4) and the incident dossier. Pure; no I/O.

The numbers are Linux's (x86-64 and arm64 share them): the logs and exit statuses come from the
nodes, whatever the control machine runs. The signals a crash is usually named by have a meaning
written for an operator; any other number is named by Python's `signal.Signals` when the control
machine knows it (`SIG<N>` otherwise).

A signal is a `cause` when it ends a process from outside Python's own error handling (a native
crash, the kernel's OOM killer): then no traceback says why, and the signal is the root cause.
SIGTERM, SIGINT and SIGHUP are requests to stop: a worker that died by them was usually stopped
by its parent after another error, which the log names.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

from tpwarden.cluster.durable import JSONObject

# a shell's and docker's exit status of a process ended by signal N is 128 + N
SIGNAL_EXIT_BASE = 128
_MAX_SIGNAL = 64


@dataclass(frozen=True)
class Signal:
    """A Linux signal: `name` SIGILL, `short` two or three words for a one-line report,
    `meaning` a sentence for an operator, `cause` (see the module's docstring)."""

    number: int
    name: str
    short: str
    meaning: str
    cause: bool

    def to_json(self) -> JSONObject:
        return {
            "number": self.number,
            "name": self.name,
            "short": self.short,
            "meaning": self.meaning,
            "cause": self.cause,
        }


_KNOWN = (
    Signal(1, "SIGHUP", "hangup", "its terminal or controlling process went away", False),
    Signal(2, "SIGINT", "interrupted", "interrupted (Ctrl-C or its parent's interrupt)", False),
    Signal(
        4,
        "SIGILL",
        "illegal instruction",
        "an instruction this CPU or its container does not allow",
        True,
    ),
    Signal(
        6,
        "SIGABRT",
        "aborted",
        "a native library aborted the process (a failed C++ check or assertion)",
        True,
    ),
    Signal(
        7,
        "SIGBUS",
        "bus error",
        "a bad memory access, often shared memory (/dev/shm) too small",
        True,
    ),
    Signal(8, "SIGFPE", "arithmetic fault", "a native arithmetic fault (division by zero)", True),
    Signal(
        9,
        "SIGKILL",
        "killed",
        "killed, often by the kernel's out-of-memory killer",
        True,
    ),
    Signal(
        11,
        "SIGSEGV",
        "segmentation fault",
        "a native crash: an invalid memory access in a C, C++ or CUDA library",
        True,
    ),
    Signal(
        15,
        "SIGTERM",
        "terminated",
        "asked to stop, usually by its parent after another error",
        False,
    ),
)
_BY_NUMBER = {s.number: s for s in _KNOWN}
_BY_NAME = {s.name: s for s in _KNOWN}
# what Python's faulthandler prints ("Fatal Python error: Bus error") -> the signal
FAULTHANDLER_NAMES = {
    "Segmentation fault": 11,
    "Bus error": 7,
    "Aborted": 6,
    "Illegal instruction": 4,
    "Floating-point exception": 8,
    "Floating point exception": 8,
}


def signal_by_number(number: int) -> Signal:
    """The signal numbered `number` (1..64); an unknown one is named `SIG<N>`."""
    known = _BY_NUMBER.get(number)
    if known is not None:
        return known
    try:
        name = _signal.Signals(number).name
        text = _signal.strsignal(number) or name
    except ValueError:
        name = text = f"SIG{number}"
    return Signal(number, name, text.lower(), text, False)


def signal_by_name(name: str) -> Signal | None:
    """`SIGSEGV` -> its Signal; None for a name that is not a signal's."""
    name = name.upper()
    known = _BY_NAME.get(name)
    if known is not None:
        return known
    try:
        return signal_by_number(int(_signal.Signals[name]))
    except KeyError:
        return None


def from_exitcode(exitcode: int | None) -> Signal | None:
    """Python's `Process.exitcode` (what vLLM logs): -N is death by signal N; None otherwise."""
    if exitcode is None or not -_MAX_SIGNAL <= exitcode < 0:
        return None
    return signal_by_number(-exitcode)


def from_exit_status(status: int | None) -> Signal | None:
    """A container's or a shell's exit status: 128 + N is death by signal N; None otherwise."""
    if status is None or not SIGNAL_EXIT_BASE < status <= SIGNAL_EXIT_BASE + _MAX_SIGNAL:
        return None
    return signal_by_number(status - SIGNAL_EXIT_BASE)


def exit_status_text(status: int | None, oom_killed: bool = False) -> str:
    """What a container's exit status says beyond its number: `SIGKILL, killed, often by the
    kernel's out-of-memory killer` for 137, `SIGKILL, OOM-killed` when docker's
    `State.OOMKilled` says so, "" for a status that is no signal's (0, 1)."""
    sig = from_exit_status(status)
    if sig is None:
        return "OOM-killed" if oom_killed else ""
    return f"{sig.name}, OOM-killed" if oom_killed else f"{sig.name}, {sig.meaning}"


def container_exit(status: int | None, oom_killed: bool = False, state: str = "exited") -> str:
    """`container exited (137): SIGKILL, killed, often by the kernel's out-of-memory killer`;
    `container exited (0)` when the status is no signal's."""
    text = exit_status_text(status, oom_killed)
    return f"container {state} ({status})" + (f": {text}" if text else "")
