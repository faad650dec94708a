"""Waiting for the lab to reach a state: one poll loop for every lab test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(cond: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.5) -> Any:
    """Call ``cond`` until it returns something truthy and return that; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)
