"""Apply an eval plan: one client container per task on the head, a run directory that
survives a server restart.

Run directory `runs/<UTC stamp>-eval/`: `manifest.json` (server defaults, versions, config
hash, the per-task plans, attempts and restarts), `table.json` (rows), `results/<task>.json`
(lm-eval's own results file), `samples/`, `cache/<task>_rank0.db` (lm-eval's request cache,
copied out after every attempt), `client/<task>.<attempt>.log`. A task with a results file is
done; `tpwarden eval run --resume DIR` reruns only the others, each from its cache.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tpwarden.cluster.bench import manifest as bm
from tpwarden.cluster.bench.plan import client_base_url
from tpwarden.cluster.bench.plan import client_image as bench_image
from tpwarden.cluster.bench.runner import BenchRunner, write_json
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.preflight import client_image_problem
from tpwarden.cluster.durable import atomic_write_bytes
from tpwarden.cluster.eval.catalog import preset_for
from tpwarden.cluster.eval.client import Watch, run_container
from tpwarden.cluster.eval.plan import EvalOptions, ServerFacts, TaskPlan, task_plan
from tpwarden.cluster.eval.presets import (
    CONTAINER_DIR,
    LM_EVAL_VERSION,
    EvalError,
    TaskPreset,
    scan_task_yaml,
)
from tpwarden.cluster.eval.progress import TaskProgress, TaskWatch, suite_summary
from tpwarden.cluster.eval.results import failed_row, score_row
from tpwarden.cluster.labels import LABEL_CLUSTER, LABEL_COMPONENT, LABEL_EVAL_RUN, LABEL_NODE
from tpwarden.cluster.launch import CPU_ONLY_ENV, ContainerPlan, Mount
from tpwarden.cluster.spec import ClusterSpec

log = logging.getLogger(__name__)
# A file, not an inline `sh -c` string: no quoting of JSON argv through a shell (the field
# report lost an hour to a heredoc in an ssh one-liner). Local task YAMLs name their data
# files relative to their folder, so lm-eval runs there.
RUN_SH = b'#!/bin/sh\nmkdir -p /bench/tasks /bench/results/cache\ncd /bench/tasks\nexec "$@"\n'
# what lm-eval's aiohttp client logs when the server goes away (a "503" alone could be a number)
_TRANSIENT = (
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ClientOSError",
    "Connection refused",
    "Connection reset",
    "RetryError",
    "503 Service Unavailable",
)


def local_tasks(include: Path | None) -> dict[str, dict[str, Any]]:
    """Task name -> scanned facts for every YAML in the include folder."""
    out: dict[str, dict[str, Any]] = {}
    for f in sorted(include.rglob("*.y*ml")) if include else []:
        facts = scan_task_yaml(f.read_text(encoding="utf-8"))
        if facts["task"]:
            out[facts["task"]] = facts
    return out


def presets(opts: EvalOptions, include: Path | None) -> list[TaskPreset]:
    local = local_tasks(include)
    return [preset_for(t, local.get(t), chat=t in opts.chat_tasks) for t in opts.tasks]


def server_facts(spec: ClusterSpec, server: Mapping[str, Any]) -> ServerFacts:
    m = spec.serving.model
    return ServerFacts(
        base_url=client_base_url(spec),
        model=m.served_name,
        tokenizer=m.tokenizer or m.path,
        max_model_len=server.get("max_model_len"),
        version=server.get("version"),
        env=dict(spec.serving.env),
    )


def container_plan(spec: ClusterSpec, tp: TaskPlan, image: str, run_id: str) -> ContainerPlan:
    """CPU-only, host network, model dir read-only (the tokenizer), offline."""
    s = spec.serving
    tok = s.model.tokenizer or s.model.path
    mounts = [Mount(s.model.path, s.model.path, True)]
    if tok != s.model.path:
        mounts.append(Mount(tok, tok, True))
    hf_cache = spec.eval.hf_cache
    env = {**tp.env, **CPU_ONLY_ENV}
    if hf_cache:  # pre-fetched datasets and metrics (docs/eval.md); datasets needs it writable
        mounts.append(Mount(hf_cache, "/hf-cache", False))
        env["HF_HOME"] = "/hf-cache"
    else:
        env["HF_HOME"] = "/tmp/hf"
    return ContainerPlan(
        node=spec.head.name,
        role="eval",
        rank=-1,
        name=f"{spec.name}-eval-{run_id}-{tp.task}"[:120].replace("_", "-"),
        image=image,
        command=tp.argv,
        entrypoint=("sh", f"{CONTAINER_DIR}/run.sh"),
        env=env,
        secret_env={},
        mounts=tuple(mounts),
        network_mode="host",
        ipc_mode="private",
        shm_size="1g",
        gpus=None,  # CPU only: never a device request
        restart_policy="no",
        labels={
            LABEL_CLUSTER: spec.name,
            LABEL_COMPONENT: "eval",
            LABEL_NODE: spec.head.name,
            LABEL_EVAL_RUN: run_id,
        },
    )


def client_image(spec: ClusterSpec, override: str | None) -> str:
    return override or spec.eval.client_image or bench_image(spec)


Progress = Callable[[str], None]


class EvalRunner:
    """Runs lm-eval tasks against the cluster a Controller drives. Starts nothing on init."""

    def __init__(
        self,
        ctl: Controller,
        runs_dir: Path,
        http: httpx.Client | None = None,
        on_progress: Progress | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        restart_wait_s: float = 900.0,
        poll_s: float = 5.0,
        on_task_progress: Callable[[TaskProgress], None] | None = None,
    ) -> None:
        self.ctl, self.spec, self.runs_dir = ctl, ctl.spec, runs_dir
        self.http = http or httpx.Client(timeout=10.0)
        self.progress = on_progress or (lambda msg: None)
        # None: the client is waited on without watching its log (as before issue 34)
        self.on_task_progress = on_task_progress
        self.clock = clock
        self.restart_wait_s, self.poll_s = restart_wait_s, poll_s

    def preflight(self) -> dict[str, Any]:
        """The same facts `bench` records (one implementation: BenchRunner.preflight)."""
        return BenchRunner(self.ctl, self.runs_dir, http=self.http).preflight()

    def plan(self, opts: EvalOptions, pre: Mapping[str, Any]) -> list[TaskPlan]:
        include = Path(opts.include_path) if opts.include_path else None
        srv = server_facts(self.spec, pre["server"])
        return [task_plan(p.name, p, srv, opts) for p in presets(opts, include)]

    def run(
        self, opts: EvalOptions, pre: Mapping[str, Any], resume: Path | None = None
    ) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
        if not pre["ok"]:
            raise EvalError(f"server not healthy ({pre['verdict']}); refusing to evaluate")
        opts = replace(opts, client_image=client_image(self.spec, opts.client_image))
        head = self.spec.head
        wrong = client_image_problem(self.ctl.docker(head), head.name, str(opts.client_image))
        if wrong:
            raise EvalError(wrong)
        plans = self.plan(opts, pre)
        if resume is not None:
            run_dir = resume
            manifest = bm_load(run_dir)
            manifest.setdefault("resumed_at", []).append(self.clock().isoformat())
        else:
            run_id = f"{self.clock().strftime('%Y%m%dT%H%M%SZ')}-eval"
            run_dir = self.runs_dir / run_id
            run_dir.mkdir(parents=True, exist_ok=False)
            manifest = self._manifest(run_id, opts, pre, plans)
        write_json(run_dir / "manifest.json", manifest)
        rows: list[dict[str, Any]] = []
        try:
            for position, tp in enumerate(plans, 1):
                rows.append(self._task_or_failure(tp, opts, run_dir, manifest, position, plans))
                write_json(run_dir / "table.json", {"kind": "eval", "rows": rows})
            manifest["summary"] = suite_summary(manifest, rows)
        finally:
            manifest["finished_at"] = self.clock().isoformat()
            write_json(run_dir / "manifest.json", manifest)
        return run_dir, manifest, rows

    def _task_or_failure(
        self, tp: TaskPlan, opts: EvalOptions, run_dir: Path, manifest: dict[str, Any],
        position: int, plans: list[TaskPlan],
    ) -> dict[str, Any]:  # fmt: skip
        """With `keep_going` (a suite: one task's failure must not cost the night's others),
        a task lm-eval failed on becomes a row without a score and the run goes on."""
        try:
            return self._task(tp, opts, run_dir, manifest, (position, len(plans)))
        except EvalError as e:
            if not opts.keep_going:
                raise
            self.progress(f"{tp.task}: failed, going on with the next task")
            manifest.setdefault("failed", []).append({"task": tp.task, "error": str(e)[-2000:]})
            return failed_row(tp.task, tp.preset.path.value, tp.stops.describe(), str(e))

    def _manifest(
        self, run_id: str, opts: EvalOptions, pre: Mapping[str, Any], plans: list[TaskPlan]
    ) -> dict[str, Any]:
        versions = {"lm_eval_version": LM_EVAL_VERSION}
        start = bm.run_manifest(
            run_id, "eval", self.clock(), self.spec, opts.to_json(), pre, versions
        )
        return {
            **start,
            "client": {"image": opts.client_image, "node": self.spec.head.name},
            "plans": [p.to_json() for p in plans],
            "attempts": [],
            "restarts": [],
        }

    def _task(
        self, tp: TaskPlan, opts: EvalOptions, run_dir: Path, manifest: dict[str, Any],
        place: tuple[int, int],
    ) -> dict[str, Any]:  # fmt: skip
        done = run_dir / "results" / f"{tp.task}.json"
        path = tp.preset.path.value
        if done.is_file():
            self.progress(f"{tp.task}: done earlier, kept")
            manifest.setdefault("kept", []).append(tp.task)
            return _row(tp, _load(done))
        run_id = manifest["run_id"]
        plan = container_plan(self.spec, tp, opts.client_image or "", run_id)
        for attempt in range(1, opts.max_resumes + 2):
            self.progress(f"{tp.task}: lm-eval via {path} (attempt {attempt})")
            rc, logs, out, facts = run_container(
                self.ctl.docker(self.spec.head),
                plan,
                self._files(tp, opts, run_dir),
                self._secrets(),
                opts.task_timeout_s,
                self._watch(tp, place, attempt, run_dir),
            )
            self._keep(tp, run_dir, attempt, logs, out, facts)
            manifest["attempts"].append(
                {"task": tp.task, "attempt": attempt, "rc": rc, "at": self.clock().isoformat()}
            )
            if rc == 0 and done.is_file():
                return _row(tp, _load(done))
            restart = self._after_failure(tp.task, attempt, rc, logs)
            manifest["restarts"].append(restart)
            write_json(run_dir / "manifest.json", manifest)
            if not restart["resume"]:
                tail = "\n".join(logs.splitlines()[-15:])
                raise EvalError(f"{tp.task}: lm-eval exited {rc}\n{tail}")
        raise EvalError(f"{tp.task}: gave up after {opts.max_resumes} resumes")

    def _files(self, tp: TaskPlan, opts: EvalOptions, run_dir: Path) -> dict[str, bytes]:
        files = {"run.sh": RUN_SH}
        if opts.include_path:
            root = Path(opts.include_path)
            for f in sorted(root.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    files[f"tasks/{f.relative_to(root).as_posix()}"] = f.read_bytes()
        cache = run_dir / "cache" / f"{tp.task}_rank0.db"
        if cache.is_file():  # resume: the answers already received are not asked again
            files[f"results/cache/{cache.name}"] = cache.read_bytes()
        return files

    def _watch(
        self, tp: TaskPlan, place: tuple[int, int], attempt: int, run_dir: Path
    ) -> Watch | None:
        """Progress from the client's log: to the callback and to `progress.json`."""
        report = self.on_task_progress
        if report is None:
            return None
        watch = TaskWatch(tp.task, place[0], place[1], attempt, time.monotonic())

        def on_log(text: str) -> None:
            p = watch.observe(text, time.monotonic())
            write_json(run_dir / "progress.json", p.to_json())
            report(p)

        return on_log

    def _secrets(self) -> dict[str, str]:
        key = self.ctl.api_key()  # the same key resolution as the probe
        return {"OPENAI_API_KEY": key} if key else {}

    def _keep(
        self, tp: TaskPlan, run_dir: Path, attempt: int, logs: str, out: Mapping[str, bytes],
        facts: Mapping[str, Any],
    ) -> None:  # fmt: skip
        client = run_dir / "client"
        client.mkdir(parents=True, exist_ok=True)
        (client / f"{tp.task}.{attempt}.log").write_text(logs)
        write_json(client / f"{tp.task}.{attempt}.container.json", dict(facts))
        for name, data in out.items():
            if name.endswith("_rank0.db"):
                atomic_write_bytes(run_dir / "cache" / name, data, mode=0o644)
            elif name.startswith("samples_") and name.endswith(".jsonl"):
                atomic_write_bytes(run_dir / "samples" / name, data, mode=0o644)
            elif name.startswith("results_") and name.endswith(".json"):
                atomic_write_bytes(run_dir / "results" / f"{tp.task}.json", data, mode=0o644)

    def _after_failure(self, task: str, attempt: int, rc: int, logs: str) -> dict[str, Any]:
        """Was the server away (a watchdog restart)? Wait for it and say whether to resume."""
        down_seen = not self._healthy()
        deadline = time.monotonic() + self.restart_wait_s
        while not self._healthy() and time.monotonic() < deadline:
            time.sleep(self.poll_s)
        transient = any(t in logs for t in _TRANSIENT)
        server = bm.collect_server(self.http, self.spec.api_base)
        return {
            "task": task,
            "attempt": attempt,
            "rc": rc,
            "at": self.clock().isoformat(),
            "server_down_seen": down_seen,
            "transient_errors_in_log": transient,
            "server_after": {k: server.get(k) for k in ("health_status", "version")},
            "resume": (down_seen or transient) and server.get("health_status") == 200,
        }

    def _healthy(self) -> bool:
        try:
            return self.http.get(f"{self.spec.api_base}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


def _row(tp: TaskPlan, results: Mapping[str, Any]) -> dict[str, Any]:
    row = score_row(tp.task, tp.preset.path.value, tp.stops.describe(), results, tp.preset.metric)
    return row.to_json()


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def bm_load(run_dir: Path) -> dict[str, Any]:
    try:
        return _load(run_dir / "manifest.json")
    except FileNotFoundError:
        raise EvalError(f"{run_dir}: not an eval run directory (manifest.json missing)") from None
