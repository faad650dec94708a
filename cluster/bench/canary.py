"""The canary, run: idle-only, measured, recorded in the ledger (issue 53).

`CanaryRunner.run()`:
1. the server must be idle: running and waiting requests 0 by vLLM's /metrics over
   `idle_window_s` (`canary_plan.user_load`; else "deferred", and no request was sent: not even
   the probe, which comes next);
2. it must answer the 1-token probe (else a "failed" canary, reason given);
3. what runs is fingerprinted; a configuration the ledger has not recorded last (a clock cap or
   a driver changed without a restart) becomes a record first (action "canary");
4. the canary lease is written where the watchdog reads it (`canary_lease`), then per level one
   client container runs the warm-ups and repeats; every second its `watch` reads /metrics: user
   load stops the level at once (the container is removed) and the canary is "deferred"; after
   the warm-ups of the first level, at the first second with the canary's requests in flight,
   the state sample is taken (`ledger.collect.collect_state`; after the level if none was);
5. every repeat is kept, the medians per level, the spec-decode acceptance from the counters'
   deltas, preemptions and the peak KV usage; the run directory `runs/<id>-canary/` keeps the
   raw results and client logs; the ledger keeps a row pointing at it, and any controlled
   evidence the canary completes (`ledger.evidence.pair_evidence`).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
from tpwarden.cluster.bench.canary_plan import (
    CanaryOptions,
    LoadSample,
    level_plan,
    result_name,
    user_load,
)
from tpwarden.cluster.bench.dataset import sharegpt_json
from tpwarden.cluster.bench.parse import (
    ResultFormatError,
    load_result_text,
    parse_result,
    spec_counters,
    spec_delta,
)
from tpwarden.cluster.bench.plan import CONTAINER_DIR, client_node
from tpwarden.cluster.bench.runner import default_runs_dir, write_json
from tpwarden.cluster.canary_lease import cleared_document, lease_document, lease_path, write_lease
from tpwarden.cluster.containers.job import folder_job
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ProbeError, TpwardenError
from tpwarden.cluster.ledger.collect import collect_fingerprint, collect_state, container_ids
from tpwarden.cluster.ledger.evidence import pair_evidence
from tpwarden.cluster.ledger.fingerprint import config_id
from tpwarden.cluster.ledger.record import ledger_file
from tpwarden.cluster.ledger.store import Ledger
from tpwarden.cluster.ledger.tables import KeyValue, LevelRow, NewCanary, NewRecord, RepeatRow
from tpwarden.cluster.vllm.metrics import sum_by_sample

log = logging.getLogger(__name__)

PREEMPTIONS = "vllm:num_preemptions_total"
NO_METRICS = "the server's /metrics does not answer"
POLL_S = 1.0


class CanaryStatus(enum.StrEnum):
    OK = "ok"
    DEFERRED = "deferred"  # user load before or during it: it stopped, never competing
    FAILED = "failed"  # the server was down, or the client failed


class UserLoad(Exception):
    """Raised inside a level's watch: users are there, the level stops."""


class Lease:
    """Where a canary tells the watchdog it runs (`canary_lease`); the default tells no one."""

    def begin(self, run_id: str, levels: tuple[int, ...], until: float) -> None:
        """A canary starts now and ends by `until`."""

    def end(self, run_id: str) -> None:
        """It ended."""


class WatchdogLease(Lease):
    """The lease written where a watchdog reads it (`canary_lease.lease_path` of the
    inventory's `watchdog.state_dir`): on this machine and on the head, wherever that directory
    exists, as the operator's hold is (`rollout.ports.WatchdogHolder`). Best effort: a lease
    that cannot be written is logged; the canary's user-load rule stands on its own."""

    def __init__(self, ctl: Controller, by: str = "tpwarden-canary") -> None:
        self.ctl = ctl
        self.by = by
        self.path = lease_path(ctl.spec.watchdog.state_dir)

    def _write(self, doc: JSONObject) -> None:
        state_dir = self.ctl.spec.watchdog.state_dir
        if os.path.isdir(state_dir):
            write_lease(self.path, doc)
        try:
            session = self.ctl.session(self.ctl.spec.head)
            if session.run(["test", "-d", state_dir]).rc == 0:
                session.put_atomic(json.dumps(doc).encode(), self.path)
        except TpwardenError as exc:
            log.warning("could not write the canary lease on the head: %s", exc)

    def begin(self, run_id: str, levels: tuple[int, ...], until: float) -> None:
        now = time.time()
        self._write(lease_document(run_id=run_id, levels=levels, until=until, by=self.by, now=now))

    def end(self, run_id: str) -> None:
        self._write(cleared_document(run_id=run_id, now=time.time()))


