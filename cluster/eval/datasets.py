"""Datasets without Hub access on the cluster: fetch on a connected machine into a private
Hugging Face cache, pack it into one archive; the head's cache gets the archive's files and an
index of the tasks it holds; `eval run` refuses up front when a task is not in that index.

Archive (`tpwarden-eval-datasets/1`, a .tar.gz): `tpwarden-datasets.json` first (format,
lm-eval version, the tasks and the datasets each loads), then the cache under `hf/` as
`datasets` and `huggingface_hub` wrote it (`hub/`, `datasets/`, `modules/`; the hub's relative
snapshot symlinks kept). The head's cache (`tpwarden.eval.hf_cache`, mounted as HF_HOME) keeps
the same index file, merged over every load.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

from tpwarden.cluster.durable import JSONObject, JSONValue, atomic_write_bytes
from tpwarden.cluster.eval.catalog import PRESETS
from tpwarden.cluster.eval.presets import LM_EVAL_VERSION, EvalError, EvalInputError
from tpwarden.cluster.eval.taskdefs import dataset_refs, index_tasks, resolve, tasks_dir

FORMAT = "tpwarden-eval-datasets/1"
INDEX_NAME = "tpwarden-datasets.json"
CACHE_PREFIX = "hf"
CODE_EVAL = "code_eval"  # HumanEval's metric script, loaded by `evaluate` from the cache

# Runs inside the lm-eval venv (its `datasets` and `evaluate`), HF_HOME set to a private cache.
FETCH_SCRIPT = """\
import json, sys
import datasets, evaluate
plan = json.load(open(sys.argv[1]))
for ref in plan["datasets"]:
    print("fetch", ref["path"], ref["name"] or "", flush=True)
    datasets.load_dataset(ref["path"], ref["name"], **ref["kwargs"])
for name in plan["metrics"]:
    print("fetch metric", name, flush=True)
    evaluate.load(name)
"""


class Run(Protocol):
    """How the fetch runs: `subprocess.run` (tests inject a fake)."""

    def __call__(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        capture_output: bool,
        text: Literal[True],
        timeout: float,
    ) -> subprocess.CompletedProcess[str]: ...


def fetch_plan(tasks: Sequence[str], root: Path) -> JSONObject:
    """Per task, the datasets its leaf tasks load (from lm-eval's own YAMLs under `root`)."""
    index = index_tasks(root)
    per_task: JSONObject = {}
    for task in tasks:
        leaves = resolve(index, task)
        per_task[task] = {
            "datasets": dataset_refs(leaves),
            "metrics": [CODE_EVAL] if any(c.get("unsafe_code") for c in leaves) else [],
        }
    every = dataset_refs(
        [{"dataset_path": r["path"], "dataset_name": r["name"], "dataset_kwargs": r["kwargs"]}
         for t in per_task.values() for r in t["datasets"]]
    )  # fmt: skip
    metrics = sorted({m for t in per_task.values() for m in t["metrics"]})
    return {"tasks": per_task, "datasets": every, "metrics": metrics}


def manifest(plan: Mapping[str, JSONValue], created_at: str) -> JSONObject:
    return {
        "format": FORMAT,
        "lm_eval_version": LM_EVAL_VERSION,
        "created_at": created_at,
        "tasks": dict(plan["tasks"]),
    }


def fetch(
    tasks: Sequence[str], venv: Path, out: Path, created_at: str, run: Run = subprocess.run
) -> JSONObject:
    """Download every dataset (and metric) the tasks need with the venv's own `datasets`, into
    a fresh cache, and pack it into `out`. Needs Hub access; `run` is injectable for tests."""
    root = tasks_dir(venv)
    if root is None:
        raise EvalInputError(f"{venv}: no lm_eval package (run tools/lm_eval/install.sh)")
    plan = fetch_plan(tasks, root)
    with tempfile.TemporaryDirectory(prefix="tpwarden-datasets-") as tmp:
        work = Path(tmp)
        (work / "plan.json").write_text(json.dumps(plan))
        (work / "fetch.py").write_text(FETCH_SCRIPT)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
        env["HF_HOME"] = str(work / "hf")
        r = run(
            [str(venv / "bin" / "python"), str(work / "fetch.py"), str(work / "plan.json")],
            env=env, capture_output=True, text=True, timeout=6 * 3600,
        )  # fmt: skip
        if r.returncode != 0:
            raise EvalError(f"fetching datasets failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
        doc = manifest(plan, created_at)
        pack(work / "hf", doc, out)
    return doc


def pack(cache: Path, doc: Mapping[str, JSONValue], out: Path) -> None:
    """The archive: the manifest first, then the cache under `hf/` (lock files left out).
    Written to a temp name beside `out` and renamed (a cache can be gigabytes: not in memory)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with tarfile.open(tmp, mode="w:gz") as tar:
        data = json.dumps(doc, indent=2, ensure_ascii=False).encode()
        info = tarfile.TarInfo(INDEX_NAME)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
        for path in sorted(cache.rglob("*")):
            if path.name.endswith(".lock") or (path.is_dir() and not path.is_symlink()):
                continue
            arcname = f"{CACHE_PREFIX}/{path.relative_to(cache).as_posix()}"
            tar.add(path, arcname=arcname, recursive=False)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)


def read_archive(archive: Path) -> JSONObject:
    """The archive's manifest, after checking every member: regular files and directories
    under `hf/`, and symlinks that stay inside it (what the hub's snapshots use)."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = tar.getmembers()
            if not members or members[0].name != INDEX_NAME:
                raise EvalInputError(f"{archive}: not a {FORMAT} archive ({INDEX_NAME} first)")
            for m in members[1:]:
                _check_member(archive, m)
            f = tar.extractfile(members[0])
            doc = json.loads(f.read() if f else b"{}")
    except (tarfile.TarError, OSError, json.JSONDecodeError) as e:
        raise EvalInputError(f"{archive}: not a readable datasets archive ({e})") from None
    if doc.get("format") != FORMAT or not isinstance(doc.get("tasks"), dict):
        raise EvalInputError(f"{archive}: format {doc.get('format')!r}, expected {FORMAT}")
    return dict(doc)


def _check_member(archive: Path, m: tarfile.TarInfo) -> None:
    name = posixpath.normpath(m.name)
    inside = name.startswith(f"{CACHE_PREFIX}/") and ".." not in name.split("/")
    if m.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), m.linkname))
        inside = inside and not m.linkname.startswith("/") and target.startswith(f"{CACHE_PREFIX}/")
    elif not (m.isfile() or m.isdir()):
        inside = False
    if not inside:
        raise EvalInputError(f"{archive}: member {m.name!r} is not a cache file under hf/")


