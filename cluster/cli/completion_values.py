"""What TAB offers for a value (issue 52): node names from the inventory given with -i, eval task
presets, suites and local tasks, `rollout --bench` presets, `bench sweep --dataset` and the
`--set` keys.

The shell runs `tpwarden` on every TAB, so this module imports only the standard library and
typer's click (already loaded), and nothing here connects anywhere: node names are read from the
inventory file itself, not through Ansible's engine (about a second per TAB) and never over SSH.
The lists are copies of ones that live in modules importing pydantic (the settings, the eval
presets); tests/unit/test_cli_completion_values.py holds each copy to its source and prints the
new rows when one drifts. Each completer returns (value, help) pairs; typer keeps those that
start with what was typed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from typer import _click as click

# THE default inventory (env TPWARDEN_INVENTORY), here so that TAB reads it without the CLI's
# heavier common module (rich); `common.DEFAULT_INVENTORY` is this one.
DEFAULT_INVENTORY = Path(os.environ.get("TPWARDEN_INVENTORY", "inventory.yml"))

# cluster.eval.catalog: PRESETS (in its order) and SUITES
EVAL_TASKS: tuple[str, ...] = (
    "mmlu", "mmlu_pro", "kmmlu", "kmmlu_direct", "kormedmcqa", "medqa_4options", "medmcqa",
    "gsm8k", "humaneval",
)  # fmt: skip
EVAL_SUITES: tuple[str, ...] = ("field",)

# `rollout --bench`: the rollout's before/after measurement (cluster.rollout.ports); the one list
# the rollout command checks its option against
BENCH_PRESETS: dict[str, str] = {
    "none": "no measurement",
    "quick": "c=1,8,32: one user, a small team, the department",
    "full": "c=1,4,8,16,32: the field report's sweep",
}
# `bench sweep --dataset`: what the requests carry
BENCH_DATASETS: dict[str, str] = {
    "prompts": "the prompt set (--prompts)",
    "random": "random tokens (--random-input-len)",
}

# Every key `rollout --set` can name under `tpwarden` (cluster.settings), dotted, in the
# settings' order; a section is a key too (drafter=null).
SET_KEYS: tuple[str, ...] = (
    "cluster_name",
    "image",
    "vllm_version",
    "model",
    "model.path",
    "model.served_name",
    "model.quantization",
    "model.tokenizer",
    "drafter",
    "drafter.method",
    "drafter.path",
    "drafter.num_speculative_tokens",
    "drafter.prompt_lookup_min",
    "drafter.prompt_lookup_max",
    "drafter.extra",
    "parallel",
    "parallel.tensor",
    "parallel.gpus_per_node",
    "parallel.backend",
    "parallel.master_port",
    "kv_cache",
    "kv_cache.dtype",
    "kv_cache.memory",
    "max_model_len",
    "enforce_eager",
    "chat_template_kwargs",
    "gpu_clock_cap_mhz",
    "host",
    "port",
    "shm_size",
    "ipc_mode",
    "gpus",
    "env",
    "extra_args",
    "container",
    "container.devices",
    "container.cap_add",
    "container.ulimits",
    "container.mounts",
    "container.privileged",
    "container.stop_timeout_s",
    "container.secrets_dir",
    "secrets",
    "secrets.hf_token",
    "secrets.hf_token.env",
    "secrets.hf_token.file",
    "secrets.api_key",
    "secrets.api_key.env",
    "secrets.api_key.file",
    "ssh",
    "ssh.known_hosts",
    "ssh.connect_timeout_s",
    "ssh.allow_unknown_hosts",
    "watchdog",
    "watchdog.interval_s",
    "watchdog.timeout_s",
    "watchdog.failures",
    "watchdog.boot_deadline_s",
    "watchdog.max_restarts",
    "watchdog.restart_window_s",
    "watchdog.alert_command",
    "watchdog.alert_webhook",
    "watchdog.alert_webhook.env",
    "watchdog.alert_webhook.file",
    "watchdog.alert_webhook_format",
    "watchdog.alert_on_restart",
    "watchdog.metrics_host",
    "watchdog.metrics_port",
    "watchdog.state_dir",
    "thermal",
    "thermal.interval_s",
    "thermal.dir",
    "thermal.disk_budget_mb",
    "thermal.metrics_host",
    "thermal.metrics_port",
    "thermal.alert_margin_c",
    "thermal.zone_roles",
    "bench",
    "bench.client_image",
    "bench.num_prompts",
    "bench.output_len",
    "eval",
    "eval.num_concurrent",
    "eval.client_image",
    "eval.hf_cache",
    "report",
    "report.deliver_at",
    "report.tz",
    "report.window_h",
    "memory",
    "memory.check",
    "memory.drop_page_cache",
    "fabric",
    "fabric.transport",
    "fabric.note",
    "ledger",
    "ledger.path",
    "ledger.canary",
    "ledger.canary.levels",
    "ledger.canary.repeats",
    "ledger.canary.warmups",
    "ledger.canary.num_prompts",
    "ledger.canary.output_len",
    "ledger.canary.seed",
    "ledger.canary.prompts",
    "ledger.canary.quiet_hours",
    "ledger.canary.tz",
    "ledger.canary.after_change",
    "ledger.canary.idle_window_s",
    "ledger.canary.client_node",
    "ledger.canary.timeout_s",
)  # fmt: skip

Items = list[tuple[str, str]]  # (value, help)
_TASK_NAME = re.compile(r"^task:\s*['\"]?([\w.-]+)", re.M)  # as cluster.eval.presets reads it


def nodes(ctx: click.Context, incomplete: str) -> Items:
    """The nodes of the inventory given with -i (or the default one): head first."""
    given = ctx.params.get("inventory")
    return [(name, role) for name, role in inventory_nodes(Path(given or DEFAULT_INVENTORY))]


def eval_tasks(ctx: click.Context, incomplete: str) -> Items:
    """`--tasks a,b,<TAB>`: the presets and the --include-path folder's tasks, after the ones
    already listed."""
    done, _, _ = incomplete.rpartition(",")
    head = f"{done}," if done else ""
    taken = set(done.split(","))
    local = _local_tasks(ctx.params.get("include_path"))
    names = [(t, "preset") for t in EVAL_TASKS] + [(t, "local") for t in local]
    return [(head + t, why) for t, why in names if t not in taken]


def eval_suites(ctx: click.Context, incomplete: str) -> Items:
    return [(s, "suite") for s in EVAL_SUITES]


def local_tasks(ctx: click.Context, incomplete: str) -> Items:
    """`--chat`: the --include-path folder's tasks."""
    return [(t, "local") for t in _local_tasks(ctx.params.get("include_path"))]


