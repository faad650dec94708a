"""Render the configuration reference (docs/configuration.md) from the typed spec itself, so the
documentation cannot drift from what the loader accepts. `python -m tpwarden.cluster.reports.config_reference`."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from tpwarden.cluster.settings import TpwardenSettings, absolute_path, not_a_flag, parse_size

HEADER = """# Configuration reference

Generated from `cluster/settings.py` by `python -m tpwarden.cluster.reports.config_reference > docs/configuration.md`;
a unit test fails when this file and the spec diverge.

All keys live in the variable `tpwarden` of group `all` (under `all.vars`, or in
`group_vars/all.yml` beside the inventory); Ansible resolves the inventory (YAML or INI, a file
or a directory, group_vars/host_vars, vault, templates) and tpwarden validates the result.
A plain one-file YAML inventory (no templates, tags, aliases, nested groups, host ranges,
group_vars/host_vars, ansible.cfg or `ANSIBLE_*` variables) is read with Ansible's rules without
loading Ansible, which halves `inventory check`'s start; a differential test holds that reader to
Ansible's answer.
Unknown keys are errors.
Per-host keys (on each host of groups `head` and `workers`): `ansible_host`, `ansible_port`,
`ansible_user`, `ansible_ssh_private_key_file`, `ansible_become`, `ansible_ssh_common_args` /
`ansible_ssh_extra_args` (ProxyJump, ProxyCommand, UserKnownHostsFile), and `vllm_host_ip` (the address
vLLM and NCCL use on that node; exported as `VLLM_HOST_IP`), `tpwarden_thermal_metrics_host` /
`tpwarden_thermal_metrics_port` (this node's thermal /metrics listener, overriding
`thermal.metrics_host` / `thermal.metrics_port`; the provisioned unit and `tpwarden prometheus
config` read the same two), and on the head `tpwarden_watchdog_host` (where the watchdog runs: a
node's name, or a name that is no node, e.g. `control`, for elsewhere; the head by default).
Provisioning's own `tpwarden_*` variables (install prefix, checks, secrets' sources) are listed in
`playbooks/roles/tpwarden/defaults/main.yml`; any group or host variable overrides them.

| key | type | default | meaning |
|---|---|---|---|
"""


def _type_name(annotation: object) -> str:
    if any(getattr(m, "func", None) is parse_size for m in _metadata(annotation)):
        return "size (16GiB, 16G, 17179869184)" + (
            " \\| None" if type(None) in typing.get_args(annotation) else ""
        )
    funcs = {getattr(m, "func", None) for m in _metadata(annotation)}
    none = " \\| None" if type(None) in typing.get_args(annotation) else ""
    if absolute_path in funcs:
        return "absolute path" + none
    if not_a_flag in funcs:
        return "str (not starting with -)" + none
    text = _plain(annotation) if funcs - {None} else str(annotation)
    text = text.replace("typing.", "")
    for prefix in ("<class '", "'>"):
        text = text.replace(prefix, "")
    return re.sub(r"tpwarden\.cluster\.\w+\.", "", text).replace("|", "\\|")


def _plain(annotation: object) -> str:
    """The annotation without its validators: list[Annotated[X, BeforeValidator(f)]] -> list[X]."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _plain(args[0])
    origin = typing.get_origin(annotation)
    if origin in (list, dict) and args:
        return f"{origin.__name__}[{', '.join(_plain(a) for a in args)}]"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _metadata(annotation: object) -> list[object]:
    found = list(getattr(annotation, "__metadata__", ()))
    for arg in typing.get_args(annotation):
        found.extend(_metadata(arg))
    return found


def _nested_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found:
            return found
    return None


def rows(model: type[BaseModel] = TpwardenSettings, prefix: str = "tpwarden") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        key = f"{prefix}.{name}"
        nested = _nested_model(info.annotation)
        if info.default is PydanticUndefined and info.default_factory is None:
            default = "**required**"
        elif info.default_factory is not None:
            default = f"`{info.get_default(call_default_factory=True)!r}`"
        else:
            default = (
                f"`{info.default!r}`" if not isinstance(info.default, BaseModel) else "(section)"
            )
        description = info.description or ("see below" if nested else "")
        out.append(f"| `{key}` | {_type_name(info.annotation)} | {default} | {description} |")
        if nested:
            out.extend(rows(nested, key))
    return out


def render() -> str:
    return HEADER + "\n".join(rows()) + "\n"


def all_keys(model: type[BaseModel] = TpwardenSettings, prefix: str = "tpwarden") -> list[str]:
    keys = []
    for name, info in model.model_fields.items():
        keys.append(f"{prefix}.{name}")
        nested = _nested_model(info.annotation)
        if nested:
            keys.extend(all_keys(nested, f"{prefix}.{name}"))
    return keys


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else None
    if target:
        Path(target).write_text(render())
    else:
        sys.stdout.write(render())
