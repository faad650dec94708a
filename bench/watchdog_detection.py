#!/usr/bin/env python3
"""Watchdog detection bench against any OpenAI-compatible server (the lab simulator, or real vLLM).

Runs the real probe + pure policy with a wall clock and a *recording* actuator (it never restarts
anything), while N load threads send long completions. Two figures:

* false restarts: Restart decisions while the server is only loaded (should be 0);
* detection time: after `--fault` (an argv run without a shell, e.g. the lab's hang fault) the time
  until the policy decides Restart, next to the policy's window (failures x timeout .. slowest).

Example (lab, time-scaled):
    python bench/watchdog_detection.py http://127.0.0.1:8000 --timeout 5 --interval 1 \
        --load 8 --load-s 60 --fault tpwarden lab fault hang --fault-wait 120

Cadence mode (no cluster needed): the real daemon loop (`Watchdog.start()`: `Cadence`, steady
clock, real `Prober` over HTTP) against a local stand-in server whose completions hang while
its /metrics stays flat, time-scaled. The hang starts right after a successful probe (the worst
case), and the detection time is printed against the operator's bound 3 x interval + timeout
for each interval/timeout pair:
    python bench/watchdog_detection.py --cadence 120/120,120/30 --scale 60
`--with-report` also runs the daily morning report's scheduler (APScheduler) in the daemon and
fires its job when the hang starts: the report is built and queued while the loop detects.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time

import httpx
from tpwarden.cluster.vllm.probe import Outcome, Prober
from tpwarden.watchdog.config import SPEC_DEFAULTS, WatchdogConfig
from tpwarden.watchdog.observation import Observation
from tpwarden.watchdog.policy import Policy, detection_window_s
from tpwarden.watchdog.policy_state import PolicyConfig, PolicyState, Restart, WatchdogPhase


def load_worker(cfg: WatchdogConfig, model: str, prompt_words: int, stop: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    body = {
        "model": model,
        "prompt": "hello " * prompt_words,
        "max_tokens": 256,
        "temperature": 0,
        "ignore_eos": True,
    }
    with httpx.Client(base_url=cfg.probe_url, headers=headers, timeout=600) as c:
        while not stop.is_set():
            try:
                c.post("/v1/completions", json=body)
            except httpx.HTTPError:
                time.sleep(0.5)


def watch(
    cfg: WatchdogConfig,
    seconds: float,
    stop_on_restart: bool,
    verdicts: dict[str, int] | None = None,
) -> tuple[int, float | None]:
    """Probe for `seconds`; returns (restart decisions, time of the first one)."""
    prober, policy = Prober(cfg), Policy(PolicyConfig.from_config(cfg))
    verdicts = {} if verdicts is None else verdicts
    state, restarts, first = PolicyState(phase=WatchdogPhase.READY), 0, None
    end = time.time() + seconds
    while time.time() < end:
        t0 = time.monotonic()
        probe = prober.probe()
        metrics = None if probe.outcome is Outcome.REFUSED else prober.scrape_metrics()
        state, decisions = policy.decide(state, Observation(probe, metrics), time.time())
        verdicts[state.last_verdict or "?"] = verdicts.get(state.last_verdict or "?", 0) + 1
        print(
            f"{time.strftime('%H:%M:%S')} {probe.outcome.value:9} {probe.latency_s:7.2f}s "
            f"{state.last_verdict:9} failures={state.consecutive_failures}"
        )
        for d in decisions:
            if isinstance(d, Restart):
                restarts += 1
                first = first or time.time()
                print(f"  RESTART decided: {d.reason}")
                state = PolicyState(phase=WatchdogPhase.READY)  # nothing restarted: keep judging
                if stop_on_restart:
                    return restarts, first
        time.sleep(max(0.0, cfg.interval_s - (time.monotonic() - t0)))
    return restarts, first


class _StandIn:
    """A local OpenAI-compatible stand-in: completions answer until `hang` is set, then block
    (a wedged engine); /metrics stays up with flat counters (vLLM's API process keeps serving)."""

    def __init__(self) -> None:
        import http.server
        import json

        self.hang = threading.Event()
        self.release = threading.Event()
        self.tokens = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    text = (
                        f"vllm:generation_tokens_total {outer.tokens}\n"
                        f"vllm:prompt_tokens_total {outer.tokens}\n"
                        f"vllm:num_requests_running {1 if outer.hang.is_set() else 0}\n"
                    )
                    self._send(200, text.encode(), "text/plain")
                else:
                    self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.hang.is_set():
                    outer.release.wait(3600)
                    return
                outer.tokens += 1
                self._send(200, json.dumps({"choices": [{"text": "!"}]}).encode())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


def cadence_run(
    interval_s: float, timeout_s: float, scale: float, with_report: bool = False
) -> tuple[float, float]:
    """One hang under the real daemon loop; returns (detection s, bound s), both unscaled."""
    from datetime import UTC, datetime

    from tpwarden.cluster.event_log import EventLog
    from tpwarden.watchdog.alert import Alerter
    from tpwarden.watchdog.config import ReportConfig
    from tpwarden.watchdog.daemon import Watchdog
    from tpwarden.watchdog.daily import DailyReport
    from tpwarden.watchdog.morning_delivery import morning_payload
    from tpwarden.watchdog.policy_state import PolicyState
    from tpwarden.watchdog.runtime import SteadyClock
    from tpwarden.watchdog.state import StateStore

    server = _StandIn()
    i, t = interval_s / scale, timeout_s / scale
    cfg = WatchdogConfig(
        probe_url=server.url,
        state_dir=tempfile.mkdtemp(prefix="wd-bench-"),
        interval_s=i,
        timeout_s=t,
        metrics_timeout_s=min(10.0 / scale, t),
        model="m",
        metrics_port=0,
        report=ReportConfig(deliver_at="07:30") if with_report else None,
    )
    daily = DailyReport(lambda r, now: morning_payload(r, cfg.events_path, now))
    StateStore(cfg.state_path).save(PolicyState(phase=WatchdogPhase.READY))  # a server that was up
    decided = threading.Event()
    marks: dict[str, float] = {}

    class Recording:
        def restart(self, reason: str, evidence: dict, keep_fds: tuple = ()) -> None:
            marks["restart"] = time.monotonic()
            decided.set()

        def boot_progress(self) -> None:
            return None

        def collect_evidence(self) -> dict:
            return {}

        def collect_dossier(self, reason: str) -> dict | None:
            return None  # takes no dossier

        def server_started_at(self) -> float | None:
            return None  # unknown: no fencing

        def close(self) -> None:
            pass

    class HangAfterFirstOk(Prober):
        def probe(self):  # type: ignore[no-untyped-def]
            result = super().probe()
            if result.outcome is Outcome.OK and "hang" not in marks:
                server.hang.set()  # right after a good probe: the slowest case to detect
                marks["hang"] = time.monotonic()
                if with_report:  # the morning report falls due now
                    daily.bring_forward(datetime.now(UTC))
            return result

    clock = SteadyClock()
    wd = Watchdog(
        cfg,
        HangAfterFirstOk(cfg),
        Recording(),
        clock,
        StateStore(cfg.state_path),
        EventLog(cfg.events_path, clock),
        Alerter(),
        daily=daily if with_report else None,
    )
    bound = 3 * interval_s + timeout_s
    wd.start()
    try:
        decided.wait(bound / scale * 3)
    finally:
        wd.stop()
        server.close()
    if "restart" not in marks:
        return float("inf"), bound
    return (marks["restart"] - marks["hang"]) * scale, bound


def cadence_main(pairs: str, scale: float, with_report: bool = False) -> int:
    extra = ", morning report due at the hang" if with_report else ""
    print(f"detection of a real hang under the daemon loop (time scale 1/{scale:g}{extra})")
    print(f"{'interval/timeout':>16} {'detected':>10} {'bound 3I+T':>11} {'ratio':>6}")
    worst = 0.0
    for pair in pairs.split(","):
        interval_s, timeout_s = (float(x) for x in pair.split("/"))
        got, bound = cadence_run(interval_s, timeout_s, scale, with_report)
        worst = max(worst, got / bound)
        print(f"{pair:>16} {got:9.1f}s {bound:10.0f}s {got / bound:6.3f}")
    ok = worst <= 1.1
    print(f"worst ratio {worst:.3f} ({'within' if ok else 'OVER'} the 1.1 limit)")
    return 0 if ok else 1


def main() -> None:
    if "--cadence" in sys.argv:
        ap = argparse.ArgumentParser(description="daemon-loop detection bench (local stand-in)")
        ap.add_argument("--cadence", required=True, help="interval/timeout pairs, e.g. 120/30")
        ap.add_argument("--scale", type=float, default=60.0, help="time divisor")
        ap.add_argument("--with-report", action="store_true", help="fire the daily report too")
        a = ap.parse_args()
        sys.exit(cadence_main(a.cadence, a.scale, a.with_report))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base_url")
    ap.add_argument("--model")
    ap.add_argument("--api-key")
    # the watchdog's own defaults (the inventory field's), not a second set
    ap.add_argument("--timeout", type=float, default=SPEC_DEFAULTS["timeout_s"])
    ap.add_argument("--interval", type=float, default=SPEC_DEFAULTS["interval_s"])
    ap.add_argument("--failures", type=int, default=SPEC_DEFAULTS["failures"])
    ap.add_argument("--load", type=int, default=8, help="concurrent load threads")
    ap.add_argument("--prompt-words", type=int, default=4000)
    ap.add_argument("--load-s", type=float, default=600, help="seconds of load-only watching")
    ap.add_argument(
        "--long-prefill-words",
        type=int,
        default=0,
        help="also keep one request with a prompt this long in flight the whole time",
    )
    ap.add_argument("--fault", nargs=argparse.REMAINDER, help="argv that hangs the server")
    ap.add_argument("--fault-wait", type=float, default=1800)
    a = ap.parse_args()
    cfg = WatchdogConfig(
        probe_url=a.base_url.rstrip("/"),
        state_dir=tempfile.mkdtemp(),
        model=a.model,
        api_key=a.api_key,
        timeout_s=a.timeout,
        interval_s=a.interval,
        failures=a.failures,
    )
    model = a.model or Prober(cfg)._http.get("/v1/models").json()["data"][0]["id"]
    stop = threading.Event()
    threads = [
        threading.Thread(target=load_worker, args=(cfg, model, a.prompt_words, stop), daemon=True)
        for _ in range(a.load)
    ]
    if a.long_prefill_words:
        threads.append(
            threading.Thread(
                target=load_worker, args=(cfg, model, a.long_prefill_words, stop), daemon=True
            )
        )
    for t in threads:
        t.start()
    verdicts: dict[str, int] = {}
    false_restarts, _ = watch(cfg, a.load_s, stop_on_restart=False, verdicts=verdicts)
    print(
        f"\nfalse restarts under load ({a.load} streams"
        f"{f' + a {a.long_prefill_words}-word prefill' if a.long_prefill_words else ''}, "
        f"{a.load_s:g}s): {false_restarts}; probe verdicts {verdicts}"
    )
    if a.fault:
        import subprocess

        t_fault = time.time()
        subprocess.run(a.fault, check=True)
        _, first = watch(cfg, a.fault_wait, stop_on_restart=True)
        lo, hi = detection_window_s(cfg)
        got = f"{first - t_fault:.1f}s" if first else "not detected"
        print(
            f"hang detection: {got}; policy window {lo:g}s .. {hi:g}s "
            f"(ratio to fastest: {((first - t_fault) / lo) if first else float('nan'):.2f})"
        )
    stop.set()


if __name__ == "__main__":
    main()
