"""systemd reloads and unit restarts are handlers: which units the restart handler restarts
(evaluated by Ansible's own templating on the real handler), and who notifies it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "playbooks" / "roles"
WANTED = ["tpwarden-clock-cap", "tpwarden-thermal", "tpwarden-watchdog"]


def _yaml(path: str) -> list[dict]:
    return yaml.safe_load((ROLES / path).read_text())


def _handler(name: str) -> dict:
    (handler,) = [h for h in _yaml("units/handlers/main.yml") if h["name"] == name]
    return handler


def _restarted(**variables: object) -> list[str]:
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template

    init_plugin_loader([])
    loop = _handler("Restart the tpwarden units")["loop"]
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(loop))


def _files(*changed: str) -> dict:
    return {"results": [{"item": u, "changed": u in changed} for u in WANTED]}


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        # a unit file changed: that unit only
        ({"units_wanted": WANTED, "units_files": _files("tpwarden-thermal")}, ["tpwarden-thermal"]),
        # nothing changed (the install block skipped): none
        (
            {"units_wanted": WANTED, "units_files": _files(),
             "tpwarden_install_reinstall": {"changed": False, "skipped": True}},
            [],
        ),
        # tpwarden reinstalled: every unit of the node runs the new code
        (
            {"units_wanted": WANTED, "units_files": _files(),
             "tpwarden_install_reinstall": {"changed": True}},
            WANTED,
        ),
        # --tags tpwarden: the units role did not run, so nothing of it is restarted
        ({"tpwarden_install_reinstall": {"changed": True}}, []),
    ],
)  # fmt: skip
def test_restart_handler_restarts_changed_units_or_all_after_a_reinstall(variables, expected):
    assert _restarted(**variables) == expected


def test_restart_handler_does_nothing_in_check_mode_and_runs_after_the_reload():
    names = [h["name"] for h in _yaml("units/handlers/main.yml")]
    assert names.index("Reload systemd") < names.index("Restart the tpwarden units")
    assert _handler("Restart the tpwarden units")["when"] == "not ansible_check_mode"


def test_unit_changes_and_a_reinstall_notify_the_handlers_before_units_start():
    tasks = _yaml("units/tasks/main.yml")
    by_name = {t.get("name"): t for t in tasks}
    assert by_name["Unit files"]["notify"] == ["Reload systemd", "Restart the tpwarden units"]
    assert by_name["Remove unit files that no longer apply"]["notify"] == "Reload systemd"
    names = [t.get("name") for t in tasks]
    flush = next(
        i for i, t in enumerate(tasks) if t.get("ansible.builtin.meta") == "flush_handlers"
    )
    # reloaded and restarted after verification, before the units are enabled and started
    assert names.index("Verify the unit files (systemd-analyze verify)") < flush
    assert flush < names.index("Units enabled and running")
    install = [t for b in _yaml("tpwarden_install/tasks/main.yml") for t in b.get("block", [b])]
    (reinstall,) = [t for t in install if t.get("register") == "tpwarden_install_reinstall"]
    assert reinstall["notify"] == "Restart the tpwarden units"
