"""Experiments (issue 54): a queue of variants measured against production by a deadline.

`plan_file` reads and validates plan.yml (every error at its file:line, nothing contacted);
`check` validates each variant's changes against the inventory as `rollout` would apply them;
`policy` (pure, time injected) estimates the queue from recorded boot and canary times and
decides what fits before the deadline; `resume` (pure) says what is left of a queue from its
results directory; `from_why` (pure) writes the plan that reverts `ledger why`'s differences.
The night: `night` (its results directory), `queue` (the queue against injected ports);
its deadline guard: `guard` (pure decisions, `guard.json`) and `guard_loop` (the guard's loop
against injected ports); `show` (pure) what `experiment show` reads out of a night's files.
"""
