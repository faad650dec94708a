"""Durable documents read as data, not trust: one typed model per document, validated once.

A document tpwarden writes and reads back (the watchdog's `state.json`, `hold.json`) is a
frozen dataclass; its annotations are the one statement of its shape. `load_document` checks a
parsed JSON value against them with pydantic, strictly and as JSON (a count is a whole number,
not `"3"` or `true`; a time is a finite number; a phase is one of its enum's values; unknown keys
are ignored), and returns the dataclass, or raises pydantic's ValidationError, a ValueError that
names the first field of a wrong type or value. No hand-kept lists of field names.
"""

from __future__ import annotations

import json
from typing import Annotated, TypeVar

from annotated_types import Ge
from pydantic import AllowInfNan, ConfigDict, TypeAdapter
from tpwarden.cluster.durable import JSONValue

T = TypeVar("T")

Count = Annotated[int, Ge(0)]  # a counter: a whole number >= 0
Time = Annotated[float, AllowInfNan(False)]  # seconds on some clock: a finite number
# A document's model sets it (`__pydantic_config__ = STRICT`): no coercion of what it reads.
STRICT = ConfigDict(strict=True)


_ADAPTERS: dict[type, TypeAdapter[object]] = {}  # built once per model, when first read


def load_document(model: type[T], data: JSONValue) -> T:
    """``data`` (as `json.loads` gave it) as ``model``; ValueError naming what is wrong."""
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    got = adapter.validate_json(json.dumps(data))
    assert isinstance(got, model)
    return got
