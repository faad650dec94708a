"""The unattended night (issue 54's second step): the queue run against injected ports.

`NightQueue.run`:
1. production measured (a canary) -> `production-start.result.json`; a resumed night that has
   it does not take it again; a canary that could not be taken (user load, a server down)
   stops the night before any restart (`production-start.failed.json`; `--resume` retries);
2. each variant left, in queue order: the policy (`policy.plan_queue`) recomputed with the
   real time and what is left; one that no longer fits is skipped with its reason (an event,
   not a file: a later `--resume` may still run it); else a restart on production plus its
   changes (never cumulative) and a canary -> `<name>.result.json`, or `<name>.failed.json`
   with the rollout's error (the boot reader's root cause) or the canary's;
3. production restored (unless the cluster is verified on it already), verified by its config
   hash on every node and health, and measured again -> `production-end.result.json` with the
   drift of production's tok/s between its two canaries; then `run.json` is finished.

`bring_back` (a resumed night, before anything else): production restored when the rollout
store says the cluster was left on anything else; `restore` (the guard, `experiment abort`):
production restored, or verified in place when the store says it is there. The ports restart,
restore, measure and tell the time (`NightPorts`); the queue itself decides, writes the files
and the events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.experiment.night import NightFiles, RunRecord, drift, tok_s
from tpwarden.cluster.experiment.plan_file import LoadedPlan
from tpwarden.cluster.experiment.policy import Costs, plan_queue
from tpwarden.cluster.experiment.resume import PRODUCTION_END, PRODUCTION_START
from tpwarden.cluster.rollout.edit import Change


@dataclass(frozen=True)
class Measured:
    """A canary as the queue keeps it: taken or not, its own JSON, why not."""

    ok: bool
    doc: JSONObject
    reason: str | None = None


@dataclass(frozen=True)
class VariantRestart:
    """A guarded rollout onto a variant: its last step (done, rolled_back, failed, refused,
    abandoned), its record's id, the configuration it ran, and the rollout's reason."""

    ok: bool
    step: str
    rollout_id: str | None
    config_hash: str
    error: str | None = None


@dataclass(frozen=True)
class Restored:
    ok: bool
    restarted: bool  # False: the cluster was verified on production already
    detail: str
    rollout_id: str | None = None

    def to_json(self) -> JSONObject:
        return asdict(self)


class NightPorts(Protocol):
    def clock(self) -> float: ...
    # The config hash this night's rollouts left the cluster on (None: it cannot be told)
    def left_on(self) -> str | None: ...
    # Every node runs production's config hash and the server answers
    def verify(self) -> tuple[bool, str]: ...
    def restart_on(self, name: str, changes: Sequence[Change]) -> VariantRestart: ...
    def restore(self) -> Restored: ...
    def canary(self, label: str) -> Measured: ...


class NotOnProduction(TpwardenError):
    """The cluster does not run the inventory's configuration: no night starts on it."""


class NightStopped(BaseException):  # a stop, as KeyboardInterrupt is, not an error
    """The night process was told to stop (SIGTERM, as `experiment abort` sends): it unwinds at
    once, releasing its locks, and restores nothing itself. Not a TpwardenError, so no step
    records it as a variant's failure; whoever stopped it restores production (the abort, the
    guard at its time, or `--resume`)."""


@dataclass(frozen=True)
class QueuedVariant:
    name: str
    changes: tuple[Change, ...]
    summary: tuple[str, ...] = ()


@dataclass
class NightOutcome:
    run: RunRecord
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    restored: Restored | None = None
    drift: dict[str, float] = field(default_factory=dict)
    stopped: str | None = None  # why the night stopped short of its closing canary
    nothing_left: bool = False
    guard: JSONObject | None = None  # the guard armed for it (`experiment.guard`)

    @property
    def ok(self) -> bool:
        return self.nothing_left or (
            self.stopped is None and bool(self.restored and self.restored.ok)
        )

    def to_json(self) -> JSONObject:
        return {
            "run": self.run.to_json(), "done": self.done, "failed": self.failed,
            "skipped": self.skipped, "drift": self.drift, "stopped": self.stopped,
            "restored": self.restored.to_json() if self.restored else None,
            "nothing_left": self.nothing_left, "guard": self.guard,
        }  # fmt: skip


