"""Draft-length rollouts: change the launcher config, restart, verify, measure, keep or roll back.

`sequence` (the recorded, resumable steps and the rollback rules), `edit` (the inventory edit,
comments kept), `ports` (the real cluster, benchmark, watchdog hold and clock behind the
sequence's injected ports).
"""
