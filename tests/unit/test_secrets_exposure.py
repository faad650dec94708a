"""Secrets stay out of reprs and argv (issue 29): the alert webhook may be a secret reference
(env: NAME or file: /path, like the API key), is never in repr() of a settings or watchdog
config object (nor the API key), and a webhook that is not an http(s) URL is refused when the
inventory is checked instead of raising httpx.InvalidURL in the daemon later."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.inventory.load import parse_inventory
from tpwarden.cluster.settings import WatchdogSpec, http_url
from tpwarden.watchdog.wiring import build_config

ROOT = Path(__file__).resolve().parents[2]
URL = "https://hooks.example.internal/services/T0/B0/s3cr3t-webhook-path"
API_KEY = "sk-live-api-key-value"


def _spec(webhook_yaml: str):
    text = (ROOT / "inventory.example.yml").read_text()
    anchor = "      watchdog:\n"
    assert anchor in text
    return parse_inventory(
        text.replace(anchor, anchor + f"        alert_webhook: {webhook_yaml}\n")
    )


def test_plain_webhook_and_api_key_are_in_no_repr():
    spec = _spec(URL)
    cfg = build_config(spec, "/tmp/wd", environ={"TPWARDEN_API_KEY": API_KEY})
    assert cfg.alert_webhook == URL and cfg.api_key == API_KEY  # the daemon has them ...
    for obj in (cfg, spec, spec.watchdog, spec.settings):
        text = repr(obj)
        assert "s3cr3t" not in text and API_KEY not in text, type(obj)  # ... no repr shows them


def test_webhook_from_an_env_reference(tmp_path):
    spec = _spec("{env: TPWARDEN_WEBHOOK}")
    assert "TPWARDEN_WEBHOOK" in str(spec.watchdog.model_dump()["alert_webhook"])
    environ = {"TPWARDEN_API_KEY": API_KEY, "TPWARDEN_WEBHOOK": URL}
    assert build_config(spec, str(tmp_path), environ=environ).alert_webhook == URL
    with pytest.raises(ConfigError, match="environment variable TPWARDEN_WEBHOOK is not set"):
        build_config(spec, str(tmp_path), environ={"TPWARDEN_API_KEY": API_KEY})


def test_webhook_from_a_file_reference_must_be_an_http_url(tmp_path):
    secret = tmp_path / "webhook"
    spec = _spec(f"{{file: {secret}}}")
    environ = {"TPWARDEN_API_KEY": API_KEY}
    secret.write_text(URL + "\n")
    assert build_config(spec, str(tmp_path), environ=environ).alert_webhook == URL
    secret.write_text("http://[not-a-host/x\n")  # httpx.InvalidURL in the daemon before
    with pytest.raises(ConfigError, match="alert webhook") as info:
        build_config(spec, str(tmp_path), environ=environ)
    assert "not-a-host" not in str(info.value)  # the value is not echoed


@pytest.mark.parametrize(
    "url",
    ["hooks.example/x", "http://[bad", "http://h:99999/", "ftp://h/x", "http://a b/", "http:///x"],
)
def test_a_webhook_that_is_not_an_http_url_is_refused(url):
    with pytest.raises(ValueError):
        http_url(url)
    with pytest.raises(ValueError):
        WatchdogSpec.model_validate({"alert_webhook": url})
