"""The minimal YAML edits of `--set`: only the value's characters or its block change."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.rollout.yaml_edit import set_value

TEXT = """\
# settings
tpwarden:
  image: img:1   # the build
  drafter:       # the field's drafter
    method: dflash
    # k as measured on 2026-11-02
    num_speculative_tokens: 3
  # what follows the drafter
  extra_args:
  - --max-num-seqs
  - '8'
  notes: |
    line one
    line two
  port: 8000
"""
ROOT = ("tpwarden",)


def _set(key, value, text=TEXT):
    return set_value(text, ROOT, key, value, "all.yml")


def _load(text):
    return YAML(typ="safe").load(text)["tpwarden"]


def test_a_scalar_changes_only_its_characters():
    new = _set("image", "img:2")
    assert new == TEXT.replace("image: img:1   #", "image: img:2   #")


def test_a_section_to_null_removes_its_block_and_keeps_the_comments_around_it():
    new = _set("drafter", None)
    assert "  drafter: null       # the field's drafter\n  # what follows the drafter\n" in new
    assert "method" not in new and "k as measured" not in new
    assert _load(new)["drafter"] is None and _load(new)["port"] == 8000


def test_null_to_a_mapping_writes_a_block():
    off = _set("drafter", None)
    on = _set("drafter", {"method": "ngram", "num_speculative_tokens": 4, "x": {"y": "a b"}}, off)
    assert "  drafter:       # the field's drafter\n    method: ngram\n" in on
    assert _load(on)["drafter"] == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "x": {"y": "a b"},
    }


def test_a_key_under_a_null_section_creates_it():
    new = _set("drafter.method", "dflash", _set("drafter", None))
    assert _load(new)["drafter"] == {"method": "dflash"}


def test_a_new_key_goes_after_the_last_child():
    new = _set("drafter.extra.draft_tensor_parallel_size", 1)
    assert _load(new)["drafter"]["extra"] == {"draft_tensor_parallel_size": 1}
    assert "    num_speculative_tokens: 3\n    extra:\n      draft_tensor_parallel_size: 1\n" in new


def test_a_same_column_block_list_and_a_block_scalar_are_replaced_whole():
    new = _set("extra_args", ["--max-num-seqs", "16"])
    assert _load(new)["extra_args"] == ["--max-num-seqs", "16"]
    assert "'8'" not in new
    new = _set("notes", "one line")
    assert _load(new)["notes"] == "one line" and "line two" not in new


def test_crlf_files_stay_crlf():
    text = TEXT.replace("\n", "\r\n")
    new = _set("drafter.extra.k", 1, _set("drafter", None, text))
    assert "\n" not in new.replace("\r\n", "")


def test_strings_that_yaml_would_misread_are_quoted():
    assert _load(_set("image", "yes"))["image"] == "yes"
    assert _load(_set("image", "a: b"))["image"] == "a: b"


@pytest.mark.parametrize(
    ("text", "key", "line", "words"),
    [
        ("tpwarden:\n  image: x\n", "image.tag", 2, "is not a mapping"),
        ("tpwarden:\n  drafter:\n    method: dflash\n", "drafter", 2, "is a section"),
        ("tpwarden:\n  env: {}\n", "env.A", 2, "written inline"),
        ("tpwarden: [\n", "image", 2, "cannot edit"),
    ],
)
def test_refusals_name_the_line(text, key, line, words):
    value = 3 if key == "drafter" else "v"
    with pytest.raises(ConfigError) as info:
        set_value(text, ROOT, key, value, "all.yml")
    assert info.value.file == "all.yml" and info.value.line == line
    assert words in info.value.message
