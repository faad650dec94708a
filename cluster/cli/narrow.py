"""Lines that fit the terminal (issue 52: on-call reads tpwarden over SSH from a phone, 80
columns): long values shortened with an ellipsis instead of wrapping, the whole of them kept in
`--json` and in the files the screens read. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

ELLIPSIS = "…"
_BREAKS = re.compile(r"\s*[\r\n]+\s*|\t")
_FRAME_PATH = re.compile(r"\(([^()\s]+/)([^/()\s]+:\d+)\)")  # "(torch/distributed/x.py:12)"


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters (one line): a source path in a stack frame
    shortened to its file name first, then the end cut with an ellipsis."""
    text = _BREAKS.sub(" ", str(text)).rstrip()  # one line; its indent and columns kept
    if len(text) <= width:
        return text
    text = short_frames(text)
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


def short_frames(text: str) -> str:
    """Source paths in stack frames cut to their file name: "(…/distributed_c10d.py:3252)"."""
    return _FRAME_PATH.sub(lambda m: f"({ELLIPSIS}/{m.group(2)})", text)


def first_fitting(variants: Sequence[str], width: int) -> str:
    """The first of ``variants`` (fullest first) that fits ``width``, else the last shortened."""
    for text in variants:
        if len(text) <= width:
            return text
    return shorten(variants[-1], width)


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """A plain table, one line per row at any width: every column but the last as wide as its
    longest cell, the last one cut to what is left."""
    cells = [list(header), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return [
        shorten(
            "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]), width
        )
        for row in cells
    ]


def pairs(doc: Mapping[str, object], value_width: int = 60) -> str:
    """``key=value`` pairs of a flat record, each value on one line and at most ``value_width``
    characters; nulls left out (an event's detail in a table cell, not JSON)."""
    out = []
    for key, value in doc.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else _compact(value)
        out.append(f"{key}={shorten(text, value_width)}")
    return " ".join(out)


def _compact(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    return str(value)
