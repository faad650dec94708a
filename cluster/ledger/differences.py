"""The differences between two canaries' records and state samples, grouped by subject (pure).

Configuration rows differ when their text differs. State rows follow load and the weather, so
only a change that matters counts (`state_matters`): a co-tenant whose CPU moved by at least
20 points of a core and half its size (or that appeared or left using that much), an SM clock
under load that moved by 5 % or more, a clock event reason that appeared or went (GPU idle
aside), another GPU user. Temperature, power, utilisation and load average are recorded but
never a difference by themselves: they follow the load and the clocks, and heat matters
through the clocks (a thermal slowdown is a clock event reason).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.ledger.subjects import CATEGORIES, Category, Subject, subject_of
from tpwarden.cluster.ledger.tables import Change

COTENANT_CPU_MIN = 20.0  # percent of one core
SM_CLOCK_REL = 0.05
_IGNORED_STATE = ("power_w", "util_pct", "load1", "rss_mib", "temp_c")


class Tier:
    CONTROLLED = "controlled"  # an earlier pair (or an experiment) where it changed alone
    MEASURED = "measured"  # the canary measured its effect (acceptance, clocks, CPU, KV)
    PRIOR = "prior"  # only the fixed prior ranks it


TIERS = (Tier.CONTROLLED, Tier.MEASURED, Tier.PRIOR)


def _num(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _set(v: str | None) -> set[str]:
    try:
        got = json.loads(v) if v else []
    except ValueError:
        return set()
    return {str(x) for x in got} if isinstance(got, list) else set()


def state_matters(c: Change) -> bool:
    """Whether a state-sample row moved enough to be a difference (module docstring)."""
    leaf = c.key.rsplit(".", 1)[-1]
    if leaf in _IGNORED_STATE or c.key == "load1":
        return False
    a, b = _num(c.before), _num(c.after)
    if c.key.startswith("cotenant."):
        x, y = a or 0.0, b or 0.0
        big = max(x, y)
        return big >= COTENANT_CPU_MIN and abs(x - y) >= max(COTENANT_CPU_MIN, 0.5 * big)
    if leaf == "sm_clock_mhz":
        return a is not None and b is not None and abs(a - b) >= SM_CLOCK_REL * max(a, b)
    if leaf == "clock_event_reasons":
        return bool((_set(c.before) ^ _set(c.after)) - {"gpu_idle"})
    if c.key == "gpu_users.others":
        return _set(c.before) != _set(c.after)
    return c.before != c.after


@dataclass
class Difference:
    """One subject that differs between the best earlier canary (before) and the latest."""

    subject: str
    category: str
    tier: str = Tier.PRIOR
    nodes: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    key: str | None = None  # the key `before` and `after` are the values of
    before: str | None = None
    after: str | None = None
    source: str = "fingerprint"  # fingerprint | state | canary
    measured: list[str] = field(default_factory=list)  # what the canary measured about it
    evidence: str | None = None  # the controlled evidence, one line
    ratio: float | None = None  # the evidence's throughput ratio and 95 % interval
    lo: float | None = None
    hi: float | None = None
    setting: str | None = None
    revert: list[JSONObject] = field(default_factory=list)  # `rollout --set` / commands
    advice: str | None = None
    magnitude: float = 0.0  # for ordering inside a tier

    @property
    def revertable(self) -> bool:
        return bool(self.revert)

    def to_json(self) -> JSONObject:
        return {**asdict(self), "revertable": self.revertable}


_PREFERRED = ("setting.", "engine.kv.tokens", "engine.drafter.k", "flag.", "engine.", "gpu", "")


def representative(changes: Sequence[Change]) -> Change:
    for prefix in _PREFERRED:
        for c in changes:
            if c.key.startswith(prefix):
                return c
    return changes[0]


def group(changes: Iterable[Change], source: str) -> list[Difference]:
    """Changes -> one Difference per subject (its nodes, keys and a representative value)."""
    by: dict[str, tuple[Subject, list[Change]]] = {}
    for c in changes:
        s = subject_of(c.key)
        by.setdefault(s.name, (s, []))[1].append(c)
    out = []
    for name, (s, rows) in by.items():
        rep = representative(rows)
        d = Difference(
            subject=name,
            category=s.category.value,
            nodes=sorted({c.node for c in rows if c.node != "*"}),
            keys=sorted({c.key for c in rows}),
            key=rep.key,
            before=rep.before,
            after=rep.after,
            source=source,
            setting=s.setting,
            advice=s.advice,
        )
        d.revert = _revert(s, rows)
        out.append(d)
    return out


def _revert(s: Subject, rows: Sequence[Change]) -> list[JSONObject]:
    """What puts it back: each inventory setting row as it was (`rollout --set PATH=VALUE`),
    or for a clock cap set without the inventory, `tpwarden clocks cap MHZ`."""
    sets = [
        {"set": c.key[len("setting.") :], "value": c.before}
        for c in rows
        if c.key.startswith("setting.")
    ]
    if sets:
        return sets
    if s.name == "GPU clock cap":
        before = {c.before for c in rows if c.key.endswith("clock_cap_mhz")}
        if len(before) == 1:
            (mhz,) = before
            cmd = "tpwarden clocks reset" if mhz is None else f"tpwarden clocks cap {mhz}"
            return [{"command": cmd}]
    return []


def rank_key(d: Difference) -> tuple[int, int, float, str]:
    """Controlled evidence first, then what the canary measured, then the fixed prior (by
    category); inside a tier the larger effect first."""
    try:
        cat = CATEGORIES.index(Category(d.category))
    except ValueError:
        cat = len(CATEGORIES)
    return (TIERS.index(d.tier), cat, -d.magnitude, d.subject)
