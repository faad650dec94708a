"""Provisioning, pure parts: runner arguments, events, stats, tags, the wheelhouse resolver, the
manifest tool, the systemd filters and the playbooks' shape (no Ansible run, no network)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.provision import gateway as prov
from tpwarden.cluster.provision import wheelhouse as wh

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


manifest = _load(PLAYBOOKS / "roles/model/files/tpwarden_manifest.py", "tpwarden_manifest")
filters = _load(PLAYBOOKS / "filter_plugins/tpwarden_filters.py", "tpwarden_filters")


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
    assert k["extravars"]["tpwarden_control_python"] == "/venv/bin/python"


def test_prepare_remove_and_bad_input(tmp_path):
    inv = ROOT / "inventory.example.yml"
    run = prov.prepare(prov.ProvisionRequest(inventory=inv, remove=True, state_root=tmp_path))
    assert run.kwargs["playbook"] == "remove.yml" and "cmdline" not in run.kwargs
    with pytest.raises(ConfigError):
        prov.prepare(prov.ProvisionRequest(inventory=tmp_path / "nope.yml"))
    with pytest.raises(ConfigError):
        prov.prepare(prov.ProvisionRequest(inventory=inv, source_dir=tmp_path))


def test_verify_model_is_an_extra_var_and_checked(tmp_path):
    inv = ROOT / "inventory.example.yml"
    req = prov.ProvisionRequest(inventory=inv, state_root=tmp_path, model_verify="sha256")
    assert prov.prepare(req).kwargs["extravars"]["tpwarden_model_verify"] == "sha256"
    plain = prov.prepare(prov.ProvisionRequest(inventory=inv, state_root=tmp_path))
    assert "tpwarden_model_verify" not in plain.kwargs["extravars"]  # the inventory's, or auto
    with pytest.raises(ConfigError, match="auto, sha256, size"):
        prov.prepare(prov.ProvisionRequest(inventory=inv, state_root=tmp_path, model_verify="md5"))
    defaults = yaml.safe_load((PLAYBOOKS / "roles/tpwarden/defaults/main.yml").read_text())
    assert defaults["tpwarden_model_verify"] == "auto"
    tasks = yaml.safe_load((PLAYBOOKS / "roles/model/tasks/main.yml").read_text())
    assert prov.MODEL_CHECK_TASK in [t["name"] for t in tasks]


def test_the_model_checks_messages_are_kept_per_loop_item():
    raw = {
        "event": "runner_on_ok",
        "event_data": {"host": "n1", "task": prov.MODEL_CHECK_TASK, "res": {"results": [
            {"msg": "/models/a: 3 files, 30 bytes match by size+mtime (...; 0 bytes read in 0.0 s)"},
            {"msg": "/models/d: 1 files, 9 bytes match by sha256 (...; 9 bytes read in 0.0 s)"},
        ]}},
    }  # fmt: skip
    message = prov.task_event(raw).message
    assert "size+mtime" in message and "/models/d" in message and "; " in message


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
    # py-spy's x86_64 wheel is tagged manylinux1 (= manylinux_2_5) only (issue 32)
    assert tags[-4:] == [
        "manylinux2014_aarch64",
        "manylinux2010_aarch64",
        "manylinux1_aarch64",
        "linux_aarch64",
    ]
    assert "manylinux_2_5_aarch64" in tags and "manylinux_2_4_aarch64" not in tags
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


def test_resolve_follows_extras_as_pip_does():
    # pytablewriter 1.2.1 asks for typepy[datetime]; typepy 1.3.5's datetime extra is pytz
    # (their METADATA, as installed in the lm-eval venv); pip fails offline without pytz.
    meta = {
        "pytablewriter": ["typepy<2,>=1.3.2", "typepy[datetime]<2,>=1.3.2", 'xlwt; extra == "all"'],
        "typepy": ["mbstrdecoder", 'python-dateutil; extra == "datetime"',
                   'pytz>=2018.9; extra == "datetime"', 'packaging; extra == "test"'],
        "mbstrdecoder": [], "python-dateutil": [], "pytz": [],
    }  # fmt: skip
    target = wh.Target("3.12", "aarch64")
    got = wh.resolve([Requirement("pytablewriter")], target, {}, meta.get)
    assert set(got) == {"pytablewriter", "typepy", "mbstrdecoder", "python-dateutil", "pytz"}
    # typepy reached first without the extra, then again with it: walked again
    got = wh.resolve([Requirement("typepy[datetime]"), Requirement("typepy")], target, {}, meta.get)
    assert set(got) == {"typepy", "mbstrdecoder", "python-dateutil", "pytz"}
    assert "pytz" not in wh.resolve([Requirement("typepy")], target, {}, meta.get)


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


def _model(tmp_path):
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "a.safetensors").write_bytes(b"x" * 1000)
    (root / "sub/config.json").write_text("{}")
    return root, manifest.ensure(str(root), dry=False)["text"]


def test_auto_reads_every_byte_once_then_sizes_and_times(tmp_path):
    # issue 52 item 6: the model (185 GB per node) is not reread on every provision
    root, text = _model(tmp_path)
    state = str(tmp_path / "state" / "models_m.json")
    first = manifest.check(str(root), text, "auto", state, dry=False)
    assert first["ok"] and first["verify"] == "sha256" and first["bytes_hashed"] == 1002
    assert first["why"] == "no record of a full check on this node" and Path(state).is_file()
    again = manifest.check(str(root), text, "auto", state, dry=False)
    assert again["ok"] and again["verify"] == "size+mtime" and again["bytes_hashed"] == 0
    assert again["why"].startswith("a full sha256 check recorded at ")
    asked = manifest.check(str(root), text, "sha256", state, dry=False)
    assert asked["verify"] == "sha256" and asked["why"] == "requested"
    assert asked["bytes_hashed"] == 1002


def test_auto_rehashes_what_moved_and_sees_a_changed_size(tmp_path):
    root, text = _model(tmp_path)
    state = str(tmp_path / "state.json")
    manifest.check(str(root), text, "auto", state, dry=False)
    weights = root / "a.safetensors"
    weights.write_bytes(b"y" * 1000)  # same size, other bytes, a new mtime
    os.utime(weights, ns=(1, 1))
    moved = manifest.check(str(root), text, "auto", state, dry=False)
    assert moved["verify"] == "size+mtime" and moved["bytes_hashed"] == 1000
    assert moved["sha256_mismatch"] == ["a.safetensors"] and not moved["ok"]
    (root / "sub/config.json").write_text("{ }")  # a size the manifest does not have
    grown = manifest.check(str(root), text, "auto", state, dry=False)
    assert "sub/config.json" in grown["size_mismatch"]


def test_auto_rereads_when_the_manifest_changed_and_dry_runs_record_nothing(tmp_path):
    root, text = _model(tmp_path)
    state = tmp_path / "state.json"
    dry = manifest.check(str(root), text, "auto", str(state), dry=True)
    assert dry["ok"] and dry["verify"] == "sha256" and not state.exists()
    manifest.check(str(root), text, "auto", str(state), dry=False)
    (root / "new.bin").write_bytes(b"n")
    (root / manifest.NAME).unlink()
    text2 = manifest.ensure(str(root), dry=False)["text"]
    changed = manifest.check(str(root), text2, "auto", str(state), dry=False)
    assert changed["verify"] == "sha256" and "manifest changed" in changed["why"]
    sizes = manifest.check(str(root), text2, "size", str(state), dry=False)
    assert sizes["verify"] == "size" and sizes["bytes_hashed"] == 0 and sizes["ok"]


# --- systemd filters and playbook shape ---------------------------------------------------------


def test_systemd_quoting():
    assert filters.systemd_argv(["/bin/x", "a b", 5, "100%", "$HOME", 'q"']) == (
        '"/bin/x" "a b" "5" "100%%" "$$HOME" "q\\""'
    )
    with pytest.raises(ValueError):
        filters.systemd_quote("a\nb")
    assert (
        filters.systemd_dir_under("/var/lib/tpwarden/watchdog", "/var/lib") == "tpwarden/watchdog"
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
        if path.name != "tpwarden-watchdog.service.j2":  # NVML's units; the watchdog uses none
            assert "PrivateDevices" not in text.replace("no PrivateDevices", ""), path.name
            assert "DevicePolicy=closed" in text and "DeviceAllow=/dev/nvidiactl rw" in text
        assert "Restart=on-failure" in text and "StartLimitBurst=" in text, path.name
        assert "NoNewPrivileges=yes" in text and "ProtectSystem=" in text, path.name


def test_thermal_unit_passes_listen_address_alert_margin_and_zone_roles():
    # Issue 19: the provisioned unit dropped --alert-margin (the `thermal start` path passed it)
    # and the agent listened on a hard-coded 127.0.0.1 whatever thermal.metrics_host said.
    import shlex

    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(filters.FilterModule().filters())
    defaults = yaml.safe_load((PLAYBOOKS / "roles/tpwarden/defaults/main.yml").read_text())[
        "tpwarden_spec_defaults"
    ]
    cfg = json.loads(json.dumps(defaults))
    cfg["thermal"].update(
        metrics_host="10.0.0.5", alert_margin_c=7, zone_roles={"5": "GPU zone", "3": "P-cores"}
    )
    template = (PLAYBOOKS / "roles/units/templates/tpwarden-thermal.service.j2").read_text()
    text = env.from_string(template).render(
        ansible_managed="managed", inventory_hostname="node2", groups={"head": ["node1"]},
        tpwarden_cfg=cfg, tpwarden_venv="/opt/tpwarden/venv", tpwarden_thermal_user="agent",
    )  # fmt: skip
    assert "User=agent" in text.splitlines()
    (exec_start,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))  # each argument double-quoted
    assert argv[argv.index("--metrics-host") + 1] == "10.0.0.5"
    assert argv[argv.index("--alert-margin") + 1] == "7"
    assert argv[argv.index("--role") + 1] == "worker"
    # zone roles reach the agent's /metrics `role` label (the provisioned unit passed none)
    roles = [argv[i + 1] for i, a in enumerate(argv) if a == "--zone-role"]
    assert roles == ["3=P-cores", "5=GPU zone"]
    assert defaults["thermal"]["metrics_host"] == "127.0.0.1"  # loopback unless configured
    assert not defaults["thermal"].get("zone_roles")  # no role unless the inventory names one


# --- the watchdog's own SSH identity (issue 15) -------------------------------------------------


def _render_unit(name: str, cfg: dict, **values: object) -> str:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(filters.FilterModule().filters())
    env.filters["dirname"] = os.path.dirname  # Ansible's
    template = (PLAYBOOKS / f"roles/units/templates/{name}").read_text()
    return env.from_string(template).render(
        ansible_managed="managed", inventory_hostname="node1", groups={"head": ["node1"]},
        tpwarden_cfg=cfg, tpwarden_venv="/opt/tpwarden/venv", tpwarden_etc="/etc/tpwarden",
        tpwarden_thermal_user=_defaults()["tpwarden_thermal_user"], **values,
    )  # fmt: skip


def _defaults() -> dict:
    return yaml.safe_load((PLAYBOOKS / "roles/tpwarden/defaults/main.yml").read_text())


def test_watchdog_unit_passes_its_own_ssh_key_and_known_hosts():
    import shlex

    cfg = json.loads(json.dumps(_defaults()["tpwarden_spec_defaults"]))
    text = _render_unit(
        "tpwarden-watchdog.service.j2", cfg, tpwarden_watchdog_ssh_dir="/etc/tpwarden/watchdog"
    )
    (exec_start,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert argv[:3] == ["/opt/tpwarden/venv/bin/tpwarden", "watchdog", "run"]
    assert argv[argv.index("--ssh-key") + 1] == "/etc/tpwarden/watchdog/id_ed25519"
    assert argv[argv.index("--known-hosts") + 1] == "/etc/tpwarden/watchdog/known_hosts"
    assert argv[argv.index("--applied") + 1] == "/var/lib/tpwarden/watchdog/applied.json"
    # the restart job writes cluster control's records and takes the restart lock: both must be
    # writable under ProtectSystem=strict / ProtectHome=read-only
    env = [shlex.split(ln.removeprefix("Environment="))[0] for ln in text.splitlines()
           if ln.startswith("Environment=")]  # fmt: skip
    assert "TPWARDEN_STATE_DIR=/var/lib/tpwarden/watchdog/control" in env
    assert 'ReadWritePaths="-/var/lib/tpwarden"' in text.splitlines()
    # the defaults name the same place the role writes to
    assert _defaults()["tpwarden_watchdog_ssh_dir"] == "{{ tpwarden_etc }}/watchdog"


def _tasks(path: str) -> list[dict]:
    """Tasks of a task file or playbook, blocks flattened."""
    doc = yaml.safe_load((PLAYBOOKS / path).read_text())
    if doc and "tasks" in doc[0]:
        doc = doc[0]["tasks"]
    out: list[dict] = []
    for task in doc:
        out.append(task)
        out.extend(task.get("block", []))
    return out


def _module(task: dict, name: str) -> dict | None:
    return task.get(f"ansible.builtin.{name}")


def test_watchdog_key_is_generated_once_on_the_watchdog_host_and_never_scanned():
    tasks = _tasks("roles/units/tasks/watchdog_ssh.yml")
    text = (PLAYBOOKS / "roles/units/tasks/watchdog_ssh.yml").read_text()
    # every module is ansible-core's (no community collection on the control machine)
    modules = {k for t in tasks for k in t if "." in k}
    assert modules and all(m.startswith("ansible.builtin.") for m in modules), modules
    (keygen,) = [t for t in tasks if "ssh-keygen" in json.dumps(_module(t, "command") or {})]
    cmd = _module(keygen, "command")
    assert cmd["creates"] == "{{ units_wd_key }}"  # idempotent: once, then kept
    assert cmd["argv"][:5] == ["ssh-keygen", "-q", "-t", "ed25519", "-N"]
    assert "tpwarden-watchdog@" in " ".join(cmd["argv"])
    assert "inventory_hostname == units_wd_host" in keygen["when"]
    (wd_dir,) = [t for t in tasks if (_module(t, "file") or {}).get("path") == (
        "{{ tpwarden_watchdog_ssh_dir }}")]  # fmt: skip
    assert _module(wd_dir, "file")["mode"] == "0700"
    # the host keys come from the nodes themselves, over Ansible's connection
    assert "keyscan" not in text.replace("Never ssh-keyscan", "").replace("never ssh-keyscan", "")
    (host_keys,) = [t for t in tasks if "units_host_key_files" in json.dumps(t.get("loop"))]
    assert _module(host_keys, "slurp") is not None
    (find,) = [t for t in tasks if _module(t, "find")]
    assert _module(find, "find") == {"paths": "/etc/ssh", "patterns": "ssh_host_*_key.pub"}
    (known,) = [t for t in tasks if _module(t, "template")]
    assert _module(known, "template")["mode"] == "0600"
    assert _module(known, "template")["dest"] == "{{ units_wd_known_hosts }}"
    (auth,) = [t for t in tasks if _module(t, "lineinfile")]
    li = _module(auth, "lineinfile")
    assert li["mode"] == "0600" and li["create"] is True and "tpwarden-watchdog@" in li["regexp"]
    # the units role runs these before it writes and starts the unit
    main = _tasks("roles/units/tasks/main.yml")
    names = [t.get("ansible.builtin.import_tasks") or t["name"] for t in main]
    assert names.index("watchdog_ssh.yml") < names.index("Units enabled and running")


def test_known_hosts_entries_are_keyed_as_the_watchdog_connects():
    # the same entry paramiko looks up: host for port 22, [host]:port otherwise
    import base64

    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters["b64decode"] = lambda s: base64.b64decode(s).decode()
    template = (PLAYBOOKS / "roles/units/templates/tpwarden-watchdog-known-hosts.j2").read_text()

    def pub(blob: str) -> dict:
        return {"content": base64.b64encode(f"ssh-ed25519 {blob} root@n\n".encode()).decode()}

    hostvars = {
        "node1": {"ansible_host": "10.0.0.11", "units_host_keys": {"results": [pub("AAA1")]}},
        "node2": {"ansible_host": "10.0.0.12", "ansible_port": 2222,
                  "units_host_keys": {"results": [pub("AAA2"), pub("BBB2")]}},
        "node3": {"units_host_keys": {"results": [pub("AAA3")]}},
    }  # fmt: skip
    text = env.from_string(template).render(
        ansible_managed="managed", units_wd_host="node1",
        units_wd_nodes=["node1", "node2", "node3"], hostvars=hostvars,
    )  # fmt: skip
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines == [
        "10.0.0.11 ssh-ed25519 AAA1",
        "[10.0.0.12]:2222 ssh-ed25519 AAA2",
        "[10.0.0.12]:2222 ssh-ed25519 BBB2",
        "node3 ssh-ed25519 AAA3",
    ]


def test_remove_takes_the_watchdog_identity_away():
    tasks = _tasks("remove.yml")
    text = (PLAYBOOKS / "remove.yml").read_text()
    (auth,) = [t for t in tasks if _module(t, "lineinfile")]
    li = _module(auth, "lineinfile")
    assert li["state"] == "absent" and "tpwarden-watchdog@" in li["regexp"]
    assert "tpwarden_watchdog_ssh_dir" in text  # the key pair and known_hosts


def test_the_nodes_wheel_is_built_from_every_package_folder(tmp_path):
    # pyproject's package-dir is the one list: a folder it maps (node/ came later) is packed and
    # hashed, so editing any of it makes the nodes reinstall
    items = wh.source_items(ROOT)
    assert {"cluster", "node", "watchdog", "playbooks", "pyproject.toml"} <= set(items)
    for item in items:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, tmp_path / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, tmp_path / item)
    before = wh.source_digest(tmp_path)
    agent = tmp_path / "node" / "thermal" / "agent.py"
    agent.write_text(agent.read_text() + "# a node-side edit\n")
    assert wh.source_digest(tmp_path) != before
    (tmp_path / "pyproject.toml").write_text("not toml [")
    with pytest.raises(RuntimeError, match="cannot read"):
        wh.source_items(tmp_path)
