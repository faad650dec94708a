"""`ledger why --plan`'s plan from `why`'s differences (pure): each setting row put back as
`rollout --set` takes it, a section switched on or off put back whole, a clock cap applied by
hand turned into the inventory's cap, and what tpwarden cannot revert listed with its advice."""

from __future__ import annotations

from pathlib import Path

from tpwarden.cluster.experiment.from_why import CANNOT, revert_plan, revert_sets, sections
from tpwarden.cluster.experiment.plan_file import parse_plan
from tpwarden.cluster.ledger.differences import Difference
from tpwarden.cluster.ledger.why import Verdict, WhyReport, why

from .test_ledger_why import BASE, NODES, QUIET_STATE, Lab

DRAFTER_ON = {
    ("*", "setting.drafter.method"): "dflash",
    ("*", "setting.drafter.path"): "/models/GLM-5.3-Flash-DFlash2",
    ("*", "setting.drafter.num_speculative_tokens"): "3",
    ("*", "setting.drafter.extra"): "{}",
}


def test_a_section_switched_off_is_set_back_whole_and_one_switched_on_back_to_null() -> None:
    off_to_on = {"drafter": None, "drafter.method": None, "drafter.num_speculative_tokens": None}
    assert sections(off_to_on) == {"drafter": None}
    on_to_off = {"drafter": None, "drafter.method": "dflash",
                 "drafter.num_speculative_tokens": "3", "drafter.extra": "{}"}  # fmt: skip
    assert sections(on_to_off) == {
        "drafter": {"method": "dflash", "num_speculative_tokens": 3, "extra": {}}
    }
    # plain rows: one change each, values read as YAML (as --set reads them)
    assert sections({"kv_cache.memory": str(16 * 2**30), "extra_args": '["--max-num-seqs","8"]',
                     "max_model_len": None}) == {  # fmt: skip
        "kv_cache.memory": 16 * 2**30, "extra_args": ["--max-num-seqs", "8"],
        "max_model_len": None,
    }  # fmt: skip


def test_clock_commands_become_the_inventory_cap_and_other_commands_are_not_revertable() -> None:
    cap = Difference(subject="GPU clock cap", category="clocks and power",
                     setting="gpu_clock_cap_mhz", revert=[{"command": "tpwarden clocks cap 2000"}])  # fmt: skip
    reset = Difference(subject="GPU clock cap", category="clocks and power",
                       setting="gpu_clock_cap_mhz", revert=[{"command": "tpwarden clocks reset"}])  # fmt: skip
    other = Difference(subject="GPU power limit", category="clocks and power",
                       revert=[{"command": "nvidia-smi -pl 100"}])  # fmt: skip
    assert revert_sets(cap) == {"gpu_clock_cap_mhz": 2000}
    assert revert_sets(reset) == {"gpu_clock_cap_mhz": None}
    assert revert_sets(other) == {}


def _report(*diffs: Difference) -> WhyReport:
    return WhyReport(cluster="lab", definition="d", level=1, verdict=Verdict.SLOWER, ratio=0.6,
                     differences=diffs)  # fmt: skip


def test_one_revertable_difference_gives_one_variant_and_no_all() -> None:
    kv = Difference(subject="KV cache", category="serving settings", setting="kv_cache",
                    before="17179869184", after="12884901888",
                    revert=[{"set": "kv_cache.memory", "value": "17179869184"}])  # fmt: skip
    cot = Difference(subject="co-tenant stress-ng", category="co-tenants", nodes=["node2"])
    plan = revert_plan(_report(kv, cot), restore_by="+03:00")
    assert [v["name"] for v in plan.variants] == ["revert-kv-cache"]
    assert plan.not_revertable == ({"subject": "co-tenant stress-ng", "nodes": ["node2"],
                                    "advice": CANNOT},)  # fmt: skip
    loaded = parse_plan(plan.text, "why.yml")
    assert loaded.plan.restore_by == "+03:00"
    assert [c.key for c in loaded.changes["revert-kv-cache"]] == ["kv_cache.memory"]


def test_same_subject_names_stay_unique() -> None:
    a = Difference(subject="setting x", category="serving settings",
                   revert=[{"set": "x", "value": "1"}])  # fmt: skip
    b = Difference(subject="setting-x", category="serving settings",
                   revert=[{"set": "y", "value": "2"}])  # fmt: skip
    names = [v["name"] for v in revert_plan(_report(a, b)).variants]
    assert names == ["revert-setting-x", "revert-setting-x-2", "revert-all"]


def test_a_drafter_switched_off_is_reverted_by_turning_it_back_on(tmp_path: Path) -> None:
    lab = Lab(tmp_path / "l.sqlite")
    before = {**BASE, **DRAFTER_ON,
              **{(n, "flag.--speculative-config"): '{"method":"dflash","num_speculative_tokens":3}'
                 for n in NODES}}  # fmt: skip
    lab.record(before)
    for _ in range(4):
        lab.canary(12.6, QUIET_STATE)
    after = {k: v for k, v in before.items() if "drafter" not in k[1] and "speculative" not in k[1]}
    after[("*", "setting.drafter")] = None  # type: ignore[assignment]  # a null row, as recorded
    lab.record(after)
    lab.canary(8.0, QUIET_STATE)
    lab.canary(8.1, QUIET_STATE)
    rep = why(lab.led, "lab")
    assert [d.subject for d in rep.differences] == ["drafter"]
    plan = revert_plan(rep)
    (variant,) = plan.variants
    assert variant["set"] == {"drafter": {"method": "dflash", "num_speculative_tokens": 3,
                                          "path": "/models/GLM-5.3-Flash-DFlash2", "extra": {}}}  # fmt: skip
    loaded = parse_plan(plan.text, "why.yml")
    (change,) = loaded.changes[variant["name"]]
    assert change.key == "drafter" and change.value["num_speculative_tokens"] == 3
