"""Apply `eval image build` on the head through its Docker gateway: read the base image's
facts in a throwaway container (`run_once`), choose and download the wheels here, build there
offline (`build_image`).
The lab runs it (tests/lab/conftest.py, eval_image_build); the pure parts are in image_build.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from tpwarden.cluster.containers.gateway import DockerGateway, ImageBuildFailed
from tpwarden.cluster.containers.job import OneShot
from tpwarden.cluster.durable import JSONObject
from tpwarden.cluster.eval.image_build import (
    FACTS_SCRIPT,
    REPO,
    BaseFacts,
    Fetch,
    build_context,
    check_base,
    dockerfile,
    inputs_digest,
    pinned_metadata,
    venv_metadata,
    wheels_needed,
)
from tpwarden.cluster.eval.presets import EVAL_VENV, EvalError, EvalInputError
from tpwarden.cluster.labels import LABEL_COMPONENT
from tpwarden.cluster.provision.wheelhouse import fetch_dependencies

BUILD_TIMEOUT_S = 3600
FACTS_TIMEOUT_S = 120.0


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
    pins_from: str = ""  # the lm-eval venv read, or the pins tpwarden ships

    def to_json(self) -> JSONObject:
        f = self.facts
        return {
            "base": self.base,
            "base_id": self.base_id,
            "target": {"machine": f.machine, "python": f.python, "glibc": f.glibc},
            "python": f.executable,
            "wheels": self.wheels,
            "pins_from": self.pins_from,
            "tag": self.tag,
            "exists": self.exists,
            "built": self.built,
            "dockerfile": self.dockerfile,
        }


def base_facts(gw: DockerGateway, base: str) -> BaseFacts:
    """Run FACTS_SCRIPT with the base image's python3 (no network, removed after)."""
    job = OneShot(
        image=base, argv=("python3", "-c", FACTS_SCRIPT),
        labels={LABEL_COMPONENT: "eval-image-facts"}, timeout_s=FACTS_TIMEOUT_S,
    )  # fmt: skip
    done = gw.run_once(job)
    if done.exit_code != 0:
        out = (done.stdout + done.stderr)[-1000:]
        raise EvalError(f"{gw.node}: python3 in {base} exited {done.exit_code}:\n{out}")
    return BaseFacts.parse(done.stdout)


def plan_image(
    gw: DockerGateway, base: str, venv: Path | None, default_venv: Path = EVAL_VENV
) -> ImagePlan:
    """`venv` (--venv) pins the wheels when given; else the default venv when it is there,
    else the pins shipped in the package (an installed tpwarden has no checkout)."""
    base_id = gw.image_id(base)
    if base_id is None:
        raise EvalInputError(f"{gw.node}: base image {base} is not there (give --base)")
    facts = base_facts(gw, base)
    check_base(base, facts)
    if venv is not None:
        meta, pins_from = venv_metadata(venv), str(venv)
    else:
        meta, pins_from = pinned_metadata(default_venv)
    wheels = wheels_needed(meta, facts.target(), facts.installed)
    digest = inputs_digest(base_id, wheels, facts)
    tag = f"{REPO}:{digest}"
    text = dockerfile(base, facts, digest)
    exists = gw.image_id(tag) is not None
    return ImagePlan(base, base_id, facts, wheels, tag, text, exists, pins_from=pins_from)


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
    with tempfile.TemporaryFile() as ctx:
        ctx.write(build_context(plan.dockerfile, files))
        ctx.seek(0)
        try:
            gw.build_image(ctx, plan.tag, timeout_s=BUILD_TIMEOUT_S, on_line=log)
        except ImageBuildFailed as exc:
            raise EvalError(str(exc)) from None
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
