"""docs/configuration.md lists every key of the spec and matches it exactly."""

from pathlib import Path

from tpwarden.cluster.reports.config_reference import all_keys, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_reference_is_current():
    assert DOC.read_text() == render(), (
        "regenerate: python -m tpwarden.cluster.reports.config_reference docs/configuration.md"
    )


def test_reference_lists_every_key():
    text = DOC.read_text()
    keys = all_keys()
    assert "tpwarden.drafter.num_speculative_tokens" in keys
    for key in keys:
        assert f"`{key}`" in text