def refuse_unmeasured(loaded: LoadedPlan) -> None:
    """What this step cannot measure yet, refused before anything runs (exit 2, file:line):
    request-only changes, and the bench and eval presets (only the canary measures)."""
    plan = loaded.plan
    for i, v in enumerate(plan.variants):
        if v.request is not None:
            raise loaded.error(("variants", i, "request"), f"variant {v.name!r}: per-request "
                               "changes are not measured by `experiment run` yet",
                               "drop the variant from this plan (--dry-run still estimates it)")  # fmt: skip
    if plan.bench != "none":
        raise loaded.error(("bench",), "bench presets are not run by `experiment run` yet: "
                           "the canary measures each variant", "remove `bench` or set it to none")  # fmt: skip
    if plan.eval is not None:
        raise loaded.error(("eval",), "eval presets are not run by `experiment run` yet: the "
                           "canary measures each variant", "remove `eval` from the plan")  # fmt: skip


class NightQueue:
    """One night of a plan (module docstring); `progress` hears one line per step."""

    def __init__(
        self,
        ports: NightPorts,
        files: NightFiles,
        run: RunRecord,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.ports, self.files, self.night = ports, files, run
        self.say = progress or (lambda line: None)

    def begin(self) -> None:
        """A fresh night: production verified running, then its run record written."""
        run = self.night
        ok, detail = self.ports.verify()
        if not ok:
            raise NotOnProduction(
                f"the cluster does not run the inventory's configuration {run.production_hash}: "
                f"{detail} (bring it up on the inventory first: tpwarden up -i INVENTORY)"
            )  # fmt: skip
        self.files.write_run(run)

    def bring_back(self) -> Restored | None:
        """A resumed night: production restored first when the cluster was left elsewhere."""
        on = self.ports.left_on()
        if on == self.night.production_hash:
            return None
        self.say(
            f"the cluster was left on {on or 'an unknown configuration'}: restoring production"
        )
        restored = self._restore(f"resume: left on {on or 'unknown'}", force=True)
        if not restored.ok:
            raise TpwardenError(f"production not restored: {restored.detail} (see `tpwarden "
                                "rollout history`; then --resume again)")  # fmt: skip
        return restored

    def restore(self, why: str) -> Restored:
        """Production restored, or verified in place when the store says the cluster is on it;
        `restore_begin` and `restore_end` in the events."""
        return self._restore(why, force=False)

    def run(self, variants: Sequence[QueuedVariant], costs: Costs) -> NightOutcome:
        """The night's variants, in queue order; `costs` as the dry run estimated them."""
        run = self.night
        out = NightOutcome(run)
        state = self.files.state([v.name for v in variants])
        self.files.event("run_begin", plan=run.plan, deadline=run.deadline,
                         resumed=bool(run.resumed), left=list(state.left))  # fmt: skip
        if self.files.result(PRODUCTION_START) is None and not self._opening(out):
            return self._end(out)
        left = [v for v in variants if v.name in state.left]
        for i, v in enumerate(left):
            why = self._no_time(left[i:], costs)
            if why:
                out.skipped[v.name] = why
                self.files.event("variant_skipped", variant=v.name, reason=why)
                self.say(f"{v.name}: skipped: {why}")
                continue
            self._variant(v, out)
        self._close(out)
        return self._end(out)

    # -- the steps ---------------------------------------------------------------------------
    def _opening(self, out: NightOutcome) -> bool:
        self.say("production: canary")
        started = self.ports.clock()
        m = self._canary(PRODUCTION_START)
        doc = {"canary": m.doc, "config_hash": out.run.production_hash, "started": started,
               "finished": self.ports.clock()}  # fmt: skip
        if not m.ok:
            out.stopped = f"production's opening canary was not taken: {m.reason}"
            self.files.write_failure(PRODUCTION_START, {**doc, "error": m.reason})
            self.files.event("production_start", ok=False, reason=m.reason)
            return False
        self.files.write_result(PRODUCTION_START, doc)
        self.files.event("production_start", ok=True, tok_s=_levels(m.doc))
        self.say(f"production: {_figures(m.doc)}")
        return True

    def _no_time(self, rest: Sequence[QueuedVariant], costs: Costs) -> str | None:
        """The policy's reason when the first of `rest` no longer fits, with the real time."""
        est = plan_queue([(v.name, True) for v in rest], costs, self.ports.clock(),
                         self.night.deadline, measured=True)  # fmt: skip
        step = next(s for s in est.steps if s.name == rest[0].name)
        return step.skipped

    def _variant(self, v: QueuedVariant, out: NightOutcome) -> None:
        started = self.ports.clock()
        self.files.event("variant_begin", variant=v.name, summary=list(v.summary))
        self.say(f"{v.name}: restart on {', '.join(v.summary) or v.name}")
        head: JSONObject = {"variant": v.name, "summary": list(v.summary), "started": started,
                            "changes": [{"key": c.key, "value": c.value} for c in v.changes]}  # fmt: skip
        try:
            r = self.ports.restart_on(v.name, v.changes)
        except TpwardenError as exc:
            r = VariantRestart(False, "error", None, "", str(exc))
        head.update(config_hash=r.config_hash, rollout_id=r.rollout_id, rollout_step=r.step)
        if not r.ok:
            return self._failed(v.name, out, head, "restart", r.error or r.step)
        m = self._canary(v.name)
        if not m.ok:
            return self._failed(v.name, out, {**head, "canary": m.doc}, "measure", m.reason or "")
        self.files.write_result(v.name, {**head, "canary": m.doc, "finished": self.ports.clock()})
        out.done.append(v.name)
        self.files.event("variant_end", variant=v.name, tok_s=_levels(m.doc))
        self.say(f"{v.name}: {_figures(m.doc)}")

    def _failed(self, name: str, out: NightOutcome, doc: JSONObject, stage: str, why: str) -> None:
        self.files.write_failure(name, {**doc, "stage": stage, "error": why,
                                        "finished": self.ports.clock()})  # fmt: skip
        out.failed[name] = why
        self.files.event("variant_failed", variant=name, stage=stage, error=why)
        self.say(f"{name}: failed ({stage}): {why}")

    def _close(self, out: NightOutcome) -> None:
        out.restored = restored = self._restore("the night's end", force=False)
        if not restored.ok:
            out.stopped = f"production not restored: {restored.detail}"
            return
        self.say("production: closing canary")
        started = self.ports.clock()
        m = self._canary(PRODUCTION_END)
        opening = self.files.result(PRODUCTION_START) or {}
        out.drift = drift(opening.get("canary"), m.doc) if m.ok else {}
        doc = {"canary": m.doc, "config_hash": out.run.production_hash, "started": started,
               "finished": self.ports.clock(), "restore": restored.to_json(),
               "production_start": opening.get("canary"), "drift": out.drift}  # fmt: skip
        if m.ok:
            self.files.write_result(PRODUCTION_END, doc)
            self.say(f"production: {_figures(m.doc)}; drift {_drift(out.drift)}")
        else:
            self.files.write_failure(PRODUCTION_END, {**doc, "error": m.reason})
            out.stopped = f"production's closing canary was not taken: {m.reason}"
        self.files.event("production_end", ok=m.ok, drift=out.drift, reason=m.reason)
        out.run.finished = self.ports.clock()
        self.files.write_run(out.run)

    def _restore(self, why: str, *, force: bool) -> Restored:
        self.files.event("restore_begin", why=why)
        on_production = not force and self.ports.left_on() == self.night.production_hash
        ok, detail = self.ports.verify() if on_production else (False, "")
        if ok:
            restored = Restored(True, False, f"already on production: {detail}")
        else:
            self.say("production: restoring (a restart on production's revision)")
            try:
                restored = self.ports.restore()
            except TpwardenError as exc:
                restored = Restored(False, True, str(exc))
        self.files.event("restore_end", **restored.to_json())
        self.say(f"production {'restored' if restored.ok else 'NOT restored'}: {restored.detail}")
        return restored

    def _canary(self, label: str) -> Measured:
        try:
            return self.ports.canary(label)
        except TpwardenError as exc:
            return Measured(False, {}, str(exc))

    def _end(self, out: NightOutcome) -> NightOutcome:
        self.files.event("run_end", ok=out.ok, done=out.done, failed=list(out.failed),
                         skipped=list(out.skipped), stopped=out.stopped)  # fmt: skip
        return out


def _levels(canary: JSONObject) -> dict[str, float]:
    return {str(k): round(v, 3) for k, v in tok_s(canary).items()}


def _figures(canary: JSONObject) -> str:
    got = tok_s(canary)
    return ", ".join(f"c{lv} {v:.1f} tok/s" for lv, v in sorted(got.items())) or "no figures"


def _drift(d: dict[str, float]) -> str:
    return ", ".join(f"c{lv} x{r:.3f}" for lv, r in d.items()) or "-"


def refused_resume(run: RunRecord | None, resume: bool, where: str) -> ConfigError | None:
    """A night started or resumed against its run record (exit 2), or None to go on."""
    if resume and run is None:
        return ConfigError(f"no night to resume in {where}",
                           hint="start it without --resume")  # fmt: skip
    if run is not None and run.aborted_at is not None:
        return ConfigError(f"this plan's night in {where} was aborted by {run.aborted_by}",
                           hint="read it with `tpwarden experiment show`; remove that directory "
                           "for a fresh night")  # fmt: skip
    if not resume and run is not None:
        state = "finished" if run.finished else "unfinished"
        return ConfigError(f"this plan's night in {where} is {state}",
                           hint="continue it with --resume, or remove that directory for a "
                           "fresh night (see `tpwarden experiment status`)")  # fmt: skip
    return None
