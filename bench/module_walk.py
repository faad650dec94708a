#!/usr/bin/env python3
"""The walk of one operation through the code: which tpwarden modules it enters, in order.

Runs one pytest test (node id) with a profiler on during its call phase and prints the
tpwarden modules whose functions it entered, grouped by room (the package holding them), and
its climbs: calls from a module into one of a higher layer (pyproject's import-linter `layers`
contract; a callback, since no import may point up). Test modules and fakes are not counted.

    python bench/module_walk.py tests/unit/test_control_boot.py::test_up_waits_for_ready_and_returns_the_boot
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections import Counter
from pathlib import Path
from types import FrameType

import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def layer_of() -> dict[str, int]:
    """Module prefix -> its layer's index (0 = the top) from the `layers` contract."""
    doc = tomllib.loads(PYPROJECT.read_text())
    found = [c for c in doc["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    out: dict[str, int] = {}  # no layers contract (an older tree): no climbs counted
    for i, layer in enumerate(found[0]["layers"] if found else []):
        for part in layer.replace("|", ":").split(":"):
            out[part.strip()] = i
    return out


def find_layer(module: str, layers: dict[str, int]) -> int | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in layers:
            return layers[".".join(parts[:n])]
    return None


class Walk:
    def __init__(self, layers: dict[str, int]) -> None:
        self.order: list[str] = []
        self.climbs: Counter[tuple[str, str]] = Counter()
        self.layers = layers

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("tpwarden."):
            return
        if name not in self.order:
            self.order.append(name)
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if caller.startswith("tpwarden.") and caller != name:
            here, there = find_layer(name, self.layers), find_layer(caller, self.layers)
            if here is not None and there is not None and here < there:
                self.climbs[(caller, name)] += 1

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):  # noqa: ANN201 - pytest hook
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(None)


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 else ".".join(parts[:2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("test", help="a pytest node id")
    args = ap.parse_args()
    walk = Walk(layer_of())
    rc = pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=", args.test],
                     plugins=[walk])  # fmt: skip
    if rc != 0:
        print(f"the test did not pass (pytest exit {rc})", file=sys.stderr)
        return 1
    rooms: dict[str, list[str]] = {}
    for m in walk.order:
        rooms.setdefault(room(m), []).append(m.rsplit(".", 1)[-1])
    print(f"\n{len(walk.order)} modules in {len(rooms)} rooms, "
          f"{sum(walk.climbs.values())} climbs ({len(walk.climbs)} distinct)")  # fmt: skip
    for r, mods in rooms.items():
        print(f"  {r}: {', '.join(mods)}")
    for (caller, callee), n in walk.climbs.most_common():
        print(f"  climb: {caller} -> {callee} x{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
