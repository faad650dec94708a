"""The crash of a whole server from its nodes' logs: which ranks died, by which signal, when.

The head's log alone often cannot name the signal: its executor may log `exit code: None` for
its own worker while a worker node's log says `exit code: -4` for another rank (the lab's SIGILL
samples). And only the head's log shows the server's boot and requests, so the phase comes from
it. Pure: the logs come in as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from tpwarden.cluster.boot.crash import Crash, combine
from tpwarden.cluster.boot.progress import BootProgress, read_boot_log

# How much of a node's log a crash is read from: the death line is near its end (the head's
# comes before the engine's traceback and its shutdown, ~80 lines), and the head's ready line
# and access log within it say the phase.
CRASH_TAIL_LINES = 400


def read_crash(text: str) -> Crash | None:
    """The workers that died in one log (a whole log or its tail), or None."""
    return read_boot_log(re.split(r"[\r\n]+", text)).crash


def cluster_crash(
    logs: Mapping[str, str], head: str | None, head_crash: Crash | None = None
) -> Crash | None:
    """Every node's log read for its dead workers, put together (`crash.combine`); the head's
    crash from its whole log (`head_crash`, as a boot tracker saw it) beats its tail's."""
    crashes: dict[str, Crash] = {}
    for node, text in logs.items():
        crash = head_crash if node == head and head_crash is not None else read_crash(text)
        if crash is not None:
            crashes[node] = crash
    if head is not None and head_crash is not None and head not in crashes:
        crashes[head] = head_crash
    return combine(crashes, head)


def with_crash(progress: BootProgress, crash: Crash | None) -> BootProgress:
    """A failed boot's progress with the server's crash: named by its signal when the signal is
    the cause (the head's own error may only say `exit code: None` or "container exited (0)")."""
    if crash is None:
        return progress
    progress = replace(progress, crash=crash)
    if crash.named and crash.signal is not None:
        return replace(
            progress,
            error=crash.describe(),
            error_kind=crash.signal.name,
            error_context=progress.error_context,
        )
    return progress
