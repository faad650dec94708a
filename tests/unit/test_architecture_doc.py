"""docs/architecture.md keeps in step with the import contracts (issue 51 item 9): every
contract of pyproject's `[tool.importlinter]` is named there by its id, and none other; its
layers table lists the `layers` contract's packages, top to bottom, in the same order."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "importlinter"
]["contracts"]


def section(title: str) -> str:
    return DOC.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_every_contract_is_described_by_its_id() -> None:
    named = set(re.findall(r"^- `([a-z-]+)`:", section("The contracts"), re.M))
    assert named == {c["id"] for c in CONTRACTS}


def test_the_layers_table_is_the_layers_contract() -> None:
    (layers,) = [c for c in CONTRACTS if c["id"] == "layers"]
    rows = [r for r in section("The layers").splitlines() if r.startswith("| ") and "`" in r]
    drawn = [re.findall(r"`(tpwarden\.[\w.]+)`", r.split("|")[2]) for r in rows]
    # the contract's layers, each a list of its packages (`|` and `:` join a layer's members)
    want = [[m.strip() for m in re.split(r"[|:]", layer)] for layer in layers["layers"]]
    assert len(drawn) == len(want)
    for got, layer in zip(drawn, want, strict=True):
        assert got and set(got) <= set(layer), (got, layer)
        if len(layer) <= 5:  # a short layer is drawn whole; the core's long list by example
            assert set(got) == set(layer), (got, layer)