def unpack(archive: Path, cache: Path, loaded_at: str) -> JSONObject:
    """Put the archive's cache files into a local cache dir and merge its index (the head
    does the same with `tar` over SSH: cluster/eval/cache.py)."""
    doc = read_archive(archive)
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        for m in tar.getmembers()[1:]:
            m.name = m.name[len(CACHE_PREFIX) + 1 :]
            if m.name:
                tar.extract(m, cache, filter="data")
    index_path = cache / INDEX_NAME
    old = json.loads(index_path.read_text()) if index_path.is_file() else None
    merged = merge_index(old, doc, archive.name, loaded_at)
    atomic_write_bytes(index_path, json.dumps(merged, indent=2).encode(), mode=0o644)
    return merged


def merge_index(
    old: Mapping[str, JSONValue] | None, doc: Mapping[str, JSONValue], archive: str, loaded_at: str
) -> JSONObject:
    """The cache's index after loading `doc`'s tasks (earlier loads kept)."""
    tasks = dict((old or {}).get("tasks") or {})
    for task, entry in doc["tasks"].items():
        tasks[task] = {**entry, "archive": archive, "loaded_at": loaded_at}
    return {"format": FORMAT, "lm_eval_version": doc.get("lm_eval_version"), "tasks": tasks}


def hub_tasks(tasks: Sequence[str], local: Mapping[str, JSONValue]) -> list[str]:
    """Tasks whose data comes from the Hub (a task under --include-path brings its own)."""
    return [t for t in tasks if t not in local and t in PRESETS]


def missing_tasks(tasks: Sequence[str], index: Mapping[str, JSONValue] | None) -> list[str]:
    held = set(((index or {}).get("tasks") or {}).keys())
    return [t for t in tasks if t not in held]


def refusal(missing: Sequence[str], suite: str | None, inventory: str, hf_cache: str | None) -> str:
    """What `eval run` says when data is missing: which tasks, and the two commands."""
    what = f"--suite {suite}" if suite else f"--tasks {','.join(missing)}"
    where = (
        f"the head's cache {hf_cache} does not hold"
        if hf_cache
        else "the inventory names no tpwarden.eval.hf_cache for"
    )
    steps = (
        f"on a machine with Hub access: tpwarden eval datasets fetch {what} --out FILE; then "
        f"tpwarden eval datasets load FILE -i {inventory}"
    )
    if not hf_cache:
        steps = f"set tpwarden.eval.hf_cache (a folder on the head) in the inventory; {steps}"
    return f"{where} the data of {', '.join(missing)} (the client is offline): {steps}"


def data_refusal(
    tasks: Sequence[str],
    suite: str | None,
    inventory: str,
    hf_cache: str | None,
    read_index: Callable[[], Mapping[str, JSONValue] | None],
) -> str | None:
    """None when every Hub task's data is in the cache the client will mount, else why not.
    `tasks` are the Hub tasks (`hub_tasks`); `read_index` is called only when there is a
    cache to read (no inventory cache: refused without contacting anything)."""
    if not tasks:
        return None
    if not hf_cache:
        return refusal(tasks, suite, inventory, None)
    missing = missing_tasks(tasks, read_index())
    return refusal(missing, suite, inventory, hf_cache) if missing else None
