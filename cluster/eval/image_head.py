"""Apply `eval image build` on the head through its Docker gateway: read the base image's
facts in a throwaway container, choose and download the wheels here, build there offline.
Not run in CI or the lab by this change (see docs/eval.md); the pure parts are in image_build.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import docker.errors
import paramiko
import requests
from packaging.utils import canonicalize_name
from tpwarden.cluster.docker_gw import DockerGateway
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.errors import DockerError, TpwardenError
from tpwarden.cluster.eval.image_build import (
    FACTS_SCRIPT,
    REPO,
    BaseFacts,
    Fetch,
    build_context,
    check_base,
    dockerfile,
    inputs_digest,
    venv_metadata,
    wheels_needed,
)
from tpwarden.cluster.eval.presets import EvalError, EvalInputError
from tpwarden.cluster.provision.wheelhouse import fetch_dependencies

BUILD_TIMEOUT_S = 3600


@dataclass
class ImagePlan:
    """What `eval image build` will do (all of it for --dry-run)."""

    base: str
    base_id: str
    facts: BaseFacts
    wheels: dict[str, str | None]
    tag: str
    dockerfile: str
    exists: bool
    built: bool = False
    wheel_files: list[str] = field(default_factory=list)

    def to_json(self) -> JSONObject:
        f = self.facts
        return {
            "base": self.base,
            "base_id": self.base_id,
            "target": {"machine": f.machine, "python": f.python, "glibc": f.glibc},
            "python": f.executable,
            "wheels": self.wheels,
            "tag": self.tag,
            "exists": self.exists,
            "built": self.built,
            "dockerfile": self.dockerfile,
        }


@contextmanager
def _docker(gw: DockerGateway, what: str) -> Iterator[None]:
    try:
        yield
    except (docker.errors.DockerException, requests.RequestException, paramiko.SSHException) as e:
        raise DockerError(f"{gw.node}: {what}: {e}") from None


def _image_id(gw: DockerGateway, ref: str) -> str | None:
    api = gw.api
    with _docker(gw, f"inspect {ref}"):
        try:
            return str(api.inspect_image(ref)["Id"])  # type: ignore[no-untyped-call]  # stub
        except docker.errors.ImageNotFound:
            return None


def base_facts(gw: DockerGateway, base: str) -> BaseFacts:
    """Run FACTS_SCRIPT with the base image's python3 (no network, removed after)."""
    api = gw.api
    cid = None
    with _docker(gw, f"facts of {base}"):
        try:
            cid = api.create_container(
                image=base, entrypoint=["python3"], command=["-c", FACTS_SCRIPT],
                network_disabled=True, labels={"io.tpwarden.component": "eval-image-facts"},
            )["Id"]  # fmt: skip
            api.start(cid)
            rc = int(api.wait(cid, timeout=120).get("StatusCode", -1))
            out = api.logs(cid, stdout=True, stderr=True).decode("utf-8", "replace")
        finally:
            if cid is not None:
                with contextlib.suppress(TpwardenError):
                    gw.remove(cid, stop_timeout=5)
    if rc != 0:
        raise EvalError(f"{gw.node}: python3 in {base} exited {rc}:\n{out[-1000:]}")
    return BaseFacts.parse(out)


def plan_image(gw: DockerGateway, base: str, venv: Path) -> ImagePlan:
    base_id = _image_id(gw, base)
    if base_id is None:
        raise EvalInputError(f"{gw.node}: base image {base} is not there (give --base)")
    facts = base_facts(gw, base)
    check_base(base, facts)
    wheels = wheels_needed(venv_metadata(venv), facts.target(), facts.installed)
    digest = inputs_digest(base_id, wheels, facts)
    tag = f"{REPO}:{digest}"
    text = dockerfile(base, facts, digest)
    return ImagePlan(base, base_id, facts, wheels, tag, text, _image_id(gw, tag) is not None)


def build(
    gw: DockerGateway, plan: ImagePlan, cache: Path, fetch: Fetch = fetch_dependencies,
    log: Callable[[str], None] = lambda line: None,
) -> ImagePlan:  # fmt: skip
    """Download the wheels for the head's platform (cached per target), build offline there."""
    if plan.exists:
        return plan
    deps = cache / plan.facts.target().key
    deps.mkdir(parents=True, exist_ok=True)
    built, missing = fetch(plan.wheels, plan.facts.target(), deps)
    if missing:
        raise EvalError(f"no wheel for {plan.facts.target().key} (nor a pure-Python sdist): "
                        f"{', '.join(missing)}")  # fmt: skip
    files = wheel_files(deps, plan.wheels)
    with tempfile.TemporaryFile() as ctx, _docker(gw, f"build {plan.tag}"):
        ctx.write(build_context(plan.dockerfile, files))
        ctx.seek(0)
        api = gw.api
        stream = api.build(
            fileobj=ctx, custom_context=True, encoding="gzip", tag=plan.tag, rm=True,
            forcerm=True, pull=False, network_mode="none", decode=True, timeout=BUILD_TIMEOUT_S,
        )  # fmt: skip
        _follow(stream, plan.tag, log)
    plan.built, plan.wheel_files = True, [f.name for f in files]
    return plan


def wheel_files(deps: Path, wheels: dict[str, str | None]) -> list[Path]:
    """The cached wheels of exactly the pinned versions (the cache keeps older ones)."""
    out = []
    for whl in sorted(deps.glob("*.whl")):
        name, version = whl.name.split("-")[:2]
        name = canonicalize_name(name)
        if name in wheels and wheels[name] in (None, version):
            out.append(whl)
    return out


def _follow(stream: Iterable[JSONObject], tag: str, log: Callable[[str], None]) -> None:
    tail: list[str] = []
    for chunk in stream:
        if "error" in chunk:
            raise EvalError(f"docker build {tag} failed: {chunk['error']}\n" + "".join(tail[-20:]))
        text = str(chunk.get("stream") or "")
        if text.strip():
            tail.append(text)
            log(text.rstrip())
