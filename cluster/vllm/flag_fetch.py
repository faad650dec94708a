"""Read the `vllm serve` flag table from the serving image itself, on the head, and cache it.

`tpwarden flags fetch` and `provision` (after its run) call `fetch_table`:

1. ask the head's docker engine for the image's ID (it must be there: provisioning loads it);
2. a table cached for that ID is reused (the reference is pointed at it), unless `refresh`;
3. otherwise cluster/vllm/dump_serve_flags.py (self-contained, shipped in the package) is copied into
   a throwaway container of the image and run with the image's own ``python3 ... --from-image``:
   no network, the serving GPUs and env, removed afterwards. Its stdout is the table; it is
   checked and cached by image ID (tpwarden.cluster.flag_tables).

`fetch_job` (what would run) is pure; the docker engine is the one seam (`ImageEngine`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tpwarden.cluster import flag_tables
from tpwarden.cluster.containers.job import OneShot, OneShotResult
from tpwarden.cluster.errors import TpwardenError
from tpwarden.cluster.labels import LABEL_CLUSTER, LABEL_COMPONENT, LABEL_NODE
from tpwarden.cluster.spec import ClusterSpec

DUMP_SCRIPT = Path(__file__).with_name("dump_serve_flags.py")
SCRIPT_IN_CONTAINER = "/tpwarden-dump-serve-flags.py"
LABELS = {LABEL_COMPONENT: "flag-table"}
TIMEOUT_S = 600.0  # importing vLLM on a busy node can take minutes


class FlagFetchFailed(TpwardenError):
    """The image's own parser could not be read (image missing, python3 or vLLM broken)."""


class ImageEngine(Protocol):
    """What fetching needs of the head's docker engine (`DockerGateway` is the real one)."""

    def image_id(self, image: str) -> str | None: ...

    def run_once(self, job: OneShot) -> OneShotResult: ...


@dataclass(frozen=True)
class FetchResult:
    image: str
    image_id: str
    vllm_version: str  # as the image reports it
    options: int
    path: Path
    reused: bool  # the cache already had this image ID: nothing ran
    mismatch: str | None  # the inventory's vllm_version contradicts the image (None: fits)

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "image_id": self.image_id,
            "vllm_version": self.vllm_version,
            "options": self.options,
            "path": str(self.path),
            "reused": self.reused,
            "mismatch": self.mismatch,
        }


def fetch_job(spec: ClusterSpec, script: bytes) -> OneShot:
    """The throwaway container that prints the image's flag table."""
    s = spec.serving
    return OneShot(
        image=s.image,
        argv=("python3", SCRIPT_IN_CONTAINER, "--from-image"),
        files={SCRIPT_IN_CONTAINER: script},
        env={k: str(v) for k, v in s.env.items()},
        labels={**LABELS, LABEL_NODE: spec.head.name, LABEL_CLUSTER: spec.name},
        gpus=s.gpus == "all",
        timeout_s=TIMEOUT_S,
    )


def fetch_table(
    spec: ClusterSpec, engine: ImageEngine, *, refresh: bool = False, cache: Path | None = None
) -> FetchResult:
    """Fetch (or reuse) the flag table of the inventory's image on the head; cache it."""
    image, head = spec.serving.image, spec.head.name
    image_id = engine.image_id(image)
    if image_id is None:
        raise FlagFetchFailed(
            f"{head}: image {image} is not there: provisioning loads it "
            "(tpwarden provision --tags image), then fetch the flag table"
        )
    table = None if refresh else flag_tables.cached_by_id(image_id, cache)
    if table is not None:
        flag_tables.point_ref(image, image_id, cache)
        path, reused = flag_tables.table_path(image_id, cache), True
    else:
        doc = _run_dump(spec, engine)
        path, reused = flag_tables.store(image, image_id, doc, cache), False
        table = flag_tables.table_from_doc(doc, f"image {image_id}")
    return FetchResult(
        image=image,
        image_id=image_id,
        vllm_version=table.version,
        options=len({id(o) for o in table.options.values()}),
        path=path,
        reused=reused,
        mismatch=flag_tables.mismatch_message(spec.serving.vllm_version, image, table),
    )


def _run_dump(spec: ClusterSpec, engine: ImageEngine) -> dict[str, Any]:
    head, image = spec.head.name, spec.serving.image
    done = engine.run_once(fetch_job(spec, DUMP_SCRIPT.read_bytes()))
    if done.exit_code != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise FlagFetchFailed(
            f"{head}: reading vLLM's parser in {image} failed (exit {done.exit_code}): {tail[0]}"
        )
    # the table is the last line (anything vLLM or a library prints to stdout comes before it)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        doc = json.loads(lines[-1] if lines else done.stdout)
        flag_tables.table_from_doc(doc, image)
        flag_tables.parse_version(str(doc["vllm_version"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise FlagFetchFailed(f"{head}: {image} printed no flag table: {exc}") from None
    return dict(doc)
