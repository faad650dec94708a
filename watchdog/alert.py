"""Alert hooks: an argv command (incident JSON on stdin, never a shell) and/or a webhook POST.

The policy decides *when* (once per incident and kind); this module only delivers. Delivery
failures are reported back as a list of problems, never raised into the watchdog loop.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import httpx

log = logging.getLogger(__name__)

Runner = Callable[..., subprocess.CompletedProcess[bytes]]
Poster = Callable[..., Any]


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
    ) -> None:
        if isinstance(command, str):
            raise TypeError("alert command must be an argv list, not a shell string")
        self._command = list(command) if command else None
        self._webhook = webhook
        self._timeout_s = timeout_s
        self._runner = runner
        self._poster = poster

    @property
    def configured(self) -> bool:
        return bool(self._command or self._webhook)

    def send(self, incident: dict[str, Any]) -> list[str]:
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
            except (OSError, subprocess.SubprocessError) as exc:
                problems.append(f"alert command failed: {exc}")
        if self._webhook:
            try:
                resp = self._poster(
                    self._webhook,
                    content=payload,
                    headers={"Content-Type": "application/json"},
                    timeout=self._timeout_s,
                )
                if getattr(resp, "status_code", 200) >= 400:
                    problems.append(f"alert webhook answered HTTP {resp.status_code}")
            except httpx.HTTPError as exc:
                problems.append(f"alert webhook failed: {exc}")
        for p in problems:
            log.error("%s", p)
        return problems
