"""The lab's venv images, one build for all of them: a venv made on this machine (CPython 3.11,
bookworm's glibc), copied into the lab base image at the same path (script shebangs hold) and
re-pointed at the image's /usr/bin/python3.11 (`RELOCATE`); offline, no pip, no compiler. The
bench client (client_image) and the real engine (engine) are such images; each has its own
Dockerfile and checks, and builds through `ensure_venv_image`. (The eval client is not: the lab
builds it with the product's `tpwarden eval image build`, FROM the bench client image.)

An image is tagged `<repo>:<hash of its inputs>` and built only when that tag is missing, then
tagged `<repo>:latest`. The build context hard-links the venv (same filesystem) or copies it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.lab import host
from tpwarden.lab.paths import StepCallback, no_steps

# The RUN lines that make a copied venv use the image's python (part of every Dockerfile).
RELOCATE = """\
 && sed -i -e 's|^home = .*|home = /usr/bin|' \\
      -e 's|^executable = .*|executable = /usr/bin/python3.11|' -e '/^command = /d' pyvenv.cfg \\
 && for n in python python3 python3.11; do ln -sf /usr/bin/python3.11 bin/$n; done \\
"""
BUILD_TIMEOUT_S = 1800.0


def digest(*parts: bytes) -> str:
    """The inputs hash of an image (or a cached artefact): 16 hex digits over its parts."""
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def install_stamp(venv: Path) -> bytes:
    """What the venv's installer recorded (versions installed); empty when it recorded none."""
    stamp = venv / ".tpwarden-install-stamp"
    return stamp.read_bytes() if stamp.is_file() else b""


def image_id(tag: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_venv_image(
    repo: str, digest_: str, dockerfile: str, venv: Path, *, cache: Path | None = None,
    files: Mapping[str, Path] | None = None, step: str = "image",
    on_step: StepCallback = no_steps, timeout_s: float = BUILD_TIMEOUT_S,
) -> str:  # fmt: skip
    """Build `repo:digest_` from `dockerfile` (the venv at `venv/` of the context, `files`
    beside it) unless it is there; tag it `repo:latest`; return the tag. LabError on failure."""
    tag = f"{repo}:{digest_}"
    if image_id(tag) is not None:
        on_step(step, f"cached {tag}")
    else:
        on_step(step, f"docker build -> {tag} (copies {venv})")
        with tempfile.TemporaryDirectory(dir=cache, prefix="venv-image-") as ctx:
            ctx_path = Path(ctx)
            (ctx_path / "Dockerfile").write_text(dockerfile)
            for name, source in (files or {}).items():
                shutil.copyfile(source, ctx_path / name)  # follows a symlink
            try:  # hard links: no copy of gigabytes when the cache is on the same filesystem
                host.run(["cp", "-al", str(venv), str(ctx_path / "venv")])
            except LabError:
                shutil.rmtree(ctx_path / "venv", ignore_errors=True)
                shutil.copytree(venv, ctx_path / "venv", symlinks=True)
            # the classic builder: engine 20.10 + a newer CLI may lack buildx
            env = {**os.environ, "DOCKER_BUILDKIT": "0"}
            host.run(
                ["docker", "build", "-q", "-t", tag, str(ctx_path)], timeout=timeout_s, env=env
            )
    host.run(["docker", "tag", tag, f"{repo}:latest"])
    return tag
