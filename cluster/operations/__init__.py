"""Operations: what a command does as a whole (design principle 14).

Between the CLI and the jobs: an operation takes the locks, holds the watchdog, writes the
events, does the job and returns a typed result, called the same way by the CLI, the watchdog
and tuning. The CLI parses, calls one operation and renders; no lock, hold or event-log call
is made above this layer (import contract `cli-renders`).

* `control`: `up`, `down`, `restart` (an operator's and the watchdog's restart job's), and
  `acting`, the cluster lock with the watchdog held.
* `rollout`: `rollout`, `rollback`, `tune drafter --apply`'s rollout: their locks and ports.
* `report`: the morning report's assembly from the cluster or a directory.
* `watchdog_hold`: the one writer of the watchdog hold and its events; `watchdog_host`: where
  the watchdog runs, and the two connectors (here, over SSH) that reach it.
"""
