"""Pure pieces of a rollout: `--set KEY=VALUE` changes applied to the inventory text as a minimal
diff (comments, order and every other line untouched), argv diffs, and `--guard` rules.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory import parse_inventory
from tpwarden.cluster.launch import plan_cluster
from tpwarden.cluster.spec import ClusterSpec

SETTINGS_PATH = ("all", "vars", "tpwarden")


@dataclass(frozen=True)
class Change:
    key: str  # dotted under tpwarden, e.g. drafter.num_speculative_tokens
    value: Any
    text: str  # the YAML text written for the value


def parse_set(item: str) -> Change:
    """`drafter.num_speculative_tokens=3` -> Change. The value is read as YAML (3 is an int,
    true a bool, "x" a string); a `tpwarden.` prefix is allowed."""
    if "=" not in item:
        raise ConfigError(
            f"--set {item!r}: expected KEY=VALUE", hint="e.g. drafter.num_speculative_tokens=3"
        )
    key, raw = item.split("=", 1)
    key = key.strip().removeprefix("tpwarden.")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
        raise ConfigError(
            f"--set {item!r}: {key!r} is not a dotted key", hint="e.g. kv_cache.memory=24GiB"
        )
    yaml = YAML(typ="safe")
    try:
        value = yaml.load(raw) if raw.strip() else ""
    except Exception as exc:  # ruamel raises many types for bad scalars
        raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from None
    if isinstance(value, (dict, list)):
        text = json.dumps(value)
    elif isinstance(value, str):
        text = json.dumps(value) if _needs_quotes(value) else value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    else:
        text = str(value)
    return Change(key, value, text)


def _needs_quotes(value: str) -> bool:
    safe = re.fullmatch(r"[A-Za-z0-9_./:@+-][A-Za-z0-9_./:@+ -]*", value) is not None
    return not safe or value.lower() in ("true", "false", "yes", "no", "null", "on", "off")


def apply_changes(text: str, changes: list[Change], source: str) -> str:
    """New inventory text with each change applied in place. Existing keys: only the value's
    characters on its line change. A new key is inserted after its parent's last child.
    The result is validated as a whole inventory (raises ConfigError)."""
    for change in changes:
        text = _apply_one(text, change, source)
    parse_inventory(text, source)  # the whole file must still be valid
    return text


def _apply_one(text: str, change: Change, source: str) -> str:
    yaml = YAML(typ="rt")
    data = yaml.load(text)
    node: Any = data
    for part in SETTINGS_PATH:
        node = node[part]
    parts = change.key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part) if isinstance(node, CommentedMap) else None
        if not isinstance(child, CommentedMap):
            raise ConfigError(
                f"--set {change.key}: tpwarden.{'.'.join(parts[: i + 1])} is not a mapping in {source}",
                hint="set an existing section's key, or edit the inventory by hand",
            )
        node = child
    leaf = parts[-1]
    lines = text.splitlines(keepends=True)
    if leaf in node:
        current = node[leaf]
        if isinstance(current, (CommentedMap, list)):
            raise ConfigError(
                f"--set {change.key}: is a section, not a value", hint="set one of its keys"
            )
        line, col = node.lc.value(leaf)
        old = lines[line]
        end = _scalar_end(old, col)
        lines[line] = old[:col] + change.text + old[end:]
        return "".join(lines)
    # A new key: insert it after the parent's last child, at the children's indentation.
    last_key = list(node.keys())[-1]
    line, col = node.lc.key(last_key)
    insert_at = _block_end(lines, line, col)
    lines.insert(insert_at, " " * col + f"{leaf}: {change.text}\n")
    return "".join(lines)


def _scalar_end(line: str, col: int) -> int:
    """Index just past the scalar that starts at `col` (before a trailing comment)."""
    rest = line[col:]
    if rest[:1] in ("'", '"'):
        quote = rest[0]
        i = 1
        while i < len(rest):
            if rest[i] == "\\" and quote == '"':
                i += 2
                continue
            if rest[i] == quote:
                return col + i + 1
            i += 1
        return col + len(rest.rstrip("\n"))
    match = re.search(r"\s+#", rest)
    body = rest[: match.start()] if match else rest.rstrip("\r\n")
    return col + len(body.rstrip())


def _block_end(lines: list[str], line: int, col: int) -> int:
    """First line after the entry at `line` whose indentation is <= col (or a blank run end)."""
    i = line + 1
    while i < len(lines):
        stripped = lines[i].strip()
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        if stripped and not stripped.startswith("#") and indent <= col:
            break
        i += 1
    while i > line + 1 and not lines[i - 1].strip():
        i -= 1
    return i


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
        out[ca.node] = [d for d in diff if not d.startswith(("---", "+++"))]
    return out


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
