"""`ledger why --plan FILE`: the experiment plan that reverts each revertable difference of a
`why` report alone and then all of them together (pure: the report in, the plan's text out).

A difference is revertable when `why` names the inventory setting that puts it back
(`rollout --set KEY=VALUE`), or, for a clock cap applied by hand, `tpwarden clocks cap MHZ` /
`clocks reset`, which the plan turns into `gpu_clock_cap_mhz` (pre-flight applies the
inventory's cap on every restart). Anything else (a co-tenant, a driver, a kernel) is listed
with what the operator can do: tpwarden cannot revert it, and the night's canaries measure it
as it stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.ledger.differences import Difference
from tpwarden.cluster.ledger.why import WhyReport

_CAP = re.compile(r"^tpwarden clocks cap (\d+)$")
CANNOT = "tpwarden cannot revert it; the night's canaries measure it as it stands"


@dataclass(frozen=True)
class RevertPlan:
    variants: tuple[JSONObject, ...]  # {"name": ..., "set": {KEY: VALUE}, "note": subject}
    not_revertable: tuple[JSONObject, ...]  # {"subject", "nodes", "advice"}
    text: str  # the plan file

    def to_json(self) -> JSONObject:
        return {"variants": list(self.variants), "not_revertable": list(self.not_revertable)}


def revert_sets(d: Difference) -> dict[str, JSONValue]:
    """The settings that put `d` back, values read as YAML (as `--set` reads them); empty when
    tpwarden cannot revert it."""
    rows = {str(r["set"]): r.get("value") for r in d.revert if "set" in r}
    out = sections(rows)
    for r in d.revert:
        if "set" not in r and d.setting == "gpu_clock_cap_mhz":
            cmd = str(r.get("command", ""))
            cap = _CAP.match(cmd)
            if cap:
                out["gpu_clock_cap_mhz"] = int(cap.group(1))
            elif cmd == "tpwarden clocks reset":
                out["gpu_clock_cap_mhz"] = None
    return out


def sections(rows: dict[str, JSONValue]) -> dict[str, JSONValue]:
    """Setting rows as they were (`path` -> text, None: absent or null) -> `--set` changes. A
    section whose own row changed (the drafter switched on or off) is set back whole: to null
    when none of its keys had a value, else to the mapping of the keys that had one (rollout's
    `--set drafter={...}`); its keys are not set one by one."""
    out: dict[str, JSONValue] = {}
    for path in sorted(rows):
        if any(path.startswith(p + ".") for p in rows):
            continue  # inside a section set back whole
        keys = {p[len(path) + 1 :]: v for p, v in rows.items() if p.startswith(path + ".")}
        had = {k: _value(v) for k, v in keys.items() if v is not None}
        out[path] = _nest(had) if had else _value(rows[path])
    return out


def _value(text: JSONValue) -> JSONValue:
    return None if text is None else yaml.safe_load(str(text))


def _nest(flat: dict[str, JSONValue]) -> JSONObject:
    """{"a.b": 1, "c": 2} -> {"a": {"b": 1}, "c": 2}."""
    out: JSONObject = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def revert_plan(report: WhyReport, restore_by: str = "06:30") -> RevertPlan:
    """One variant per revertable difference, then one with all of them (when 2 or more)."""
    variants: list[JSONObject] = []
    together: dict[str, JSONValue] = {}
    cannot: list[JSONObject] = []
    for d in report.differences:
        sets = revert_sets(d)
        if not sets:
            cannot.append({"subject": d.subject, "nodes": d.nodes, "advice": d.advice or CANNOT})
            continue
        variants.append({"name": _name(d.subject, variants), "set": sets,
                         "note": f"revert {d.subject}: {d.after} -> {d.before}"})  # fmt: skip
        together.update(sets)
    if len(variants) >= 2:
        variants.append({"name": _name("all", variants), "set": together,
                         "note": "revert every revertable difference together"})  # fmt: skip
    return RevertPlan(tuple(variants), tuple(cannot), _text(report, variants, cannot, restore_by))


def _name(subject: str, taken: list[JSONObject]) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:36] or "difference"
    name, n = f"revert-{slug}", 2
    while any(v["name"] == name for v in taken):
        name, n = f"revert-{slug}-{n}", n + 1
    return name


def _text(
    report: WhyReport, variants: list[JSONObject], cannot: list[JSONObject], restore_by: str
) -> str:
    ratio = f"x{report.ratio:.2f}" if report.ratio is not None else "no ratio"
    head = [
        f"# Written by `tpwarden ledger why --plan` for cluster {report.cluster}: the latest",
        f"# canary at concurrency {report.level} is {report.verdict.value} ({ratio}).",
        "# Each variant reverts one difference alone; the last reverts them together.",
        "# Check it: tpwarden experiment run THIS_FILE -i INVENTORY --dry-run",
    ]
    if cannot:
        head.append("# Not revertable by tpwarden (measured as they stand):")
        for c in cannot:
            nodes = f" on {', '.join(c['nodes'])}" if c["nodes"] else ""
            head.append(f"#   {c['subject']}{nodes}: {c['advice']}")
    if not variants:
        head.append("# Nothing here is revertable: this plan has no variant to run.")
        return "\n".join(head) + "\n"
    body = yaml.safe_dump({"variants": variants}, sort_keys=False, allow_unicode=True)
    return "\n".join(head) + f'\nrestore_by: "{restore_by}"\n' + body
