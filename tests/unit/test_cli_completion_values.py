"""TAB completes values (issue 52): node names from the inventory given with -i, eval presets
and tasks, `rollout --bench` presets and `--set` keys; from stand-ins (`completion_params`) that
parse as the real commands do, so a TAB imports no command module and connects nowhere."""

from __future__ import annotations

import json
import os
import pprint
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from tpwarden.cluster.cli import app, common, completion_values, lazy
from tpwarden.cluster.cli.completion_params import PARAMS, rows_of
from tpwarden.cluster.cli.completion_values import inventory_nodes
from tpwarden.cluster.eval.catalog import PRESETS, SUITES
from tpwarden.cluster.reports.config_reference import _nested_model
from tpwarden.cluster.rollout.ports import FULL_LEVELS, QUICK_LEVELS
from tpwarden.cluster.settings import TpwardenSettings
from typer._completion_classes import BashComplete
from typer.main import get_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "inventory.example.yml")
NODES = ["node1", "node2", "node3", "node4"]


def _tree() -> dict[str, object]:
    return {" ".join(path): cmd for path, cmd in lazy.walk(get_command(app)) if path}


def test_the_stand_ins_are_the_real_commands_parameters():
    tree = _tree()
    want = {key: rows_of(tree[key]) for key in PARAMS}
    assert want == PARAMS, "paste into completion_params.py:\n" + pprint.pformat(want, width=100)


def test_every_command_that_completes_a_value_has_a_stand_in():
    """A completer on a command without a stand-in would import the command's module per TAB."""
    completing = {key for key, cmd in _tree().items() if any(r[3] for r in rows_of(cmd)[1])}
    assert completing == set(PARAMS)


def _offered(args: list[str], incomplete: str) -> list[tuple[str, str | None]]:
    done = BashComplete(get_command(app), {}, "tpwarden", "_TPWARDEN_COMPLETE")
    return [(i.value, i.help) for i in done.get_completions(list(args), incomplete)]


# (words typed, the word being completed, whether the real command is imported for it: only
# for names of options and sub-commands, whose help the real command holds)
CASES = [
    (["logs", "-i", EXAMPLE], "", False),
    (["logs", "-i", EXAMPLE, "--follow"], "node", False),
    (["logs", "--tail", "5", "-i", EXAMPLE], "node3", False),
    (["logs", "node1"], "", False),
    (["logs"], "--f", True),
    (["logs", "-i"], "", False),
    (["eval", "run", "--tasks"], "gsm", False),
    (["eval", "run", "--tasks"], "mmlu,k", False),
    (["eval", "run", "--suite"], "", False),
    (["eval", "run", "--dry-run"], "--t", True),
    (["bench", "sweep", "-i", EXAMPLE, "--client-node"], "node", False),
    (["bench", "sweep", "--no-ignore-eos", "--dataset"], "", False),
    (["bench", "prefill", "-i", EXAMPLE, "--client-node"], "", False),
    (["rollout", "--set"], "drafter.n", False),
    (["rollout", "--set", "kv_cache.memory=24GiB", "--set"], "tpwarden.watchdog.f", False),
    (["rollout", "--bench"], "", False),
    (["rollout"], "h", True),
    (["rollout"], "--b", True),
    (["rollout", "history"], "--", True),
]


@pytest.mark.parametrize(("args", "incomplete", "imports"), CASES)
def test_a_stand_in_completes_as_its_real_command(args, incomplete, imports, monkeypatch):
    monkeypatch.setattr(lazy, "_RESOLVED", {})  # nothing imported yet: the stand-ins answer
    standing_in = _offered(args, incomplete)
    assert bool(lazy._RESOLVED) is imports, list(lazy._RESOLVED)
    real = _real_offered(args, incomplete)
    assert standing_in == real, (args, incomplete)


def _real_offered(args: list[str], incomplete: str) -> list[tuple[str, str | None]]:
    """The same completion with every command module imported first (no stand-in is built)."""
    from tpwarden.cluster.cli import COMMANDS

    for name, (target, _short) in COMMANDS.items():
        if name != "lab":
            lazy._mount(target, name)
    return _offered(args, incomplete)


def test_what_the_stand_ins_offer():
    assert [v for v, _ in _offered(["logs", "-i", EXAMPLE], "")] == NODES
    assert _offered(["logs", "-i", EXAMPLE], "node3") == [("node3", "worker")]
    assert _offered(["eval", "run", "--tasks"], "gsm") == [("gsm8k", "preset")]
    assert [v for v, _ in _offered(["eval", "run", "--tasks"], "mmlu,k")] == [
        "mmlu,kmmlu", "mmlu,kmmlu_direct", "mmlu,kormedmcqa",
    ]  # fmt: skip
    assert [v for v, _ in _offered(["eval", "run", "--tasks"], "mmlu,mm")] == ["mmlu,mmlu_pro"]
    assert _offered(["rollout", "--set"], "drafter.n") == [
        ("drafter.num_speculative_tokens=", None)
    ]
    assert [v for v, _ in _offered(["rollout", "--bench"], "")] == ["none", "quick", "full"]
    assert [v for v, _ in _offered(["bench", "sweep", "--dataset"], "r")] == ["random"]


def test_eval_tasks_offer_the_include_paths_own_tasks(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "my_mc.yaml").write_text("task: my_mc\noutput_type: multiple_choice\n")
    (tmp_path / "notes.yml").write_text("# no task here\n")
    offered = _offered(["eval", "run", "--include-path", str(tmp_path), "--tasks"], "gsm8k,m")
    assert ("gsm8k,my_mc", "local") in offered and ("gsm8k,mmlu", "preset") in offered
    chat = _offered(["eval", "run", "--include-path", str(tmp_path), "--chat"], "")
    assert chat == [("my_mc", "local")]


