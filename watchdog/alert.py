"""Alert hooks: an argv command (incident JSON on stdin, never a shell) and/or a webhook POST.

The webhook body is tpwarden's incident record (format `tpwarden`), or the same incident as
Alertmanager's webhook payload (format `alertmanager`, see alertmanager.py) for receivers that
an Alertmanager already feeds. The command always gets tpwarden's record.

The policy decides *when* (once per incident and kind); this module only delivers. Delivery
failures are reported back as a list of problems, never raised into the watchdog loop.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import httpx
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.watchdog.alertmanager import alertmanager_payload

log = logging.getLogger(__name__)


class Runner(Protocol):
    """How the alert command runs: `subprocess.run` (tests inject a fake)."""

    def __call__(
        self,
        args: Sequence[str],
        *,
        input: bytes,
        capture_output: bool,
        timeout: float,
        check: bool,
        shell: bool,
    ) -> subprocess.CompletedProcess[bytes]: ...


class Poster(Protocol):
    """How the webhook is posted: `httpx.post` (tests inject a fake)."""

    def __call__(
        self, url: str, *, content: bytes, headers: Mapping[str, str], timeout: float
    ) -> httpx.Response: ...


WEBHOOK_FORMATS = ("tpwarden", "alertmanager")


class Alerter:
    """Sends one incident record to every configured hook. Starts nothing when built."""

    def __init__(
        self,
        command: Sequence[str] | None = None,
        webhook: str | None = None,
        *,
        timeout_s: float = 30.0,
        runner: Runner = subprocess.run,
        poster: Poster = httpx.post,
        webhook_format: str = "tpwarden",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(command, str):
            raise TypeError("alert command must be an argv list, not a shell string")
        if webhook_format not in WEBHOOK_FORMATS:
            raise ValueError(f"webhook format must be one of {WEBHOOK_FORMATS}")
        self._webhook_format = webhook_format
        self._clock = clock
        self._command = list(command) if command else None
        self._webhook = webhook
        self._timeout_s = timeout_s
        self._runner = runner
        self._poster = poster

    @property
    def configured(self) -> bool:
        return bool(self._command or self._webhook)

    def send(self, incident: JSONObject) -> list[str]:
        """Deliver `incident`; returns the problems met (empty list = delivered everywhere)."""
        problems: list[str] = []
        payload = json.dumps(incident, default=str).encode()
        if self._command:
            try:
                proc = self._runner(
                    self._command,
                    input=payload,
                    capture_output=True,
                    timeout=self._timeout_s,
                    check=False,
                    shell=False,
                )
                if proc.returncode != 0:
                    tail = (proc.stderr or b"").decode(errors="replace").strip()[-200:]
                    problems.append(f"alert command exited {proc.returncode}: {tail}")
            except Exception as exc:  # noqa: BLE001 - any failure is a problem, never raised
                problems.append(f"alert command failed: {type(exc).__name__}: {exc}")
        if self._webhook:
            body = payload
            if self._webhook_format == "alertmanager":
                doc = alertmanager_payload(incident, self._clock())
                body = json.dumps(doc, default=str).encode()
            try:
                resp = self._poster(
                    self._webhook,
                    content=body,
                    headers={"Content-Type": "application/json"},
                    timeout=self._timeout_s,
                )
                if getattr(resp, "status_code", 200) >= 400:
                    problems.append(f"alert webhook answered HTTP {resp.status_code}")
            except Exception as exc:  # noqa: BLE001 - e.g. httpx.InvalidURL is no HTTPError
                problems.append(f"alert webhook failed: {type(exc).__name__}: {exc}")
        for p in problems:
            log.error("%s", p)
        return problems


class Outbox:
    """Alerts not yet delivered, retried with exponential backoff until every hook took them.

    The daemon adds each alert and calls `flush(now)` every tick; the result says what was
    delivered and what is still pending, so the event log (and /metrics) can say so. Kept in
    memory and mirrored to a file by the daemon when the disk allows: a full disk must never
    cost an alert.
    """

    def __init__(
        self, alerter: Alerter, *, first_retry_s: float = 30.0, max_retry_s: float = 900.0
    ):
        self._alerter = alerter
        self._first = first_retry_s
        self._max = max_retry_s
        self.pending: list[JSONObject] = []

    def add(self, incident: JSONObject, now: float) -> None:
        self.pending.append({"incident": incident, "attempts": 0, "next_at": now, "problems": []})

    def load(self, pending: list[JSONValue]) -> list[tuple[JSONValue, str]]:
        """Take the items a previous daemon left; returns the malformed ones dropped, with why
        (an item without `next_at` would otherwise raise on every flush)."""
        self.pending, dropped = [], []
        for item in pending:
            why = item_problem(item)
            if why is None:
                self.pending.append(item)
            else:
                dropped.append((repr(item)[:300], why))
        return dropped

    def flush(self, now: float) -> list[JSONObject]:
        """Try every alert that is due; returns one report per attempt made (or per malformed
        item dropped: `dropped` true). A hook that raises is a failed attempt, retried."""
        reports: list[JSONObject] = []
        keep: list[JSONObject] = []
        for item in self.pending:
            why = item_problem(item)
            if why is not None:
                reports.append({"dropped": True, "error": why, "item": repr(item)[:300]})
                continue
            if item["next_at"] > now:
                keep.append(item)
                continue
            if self._alerter.configured:
                try:
                    problems = self._alerter.send(item["incident"])
                except Exception as exc:  # noqa: BLE001 - retried like any failed delivery
                    problems = [f"alerter raised {type(exc).__name__}: {exc}"]
            else:
                problems = ["no alert hook configured"]
            item["attempts"] += 1
            item["problems"] = problems
            delivered = not problems
            if not delivered:
                delay = min(self._max, self._first * 2 ** (item["attempts"] - 1))
                item["next_at"] = now + delay
                if self._alerter.configured:
                    keep.append(item)  # without any hook there is nothing to retry
            reports.append(
                {
                    "incident_id": item["incident"].get("incident_id"),
                    "category": item["incident"].get("category"),
                    "delivered": delivered,
                    "attempts": item["attempts"],
                    "problems": problems,
                    "next_attempt_at": None if delivered else item["next_at"],
                }
            )
        self.pending = keep
        return reports


def item_problem(item: JSONValue) -> str | None:
    """Why an outbox item cannot be used (None: it can)."""
    if not isinstance(item, dict):
        return f"outbox item is {type(item).__name__}, not an object"
    if not isinstance(item.get("incident"), dict):
        return "outbox item has no incident object"
    at = item.get("next_at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        return f"outbox item has no usable next_at ({at!r})"
    n = item.get("attempts")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        return f"outbox item has no usable attempts count ({n!r})"
    return None
