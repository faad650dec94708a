"""The restart job: the watchdog's restart, run as a detached child process.

    python -m tpwarden.watchdog.restart_job INVENTORY WHY [CONTROL_STATE_DIR]
        [--ssh-key PATH] [--known-hosts PATH]

`ControllerActuator.restart()` starts it in its own session and waits for it, so a daemon
killed mid-restart never leaves a half-applied plan. It runs the one restart operation
(`tpwarden.cluster.operations.control.restart`, as `tpwarden restart` does; as the watchdog: its
daemon holds the cluster restart lock, and it does not wait for the boot) and prints ONE JSON line, the result (`tpwarden.watchdog.actuator.result_doc`, or
`{"ok": false, "error": ...}`); the exit status is 0 applied, 1 failed, 2 error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Protocol, TextIO

from tpwarden.cluster.control.applied import read_applied
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.operations.control import WATCHDOG, restart
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.ssh.identity import SshIdentity
from tpwarden.watchdog.actuator import RESTART_JOB_MODULE, WATCHDOG_WHO, result_doc


class ControllerFactory(Protocol):
    """`Controller` itself (tests inject a fake)."""

    def __call__(
        self,
        spec: ClusterSpec,
        *,
        state_dir: str | None,
        applied_source: tuple[str, str] | None,
    ) -> Controller: ...


def restart_job(
    inventory: str,
    why: str,
    control_state_dir: str | None = None,
    identity: SshIdentity = SshIdentity(),
    *,
    out: TextIO | None = None,
    controller: ControllerFactory | None = None,
) -> int:
    """The restart the watchdog runs as a child (the restart operation, as the watchdog); prints
    one JSON line (the result) to `out` (stdout) and returns the exit status (0 applied,
    1 failed, 2 error). `inventory`: an applied-plan record (`*.json`, replayed as recorded,
    whatever the inventory file says now) or an inventory file. `identity`: the watchdog's own
    SSH key and known_hosts (the record keeps the plan's). `controller`: a Controller factory
    (tests inject a fake)."""
    out = sys.stdout if out is None else out
    try:
        plan = read_applied(inventory) if inventory.endswith(".json") else None
        spec = identity.apply(plan.spec() if plan is not None else load_inventory(Path(inventory)))
        source = (plan.inventory_text, plan.inventory_path) if plan is not None else None
        with (controller or Controller)(
            spec, state_dir=control_state_dir, applied_source=source
        ) as ctl:
            result = restart(ctl, why, actor=WATCHDOG, who=WATCHDOG_WHO, wait_ready=False).result
            doc = result_doc(result, spec)
    except Exception as exc:  # noqa: BLE001 - reported to the waiting daemon as data
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}), file=out)
        out.flush()
        return 2
    print(json.dumps(doc), file=out)
    out.flush()
    return 0 if doc["ok"] else 1


def main(argv: list[str], controller: ControllerFactory | None = None) -> int:
    """`INVENTORY WHY [CONTROL_STATE_DIR] [--ssh-key P] [--known-hosts P]` -> exit status.
    `controller`: as for `restart_job` (tests inject a fake)."""
    parser = argparse.ArgumentParser(prog=f"python -m {RESTART_JOB_MODULE}")
    parser.add_argument("inventory")
    parser.add_argument("why")
    parser.add_argument("control_state_dir", nargs="?")
    parser.add_argument("--ssh-key")
    parser.add_argument("--known-hosts")
    args = parser.parse_args(argv)
    identity = SshIdentity(args.ssh_key, args.known_hosts)
    return restart_job(
        args.inventory, args.why, args.control_state_dir, identity, controller=controller
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
