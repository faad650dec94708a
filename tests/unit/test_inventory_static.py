"""A plain YAML inventory read without Ansible gives Ansible's own answer, lines included.

Differential: every YAML inventory the suite ships and a set of written variations are resolved
both ways (`static_yaml.resolve_static` and Ansible's engine through `ansible.resolve`); where
the direct reader answers, the two answers (or the two errors) must be equal. Where it cannot
be sure, it must decline (None) so that Ansible answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.ansible import Resolved, canonical, resolve
from tpwarden.cluster.inventory.static_yaml import resolve_static
from tpwarden.lab.inventory import render_inventory
from tpwarden.lab.paths import LabPaths

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "unit" / "inventories"
SHIPPED = [
    ROOT / "inventory.example.yml",
    *sorted(FIXTURES.glob("*.yml")),
    *sorted((FIXTURES / "bad").glob("*.yml")),
]

HOSTS = """\
    head:
      hosts:
        node1: {ansible_host: 10.0.0.11}
    workers:
      hosts:
        node2: {ansible_host: 10.0.0.12}
"""
SETTINGS = """\
  vars:
    tpwarden:
      image: registry.example.internal/vllm:0.33.0
      parallel: {tensor: 2}
"""
# each a whole inventory the direct reader must answer, and answer as Ansible does
VARIATIONS = {
    "example-shape": f"all:\n  children:\n{HOSTS}{SETTINGS}",
    "vars-first": f"all:\n{SETTINGS}  children:\n{HOSTS}",
    "groups-at-top-level": textwrap.dedent("""\
        head:
          hosts:
            node1:
        workers:
          hosts: {node3: {ansible_port: 2203}, node2: ~}
        all:
          vars: {ansible_user: root, tpwarden: {image: a}}
        """),
    "host-in-two-groups-group-precedence-by-name": textwrap.dedent("""\
        all:
          vars: {ansible_user: all-user, ansible_port: 22}
          children:
            zeta:
              vars: {ansible_user: zeta-user}
              hosts: {node2: {ansible_port: 2202}}
            head:
              vars: {ansible_user: head-user}
              hosts: {node1: ~}
            workers:
              vars: {ansible_user: workers-user, ansible_become: yes}
              hosts:
                node2: {ansible_port: 2222}
                node3:
            alpha:
              vars: {ansible_user: alpha-user}
              hosts: {node3: ~, node1: {vllm_host_ip: 192.168.0.1}}
        """),
    "host-overrides-settings": f"all:\n  children:\n{HOSTS}"
    + "        node3:\n          tpwarden: {image: other, parallel: {tensor: 2}}\n"
    + SETTINGS,
    "same-settings-on-a-host-is-no-override": f"all:\n  children:\n{HOSTS}"
    + "        node3:\n          tpwarden:\n            image: registry.example.internal/vllm:0.33.0\n"
    + "            parallel: {tensor: 2}\n"
    + SETTINGS,
    "yaml-1.1-scalars": f"all:\n  children:\n{HOSTS}"
    + textwrap.indent(
        textwrap.dedent("""\
            vars:
              tpwarden:
                flags: [yes, no, on, off, True, ~, null, 0x1f, 0o17, 1_000, .inf, -.inf, 1e3, '07']
                empty: {}
                none:
                text: "quoted: yes"
                folded: >
                  two
                  lines
                literal: |
                  kept
                nested:
                  - {a: 1, b: [x, {c: d}]}
                  -
                    - deep
            """),
        "  ",
    ),
    "keys-and-values-on-separate-lines": textwrap.dedent("""\
        all:
          children:
            head:
              hosts:
                node1:
                  ansible_host:
                    10.0.0.11
                  ansible_ssh_common_args:
                    -o ProxyJump=bastion
            workers:
              hosts:
                node2:
          vars:
            tpwarden:
              model:
                path:
                  /models/x
        """),
    "empty-sections-and-groups": textwrap.dedent("""\
        all:
          hosts:
          vars:
          children:
            head:
              hosts:
                node1:
            workers:
            other: {}
        """),
    "host-directly-under-all": textwrap.dedent("""\
        all:
          hosts:
            node9: {ansible_user: lone}
            node1: {ansible_user: first}
          children:
            head: {hosts: {node1: {ansible_user: second}}}
            workers: {hosts: {node9: ~}}
        """),
    "odd-variable-names": f"all:\n  children:\n{HOSTS}"
    + "        node3:\n          2bad-name: x\n          class: y\n",
}


def _same(static: Resolved, ansible: Resolved) -> None:
    assert static.source == ansible.source
    assert static.groups == ansible.groups
    assert canonical(static.host_vars) == canonical(ansible.host_vars)  # type: ignore[arg-type]
    assert canonical(static.settings) == canonical(ansible.settings)
    assert canonical(static.settings_by_host) == canonical(ansible.settings_by_host)
    assert static.locs == ansible.locs


def _attempt(
    resolver: Callable[[Path], Resolved | None], path: Path
) -> Resolved | ConfigError | None:
    try:
        return resolver(path)
    except ConfigError as exc:
        return exc


def _agree(path: Path) -> bool:
    """True when the direct reader answered (and then equal to Ansible); False when it declined.
    Ansible is asked only then: the fixtures it declines include alias bombs `check_files`
    refuses before Ansible may read them."""
    static = _attempt(lambda p: resolve_static(p, {}), path)
    if static is None:
        return False
    ansible = _attempt(resolve, path)
    if isinstance(ansible, ConfigError) or isinstance(static, ConfigError):
        assert isinstance(static, ConfigError), f"Ansible refused: {ansible}"
        assert isinstance(ansible, ConfigError), f"only the direct reader refused: {static}"
        assert (static.message, static.file, static.line, static.key) == (
            ansible.message,
            ansible.file,
            ansible.line,
            ansible.key,
        )
        return True
    assert ansible is not None
    _same(static, ansible)
    return True


def test_every_shipped_yaml_inventory_reads_as_ansible_reads_it() -> None:
    answered = [path.name for path in SHIPPED if _agree(path)]
    # the example and nearly every fixture are plain YAML: the direct reader is the common path
    assert "inventory.example.yml" in answered
    assert len(answered) >= len(SHIPPED) - 12, sorted(set(p.name for p in SHIPPED) - set(answered))


@pytest.mark.parametrize(
    ("engine", "backend"), [("sim", "native"), ("real", "native"), ("sim", "ray")]
)
def test_the_lab_inventories_read_as_ansible_reads_them(
    engine: str, backend: str, tmp_path: Path
) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(render_inventory(LabPaths(tmp_path), engine, backend), encoding="utf-8")
    assert _agree(path)


@pytest.mark.parametrize("name", sorted(VARIATIONS))
def test_written_variations_read_as_ansible_reads_them(name: str, tmp_path: Path) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(VARIATIONS[name], encoding="utf-8")
    assert _agree(path), f"{name}: the direct reader declined"


def test_a_relative_path_and_a_symlink_name_the_file_as_ansible_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real" / "inventory.yml"
    real.parent.mkdir()
    real.write_text(VARIATIONS["keys-and-values-on-separate-lines"], encoding="utf-8")
    (tmp_path / "inv.yml").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    for given in (Path("real/inventory.yml"), Path("inv.yml"), tmp_path / "inv.yml"):
        assert _agree(given), given


DECLINED = {
    "a template": "all:\n  vars:\n    x: '{{ y }}'\n",
    "a Jinja comment": "all:\n  vars:\n    x: 1  # {# not yaml #}\n",
    "a vault tag": "all:\n  vars:\n    x: !vault |\n      $ANSIBLE_VAULT;1.1;AES256\n      00\n",
    "an unsafe tag": "all:\n  vars:\n    x: !unsafe 'a'\n",
    "an alias": "all:\n  vars:\n    a: &x {b: 1}\n    c: *x\n",
    "a merge key": "all:\n  vars:\n    a: &x {b: 1}\n    c:\n      <<: *x\n",
    "a nested group": "all:\n  children:\n    cluster:\n      children:\n        head:\n",
    "a host range": "all:\n  hosts:\n    node[1:4]:\n",
    "a host with a port": "all:\n  hosts:\n    node1:2222:\n",
    "a group priority": "all:\n  children:\n    head:\n      vars: {ansible_group_priority: 5}\n",
    "a plugin file": "plugin: constructed\n",
    "a date": "all:\n  vars:\n    when: 2026-12-04\n",
    "an unknown group key": "all:\n  host:\n    node1:\n",
    "a string shorthand": "all:\n  hosts: node1\n",
    "a group name Ansible warns about": "all:\n  children:\n    my-group:\n",
    "a number as a key": "all:\n  vars:\n    tpwarden: {1: x}\n",
    "a list at the top": "- all\n",
    "an empty file": "",
    "a host named as a group": "all:\n  children:\n    head:\n      hosts:\n        workers:\n"
    "    workers:\n      hosts:\n        node2:\n",
    "a localhost address": "all:\n  hosts:\n    127.0.0.1:\n",
}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_what_only_ansible_resolves_is_left_to_it(name: str, tmp_path: Path) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(DECLINED[name], encoding="utf-8")
    assert resolve_static(path, {}) is None


@pytest.mark.parametrize(
    "setting", ["env", "cwd-config", "group_vars", "host_vars", "suffix", "exec"]
)
def test_anything_that_could_change_ansibles_rules_is_left_to_it(
    setting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(VARIATIONS["example-shape"], encoding="utf-8")
    environ: dict[str, str] = {}
    assert resolve_static(path, environ) is not None
    if setting == "env":
        environ["ANSIBLE_HASH_BEHAVIOUR"] = "merge"
    elif setting == "cwd-config":
        (tmp_path / "ansible.cfg").write_text("[defaults]\nhash_behaviour = merge\n")
        monkeypatch.chdir(tmp_path)
    elif setting in ("group_vars", "host_vars"):
        (tmp_path / setting).mkdir()
    elif setting == "suffix":
        path = path.rename(tmp_path / "inventory")
    else:
        path.chmod(0o755)
    assert resolve_static(path, environ) is None


def test_inventory_check_on_a_plain_file_never_imports_ansible() -> None:
    code = (
        "import sys\n"
        "from tpwarden.cluster.inventory.load import load_inventory\n"
        f"spec = load_inventory({str(ROOT / 'inventory.example.yml')!r}, flag_table=True)\n"
        "assert len(spec.nodes) == 4\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'ansible'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]"
