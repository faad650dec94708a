"""Inventories without Ansible: what the watchdog on a node reads, and how it is written.

Nodes never install Ansible. `tpwarden provision` therefore copies to the watchdog host an
inventory that the control machine already resolved through Ansible (`export_resolved`): one
YAML file, every variable final (group_vars, host_vars, vault and templates applied). On a node,
`read_resolved` reads such a file with the YAML bounds of `yaml_guard` and no templating; the
same `build_spec` validates it, so it means exactly what the operator's inventory means.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.ansible import HOST_VARS, Resolved
from tpwarden.cluster.spec import ClusterSpec, NodeSpec

HEADER = "# Resolved by tpwarden from {source} (Ansible applied); do not edit, re-provision.\n"


def export_resolved(spec: ClusterSpec) -> str:
    """A single-file inventory equivalent to `spec` (same config hash), for nodes."""

    def host(node: NodeSpec) -> JSONObject:
        out: JSONObject = {
            "ansible_host": node.ssh_host,
            "ansible_port": node.ssh_port,
            "ansible_user": node.ssh_user,
            "vllm_host_ip": node.vllm_host_ip,
        }
        if node.ssh_key_file:
            out["ansible_ssh_private_key_file"] = node.ssh_key_file
        if node.ssh_args:
            out["ansible_ssh_common_args"] = node.ssh_args
        if node.become:
            out["ansible_become"] = True
        return out

    doc = {
        "all": {
            "children": {
                "head": {"hosts": {spec.head.name: host(spec.head)}},
                "workers": {"hosts": {n.name: host(n) for n in spec.workers}},
            },
            "vars": {"tpwarden": spec.settings.model_dump(mode="json")},
        }
    }
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return HEADER.format(source=spec.source_file) + body


def read_resolved(path: Path) -> Resolved:
    """Read a file written by `export_resolved` (or any single-file YAML inventory without
    templates, group_vars or vault) without Ansible."""
    if path.is_dir() or path.suffix not in (".yml", ".yaml"):
        raise ConfigError(
            "without Ansible, only a single YAML inventory file can be read",
            file=str(path),
            hint="install tpwarden[control] (Ansible) or provision to copy a resolved inventory",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path)) from None
    return resolved_from_text(text, str(path))


def resolved_from_text(text: str, source: str) -> Resolved:
    """`read_resolved` for text held elsewhere (an applied plan records the resolved inventory)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot read: {exc}", file=source) from None
    root = data.get("all") if isinstance(data, dict) else None
    if not isinstance(root, dict):
        raise ConfigError(
            "without Ansible, only a single YAML file starting with `all:` can be read",
            file=source,
            hint="install tpwarden[control] (Ansible) or provision to copy a resolved inventory",
        )
    all_vars = root.get("vars") or {}
    children = root.get("children") or {}
    resolved = Resolved(
        source=source,
        groups={},
        host_vars={},
        settings=all_vars.get("tpwarden"),
        settings_by_host={},
    )
    for group in ("head", "workers"):
        node = children.get(group) or {}
        group_vars = node.get("vars") or {}
        hosts = node.get("hosts") or {}
        resolved.groups[group] = [str(h) for h in hosts]
        for name, hvars in hosts.items():
            merged = {**all_vars, **group_vars, **(hvars or {})}
            if "{{" in str(merged):
                raise ConfigError(
                    "templates need Ansible", file=source, hint="install tpwarden[control]"
                )
            resolved.host_vars[str(name)] = {k: merged[k] for k in HOST_VARS if k in merged}
    return resolved
