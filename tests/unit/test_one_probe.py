"""One 1-token probe, one notion of healthy, one /metrics parser, one secret resolution: the
pieces `tpwarden status`, the watchdog and cluster control share (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.errors import CommandFailed, ConfigError, ProbeError
from tpwarden.cluster.inventory.load import load_inventory
from tpwarden.cluster.secrets import resolve_secret
from tpwarden.cluster.settings import SecretRef
from tpwarden.cluster.vllm.metrics import sum_by_sample
from tpwarden.cluster.vllm.probe import (
    Outcome,
    ProbeResult,
    is_healthy,
    metrics_snapshot,
    probe_completion,
)

ROOT = Path(__file__).resolve().parents[2]
COMPLETION = {"choices": [{"index": 0, "text": "!"}]}


def _client(answer) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(answer))


def _raise(exc: Exception):
    def answer(request: httpx.Request) -> httpx.Response:
        raise exc

    return answer


# --- the probe and healthy ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "healthy"),
    [(Outcome.OK, True)] + [(o, False) for o in Outcome if o is not Outcome.OK],
)
def test_healthy_is_an_ok_completion_and_nothing_else(outcome: Outcome, healthy: bool) -> None:
    assert is_healthy(ProbeResult(outcome, 0.1)) is healthy


def test_probe_completion_sends_the_one_request_and_classifies_the_answer() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=COMPLETION)

    ticks = iter([10.0, 10.5, 12.0])
    r = probe_completion(
        _client(answer),
        "http://s/v1/completions",
        "m",
        timeout_s=5,
        headers={"Authorization": "Bearer k"},
        monotonic=lambda: next(ticks),
    )
    assert r == ProbeResult(Outcome.OK, 2.0, "", 200, "m") and is_healthy(r)
    body = json.loads(seen[0].content)
    assert body["max_tokens"] == 1 and body["model"] == "m" and body["temperature"] == 0
    assert seen[0].headers["authorization"] == "Bearer k"


@pytest.mark.parametrize(
    ("exc", "outcome", "detail"),
    [
        (httpx.ReadTimeout("slow"), Outcome.TIMEOUT, "no answer within 5s (ReadTimeout)"),
        (httpx.ConnectError("refused"), Outcome.REFUSED, "connect failed: refused"),
        (httpx.RemoteProtocolError("gone"), Outcome.REFUSED, "connection dropped"),
        (httpx.DecodingError("bad gzip"), Outcome.MALFORMED, "DecodingError: bad gzip"),
    ],
)
def test_no_usable_answer_is_an_outcome_never_an_exception(
    exc: Exception, outcome: Outcome, detail: str
) -> None:
    r = probe_completion(_client(_raise(exc)), "http://s/v1/completions", "m", timeout_s=5)
    assert r.outcome is outcome and detail in r.detail and r.status_code is None


def test_a_timeout_left_of_a_deadline_reads_in_one_decimal() -> None:
    # status probes with what is left of its deadline: "4.95885s" in a table helps nobody
    r = probe_completion(
        _client(_raise(httpx.ReadTimeout("slow"))),
        "http://s/v1/completions",
        "m",
        timeout_s=4.95885,
    )
    assert "no answer within 5s (ReadTimeout)" in r.detail
    r = probe_completion(
        _client(_raise(httpx.ReadTimeout("slow"))), "http://s/v1/completions", "m", timeout_s=2.34
    )
    assert "no answer within 2.3s (ReadTimeout)" in r.detail


SPEC = ROOT / "inventory.example.yml"


@pytest.mark.parametrize(
    ("answer", "ok", "error"),
    [
        (lambda r: httpx.Response(200, json=COMPLETION), True, None),
        (lambda r: httpx.Response(200, json={"choices": []}), False, "malformed: 200 but no"),
        (_raise(httpx.ConnectError("refused")), False, "refused: connect failed: refused"),
        (_raise(httpx.ReadTimeout("t")), False, "timeout: no answer within 1s (ReadTimeout)"),
    ],
)
def test_status_judges_with_the_watchdogs_probe(monkeypatch, answer, ok, error) -> None:
    monkeypatch.setenv("TPWARDEN_API_KEY", "k")
    ctl = Controller(load_inventory(SPEC), http=_client(answer))
    try:
        got_ok, ms, err = ctl.probe(timeout=1)
    finally:
        ctl.close()
    assert got_ok is ok
    assert (err is None) if error is None else err.startswith(error)
    assert (ms is None) is (error is not None and not error.startswith("malformed"))


def test_metrics_page_is_the_controllers_read_of_metrics() -> None:
    ctl = Controller(
        load_inventory(SPEC), http=_client(lambda r: httpx.Response(200, text="vllm:x 1\n"))
    )
    assert ctl.metrics_page() == (200, "vllm:x 1\n")
    ctl.close()
    down = Controller(load_inventory(SPEC), http=_client(_raise(httpx.ConnectError("refused"))))
    with pytest.raises(ProbeError, match="ConnectError: refused"):
        down.metrics_page()
    down.close()


# --- /metrics -----------------------------------------------------------------------------


def test_one_parser_sums_over_label_sets() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 3\n'
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{engine="0"} 7\n'
        'vllm:generation_tokens_created{engine="0"} 1.7e9\n'
    )
    sums = sum_by_sample(text)
    assert sums["vllm:num_requests_running"] == 5 and sums["vllm:generation_tokens_total"] == 7
    assert metrics_snapshot(text, 1.0).get("vllm:generation_tokens_total") == 7


@pytest.mark.parametrize("text", ["<html>oops</html>", 'vllm:x{a="b"} nope\n'])
def test_not_exposition_format_is_an_error_for_every_reader(text: str) -> None:
    with pytest.raises(ValueError):
        sum_by_sample(text)
    assert metrics_snapshot(text, 1.0).error.startswith("unparseable /metrics")


# --- secrets --------------------------------------------------------------------------------


def _no_file(path: str) -> str:
    raise AssertionError("an env reference reads no file")


def test_secret_from_the_environment() -> None:
    ref = SecretRef(env="K")
    assert (
        resolve_secret(ref, read_file=_no_file, environ={"K": "v"}, what="w", where="here") == "v"
    )
    with pytest.raises(ConfigError, match="w: environment variable K is not set here"):
        resolve_secret(ref, read_file=_no_file, environ={}, what="w", where="here")


def test_secret_from_a_file_read_by_the_injected_reader(tmp_path: Path) -> None:
    key = tmp_path / "key"
    ref = SecretRef(file=str(key))

    def read(path: str) -> str:
        return Path(path).read_text()

    with pytest.raises(ConfigError, match="not readable here"):
        resolve_secret(ref, read_file=read, environ={}, what="w", where="here")
    key.write_text("s3cret\n")
    assert resolve_secret(ref, read_file=read, environ={}, what="w", where="here") == "s3cret"

    def unreachable(path: str) -> str:  # the node's SFTP failed: not a config error
        raise CommandFailed("node1", ["sftp-get", path], 1, "no such file")

    with pytest.raises(CommandFailed):
        resolve_secret(ref, read_file=unreachable, environ={}, what="w", where="here")


def test_the_probe_sends_the_key_it_can_resolve_and_none_it_cannot(monkeypatch) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=COMPLETION)

    ctl = Controller(load_inventory(SPEC), http=_client(answer))
    try:
        monkeypatch.setenv("TPWARDEN_API_KEY", "k")
        assert ctl.probe(timeout=1)[0]
        monkeypatch.delenv("TPWARDEN_API_KEY")
        assert ctl.probe(timeout=1)[0]
    finally:
        ctl.close()
    assert seen[0].headers["authorization"] == "Bearer k"
    assert "authorization" not in seen[1].headers
