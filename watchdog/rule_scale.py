"""tpwarden's alert rules with their time windows scaled, for rehearsals.

The shipped rules (monitoring/tpwarden-rules.yml) wait as long as a real night needs: a hung
server fires after two minutes of flat token counters plus 30 s, a stale thermal agent after
half an hour. A rehearsal on the lab, whose watchdog ticks every 2 s and whose simulated boot
takes seconds, would wait those minutes for nothing. `scale_rules` returns the same rules with
every `for:` duration and every range selector (`[2m]`, `[1h]`, the range of a subquery) in the
expressions multiplied by `scale`: the same conditions over shorter windows. A range is kept at
least `min_range_s` long (a window needs two samples for `increase` or `changes` to say
anything: give at least two scrape intervals). `tpwarden prometheus rules --time-scale` writes
such a file; the shipped values stay what `promtool test rules` covers.

Pure: text in, text out (ruamel.yaml keeps the comments and the order).
"""

from __future__ import annotations

import io
import math
import re

from ruamel.yaml import YAML
from tpwarden.cluster.errors import ConfigError

# Prometheus durations: a sequence of <number><unit> from the largest unit down ("1h30m").
_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
# a range selector or a subquery's range: `[5m]`, `[1h:1m]` (the step is left as it is)
_RANGE = re.compile(r"\[((?:\d+(?:ms|s|m|h|d|w|y))+)(?=[:\]])")


def parse_duration(text: str) -> float:
    """`1h30m` -> 5400.0 seconds. ConfigError when it is not a Prometheus duration."""
    if not _DURATION.match(text):
        raise ConfigError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in _PART.findall(text))


def format_duration(seconds: float) -> str:
    """Seconds -> the shortest exact Prometheus duration at millisecond resolution (`90s`,
    `2m`, `1500ms`); never below 1ms."""
    ms = max(1, round(seconds * 1000))
    if ms % 1000:
        return f"{ms}ms"
    s = ms // 1000
    for unit, size in (("h", 3600), ("m", 60)):
        if s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def _scaled(text: str, scale: float, floor_s: float) -> str:
    return format_duration(max(floor_s, parse_duration(text) * scale))


def scale_expr(expr: str, scale: float, min_range_s: float) -> str:
    """Every range selector in a PromQL expression scaled, kept >= `min_range_s`."""
    return _RANGE.sub(lambda m: "[" + _scaled(m.group(1), scale, min_range_s), expr)


def scale_rules(text: str, scale: float, min_range_s: float = 0.0) -> str:
    """The rule file `text` with every rule's `for:` and every range in its `expr` scaled."""
    if not (math.isfinite(scale) and scale > 0):
        raise ConfigError(f"time scale must be a positive number, not {scale!r}")
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # keep expressions on the lines they were written on
    doc = yaml.load(text)
    for group in doc.get("groups") or []:
        for rule in group.get("rules") or []:
            if "for" in rule:
                rule["for"] = _scaled(str(rule["for"]), scale, 0.0)
            if "expr" in rule:
                # block scalars (`expr: |`) are str subclasses: rebuilt as such, kept as written
                rule["expr"] = type(rule["expr"])(scale_expr(rule["expr"], scale, min_range_s))
    out = io.StringIO()
    out.write(
        f"# tpwarden's alert rules with every `for:` and range window x{scale:g} (ranges at least "
        f"{format_duration(max(min_range_s, 0.001))}),\n# for rehearsals (`tpwarden prometheus "
        "rules --time-scale`); descriptions still name the shipped windows.\n"
    )
    yaml.dump(doc, out)
    return out.getvalue()
