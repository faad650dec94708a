"""The sub-commands a TAB completion offers under each command group, with their short help, so
that `tpwarden watchdog h<TAB>` answers without importing the group (issue 30: the group's module
pulls typer's pydantic coercion, the settings and httpx). Only `lazy.CompletionGroup` reads it.

Key: the group's path ("eval datasets"); value: sub-command -> the short help its real command
gives (``get_short_help_str()``), in the real group's order. Only groups without options of their
own are listed (``rollout`` has some; the lab may be absent): the others are completed from the
real group, imported. `tests/unit/test_cli_completion_table.py` fails, printing the table to paste
here, when a command is added, renamed or re-worded.
"""

from __future__ import annotations

SUBCOMMANDS: dict[str, dict[str, str]] = {
    "inventory": {
        "check": "Validate an inventory; exit 2 with...",
    },
    "watchdog": {
        "run": "Run the watchdog in the foreground until...",
        "status": "State, consecutive failures, last probe,...",
        "hold": "Suppress automatic restarts for a limited...",
        "release": "End an operator hold, and re-arm restarts...",
        "history": "Events from events.jsonl: decisions,...",
    },
    "thermal": {
        "agent": "Run the thermal agent on this node until...",
        "start": "Start the agent on every node: the...",
        "stop": "Stop the agent on every node (whichever...",
        "status": "Per node: agent running, last sample age,...",
        "watch": "Live table of every node's latest sample...",
        "report": "Peaks, margins to critical, throttle...",
        "zones": "Per node and zone: type, role (if mapped),...",
    },
    "bench": {
        "sweep": "One `vllm bench serve` per concurrency...",
        "prefill": "TTFT and prefill tok/s for long random...",
        "compare": "Two runs side by side with % changes, and...",
    },
    "decide": {
        "ask": "One multiple-choice question ->...",
        "yesno": "P(Yes) vs P(No) from the first token...",
        "score": "A distribution over integer scores and its...",
        "run": "Decide every item of a JSONL file;...",
        "calibrate": "Fit a temperature (ECE, reliability...",
    },
    "eval": {
        "presets": "The built-in task presets: path, few-shot,...",
        "run": "Run lm-eval tasks against the server; one...",
        "compare": "Per-task score deltas, and what changed...",
        "datasets": "The tasks' datasets for a cluster without...",
        "image": "The lm-eval client image: built on the...",
    },
    "eval datasets": {
        "fetch": "On a machine with Hub access: download...",
        "load": "Put an archive's datasets into the head's...",
    },
    "eval image": {
        "build": "Build the eval client image on the head:...",
    },
    "experiment": {
        "run": "Validate the plan (exit 2 at its...",
        "status": "Where the plan's night stands: each...",
        "show": "The night's full results: for each variant...",
        "abort": "Stop the plan's night and restore production.",
        "guard": "The night's deadline guard, in the...",
    },
    "ledger": {
        "list": "Records, newest first: when the server...",
        "show": "One record: its fingerprint by node...",
        "diff": "What differs between two records, grouped...",
        "why": "Is the latest canary slower than the best...",
        "canary": "Run one canary now, if the server is idle:...",
        "export": "The ledger as JSON lines: one line per...",
    },
    "prometheus": {
        "config": "Scrape jobs tpwarden-thermal,...",
        "rules": "tpwarden's alert rules (group `tpwarden`),...",
    },
    "tune": {
        "drafter": "Sweep at the current k, record...",
    },
    "flags": {
        "fetch": "Read the flag table from the serving...",
        "show": "Say which flag table `inventory check` and...",
    },
    "clocks": {
        "show": "Read SM clocks and each node's record of...",
        "cap": "Lock SM clocks to 0..MHZ on every node...",
        "reset": "Remove the clock cap on every node (like...",
    },
    "incident": {
        "list": "The stored dossiers, newest first: when,...",
        "show": "One dossier: the verdict and the facts it...",
        "capture": "Take a dossier of the running server now,...",
    },
}
