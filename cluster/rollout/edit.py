"""Pure pieces of a rollout: `--set KEY=VALUE` changes (applied by `yaml_edit` as a minimal diff
of the file each value came from, chosen by `layout`), what a change changes (settings and argv
diffs), and `--guard` rules.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ruamel.yaml import YAML
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import parse_inventory
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.rollout.yaml_edit import set_value, yaml_text
from tpwarden.cluster.settings import DrafterSpec
from tpwarden.cluster.spec import ClusterSpec

SETTINGS_PATH = ("all", "vars", "tpwarden")


@dataclass(frozen=True)
class Change:
    key: str  # dotted under tpwarden, e.g. drafter.num_speculative_tokens
    value: JSONValue
    text: str  # the YAML text of the value (a mapping is written as a block)


def parse_set(item: str) -> Change:
    """`drafter.num_speculative_tokens=3` -> Change. The value is read as YAML (3 is an int,
    true a bool, "x" a string); a `tpwarden.` prefix is allowed."""
    if "=" not in item:
        raise ConfigError(
            f"--set {item!r}: expected KEY=VALUE", hint="e.g. drafter.num_speculative_tokens=3"
        )
    key, raw = item.split("=", 1)
    key = set_key(key, item)
    yaml = YAML(typ="safe")
    try:
        value = yaml.load(raw) if raw.strip() else ""
    except Exception as exc:  # ruamel raises many types for bad scalars
        raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from None
    return Change(key, value, yaml_text(value))


def change_of(key: str, value: JSONValue) -> Change:
    """A change given as a key and a value already read (an experiment plan's `set` mapping):
    the same key rule as `parse_set`."""
    return Change(set_key(key, f"{key}={yaml_text(value).strip()}"), value, yaml_text(value))


def set_key(key: str, item: str) -> str:
    """The dotted key of a change, its `tpwarden.` prefix dropped; ConfigError if not one."""
    key = key.strip().removeprefix("tpwarden.")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
        raise ConfigError(
            f"--set {item!r}: {key!r} is not a dotted key", hint="e.g. kv_cache.memory=24GiB"
        )
    return key


def apply_changes(text: str, changes: list[Change], source: str) -> str:
    """New text of a single-file YAML inventory (settings under all.vars.tpwarden) with each
    change applied in place (`yaml_edit`), validated as a whole inventory (raises ConfigError).
    Other layouts: `layout.plan_edit`, which edits the file each value came from."""
    for change in changes:
        text = set_value(text, SETTINGS_PATH, change.key, change.value, source)
    parse_inventory(text, source)  # the whole file must still be valid
    return text


def text_diff(old: str, new: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}")
    )


def argv_diff(old: ClusterSpec, new: ClusterSpec) -> dict[str, list[str]]:
    """Per node, the unified diff of its vLLM argv (one argument per line)."""
    out = {}
    a, b = plan_cluster(old), plan_cluster(new)
    for ca, cb in zip(a.containers, b.containers, strict=True):
        diff = list(difflib.unified_diff(list(ca.vllm_argv), list(cb.vllm_argv), lineterm="", n=1))
        # the two header lines only: a removed flag is itself "---flag" ("-" + "--flag")
        out[ca.node] = diff[2:]
    return out


def describe_changes(old: ClusterSpec, new: ClusterSpec) -> list[str]:
    """What a rollout changes, one line per setting: "drafter: dflash k=3 -> off",
    "kv_cache.memory: 17179869184 -> 25769803776". The drafter is named as a whole when it is
    switched on or off or its method or k changes; otherwise its fields are listed."""
    a, b = old.settings.model_dump(), new.settings.model_dump()
    out = []
    da, db = old.settings.drafter, new.settings.drafter
    if _drafter_name(da) != _drafter_name(db):
        out.append(f"drafter: {_drafter_name(da)} -> {_drafter_name(db)}")
        a.pop("drafter"), b.pop("drafter")
    fa, fb = _flat(a), _flat(b)
    for key in sorted(set(fa) | set(fb)):
        if key not in fa or key not in fb or fa[key] != fb[key]:
            out.append(f"{key}: {_shown(fa, key)} -> {_shown(fb, key)}")
    return out


def _drafter_name(d: DrafterSpec | None) -> str:
    return "off" if d is None else f"{d.method} k={d.num_speculative_tokens}"


def _flat(doc: JSONValue, prefix: str = "") -> JSONObject:
    """{"a": {"b": 1}, "c": {}} -> {"a.b": 1}: leaves only (an empty mapping has none)."""
    if isinstance(doc, dict):
        out: JSONObject = {}
        for key, value in doc.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): doc}


def _shown(flat: JSONObject, key: str) -> str:
    return yaml_text(flat[key]) if key in flat else "(unset)"


# --- guards: "c=32 aggregate >= -5%" -----------------------------------------------------------

_GUARD = re.compile(r"^\s*c\s*=\s*(\d+)\s+([a-z_]+)\s*(>=|<=|>|<)\s*([+-]?\d+(?:\.\d+)?)\s*%\s*$")
GUARD_METRICS = ("aggregate", "per_stream", "ttft_p50", "itl_p50", "acceptance", "tokens_per_step")


@dataclass(frozen=True)
class Guard:
    concurrency: int
    metric: str
    op: str
    percent: float

    def __str__(self) -> str:
        return f"c={self.concurrency} {self.metric} {self.op} {self.percent:+g}%"


@dataclass(frozen=True)
class GuardVerdict:
    guard: Guard
    ok: bool
    change_pct: float | None
    detail: str


def parse_guard(text: str) -> Guard:
    match = _GUARD.match(text)
    if not match or match.group(2) not in GUARD_METRICS:
        raise ConfigError(
            f"--guard {text!r}: expected 'c=N METRIC OP PERCENT%'",
            hint=f"e.g. 'c=32 aggregate >= -5%'; METRIC is one of {', '.join(GUARD_METRICS)}",
        )
    return Guard(int(match.group(1)), match.group(2), match.group(3), float(match.group(4)))


def check_guard(
    guard: Guard, before: dict[int, dict[str, float]], after: dict[int, dict[str, float]]
) -> GuardVerdict:
    """Relative change of a metric at one concurrency, compared with the guard's threshold."""
    b = before.get(guard.concurrency, {}).get(guard.metric)
    a = after.get(guard.concurrency, {}).get(guard.metric)
    if b is None or a is None or b == 0:
        return GuardVerdict(
            guard, False, None, f"no {guard.metric} at c={guard.concurrency} in both runs"
        )
    change = (a - b) / b * 100.0
    ok = {
        ">=": change >= guard.percent,
        "<=": change <= guard.percent,
        ">": change > guard.percent,
        "<": change < guard.percent,
    }[guard.op]
    return GuardVerdict(
        guard,
        ok,
        change,
        f"{guard.metric} at c={guard.concurrency}: {b:.4g} -> {a:.4g} ({change:+.1f}%)",
    )
