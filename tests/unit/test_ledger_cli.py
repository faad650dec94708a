"""`tpwarden ledger` on ledgers built like the cluster builds them: `why` fits 80 columns and
exits 1 on a slowdown, `--json` names the differences, list/show/diff/export read the same file,
and a ledger from a newer tpwarden is refused with its path (exit 2), untouched."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.ledger.schema import SCHEMA_VERSION
from typer.testing import CliRunner

from .test_ledger_why import BASE, QUIET_STATE, Lab, _regression

runner = CliRunner()


@pytest.fixture
def regressed(tmp_path: Path) -> Path:
    lab = Lab(tmp_path / "lab.sqlite")
    _regression(lab)
    lab.led.close()
    return tmp_path / "lab.sqlite"


@pytest.fixture
def unchanged(tmp_path: Path) -> Path:
    lab = Lab(tmp_path / "same.sqlite")
    lab.record(BASE)
    for _ in range(10):
        lab.canary(12.6, QUIET_STATE)
    lab.led.close()
    return tmp_path / "same.sqlite"


def test_why_fits_80_columns_names_the_causes_and_exits_1(regressed: Path) -> None:
    res = runner.invoke(app, ["ledger", "why", "--ledger", str(regressed)], terminal_width=80)
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert all(len(line) <= 80 for line in lines), [x for x in lines if len(x) > 80]
    text = res.output
    assert "SLOWER" in text and "differences, most likely first" in text
    order = [text.index(s) for s in ("KV cache", "GPU clock cap", "co-tenant stress-ng")]
    assert order == sorted(order)
    assert "16 GiB -> 12 GiB" in text and "rollout --set kv_cache.memory=16GiB" in text
    assert "tpwarden clocks cap 2000" in text


def test_why_json_is_one_document(regressed: Path) -> None:
    res = runner.invoke(app, ["ledger", "why", "--ledger", str(regressed), "--json"])
    doc = json.loads(res.stdout)
    assert doc["command"] == "ledger why" and doc["ok"] is False and doc["verdict"] == "slower"
    assert [d["subject"] for d in doc["differences"]] == [
        "KV cache", "GPU clock cap", "co-tenant stress-ng",
    ]  # fmt: skip
    assert doc["ci95"][1] < 1.0 and doc["noise"]["n"] == 4


def test_why_on_an_unchanged_server_is_within_noise(unchanged: Path) -> None:
    res = runner.invoke(app, ["ledger", "why", "--ledger", str(unchanged)], terminal_width=80)
    assert res.exit_code == 0, res.output
    assert "WITHIN NOISE" in res.output and "no difference that matters" in res.output


def test_list_show_diff_export(regressed: Path, tmp_path: Path) -> None:
    listed = runner.invoke(app, ["ledger", "list", "--ledger", str(regressed), "--json"])
    recs = json.loads(listed.stdout)["records"]
    assert [r["id"] for r in recs] == [2, 1] and recs[0]["changed"] == 11
    shown = runner.invoke(app, ["ledger", "show", "2", "--ledger", str(regressed)])
    assert shown.exit_code == 0 and "flag.--kv-cache-memory-bytes = 12 GiB" in shown.output
    diff = runner.invoke(app, ["ledger", "diff", "1", "2", "--ledger", str(regressed)])
    assert diff.exit_code == 0 and "KV cache" in diff.output and "GPU clock cap" in diff.output
    out = tmp_path / "x.jsonl"
    exp = runner.invoke(
        app, ["ledger", "export", "--jsonl", "--ledger", str(regressed), "-o", str(out)]
    )
    assert exp.exit_code == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 6 and rows[-1]["output_tok_s"] < 9 and rows[0]["time"].endswith("Z")
    every = runner.invoke(app, ["ledger", "export", "--all", "--ledger", str(regressed), "--json"])
    tables = {x["table"] for x in json.loads(every.stdout)["lines"]}
    assert {"records", "fingerprint", "canaries", "canary_repeats", "state_samples"} <= tables


def test_a_newer_ledger_is_refused_with_its_path_and_left_alone(regressed: Path) -> None:
    with sqlite3.connect(regressed) as c:
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = regressed.read_bytes()
    res = runner.invoke(app, ["ledger", "why", "--ledger", str(regressed), "--json"])
    assert res.exit_code == 2
    doc = json.loads(res.stdout)
    assert str(regressed) in doc["error"]["message"] and "newer tpwarden" in doc["error"]["message"]
    assert regressed.read_bytes() == before


def test_why_with_no_earlier_canary_says_so(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "one.sqlite")
    lab.record(BASE)
    lab.canary(12.6, QUIET_STATE)
    lab.led.close()
    res = runner.invoke(app, ["ledger", "why", "--ledger", str(tmp_path / "one.sqlite")])
    assert res.exit_code == 0 and "no earlier canary" in res.output
