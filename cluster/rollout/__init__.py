"""Rollouts: change the launcher config, restart, verify, measure, keep or roll back.

`sequence` (the recorded, resumable steps and the rollback rules), `edit` (`--set`, what a change
changes, guards), `layout` (which file of the inventory a value came from, and the inventory as
it would be with edited files), `yaml_edit` (the minimal diff of one file), `ports` (the real
cluster, benchmark, watchdog hold and clock behind the sequence's injected ports).
"""
