"""`tune drafter --plot`: one panel per level with the predictions, their band, the point
measured at the current k and the rollout's point at the new k (issue 33 item 4)."""

from __future__ import annotations

import json

import pytest
from tpwarden.cluster.cli import app
from tpwarden.cluster.tune.model import fit, predict
from tpwarden.cluster.tune.plot import (
    APPLIED_GID,
    BAND_GID,
    EXTRAPOLATED_GID,
    MEASURED_GID,
    PREDICTED_GID,
    tune_figure,
    tune_png,
)
from tpwarden.cluster.tune.runner import level_json, save
from typer.testing import CliRunner

from tests.unit.test_tune_model import _field_levels

pytest.importorskip("matplotlib")  # a control-machine extra; the nodes' install has none

PNG = b"\x89PNG\r\n\x1a\n"


def _by_gid(ax, gid):
    return [a for a in ax.get_children() if a.get_gid() == gid]


def test_one_panel_per_level_with_predictions_band_and_measured_points():
    levels = _field_levels()
    preds = predict(levels, fit(levels))
    measured = [(7, lv.concurrency, lv.aggregate_tok_s) for lv in levels]
    fig = tune_figure(preds, measured, applied=[(3, 32, 171.0)])
    try:
        axes = fig.axes
        assert [ax.get_title() for ax in axes] == ["c=1", "c=4", "c=8", "c=16", "c=32"]
        c32 = axes[-1]
        (line,) = _by_gid(c32, PREDICTED_GID)
        want = [p.aggregate_tok_s for p in sorted(preds, key=lambda p: p.k) if p.concurrency == 32]
        assert list(line.get_xdata()) == list(range(8))
        assert list(line.get_ydata()) == pytest.approx(want)
        assert len(_by_gid(c32, BAND_GID)) == 1
        (star,) = _by_gid(c32, MEASURED_GID)
        assert star.get_offsets().tolist() == [[7.0, 144.8]]
        (after,) = _by_gid(c32, APPLIED_GID)
        assert after.get_offsets().tolist() == [[3.0, 171.0]]
        assert _by_gid(axes[0], APPLIED_GID) == []  # the rollout's point only where measured
        # one k measured: every other k' has an extrapolated step time, hollow markers
        (ex,) = _by_gid(c32, EXTRAPOLATED_GID)
        assert sorted(x for x, _ in ex.get_offsets().tolist()) == list(range(7))
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    assert tune_png(preds, measured).startswith(PNG)


def test_cli_plot_from_a_saved_run_with_its_rollout(tmp_path):
    run = tmp_path / "run"
    applied = {"rollout_id": "r1", "step": "done", "kept": True, "from_k": 7, "to_k": 3,
               "levels": [{"concurrency": 32, "predicted_tok_s": 199.4, "measured_tok_s": 171.0,
                           "predicted_95": [180, 220], "ratio": 171 / 199.4}]}  # fmt: skip
    save(run, {"levels": [level_json(lv) for lv in _field_levels()], "applied": applied})
    out = tmp_path / "k.png"
    args = [
        "tune",
        "drafter",
        "--from-run",
        str(run),
        "--plot",
        str(out),
        "--runs-dir",
        str(tmp_path),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(PNG) and f"plot: {out}" in result.output
    assert "this run: k=7 -> k=3 (rollout r1, kept)" in result.output
    js = CliRunner().invoke(app, [*args, "--json"])
    assert json.loads(js.stdout)["applied"]["rollout_id"] == "r1"


def test_cli_plot_to_an_unwritable_place_is_one_error_line(tmp_path):
    run = tmp_path / "run"
    save(run, {"levels": [level_json(lv) for lv in _field_levels()]})
    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "k.png"  # its folder is a file
    result = CliRunner().invoke(
        app, ["tune", "drafter", "--from-run", str(run), "--plot", str(bad), "--json"]
    )
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["error"]["kind"] == "io"