# -- the copies held to their sources -----------------------------------------------------------
def _settable(model: type[BaseModel] = TpwardenSettings, prefix: str = "") -> list[str]:
    """Every dotted key `--set` can name: fields and sections, not inside a list's items or a
    mapping's values."""
    keys = []
    for name, info in model.model_fields.items():
        keys.append(prefix + name)
        nested = _nested_model(info.annotation)
        if nested and typing.get_origin(info.annotation) not in (list, dict):
            keys += _settable(nested, f"{prefix}{name}.")
    return keys


def test_the_value_lists_are_their_sources():
    assert completion_values.EVAL_TASKS == tuple(PRESETS)
    assert completion_values.EVAL_SUITES == tuple(SUITES)
    assert list(completion_values.SET_KEYS) == _settable(), pprint.pformat(_settable())
    presets = completion_values.BENCH_PRESETS
    assert list(presets) == ["none", "quick", "full"]
    assert "c=" + ",".join(map(str, QUICK_LEVELS)) in presets["quick"]
    assert "c=" + ",".join(map(str, FULL_LEVELS)) in presets["full"]
    assert common.DEFAULT_INVENTORY is completion_values.DEFAULT_INVENTORY


# -- node names without Ansible ------------------------------------------------------------------
def test_nodes_of_the_example_inventory():
    assert inventory_nodes(Path(EXAMPLE)) == [
        ("node1", "head"), ("node2", "worker"), ("node3", "worker"), ("node4", "worker"),
    ]  # fmt: skip


def test_nodes_of_an_ini_inventory_with_a_range_and_child_groups(tmp_path):
    inv = tmp_path / "hosts"
    inv.write_text(
        "# the field's nodes\n[head]\nspark01 ansible_host=10.0.0.11\n\n"
        "[rack_a]\nspark[02:03] ansible_user=root\n[rack_b]\nspark04\n"
        "[workers:children]\nrack_a\nrack_b\n[workers:vars]\nansible_user=root\n"
        "[control]\nlaptop\n"
    )
    assert inventory_nodes(inv) == [
        ("spark01", "head"), ("spark02", "worker"), ("spark03", "worker"), ("spark04", "worker"),
    ]  # fmt: skip


def test_nodes_of_an_inventory_directory_with_vault_and_group_vars(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("tpwarden: {}\n")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    head:\n      hosts:\n        gb1:\n"
        "          ansible_become_password: !vault |\n            $ANSIBLE_VAULT;1.1;AES256\n"
        "            6162\n    workers:\n      children:\n        more:\n          hosts:\n"
        "            gb[2:6:2]:\n"
    )
    assert inventory_nodes(tmp_path) == [("gb1", "head"), ("gb2", "worker"), ("gb4", "worker"),
                                         ("gb6", "worker")]  # fmt: skip


@pytest.mark.parametrize("text", ["all: [unclosed", "", "just text\n", "all:\n  hosts: 3\n"])
def test_an_unreadable_inventory_offers_nothing(tmp_path, text):
    (tmp_path / "inv.yml").write_text(text)
    assert inventory_nodes(tmp_path / "inv.yml") == []
    assert inventory_nodes(tmp_path / "missing.yml") == []


# -- a real TAB: a fresh process, what it loads, that it connects nowhere ------------------------
PROBE = """
import json, os, socket, sys
dialled = []
def refuse(self, address, *a, **k):
    dialled.append(str(address))
    raise OSError("no network in a TAB")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
sys.argv = ["tpwarden"]
from tpwarden.cluster.cli import app
try:
    app()
except SystemExit:
    pass
sys.stderr.write("\\nPROBE " + json.dumps({"modules": sorted(sys.modules), "dialled": dialled}))
"""
HEAVY = ("pydantic", "pydantic_core", "httpx", "paramiko", "docker", "ansible", "requests",
         "rich", "tpwarden.cluster.settings", "tpwarden.cluster.inventory", "tpwarden.lab")  # fmt: skip


def _tab(words: str, cword: int) -> tuple[list[str], dict[str, list[str]]]:
    env = {**os.environ, "_TPWARDEN_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(cword)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120
    )
    return done.stdout.split(), json.loads(done.stderr.rsplit("PROBE ", 1)[1])


@pytest.mark.parametrize(
    ("words", "cword", "offered"),
    [
        (f"tpwarden logs -i {EXAMPLE} ", 4, NODES),
        (f"tpwarden bench sweep -i {EXAMPLE} --client-node node", 6, NODES),
        ("tpwarden eval run --tasks gsm", 4, ["gsm8k"]),
        ("tpwarden rollout --set drafter.n", 3, ["drafter.num_speculative_tokens="]),
        ("tpwarden rollout --bench ", 3, ["none", "quick", "full"]),
    ],
)
def test_a_value_tab_imports_no_command_module_and_connects_nowhere(words, cword, offered):
    got, seen = _tab(words, cword)
    assert got == offered
    assert seen["dialled"] == []
    loaded = [m for m in seen["modules"] if m.startswith(HEAVY)]
    assert not loaded, loaded
    commands = [m for m in seen["modules"] if m.startswith("tpwarden.cluster.cli.")]
    assert set(commands) <= {
        "tpwarden.cluster.cli.lazy", "tpwarden.cluster.cli.completion_table",
        "tpwarden.cluster.cli.completion_params", "tpwarden.cluster.cli.completion_values",
    }, commands  # fmt: skip
