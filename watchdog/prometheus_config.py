"""A Prometheus scrape config for a tpwarden cluster, generated from its inventory (pure).

Three jobs, named in the metrics contract: ``tpwarden-thermal`` (every node's thermal agent,
label ``node``), ``tpwarden-watchdog`` (the watchdog on ``tpwarden_watchdog_host``) and ``vllm``
(the head's API ``/metrics``). ``rule_files`` names tpwarden's alert rules.

A target is the address Prometheus dials, derived from where the exporter *listens*:

* a specific address (``10.0.0.5``, or the lab's ``127.0.0.11``) is dialled as is;
* a wildcard (``0.0.0.0``, ``::``) is dialled at the node's inventory address (ansible_host);
* a loopback address that is not the node's own inventory address (``127.0.0.1`` on a node
  reached as ``10.0.0.5``) cannot be reached from another machine: an error with the fix.
  The watchdog on a machine outside the inventory ("control") may listen on loopback when
  Prometheus runs beside it: a warning says so.

Nothing here reads secrets: an API key configured as a file is referred to by its path
(``credentials_file``); one held only in an environment variable gets a warning.
"""

from __future__ import annotations

import io
import ipaddress
import os.path
from collections.abc import Callable
from dataclasses import dataclass, field

from ruamel.yaml import YAML
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.watchdog.monitoring_files import rules_path

JOB_THERMAL, JOB_WATCHDOG, JOB_VLLM = "tpwarden-thermal", "tpwarden-watchdog", "vllm"
WILDCARDS = ("0.0.0.0", "::", "")


def default_rules_path() -> str:
    """The alert rules shipped as package data (watchdog/monitoring/tpwarden-rules.yml)."""
    return str(rules_path())


@dataclass(frozen=True)
class PromOptions:
    scrape_interval_s: float = 15.0
    evaluation_interval_s: float | None = None  # None: the scrape interval
    rules_path: str | None = None  # None: default_rules_path() when it exists
    api_key_file: str | None = None  # where Prometheus reads the API key (overrides the inventory)


@dataclass(frozen=True, kw_only=True)
class Finding:
    level: str  # "error": the target cannot work as configured; "warning": it may not
    job: str
    target: str
    message: str
    fix: str

    def render(self) -> str:
        return f"{self.level}: {self.job} {self.target}: {self.message}; fix: {self.fix}"


@dataclass(frozen=True)
class PromConfig:
    doc: JSONObject
    findings: tuple[Finding, ...] = field(default=())

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "warning")

    def targets(self, job: str) -> list[str]:
        for sc in self.doc["scrape_configs"]:
            if sc["job_name"] == job:
                return [t for group in sc["static_configs"] for t in group["targets"]]
        return []


def duration(seconds: float) -> str:
    """Prometheus duration syntax: 2 -> "2s", 0.5 -> "500ms"."""
    if seconds <= 0:
        raise ValueError(f"interval {seconds:g} s is not positive")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _dial(
    job: str, who: str, listen: str, port: int, reach: str | None, setting: str
) -> tuple[str, list[Finding]]:
    """The address Prometheus dials for an exporter listening on ``listen``:``port`` on a node
    reached at ``reach`` (None: a machine outside the inventory), and what may keep it from
    working: at most one finding, about the dialled address (the machine, for a wildcard)."""
    if listen in WILDCARDS:
        if reach is not None:
            return _hostport(reach, port), []
        addr, target, level = _hostport(who, port), who, "warning"
        message = (
            f"listens on every address ({listen or '*'}) of {who}, which has no address in the "
            f"inventory; dialling {who!r}"
        )
        fix = f"set {setting} to the address Prometheus can reach"
    elif _is_loopback(listen) and listen != reach:
        addr = target = _hostport(listen, port)
        if reach is None:
            level = "warning"
            message = (
                f"{who} listens on loopback only: only a Prometheus on {who} itself can scrape it"
            )
            fix = f"run Prometheus on {who}, or set {setting} to an address it can reach"
        else:
            level = "error"
            message = (
                f"{who} listens on loopback only, so a Prometheus on another machine cannot "
                f"scrape it (it would dial its own {listen})"
            )
            fix = f"set {setting} to {who}'s address ({reach}), or 0.0.0.0 behind a firewall"
    else:
        return _hostport(listen, port), []
    return addr, [Finding(level=level, job=job, target=target, message=message, fix=fix)]


def _job(name: str, groups: list[JSONObject], **extra: JSONValue) -> JSONObject:
    return {"job_name": name, **extra, "static_configs": groups}