@dataclass
class CanaryOutcome:
    status: CanaryStatus
    reason: str | None
    run_id: str
    definition: str
    started: float
    finished: float
    canary_id: int | None = None
    record_id: int | None = None
    cfg: str | None = None
    recorded_drift: bool = False
    server_s: float = 0.0
    run_dir: str | None = None
    levels: list[LevelRow] = field(default_factory=list)
    evidence: int = 0

    def to_json(self) -> JSONObject:
        return {
            "status": self.status.value, "reason": self.reason, "run_id": self.run_id,
            "definition": self.definition, "started": self.started, "finished": self.finished,
            "canary_id": self.canary_id, "record_id": self.record_id, "cfg": self.cfg,
            "recorded_drift": self.recorded_drift, "server_s": round(self.server_s, 3),
            "run_dir": self.run_dir, "evidence_rows": self.evidence,
            "levels": [{k: getattr(lv, k) for k in lv.__dataclass_fields__} for lv in self.levels],
        }  # fmt: skip


def _num(m: Mapping[str, float], name: str) -> float:
    return float(m.get(name) or 0.0)


class CanaryRunner:
    """One canary against the cluster a Controller drives. Starts nothing on init."""

    def __init__(
        self,
        ctl: Controller,
        options: CanaryOptions | None = None,
        *,
        trigger: str = "manual",
        ledger_path: Path | None = None,
        runs_dir: Path | None = None,
        http: httpx.Client | None = None,
        lease: Lease | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.ctl = ctl
        self.spec = ctl.spec
        self.opts = options or CanaryOptions.from_spec(ctl.spec)
        self.trigger = trigger
        self.path = ledger_path or ledger_file(ctl.spec, ctl.state_dir)
        self.runs_dir = runs_dir or default_runs_dir()
        self.http = http or httpx.Client(timeout=10.0)
        self.lease = lease or Lease()
        self.clock = clock
        self.sleep = sleep
        self.progress = on_progress or (lambda msg: None)
        self._state: JSONObject = {}
        self._state_rows: list[KeyValue] = []
        self._state_thread: threading.Thread | None = None
        self._kv_peak = 0.0

    # -- the server's load ------------------------------------------------------------------
    def _page(self) -> str | None:
        try:
            status, text = self.ctl.metrics_page(timeout_s=5.0)
        except ProbeError:
            return None
        return text if status == 200 else None

    def _sample(self) -> LoadSample | None:
        text = self._page()
        try:
            m = sum_by_sample(text) if text is not None else None
        except ValueError:
            m = None
        if m is None:
            return None
        self._kv_peak = max(self._kv_peak, _num(m, "vllm:kv_cache_usage_perc"))
        return LoadSample(self.clock(), _num(m, "vllm:num_requests_running"),
                          _num(m, "vllm:num_requests_waiting"))  # fmt: skip

    def idle(self) -> str | None:
        """None when idle over the idle window; else why not (users' load, no /metrics)."""
        samples: list[LoadSample] = []
        end = self.clock() + self.opts.idle_window_s
        while True:
            s = self._sample()
            if s is None:
                return f"{NO_METRICS}: idle or not cannot be told"
            samples.append(s)
            busy = user_load(samples, 0)
            if busy:
                return busy
            if self.clock() >= end and len(samples) >= 2:  # two: a user's stream outlasts one
                return None
            self.sleep(POLL_S)

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> CanaryOutcome:
        started = self.clock()
        run_id = datetime.fromtimestamp(started, UTC).strftime("%Y%m%dT%H%M%SZ") + "-canary"
        out = CanaryOutcome(CanaryStatus.OK, None, run_id, self.opts.definition(self.spec),
                            started, started)  # fmt: skip
        busy = self.idle()  # /metrics only: not one request before the server is known idle
        if busy is not None and not busy.startswith(NO_METRICS):
            return self._finish(out, CanaryStatus.DEFERRED, f"{busy}; no request sent")
        ok, _, error = self.ctl.probe(timeout=30.0)
        if not ok:
            return self._finish(out, CanaryStatus.FAILED, f"server not healthy: {error}")
        if busy is not None:  # it answers, but whether users are there cannot be told
            return self._finish(out, CanaryStatus.DEFERRED, busy)
        self._fingerprint(out)
        run_dir = self.runs_dir / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        out.run_dir = str(run_dir)
        repeats: list[RepeatRow] = []
        self.lease.begin(run_id, self.opts.levels, started + self.opts.timeout_s)
        try:
            for i, level in enumerate(self.opts.levels):
                self.progress(
                    f"c{level}: {self.opts.warmups} warm-up + {self.opts.repeats} repeats"
                )
                row, reps = self._level(level, run_id, run_dir, sample_state=i == 0)
                out.levels.append(row)
                repeats += reps
                if self._state_thread is None and not self._state:
                    self._take_state("", self.spec.head.name)  # it ended before its warm-ups showed
        except UserLoad as e:
            return self._finish(out, CanaryStatus.DEFERRED, f"{e}; stopped", repeats)
        except (TpwardenError, ResultFormatError) as e:
            return self._finish(out, CanaryStatus.FAILED, str(e), repeats)
        finally:
            self.lease.end(run_id)
            if self._state_thread is not None:
                self._state_thread.join(timeout=90.0)
        return self._finish(out, CanaryStatus.OK, None, repeats)

    def _fingerprint(self, out: CanaryOutcome) -> None:
        """Record what runs when the ledger's latest record is another configuration."""
        got = collect_fingerprint(self.ctl, self.http)
        cfg = config_id(got.rows)
        with Ledger.open(self.path) as led:
            latest = led.latest_record(self.spec.name)
            if latest is not None and latest.cfg == cfg:
                out.record_id, out.cfg = latest.id, cfg
                return
            rec = led.add_record(NewRecord(
                ts=self.clock(), cluster=self.spec.name, cfg=cfg,
                spec_hash=self.spec.config_hash(), action="canary",
                reason="the canary found a configuration the ledger had not recorded last "
                "(changed without a restart, or no record yet)",
                who="tpwarden-canary", run_dir=None, rows=tuple(got.rows), missing=got.missing,
            ))  # fmt: skip
        out.record_id, out.cfg, out.recorded_drift = rec.id, cfg, True

    def _level(
        self, level: int, run_id: str, run_dir: Path, *, sample_state: bool
    ) -> tuple[LevelRow, list[RepeatRow]]:
        plan = level_plan(self.spec, self.opts, level, run_id)
        node = client_node(self.spec, self.opts.bench_options())
        text = self.opts.prompts.read_text(encoding="utf-8")
        files = {"prompts.json": sharegpt_json(text, str(self.opts.prompts))}
        key = self.ctl.api_key()
        secrets = {"OPENAI_API_KEY": key} if key else {}
        before = self._page() or ""
        self._kv_peak = 0.0
        job = replace(
            folder_job(plan, secrets, "canary client", CONTAINER_DIR, files, self.opts.timeout_s,
                       watch=self._watch(level, plan.name, node.name, sample_state)),
            poll_s=POLL_S,
        )  # fmt: skip
        done = self.ctl.docker(node).run_to_completion(job)
        after = self._page() or ""
        (run_dir / "client").mkdir(exist_ok=True)
        (run_dir / "client" / f"c{level}.log").write_text(done.logs)
        if done.exit_code != 0:
            tail = "\n".join(done.logs.splitlines()[-10:])
            raise TpwardenError(f"c{level}: the canary client exited {done.exit_code}\n{tail}")
        (run_dir / "results").mkdir(exist_ok=True)
        reps = []
        for i in range(self.opts.warmups + self.opts.repeats):
            raw = done.results.get(result_name(level, i))
            if raw is None:
                raise TpwardenError(f"c{level}: repeat {i} wrote no result")
            (run_dir / "results" / result_name(level, i)).write_bytes(raw)
            r = parse_result(load_result_text(raw.decode()))
            reps.append(RepeatRow(
                level=level, repeat=i, warmup=i < self.opts.warmups,
                output_tok_s=r.aggregate_tok_s, per_stream_tok_s=r.per_stream_tok_s,
                ttft_p50_ms=r.ttft_p50_ms, itl_p50_ms=r.itl_p50_ms, duration_s=r.duration_s,
                completed=r.completed,
            ))  # fmt: skip
        return self._level_row(level, reps, before, after), reps

    def _level_row(self, level: int, reps: list[RepeatRow], before: str, after: str) -> LevelRow:
        measured = [r for r in reps if not r.warmup]

        def med(name: str) -> float | None:
            vals = [getattr(r, name) for r in measured if getattr(r, name) is not None]
            return statistics.median(vals) if vals else None

        delta = spec_delta(spec_counters(before), spec_counters(after))
        pre = (
            _counter(after, PREEMPTIONS) - _counter(before, PREEMPTIONS)
            if PREEMPTIONS in after
            else None
        )
        return LevelRow(
            level=level, output_tok_s=med("output_tok_s"), per_stream_tok_s=med("per_stream_tok_s"),
            ttft_p50_ms=med("ttft_p50_ms"), itl_p50_ms=med("itl_p50_ms"),
            acceptance_pct=delta.acceptance_pct if delta else None,
            tokens_per_step=delta.tokens_per_step if delta else None,
            preemptions=pre, kv_usage_max=self._kv_peak, repeats=len(measured),
        )  # fmt: skip

    def _watch(self, level: int, name: str, node: str, sample_state: bool) -> Callable[[str], None]:
        """Called every second while the level runs, with the client's new log: user load
        raises `UserLoad` (the container is then removed); after the warm-ups' results, the
        state sample is taken in the background once."""
        samples: list[LoadSample] = []
        seen = {"results": 0, "sampled": not sample_state}

        def watch(new_log: str) -> None:
            s = self._sample()
            if s is not None:
                samples.append(s)
                busy = user_load(samples[-2:], level)
                if busy:
                    raise UserLoad(f"c{level}: {busy}")
            seen["results"] += new_log.count("Serving Benchmark Result")
            under_load = s is not None and s.running >= 1  # the clocks as the canary runs
            if not seen["sampled"] and seen["results"] >= self.opts.warmups and under_load:
                seen["sampled"] = True
                t = threading.Thread(target=self._take_state, args=(name, node), daemon=True)
                self._state_thread = t
                t.start()

        return watch

    def _take_state(self, client: str, client_node_name: str) -> None:
        try:
            exclude = container_ids(self.ctl.observe())
            c = (
                self.ctl.docker(self.spec.node(client_node_name)).inspect(client)
                if client
                else None
            )
            if c is not None:
                exclude.setdefault(client_node_name, []).append(c.id)
            got = collect_state(self.ctl, exclude)
            self._state, self._state_rows = {"nodes": got.doc, "missing": got.missing}, got.rows
        except TpwardenError as e:  # the canary's figures still count without it
            self._state = {"error": str(e)}

    # -- the record -------------------------------------------------------------------------
    def _finish(
        self, out: CanaryOutcome, status: CanaryStatus, reason: str | None,
        repeats: list[RepeatRow] | None = None,
    ) -> CanaryOutcome:  # fmt: skip
        out.status, out.reason, out.finished = status, reason, self.clock()
        reps = repeats or []
        out.server_s = sum(r.duration_s or 0.0 for r in reps)
        if status is not CanaryStatus.OK:
            out.levels = []
        doc: JSONObject = {"options": self.opts.to_json(), "state": self._state,
                           "trigger": self.trigger}  # fmt: skip
        if out.run_dir:
            write_json(Path(out.run_dir) / "canary.json", {**out.to_json(), **doc})
        with Ledger.open(self.path) as led:
            out.canary_id = led.add_canary(NewCanary(
                record_id=out.record_id, cluster=self.spec.name, cfg=out.cfg,
                definition=out.definition, started=out.started, finished=out.finished,
                status=status.value, reason=reason, trigger=self.trigger, server_s=out.server_s,
                run_dir=out.run_dir, doc=json.loads(json.dumps(doc, default=str)),
                levels=tuple(out.levels), repeats=tuple(reps) if status is CanaryStatus.OK else (),
                state=tuple(self._state_rows) if status is CanaryStatus.OK else (),
            ))  # fmt: skip
            if status is CanaryStatus.OK:
                out.evidence = len(pair_evidence(led, out.canary_id, out.finished))
        return out


def _counter(page: str, name: str) -> float:
    try:
        return float(sum_by_sample(page).get(name) or 0.0) if page else 0.0
    except ValueError:
        return 0.0
