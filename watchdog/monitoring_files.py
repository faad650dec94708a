"""Where the installed package keeps its monitoring files: the Prometheus alert rules and the
Grafana dashboard (package data under `tpwarden/watchdog/monitoring/`), so `tpwarden prometheus
config` can copy them next to the scrape config it writes. Paths only; reading them is the caller's."""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

RULES_FILE = "tpwarden-rules.yml"
DASHBOARD_FILE = "grafana-night.json"


def _data_path(name: str) -> Path:
    resource = files("tpwarden.watchdog").joinpath("monitoring", name)
    # The package is installed as plain files (never zipped), so this path stays valid after the
    # context closes; as_file() only materialises a copy for a zip import.
    with as_file(resource) as path:
        return Path(path)


def rules_path() -> Path:
    """The alert rule file (group `tpwarden`), valid for `promtool check rules`."""
    return _data_path(RULES_FILE)


def dashboard_path() -> Path:
    """The overnight Grafana dashboard (JSON model, datasource as a template variable)."""
    return _data_path(DASHBOARD_FILE)
