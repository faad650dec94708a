"""One eval client container on the head, through its Docker gateway
(`DockerGateway.run_to_completion`): create, fill /bench, start, wait (watching its log when
asked: the progress of a night-long task), collect /bench/results, remove."""

from __future__ import annotations

from collections.abc import Mapping

from tpwarden.cluster.containers.gateway import DockerGateway
from tpwarden.cluster.containers.job import Watch, folder_job
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.eval.presets import CONTAINER_DIR
from tpwarden.cluster.launch import ContainerPlan

__all__ = ["Watch", "run_container"]


def run_container(
    gw: DockerGateway, plan: ContainerPlan, files: Mapping[str, bytes], secrets: Mapping[str, str],
    timeout_s: float, watch: Watch | None = None,
) -> tuple[int, str, dict[str, bytes], JSONObject]:  # fmt: skip
    """(exit code, logs, /bench/results files, container facts). The folders under /bench are
    world-writable (0777): lm-eval writes its results and request cache there."""
    job = folder_job(
        plan, secrets, "eval client", CONTAINER_DIR, files, timeout_s, dir_mode=0o777, watch=watch
    )
    done = gw.run_to_completion(job)
    return done.exit_code, done.logs, done.results, done.facts
