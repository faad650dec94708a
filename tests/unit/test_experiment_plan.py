"""The experiment plan file (issue 54): read into its typed model, every refusal at the plan's
file:line with the key and a fix, and each variant's `set` checked against the inventory as
`rollout` would apply it (the same parser, the same inventory checks, the image's flag table),
with nothing written and no node contacted."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.experiment.check import check_variants
from tpwarden.cluster.experiment.plan_file import load_plan, parse_plan
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.rollout.edit import parse_set

INV = str(Path(__file__).parent / "inventories" / "good.yml")

PLAN = """\
restore_by: "06:30"
tz: Asia/Seoul
bench: quick
eval: {preset: gsm8k, limit: 200}
variants:
  - name: no-drafter
    set: ["drafter=null"]
  - name: k5
    set: {drafter.num_speculative_tokens: 5}
  - name: thinking
    request:
      chat_template_kwargs: {enable_thinking: true}
      sampling: {temperature: 0.6}
"""


def _refused(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as got:
        parse_plan(text, "plan.yml")
    return got.value


def test_a_plan_reads_into_its_model_with_rollouts_own_changes() -> None:
    loaded = parse_plan(PLAN, "plan.yml")
    plan = loaded.plan
    assert plan.restore_by == "06:30" and plan.tz == "Asia/Seoul" and plan.bench == "quick"
    assert plan.eval is not None and (plan.eval.preset, plan.eval.limit) == ("gsm8k", 200)
    assert [v.name for v in plan.variants] == ["no-drafter", "k5", "thinking"]
    assert [v.restarts for v in plan.variants] == [True, True, False]
    # the list form and the mapping form give what `rollout --set` gives
    assert loaded.changes["no-drafter"] == (parse_set("drafter=null"),)
    assert loaded.changes["k5"] == (parse_set("drafter.num_speculative_tokens=5"),)
    assert loaded.changes["thinking"] == ()
    thinking = plan.variants[2].request
    assert thinking is not None and thinking.chat_template_kwargs == {"enable_thinking": True}
    assert thinking.sampling.temperature == 0.6


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        ('restore_by: "06:30"\nvariants:\n  - name: a\n    sett: [x=1]\n', 4,
         "variants[0].sett", "did you mean 'set'?"),
        ('restore_by: "06:30"\nvariants:\n  - name: a\n    request: {sampling: {temprature: 1}}\n',
         4, "variants[0].request.sampling.temprature", "did you mean 'temperature'?"),
        ('restore_by: "25:30"\nvariants:\n  - name: a\n    set: [x=1]\n', 1, "restore_by",
         "not a time of day"),
        ('restore_by: "06:30"\nbench: fast\nvariants:\n  - name: a\n    set: [x=1]\n', 2,
         "bench", "'quick'"),
        ('restore_by: "06:30"\nvariants:\n  - name: a\n    set: ["x y=1"]\n', 4,
         "variants[0].set[0]", "is not a dotted key"),
        ('restore_by: "06:30"\nvariants:\n  - name: a\n    set: [x=1]\n  - name: a\n'
         '    set: [y=2]\n', 5, "variants[1].name", "named twice"),
        ('restore_by: "06:30"\nvariants:\n  - name: a\n    request: {}\n', 3, "variants[0]",
         "changes nothing"),
        ('restore_by: "06:30"\nvariants:\n  - name: production\n    set: [x=1]\n', 3,
         "variants[0].name", "reserved"),
        ('restore_by: "06:30"\neval: {preset: nosuch}\nvariants:\n  - name: a\n    set: [x=1]\n',
         2, "eval.preset", "unknown eval preset"),
        ('restore_by: "06:30"\ntz: Mars/Olympus\nvariants:\n  - name: a\n    set: [x=1]\n', 2,
         "tz", "unknown time zone"),
        ("variants:\n  - name: a\n    set: [x=1]\n", 1, "restore_by", "required key is missing"),
        ('restore_by: "06:30"\nvariants:\n  - name: a\n    set: [x=1, x=2]\n', 4,
         "variants[0].set", "set twice"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_at_its_file_and_line(
    text: str, line: int, key: str, words: str
) -> None:
    err = _refused(text)
    assert (err.file, err.line, err.key) == ("plan.yml", line, key), err.render()
    assert words in err.render()
    assert err.exit_code == 2


def test_a_set_that_is_neither_a_list_nor_a_mapping_says_what_it_takes() -> None:
    err = _refused('restore_by: "06:30"\nvariants:\n  - name: a\n    set: x=1\n')
    assert (err.line, err.key) == (4, "variants[0].set")
    assert "KEY=VALUE" in (err.hint or "")


def test_an_unquoted_clock_time_says_to_quote_it() -> None:
    err = _refused("restore_by: 16:30\nvariants:\n  - name: a\n    set: [x=1]\n")
    assert err.line == 1 and err.key == "restore_by" and "quote" in (err.hint or "")


def test_a_tag_or_a_second_document_is_refused_at_its_line_never_built() -> None:
    err = _refused('restore_by: "06:30"\nvariants: !!python/object/apply:os.system ["true"]\n')
    assert err.line == 2 and "YAML" in err.message
    err = _refused('restore_by: "06:30"\n---\nvariants: []\n')
    assert err.line == 2 and "single document" in err.message


def test_a_duplicate_key_and_a_missing_file_are_refused_with_their_place(tmp_path: Path) -> None:
    err = _refused('restore_by: "06:30"\nrestore_by: "07:00"\nvariants: []\n')
    assert err.line == 2 and "duplicate key" in err.render()
    with pytest.raises(ConfigError, match="file not found"):
        load_plan(tmp_path / "none.yml")


def test_variants_are_checked_as_rollout_applies_them() -> None:
    spec = load_inventory(INV)
    checks = check_variants(parse_plan(PLAN, "plan.yml"), INV, spec)
    by = {c.name: c for c in checks}
    assert by["no-drafter"].summary == ("drafter: dflash k=3 -> off",)
    assert by["k5"].summary == ("drafter: dflash k=3 -> dflash k=5",)
    assert by["no-drafter"].config_hash != spec.config_hash() != by["k5"].config_hash
    # a request-only variant runs on production: its hash is production's, no restart
    assert not by["thinking"].restarts and by["thinking"].config_hash == spec.config_hash()
    assert by["thinking"].summary == (
        "request chat_template_kwargs.enable_thinking: True",
        "request sampling.temperature: 0.6",
    )


def test_a_variant_with_settings_and_a_request_shows_both_and_restarts_only_for_a_change() -> None:
    text = (
        'restore_by: "06:30"\nvariants:\n'
        "  - name: both\n    set: [drafter=null]\n"
        "    request: {chat_template_kwargs: {enable_thinking: true}}\n"
        "  - name: same\n    set: [enforce_eager=true]\n"
        "    request: {sampling: {seed: 7}}\n"
    )
    checks = check_variants(parse_plan(text, "plan.yml"), INV, load_inventory(INV))
    both, same = checks
    assert both.restarts and both.summary == (
        "drafter: dflash k=3 -> off", "request chat_template_kwargs.enable_thinking: True",
    )  # fmt: skip
    assert not same.restarts and same.summary == ("request sampling.seed: 7",)


@pytest.mark.parametrize(
    ("sets", "line", "key", "words"),
    [
        # the image's flag table (vLLM 0.33.0, shipped) has no such flag
        ("    set:\n      - enforce_eager=true\n      - 'extra_args=[\"--no-such-flag\"]'\n", 6,
         "variants[0].set[1]", "has no flag --no-such-flag"),
        ("    set: {drafter.num_speculative_tokens: abc}\n", 4,
         "variants[0].set.drafter.num_speculative_tokens", "valid integer"),
        ("    set: [drafter.nosuch=1]\n", 4, "variants[0].set[0]", "unknown key"),
        ("    set: [enforce_eager=true]\n", 4, "variants[0].set", "changes nothing"),
    ],
)  # fmt: skip
def test_a_change_the_inventory_refuses_is_refused_at_the_plans_line(
    tmp_path: Path, sets: str, line: int, key: str, words: str
) -> None:
    inventory = tmp_path / "inv.yml"
    original = Path(INV).read_text()
    inventory.write_text(original)
    text = 'restore_by: "06:30"\nvariants:\n  - name: a\n' + sets
    loaded = parse_plan(text, "plan.yml")
    with pytest.raises(ConfigError) as got:
        check_variants(loaded, str(inventory), load_inventory(inventory))
    err = got.value
    assert (err.file, err.line, err.key) == ("plan.yml", line, key), err.render()
    assert words in err.render()
    assert inventory.read_text() == original  # nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inv.yml"]


@pytest.mark.parametrize("layout", ["example-dir", "example-ini/hosts.ini"])
def test_variants_are_checked_on_every_inventory_layout_and_nothing_is_written(
    layout: str,
) -> None:
    inventory = Path(INV).parent / layout
    home = inventory if inventory.is_dir() else inventory.parent
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    checks = check_variants(parse_plan(PLAN, "plan.yml"), str(inventory), load_inventory(inventory))
    assert [c.summary for c in checks][:2] == [
        ("drafter: dflash k=3 -> off",), ("drafter: dflash k=3 -> dflash k=5",),
    ]  # fmt: skip
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before
