"""The lab trains its client tokenizer on bench's default prompt set. When that file moved with
the bench package, the lab silently kept a placeholder tokenizer and the lab's bench and eval
runs failed; a missing prompt set is now an error, and the default is the shipped file."""

from __future__ import annotations

import inspect

import pytest
from tpwarden.cluster.bench.plan import DEFAULT_PROMPTS
from tpwarden.cluster.errors import LabError
from tpwarden.lab import client_image


def test_the_lab_tokenizer_trains_on_the_shipped_prompt_set() -> None:
    default = inspect.signature(client_image.ensure_lab_tokenizer).parameters["prompts"].default
    assert default == DEFAULT_PROMPTS and DEFAULT_PROMPTS.is_file()


def test_a_missing_prompt_set_is_an_error_not_a_placeholder(tmp_path) -> None:
    steps: list[tuple[str, str]] = []
    with pytest.raises(LabError, match="prompt set .* is missing"):
        client_image.ensure_lab_tokenizer(
            tmp_path / "model",
            tmp_path / "cache",
            venv=tmp_path / "no-venv",
            prompts=tmp_path / "gone.jsonl",
            on_step=lambda *a: steps.append(a),
        )
    assert not steps  # no "placeholder kept" warning