def bench_presets(ctx: click.Context, incomplete: str) -> Items:
    return list(BENCH_PRESETS.items())


def bench_datasets(ctx: click.Context, incomplete: str) -> Items:
    return list(BENCH_DATASETS.items())


def set_keys(ctx: click.Context, incomplete: str) -> list[str]:
    """`--set KEY=`: every settings key, ready for its value (a `tpwarden.` prefix kept)."""
    prefix = "tpwarden." if incomplete.startswith("tpwarden.") else ""
    return [f"{prefix}{key}=" for key in SET_KEYS]


def _local_tasks(folder: object) -> list[str]:
    """Task names of the YAMLs under an --include-path folder (none when it is not one)."""
    if not isinstance(folder, str | Path) or not folder or not Path(folder).is_dir():
        return []
    found = []
    for f in sorted(Path(folder).rglob("*.y*ml")):
        try:
            m = _TASK_NAME.search(f.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if m and m.group(1) not in found:
            found.append(m.group(1))
    return found


# -- node names from an inventory file, without Ansible ----------------------------------------
# Best effort, for TAB only: the hosts of groups `head` and `workers` (and their child groups)
# as Ansible's YAML and INI inventory plugins lay them out, numeric host ranges expanded. What
# only Ansible resolves (templates, dynamic inventories) offers nothing; `inventory check` says
# what the inventory really holds.
_SKIP_DIRS = ("group_vars", "host_vars")
_RANGE = re.compile(r"\[(\d+):(\d+)(?::(\d+))?\]")


def inventory_nodes(path: Path) -> list[tuple[str, str]]:
    """(name, "head"|"worker") for every node of the inventory at ``path``; [] when unreadable."""
    groups: dict[str, tuple[list[str], list[str]]] = {}
    try:
        files = sorted(_inventory_files(path))
        for f in files:
            text = f.read_text(encoding="utf-8")
            yaml_like = f.suffix in (".yml", ".yaml", ".json") or not _looks_ini(text)
            _merge(groups, _yaml_groups(text) if yaml_like else _ini_groups(text))
    except Exception:  # noqa: BLE001 - a TAB never fails: nothing to offer
        return []
    out: dict[str, str] = {}
    for group, role in (("head", "head"), ("workers", "worker")):
        for host in _hosts_under(groups, group, set()):
            out.setdefault(host, role)
    return list(out.items())


def _inventory_files(path: Path) -> Iterator[Path]:
    if not path.is_dir():
        yield path
        return
    for f in path.iterdir():
        if f.is_file() and not f.name.startswith(".") and f.name not in _SKIP_DIRS:
            yield f


def _looks_ini(text: str) -> bool:
    return any(line.strip().startswith("[") for line in text.splitlines())


def _merge(
    into: dict[str, tuple[list[str], list[str]]], more: dict[str, tuple[list[str], list[str]]]
) -> None:
    for name, (hosts, children) in more.items():
        have = into.setdefault(name, ([], []))
        have[0].extend(h for h in hosts if h not in have[0])
        have[1].extend(c for c in children if c not in have[1])


def _hosts_under(
    groups: dict[str, tuple[list[str], list[str]]], name: str, seen: set[str]
) -> Iterator[str]:
    if name in seen or name not in groups:
        return
    seen.add(name)
    hosts, children = groups[name]
    for host in hosts:
        yield from _expand(host)
    for child in children:
        yield from _hosts_under(groups, child, seen)


def _expand(pattern: str) -> Iterator[str]:
    """`node[01:04]` -> node01..node04 (Ansible's numeric host ranges, with a stride)."""
    m = _RANGE.search(pattern)
    if m is None:
        if "{{" not in pattern:
            yield pattern
        return
    lo, hi, stride = m.group(1), m.group(2), int(m.group(3) or 1)
    width = len(lo) if lo.startswith("0") else 0
    for n in range(int(lo), int(hi) + 1, max(stride, 1)):
        yield from _expand(pattern[: m.start()] + str(n).zfill(width) + pattern[m.end() :])


def _yaml_groups(text: str) -> dict[str, tuple[list[str], list[str]]]:
    import yaml  # deferred: only when TAB completes a node name

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        """Safe, and a tag (a vaulted value) reads as nothing instead of failing."""

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    data = yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    groups: dict[str, tuple[list[str], list[str]]] = {}

    def walk(name: str, body: object) -> None:
        body = body if isinstance(body, dict) else {}
        hosts = [str(h) for h in _mapping(body.get("hosts"))]
        kids = _mapping(body.get("children"))
        _merge(groups, {name: (hosts, [str(k) for k in kids])})
        for child, child_body in kids.items():
            walk(str(child), child_body)

    for name, body in _mapping(data).items():
        walk(str(name), body)
    return groups


def _mapping(value: object) -> dict[object, object]:
    return value if isinstance(value, dict) else {}


def _ini_groups(text: str) -> dict[str, tuple[list[str], list[str]]]:
    groups: dict[str, tuple[list[str], list[str]]] = {}
    section, kind = "ungrouped", "hosts"
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section, _, kind = line[1:-1].partition(":")
            kind = kind or "hosts"
            groups.setdefault(section, ([], []))
            continue
        first = line.split()[0]
        if kind == "hosts":
            _merge(groups, {section: ([first], [])})
        elif kind == "children":
            _merge(groups, {section: ([], [first])})
    return groups
