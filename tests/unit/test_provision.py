"""Provisioning, pure parts: runner arguments, events, stats, tags, the wheelhouse resolver, the
manifest tool, the systemd filters and the playbooks' shape (no Ansible run, no network)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from servectl.cluster import provision as prov
from servectl.cluster import provision_wheelhouse as wh
from servectl.cluster.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


manifest = _load(PLAYBOOKS / "roles/model/files/servectl_manifest.py", "servectl_manifest")
filters = _load(PLAYBOOKS / "filter_plugins/servectl_filters.py", "servectl_filters")


# --- runner arguments ---------------------------------------------------------------------------


def test_prepare_builds_runner_arguments(tmp_path):
    inv = ROOT / "inventory.example.yml"
    req = prov.ProvisionRequest(
        inventory=inv, check=True, tags=("units", "model"), state_root=tmp_path, ident="run1"
    )
    run = prov.prepare(req, python="/venv/bin/python")
    assert run.private_data_dir == tmp_path / "run1"
    assert run.artifact_dir == tmp_path / "run1/artifacts/run1"
    k = run.kwargs
    assert k["playbook"] == "site.yml" and k["project_dir"] == str(PLAYBOOKS)
    assert k["inventory"] == str(inv) and k["tags"] == "units,model"
    assert k["cmdline"] == "--check --diff"
    assert k["envvars"]["PATH"].startswith("/venv/bin:")
    assert k["extravars"]["servectl_control_python"] == "/venv/bin/python"


def test_prepare_remove_and_bad_input(tmp_path):
    inv = ROOT / "inventory.example.yml"
    run = prov.prepare(prov.ProvisionRequest(inventory=inv, remove=True, state_root=tmp_path))
    assert run.kwargs["playbook"] == "remove.yml" and "cmdline" not in run.kwargs
    with pytest.raises(ConfigError):
        prov.prepare(prov.ProvisionRequest(inventory=tmp_path / "nope.yml"))
    with pytest.raises(ConfigError):
        prov.prepare(prov.ProvisionRequest(inventory=inv, source_dir=tmp_path))


def test_parse_tags():
    assert prov.parse_tags("units, model") == ("units", "model")
    assert prov.parse_tags(None) == ()
    with pytest.raises(ConfigError, match="valid: prereqs"):
        prov.parse_tags("units,bogus")


def test_task_event_and_host_stats():
    changed = {
        "event": "runner_on_ok",
        "event_data": {"host": "n1", "task": "T", "res": {"changed": True}},
    }
    assert prov.task_event(changed) == prov.TaskEvent("n1", "T", "changed")
    failed = {
        "event": "runner_on_failed",
        "event_data": {"host": "n2", "task": "T", "res": {"msg": "boom"}},
    }
    assert prov.task_event(failed).message == "boom"
    ignored = {"event": "runner_on_failed", "event_data": {"host": "n2", "ignore_errors": True}}
    assert prov.task_event(ignored).status == "ok"
    assert prov.task_event({"event": "playbook_on_start", "event_data": {}}) is None
    stats = {"ok": {"n1": 5, "n2": 3}, "changed": {"n1": 1}, "failures": {"n2": 1}, "dark": {}}
    hosts = prov.host_stats(stats)
    assert hosts[0] == prov.HostStats("n1", ok=5, changed=1)
    assert not hosts[1].good and hosts[1].failed == 1


# --- wheelhouse ---------------------------------------------------------------------------------


def test_target_platform_tags():
    t = wh.Target("3.12", "aarch64", "2.39")
    tags = t.platforms()
    assert tags[0] == "manylinux_2_39_aarch64" and "manylinux_2_17_aarch64" in tags
    assert "manylinux2014_aarch64" in tags and t.abi == "cp312"
    assert t.key == "cp312-aarch64-glibc2.39"


def test_resolve_evaluates_markers_for_the_target():
    meta = {
        "a": [
            "b>=1",
            "c; platform_machine == 'x86_64'",
            "d; python_version < '3.11'",
            "e; extra == 'x'",
        ],
        "b": [],
        "c": [],
    }
    reqs = wh.resolve([Requirement("a")], wh.Target("3.11", "aarch64"), {"a": "1.0"}, meta.get)
    assert reqs == {"a": "1.0", "b": None}
    reqs = wh.resolve([Requirement("a")], wh.Target("3.11", "x86_64"), {}, meta.get)
    assert set(reqs) == {"a", "b", "c"}


def test_constraints_and_pyproject():
    pins = wh.read_constraints("Foo_Bar==1.2  # x\nbaz>=3\nruamel.yaml==0.19.1\n")
    assert pins == {"foo-bar": "1.2", "ruamel-yaml": "0.19.1"}
    names = {r.name for r in wh.runtime_requirements((ROOT / "pyproject.toml").read_text())}
    assert {"paramiko", "nvidia-ml-py", "apscheduler", "prometheus-client"} <= names
    # the control machine's extras (Ansible, plotting) never go to the nodes
    assert not names & {"ansible-runner", "ansible-core", "matplotlib"}


def test_missing_wheels_are_named(tmp_path):
    calls = []

    class Done:
        def __init__(self, rc):
            self.returncode, self.stdout, self.stderr = rc, "", ""

    def runner(argv, env=None):
        calls.append(argv)
        if "download" in argv and "nowheel==1" in argv:
            return Done(1)
        if "wheel" in argv:
            return Done(1)  # the sdist is not pure Python
        return Done(0)

    built, missing = wh.fetch_dependencies(
        {"ok": "1", "nowheel": "1"}, wh.Target("3.11", "aarch64"), tmp_path, runner
    )
    assert missing == ["nowheel==1"] and built == []
    assert "--only-binary=:all:" in calls[0] and "manylinux2014_aarch64" in calls[0]


# --- manifest ----------------------------------------------------------------------------------


def test_manifest_roundtrip_and_compare(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.safetensors").write_bytes(b"x" * 10)
    (tmp_path / "sub/config.json").write_text("{}")
    first = manifest.ensure(str(tmp_path), dry=False)
    assert first["generated"] and (tmp_path / manifest.NAME).is_file()
    assert not manifest.ensure(str(tmp_path), dry=False)["generated"]
    ref = manifest.parse(first["text"])
    assert ref["a.safetensors"][0] == 10
    assert manifest.compare(ref, manifest.scan(str(tmp_path)))["ok"]
    (tmp_path / "a.safetensors").write_bytes(b"y" * 10)  # same size, other bytes
    diff = manifest.compare(ref, manifest.scan(str(tmp_path)))
    assert diff["sha256_mismatch"] == ["a.safetensors"] and not diff["ok"]
    assert manifest.compare(ref, manifest.scan(str(tmp_path), "size"))["ok"]
    (tmp_path / "sub/config.json").unlink()
    assert manifest.compare(ref, manifest.scan(str(tmp_path)))["missing"] == ["sub/config.json"]


def test_manifest_dry_run_writes_nothing(tmp_path):
    (tmp_path / "w").write_bytes(b"1")
    assert manifest.ensure(str(tmp_path), dry=True)["generated"]
    assert not (tmp_path / manifest.NAME).exists()
    with pytest.raises(ValueError):
        manifest.parse("nonsense line\n")


# --- systemd filters and playbook shape ---------------------------------------------------------


def test_systemd_quoting():
    assert filters.systemd_argv(["/bin/x", "a b", 5, "100%", "$HOME", 'q"']) == (
        '"/bin/x" "a b" "5" "100%%" "$$HOME" "q\\""'
    )
    with pytest.raises(ValueError):
        filters.systemd_quote("a\nb")
    assert (
        filters.systemd_dir_under("/var/lib/servectl/watchdog", "/var/lib") == "servectl/watchdog"
    )
    assert filters.systemd_dir_under("/data/thermal", "/var/log") == ""


def test_site_roles_are_tagged():
    plays = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())
    tags = {t for r in plays[0]["roles"] for t in r["tags"]}
    assert tags == {"always", *prov.TAGS}
    assert (PLAYBOOKS / "remove.yml").is_file()


def test_secret_tasks_never_log():
    tasks = yaml.safe_load((PLAYBOOKS / "roles/secrets/tasks/main.yml").read_text())
    for task in tasks:
        if any("secret_values" in json.dumps(v) for v in task.values()) and "copy" in json.dumps(
            task
        ):
            assert task.get("no_log") is True, task["name"]


def test_unit_templates_keep_nvml_and_declare_restart():
    units = PLAYBOOKS / "roles/units/templates"
    for path in units.glob("*.service.j2"):
        text = path.read_text()
        assert "PrivateDevices" not in text.replace("no PrivateDevices", ""), path.name
        assert "Restart=on-failure" in text and "StartLimitBurst=" in text, path.name
        assert "NoNewPrivileges=yes" in text and "ProtectSystem=" in text, path.name


def test_thermal_unit_passes_listen_address_and_alert_margin():
    # Issue 19: the provisioned unit dropped --alert-margin (the `thermal start` path passed it)
    # and the agent listened on a hard-coded 127.0.0.1 whatever thermal.metrics_host said.
    import shlex

    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(filters.FilterModule().filters())
    defaults = yaml.safe_load(
        (PLAYBOOKS / "roles/servectl_defaults/defaults/main.yml").read_text()
    )["servectl_spec_defaults"]
    cfg = json.loads(json.dumps(defaults))
    cfg["thermal"].update(metrics_host="10.0.0.5", alert_margin_c=7)
    template = (PLAYBOOKS / "roles/units/templates/servectl-thermal.service.j2").read_text()
    text = env.from_string(template).render(
        ansible_managed="managed", inventory_hostname="node2", groups={"head": ["node1"]},
        servectl_cfg=cfg, servectl_venv="/opt/servectl/venv",
    )  # fmt: skip
    (exec_start,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))  # each argument double-quoted
    assert argv[argv.index("--metrics-host") + 1] == "10.0.0.5"
    assert argv[argv.index("--alert-margin") + 1] == "7"
    assert argv[argv.index("--role") + 1] == "worker"
    assert defaults["thermal"]["metrics_host"] == "127.0.0.1"  # loopback unless configured