def _thermal_job(spec: ClusterSpec) -> tuple[JSONObject, list[Finding]]:
    groups, findings = [], []
    for node in spec.nodes:
        host, port = spec.thermal_metrics_address(node)
        setting = (
            f"host var tpwarden_thermal_metrics_host of {node.name}"
            if node.thermal_metrics_host
            else f"tpwarden.thermal.metrics_host (or host var tpwarden_thermal_metrics_host of "
            f"{node.name})"
        )
        addr, found = _dial(JOB_THERMAL, node.name, host, port, node.ssh_host, setting)
        findings += found
        labels = {"node": node.name, "role": node.role, "cluster": spec.name}
        groups.append({"targets": [addr], "labels": labels})
    # The agent labels its own series with `node` (the contract): keep them, not exported_node.
    return _job(JOB_THERMAL, groups, honor_labels=True), findings


def _watchdog_job(spec: ClusterSpec) -> tuple[JSONObject, list[Finding]]:
    where = spec.watchdog_host or spec.head.name
    by_name = {n.name: n for n in spec.nodes}
    reach = by_name[where].ssh_host if where in by_name else None
    wd = spec.watchdog
    addr, found = _dial(
        JOB_WATCHDOG, where, wd.metrics_host, wd.metrics_port, reach,
        "tpwarden.watchdog.metrics_host",
    )  # fmt: skip
    labels = {"watchdog_host": where, "cluster": spec.name}
    return _job(JOB_WATCHDOG, [{"targets": [addr], "labels": labels}]), found


def _vllm_job(spec: ClusterSpec, options: PromOptions) -> tuple[JSONObject, list[Finding]]:
    head = spec.head
    addr, findings = _dial(
        JOB_VLLM, head.name, spec.serving.host, spec.serving.port, head.ssh_host, "tpwarden.host"
    )
    extra: JSONObject = {"metrics_path": "/metrics"}
    key = spec.secrets.api_key
    key_file = options.api_key_file or (key.file if key is not None else None)
    if key_file:
        # Prometheus reads the key from this file on its own machine; the value never appears.
        extra["authorization"] = {"type": "Bearer", "credentials_file": key_file}
        if key is not None and key.file and not options.api_key_file:
            findings.append(
                Finding(
                    level="warning",
                    job=JOB_VLLM,
                    target=addr,
                    message=f"the bearer token is read from {key_file} "
                    "on the Prometheus machine (the inventory's secrets.api_key.file is a "
                    "node path)",
                    fix="copy the key file there readable by prometheus, or pass --api-key-file PATH",
                )  # fmt: skip
            )
    elif key is not None and key.env:
        findings.append(
            Finding(
                level="warning",
                job=JOB_VLLM,
                target=addr,
                message=f"the API key is only in the environment "
                f"variable {key.env}; Prometheus reads bearer tokens from files, so this "
                "job is configured without one (if vLLM protects /metrics, it gets 401)",
                fix="write the key to a file readable by prometheus and pass --api-key-file PATH",
            )  # fmt: skip
        )
    labels = {"node": head.name, "cluster": spec.name}
    return _job(JOB_VLLM, [{"targets": [addr], "labels": labels}], **extra), findings


def build_config(
    spec: ClusterSpec, options: PromOptions, rules_exists: Callable[[str], bool] | None = None
) -> PromConfig:
    """The scrape config for ``spec`` (a ClusterSpec). ``rules_exists(path) -> bool`` decides
    whether the default rules file is named (injected; default: os.path.isfile)."""
    exists = rules_exists or os.path.isfile
    interval = options.scrape_interval_s
    evaluation = options.evaluation_interval_s or interval
    doc: JSONObject = {
        "global": {
            "scrape_interval": duration(interval),
            "scrape_timeout": duration(min(interval, 10.0)),  # must not exceed the interval
            "evaluation_interval": duration(evaluation),
        }
    }
    findings: list[Finding] = []
    rules = options.rules_path
    if rules is None:
        default = default_rules_path()
        if exists(default):
            rules = default
        else:
            findings.append(
                Finding(
                    level="warning",
                    job="rule_files",
                    target=default,
                    message="tpwarden's alert rules are not "
                    "installed with this tpwarden, so no rule_files are named",
                    fix="pass --rules PATH",
                )  # fmt: skip
            )
    if rules:
        doc["rule_files"] = [rules]
    jobs = []
    for job, found in (_thermal_job(spec), _watchdog_job(spec), _vllm_job(spec, options)):
        jobs.append(job)
        findings += found
    doc["scrape_configs"] = jobs
    return PromConfig(doc, tuple(findings))


def render_yaml(config: PromConfig, source: str = "") -> str:
    yaml = YAML()
    yaml.default_flow_style = False
    out = io.StringIO()
    out.write(
        "# Prometheus scrape config generated by `tpwarden prometheus config`"
        + (f" from {source}" if source else "")
        + ".\n# Jobs: tpwarden-thermal (every node's agent), tpwarden-watchdog, vllm.\n"
    )
    yaml.dump(config.doc, out)
    return out.getvalue()
