"""Benchmarks from a CPU-only client container: sweeps, prefill, run directories.

Plan, then apply: the plans are pure (`tpwarden.cluster.bench.plan`: a `ContainerPlan` per
level with the `vllm bench serve` argv); `BenchRunner` applies them
through the head's Docker gateway: create the container (host network, no GPU request, the
model directory read-only for `--tokenizer`), copy the prompt file in, start it, wait, copy
the saved result out, remove it (also on failure). Spec-decode counters are read from the
server's /metrics before and after each level. Every run writes `runs/<UTC stamp>-<kind>/`:
`manifest.json`, `table.json`, `results/<level>.json` (the raw saved JSON), `client/` (logs
and the client container's inspect facts).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tpwarden.cluster.bench import manifest as bm
from tpwarden.cluster.bench.dataset import sharegpt_json
from tpwarden.cluster.bench.parse import (
    LevelResult,
    ResultFormatError,
    load_result_text,
    parse_result,
    spec_counters,
    spec_delta,
)
from tpwarden.cluster.bench.plan import (
    CONTAINER_DIR,
    BenchError,
    BenchOptions,
    client_image,
    client_node,
    client_plan,
    level_name,
    run_id_for,
)
from tpwarden.cluster.containers.gateway import DockerGateway
from tpwarden.cluster.containers.job import folder_job
from tpwarden.cluster.control.controller import Controller
from tpwarden.cluster.control.preflight import client_image_problem
from tpwarden.cluster.durable import atomic_write_text
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.launch import ContainerPlan

log = logging.getLogger(__name__)


# --- run directory ---------------------------------------------------------------------------


def write_json(path: Path, doc: Any) -> None:
    """A run artifact, atomically: keys in the order written (a manifest reads top-down),
    non-ASCII kept readable (Korean prompts and task names), anything else as `str`."""
    text = json.dumps(doc, indent=1, sort_keys=False, default=str, ensure_ascii=False) + "\n"
    atomic_write_text(path, text, mode=0o644)


def default_runs_dir() -> Path:
    return Path(os.environ.get("TPWARDEN_RUNS_DIR", "runs"))


@dataclass(frozen=True)
class LevelOutcome:
    level: int
    result: LevelResult
    raw: Mapping[str, Any]
    spec_delta: Mapping[str, Any] | None
    client: Mapping[str, Any]

    def row(self, kind: str) -> dict[str, Any]:
        row = {"level": self.level, **self.result.to_json()}
        if kind == "prefill":
            ttft = self.result.ttft_p50_ms
            per_req_in = (self.result.total_input_tokens or 0) / max(1, self.result.completed)
            row["input_tokens_per_request"] = per_req_in
            row["prefill_tok_s"] = per_req_in / (ttft / 1000.0) if ttft else None
        return row


@dataclass
class BenchRun:
    run_id: str
    dir: Path
    kind: str
    manifest: dict[str, Any]
    outcomes: list[LevelOutcome] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        return [o.row(self.kind) for o in self.outcomes]


# --- apply -------------------------------------------------------------------------------------

Progress = Callable[[str], None]


class BenchRunner:
    """Runs one benchmark against the cluster a Controller drives. Starts nothing on init."""

    def __init__(
        self,
        ctl: Controller,
        runs_dir: Path | None = None,
        http: httpx.Client | None = None,
        on_progress: Progress | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.ctl = ctl
        self.spec = ctl.spec
        self.runs_dir = runs_dir or default_runs_dir()
        self.http = http or httpx.Client(timeout=10.0)
        self.progress = on_progress or (lambda msg: None)
        self.clock = clock

    # preflight: defaults first, then refuse if unhealthy
    def preflight(self) -> dict[str, Any]:
        server = bm.collect_server(self.http, self.spec.api_base)
        defaults = bm.defaults_from_plan(self.spec)
        status = self.ctl.status(with_gpus=False)
        facts = {
            "server": server,
            "server_defaults": defaults,
            "verdict": status.verdict.value,
            "notes": list(status.notes),
            "probe_ok": status.server.probe_ok,
            "ok": status.ok and server.get("health_status") == 200,
            # the network NCCL chose per rank (cluster.control.transport), kept with the run
            "transport": status.transport,
        }
        return facts

    def run(self, opts: BenchOptions, preflight: Mapping[str, Any] | None = None) -> BenchRun:
        pre = dict(preflight or self.preflight())
        if not pre["ok"]:
            raise BenchError(
                f"server not healthy ({pre['verdict']}: {'; '.join(pre['notes']) or '-'}); "
                "refusing to benchmark"
            )
        opts = replace(opts, client_image=client_image(self.spec, opts.client_image))
        at = client_node(self.spec, opts)
        wrong = client_image_problem(self.ctl.docker(at), at.name, str(opts.client_image))
        if wrong:
            raise BenchError(wrong)
        run_id = run_id_for(opts.kind, self.clock())
        run_dir = self.runs_dir / run_id
        run_dir.mkdir(parents=True, exist_ok=False)
        manifest = self._manifest_start(run_id, opts, pre)
        write_json(run_dir / "manifest.json", manifest)
        run = BenchRun(run_id, run_dir, opts.kind, manifest)
        try:
            for i, level in enumerate(opts.levels):
                self.progress(f"{level_name(opts, level)}: running vllm bench serve")
                out = self._level(opts, level, i, run_id, run_dir)
                run.outcomes.append(out)
                write_json(run_dir / "table.json", {"kind": opts.kind, "rows": run.rows()})
        finally:
            manifest["finished_at"] = self.clock().isoformat()
            manifest["completed_levels"] = [o.level for o in run.outcomes]
            with contextlib.suppress(TpwardenError):
                temps = bm.collect_temps(self.ctl)
                for node, gpus in temps.items():
                    manifest["nodes"].setdefault(node, {})["gpus_end"] = gpus
            write_json(run_dir / "manifest.json", manifest)
        return run

    def _manifest_start(
        self, run_id: str, opts: BenchOptions, pre: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.progress("manifest: clocks, temperatures, processes, KV cache")
        nodes = self.ctl.fan_out(
            list(self.spec.nodes), lambda n: bm.collect_node(self.ctl, n), timeout=120
        )
        own = ["vllm serve", "vllm bench", "vllm_sim", "tpwarden"]
        node_docs = {}
        for name, doc in nodes.items():
            if isinstance(doc, TpwardenError):
                node_docs[name] = {"error": str(doc)}
            else:
                doc["gpus_start"] = doc.get("gpus", [])
                node_docs[name] = bm.mark_own(doc, own)
        start = bm.run_manifest(run_id, opts.kind, self.clock(), self.spec, opts.to_json(), pre)
        return {
            **start,
            "kv_cache": bm.collect_kv_cache(self.ctl),
            "client": {"image": opts.client_image, "node": client_node(self.spec, opts).name},
            "nodes": node_docs,
        }

    def _metrics(self) -> str | None:
        try:
            return self.http.get(f"{self.spec.api_base}/metrics", timeout=10).text
        except httpx.HTTPError:
            return None

    def _level(
        self, opts: BenchOptions, level: int, index: int, run_id: str, run_dir: Path
    ) -> LevelOutcome:
        name = level_name(opts, level)
        plan = client_plan(self.spec, opts, level, index, run_id)
        files = (
            {
                "prompts.json": sharegpt_json(
                    opts.prompts.read_text(encoding="utf-8"), str(opts.prompts)
                )
            }
            if opts.kind == "sweep" and opts.dataset == "prompts"
            else {}
        )
        secrets = {}
        key = self.ctl.api_key()  # the same key resolution as the probe
        if key:
            secrets["OPENAI_API_KEY"] = key
        before = self._metrics()
        gw = self.ctl.docker(client_node(self.spec, opts))
        rc, logs, results, facts = run_client(gw, plan, files, secrets, opts.level_timeout_s)
        after = self._metrics()
        (run_dir / "client").mkdir(exist_ok=True)
        (run_dir / "client" / f"{name}.log").write_text(logs)
        write_json(run_dir / "client" / f"{name}.container.json", facts)
        raw_text = results.get(f"{name}.json")
        if rc != 0 or raw_text is None:
            tail = "\n".join(logs.splitlines()[-15:])
            raise BenchError(f"{name}: vllm bench serve exited {rc}, no result\n{tail}")
        (run_dir / "results").mkdir(exist_ok=True)
        (run_dir / "results" / f"{name}.json").write_bytes(raw_text)
        delta = spec_delta(
            spec_counters(before) if before else None, spec_counters(after) if after else None
        )
        try:
            raw = load_result_text(raw_text.decode())
            result = parse_result(raw, delta)
        except ResultFormatError as e:  # e.g. every request failed: an error, not 0 tok/s
            raise BenchError(f"{name}: {e} (results/{name}.json kept)") from None
        return LevelOutcome(level, result, raw, delta.to_json() if delta else None, facts)


def run_client(
    gw: DockerGateway,
    plan: ContainerPlan,
    files: Mapping[str, bytes],
    secret_env: Mapping[str, str],
    timeout_s: float,
) -> tuple[int, str, dict[str, bytes], dict[str, Any]]:
    """Create, fill, start, wait, collect, remove (`DockerGateway.run_to_completion`):
    (exit code, logs, result files, facts). The container is removed whatever happens."""
    job = folder_job(plan, secret_env, "bench client", CONTAINER_DIR, files, timeout_s)
    done = gw.run_to_completion(job)
    return done.exit_code, done.logs, done.results, done.facts


def load_run(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, table) of a run directory."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
        table = json.loads((path / "table.json").read_text())
    except FileNotFoundError as e:
        raise BenchError(f"{path}: not a run directory ({e.filename} missing)") from None
    return manifest, table


def compare_rows(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], keys: Sequence[str]
) -> list[dict[str, Any]]:
    """Join rows by level; per key: a, b and % change (b vs a)."""
    by_a = {r["level"]: r for r in a}
    by_b = {r["level"]: r for r in b}
    out = []
    for level in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(level, {}), by_b.get(level, {})
        row: dict[str, Any] = {"level": level}
        for k in keys:
            va, vb = ra.get(k), rb.get(k)
            pct = (
                100.0 * (vb - va) / va
                if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va
                else None
            )
            row[k] = {"a": va, "b": vb, "pct": pct}
        out.append(row)
    return out
