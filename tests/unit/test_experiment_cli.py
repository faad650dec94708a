"""`tpwarden ledger why --plan` and `tpwarden experiment run --dry-run` (issue 54, first step):
after the ledger's scripted regression, the plan reverts the KV size and the clock cap alone and
together and lists the co-tenant as not revertable; that plan, checked against the regressed
inventory, is a queue estimated from the recorded boots and the ledger's canaries, refused when
it passes its deadline unless --allow-partial, and resumed from its results directory."""

from __future__ import annotations

import json
import socket
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.durable import append_jsonl
from tpwarden.cluster.experiment.plan_file import load_plan
from tpwarden.cluster.experiment.resume import failure_name, result_name
from typer.testing import CliRunner

from .test_ledger_why import BASE, QUIET_STATE, Lab, _regression

runner = CliRunner()
GOOD = Path(__file__).parent / "inventories" / "good.yml"
SCHEMA = json.loads(
    resources.files("tpwarden.cluster").joinpath("data/cli-envelope.schema.json").read_text()
)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state directory holding the regressed ledger of cluster `lab` (as the cluster keeps
    it) and three recorded boots."""
    root = tmp_path / "state"
    monkeypatch.setenv("TPWARDEN_STATE_DIR", str(root))
    (root / "ledger").mkdir(parents=True)
    lab = Lab(root / "ledger" / "lab.sqlite")
    _regression(lab)
    lab.led.close()
    for total in (1000.0, 1110.0, 900.0):
        append_jsonl(root / "boots.jsonl", {"cluster": "lab", "total_s": total, "phases": {}})
    append_jsonl(root / "boots.jsonl", {"cluster": "other", "total_s": 9999.0, "phases": {}})
    return root


@pytest.fixture
def regressed_inventory(tmp_path: Path) -> Path:
    """good.yml as the regression left it: cluster `lab`, KV 12 GiB, the clock cap 1500."""
    text = GOOD.read_text()
    text = text.replace("    tpwarden:\n", "    tpwarden:\n      cluster_name: lab\n", 1)
    text = text.replace("memory: 16GiB", "memory: 12GiB").replace(
        "gpu_clock_cap_mhz: 2000", "gpu_clock_cap_mhz: 1500"
    )
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return path


def _why_plan(state: Path, out: Path, *extra: str) -> object:
    ledger = str(state / "ledger" / "lab.sqlite")
    return runner.invoke(app, ["ledger", "why", "--ledger", ledger, "--plan", str(out), *extra],
                         terminal_width=80)  # fmt: skip


def test_why_plan_reverts_each_difference_alone_and_together(state: Path, tmp_path: Path) -> None:
    out = tmp_path / "why.yml"
    res = _why_plan(state, out)
    assert res.exit_code == 1, res.output  # still `why`: slower
    assert "3 variant(s): revert-kv-cache, revert-gpu-clock-cap, revert-all" in res.output
    assert "not revertable: co-tenant stress-ng on node2: stop stress-ng" in res.output
    loaded = load_plan(out)
    sets = {v.name: {c.key: c.value for c in loaded.changes[v.name]} for v in loaded.plan.variants}
    assert sets == {
        "revert-kv-cache": {"kv_cache.memory": 16 * 2**30},
        "revert-gpu-clock-cap": {"gpu_clock_cap_mhz": 2000},
        "revert-all": {"kv_cache.memory": 16 * 2**30, "gpu_clock_cap_mhz": 2000},
    }
    text = out.read_text()
    assert "co-tenant stress-ng on node2" in text.split("restore_by")[0]  # in the header
    assert 'restore_by: "06:30"' in text


def test_why_plan_json_names_the_plan_and_what_it_cannot_revert(
    state: Path, tmp_path: Path
) -> None:
    res = _why_plan(state, tmp_path / "why.yml", "--json")
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, SCHEMA)
    plan = doc["plan"]
    assert plan["path"] == str(tmp_path / "why.yml")
    assert [v["name"] for v in plan["variants"]] == [
        "revert-kv-cache", "revert-gpu-clock-cap", "revert-all",
    ]  # fmt: skip
    assert [c["subject"] for c in plan["not_revertable"]] == ["co-tenant stress-ng"]
    assert plan["not_revertable"][0]["nodes"] == ["node2"]


def test_why_plan_on_an_unchanged_server_has_nothing_to_revert(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "same.sqlite")
    lab.record(BASE)
    for _ in range(4):
        lab.canary(12.6, QUIET_STATE)
    lab.led.close()
    out = tmp_path / "why.yml"
    res = runner.invoke(app, ["ledger", "why", "--ledger", str(tmp_path / "same.sqlite"),
                              "--plan", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "nothing here is revertable" in res.output
    assert "variants:" not in out.read_text()


def _dry_run(plan: Path, inventory: Path, *extra: str) -> object:
    return runner.invoke(app, ["experiment", "run", str(plan), "-i", str(inventory), "--dry-run",
                               *extra], terminal_width=200)  # fmt: skip


def _why_plan_by(state: Path, tmp_path: Path, restore_by: str) -> Path:
    """The why plan, its deadline set relative to now (the test does not depend on the hour)."""
    out = tmp_path / "why.yml"
    _why_plan(state, out)
    out.write_text(out.read_text().replace('restore_by: "06:30"', f'restore_by: "{restore_by}"'))
    return out


def test_the_why_plan_is_a_queue_estimated_from_the_recorded_boots_and_canaries(
    state: Path, tmp_path: Path, regressed_inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _why_plan_by(state, tmp_path, "+06:00")

    def no_network(*args: object) -> None:
        raise AssertionError(f"the dry run connected to {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    res = _dry_run(plan, regressed_inventory, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["command"] == "experiment run" and doc["ok"] and doc["dry_run"]
    costs = doc["queue"]["costs"]
    assert costs["boot_s"] == 1110.0  # the worst of lab's boots, not the other cluster's
    assert costs["canary_s"] == 200.0 and "recorded canaries" in costs["canary_from"]
    steps = [(s["name"], s["kind"]) for s in doc["queue"]["steps"]]
    assert steps[1:4] == [("revert-kv-cache", "restart"), ("revert-gpu-clock-cap", "restart"),
                          ("revert-all", "restart")]  # fmt: skip
    assert doc["queue"]["verdict"] == "fits"
    summaries = {v["name"]: v["summary"] for v in doc["variants"]}
    assert summaries["revert-gpu-clock-cap"] == ["gpu_clock_cap_mhz: 1500 -> 2000"]
    assert summaries["revert-kv-cache"] == ["kv_cache.memory: 12884901888 -> 17179869184"]


def test_a_queue_past_its_deadline_is_refused_unless_partial(
    state: Path, tmp_path: Path, regressed_inventory: Path
) -> None:
    out = _why_plan_by(state, tmp_path, "+01:30")
    refused = _dry_run(out, regressed_inventory)
    assert refused.exit_code == 2, refused.output
    assert "skipped: needs" in refused.output and "verdict: partial" in refused.output
    assert "restore_by" in refused.output and "--allow-partial" in refused.output
    as_json = _dry_run(out, regressed_inventory, "--json")
    doc = json.loads(as_json.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert as_json.exit_code == 2 and doc["ok"] is False and doc["error"]["exit_code"] == 2
    assert doc["queue"]["verdict"] == "partial"
    partial = _dry_run(out, regressed_inventory, "--allow-partial")
    assert partial.exit_code == 0, partial.output
    # 90 min: production 3.3, each variant 21.8 (boot 18.5, canary 3.3), restore 21.8,
    # margin 10: the first two fit (they end at 46.9 min, the restore at 68.7), revert-all not
    assert partial.output.count("skipped: needs") == 1
    assert "- revert-all" in partial.output


def test_the_dry_run_estimates_only_what_is_left(
    state: Path, tmp_path: Path, regressed_inventory: Path
) -> None:
    out = _why_plan_by(state, tmp_path, "+06:00")
    results = state / "experiment" / "lab" / "why"
    results.mkdir(parents=True)
    (results / result_name("revert-kv-cache")).write_text("{}")
    (results / failure_name("revert-all")).write_text("{}")
    res = _dry_run(out, regressed_inventory, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["resume"]["left"] == ["revert-gpu-clock-cap"]
    names = [s["name"] for s in doc["queue"]["steps"]]
    assert names == ["production", "revert-gpu-clock-cap", "production"]
    # production's opening canary taken: the resumed queue starts with what is left
    (results / result_name("production-start")).write_text("{}")
    doc = json.loads(_dry_run(out, regressed_inventory, "--json").stdout)
    kinds = [s["kind"] for s in doc["queue"]["steps"]]
    assert kinds == ["restart", "production-end"] and doc["resume"]["foreign"] == []


def test_the_run_refuses_what_it_does_not_measure_yet_and_says_so(tmp_path: Path) -> None:
    # the unattended run is built (tests/unit/test_experiment_night.py); request variants not yet
    plan = tmp_path / "p.yml"
    plan.write_text('restore_by: "06:30"\nvariants:\n  - name: a\n    set: [drafter=null]\n'
                    "  - name: b\n    request: {sampling: {temperature: 0.6}}\n")  # fmt: skip
    res = runner.invoke(app, ["experiment", "run", str(plan), "-i", str(GOOD)])
    assert res.exit_code == 2 and "not measured by `experiment run` yet" in res.output
    assert f"{plan}:6:" in res.output


def test_a_bad_plan_exits_2_at_its_line_with_nothing_contacted(tmp_path: Path) -> None:
    plan = tmp_path / "p.yml"
    plan.write_text('restore_by: "06:30"\nvariants:\n  - name: a\n    sett: [drafter=null]\n')
    res = _dry_run(plan, GOOD, "--json")
    assert res.exit_code == 2
    doc = json.loads(res.stdout)
    assert doc["error"]["message"].startswith(f"{plan}:4: variants[0].sett: unknown key")


def test_an_image_with_no_flag_table_is_refused_before_any_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing fetched
    inventory = tmp_path / "inv.yml"
    inventory.write_text(
        GOOD.read_text().replace('vllm_version: "0.33.0"', 'vllm_version: "0.99.0"')
    )
    plan = tmp_path / "p.yml"
    plan.write_text('restore_by: "+06:00"\nvariants:\n  - name: a\n    set: [drafter=null]\n')
    res = _dry_run(plan, inventory, "--json")
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert "no shipped flag table" in doc["error"]["message"]
    assert "tpwarden flags fetch" in doc["error"]["hint"] + doc["error"]["message"]
