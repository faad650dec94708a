"""Is a process frozen by the cgroup freezer (`docker pause`, a systemd freeze)? (issue 32)

Its state and wchan do not say so reliably. Captured on this project's machine (kernel 6.18,
tests/fixtures/proc/frozen-*): under the cgroup v1 freezer a frozen task shows D with the wchan
it slept in before (`hrtimer_nanosleep`, `futex_do_wait`), under the v2 freezer S at
`get_signal`. The freezer's own state does say it:

* cgroup v1: `freezer.state` of the process's freezer cgroup, THAWED, FREEZING or FROZEN
  (Documentation/admin-guide/cgroup-v1/freezer-subsystem.rst);
* cgroup v2: the `frozen` key of the process's cgroup's `cgroup.events`, 1 or 0 (kernel 5.2+,
  Documentation/admin-guide/cgroup-v2.rst), under /sys/fs/cgroup, or /sys/fs/cgroup/unified on
  a hybrid host.

The cgroup paths in /proc/PID/cgroup are relative to the reader's cgroup namespace: read from
the host's, as the dossier is. Read from another namespace (a diagnostic container beside the
rank's) a path may climb out of it with `..`; joined to the reader's own cgroup mount it would
name some other cgroup, so such a path gives no answer. Standard library only: this runs on
the nodes.
"""

from __future__ import annotations

from pathlib import Path

V1_STATES = {"FROZEN": True, "FREEZING": True, "THAWED": False}


def freezer_files(cgroup_text: str, cgroup_root: str | Path = "/sys/fs/cgroup") -> list[Path]:
    """Where the freezer state of a process with this /proc/PID/cgroup can be read: the v1
    freezer's `freezer.state`, then v2's `cgroup.events` (pure v2, then a hybrid host's)."""
    root = Path(cgroup_root)
    out: list[Path] = []
    for line in cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.strip().lstrip("/")
        if ".." in relative.split("/"):
            continue  # outside the reader's cgroup namespace (read from a container): unknown
        if "freezer" in controllers.split(","):
            out.insert(0, root / "freezer" / relative / "freezer.state")
        elif hierarchy == "0" and controllers == "":
            out += [
                root / relative / "cgroup.events",
                root / "unified" / relative / "cgroup.events",
            ]
    return out


def frozen_from(path: Path, text: str) -> bool | None:
    """One freezer file's answer; None when it does not give one (an unknown state, or a
    `cgroup.events` without `frozen`: a kernel before 5.2)."""
    if path.name == "freezer.state":
        return V1_STATES.get(text.strip())
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "frozen":
            return value.strip() == "1"
    return None


def read_frozen(
    pid: int, proc_root: str | Path = "/proc", cgroup_root: str | Path = "/sys/fs/cgroup"
) -> bool | None:
    """True when either freezer holds the process, False when the ones readable do not, None
    when none can be read (the process is gone, no freezer is mounted)."""
    try:
        cgroup_text = (Path(proc_root) / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    answers = []
    for path in freezer_files(cgroup_text, cgroup_root):
        try:
            answers.append(frozen_from(path, path.read_text()))
        except OSError:
            continue
    if True in answers:
        return True
    return False if False in answers else None
