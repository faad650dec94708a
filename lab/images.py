"""The lab's Docker images, built offline and only when their inputs change.

- ``tpwarden-lab/base:<hash>``: ``docker import`` of a Debian minbase tarball with python3 and
  python3-aiohttp (the rootfs machinery in rootfs.py; hash = that rootfs's inputs hash).
- ``tpwarden-lab/vllm-sim:<hash>`` (and ``:latest``): the base plus the whole
  ``lab/vllm_sim/`` directory, its ``bin/`` on PATH, no ENTRYPOINT: the container's
  command is the toolkit's own argv, ``vllm serve ...``. Hash = sim files + base tag.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from tpwarden.cluster.errors import LabError
from tpwarden.lab import host, rootfs
from tpwarden.lab.paths import StepCallback, no_steps

BASE_REPO = "tpwarden-lab/base"
SIM_REPO = "tpwarden-lab/vllm-sim"
SIM_LATEST = f"{SIM_REPO}:latest"
SIM_SOURCE = Path(__file__).with_name("vllm_sim")
# Inside the image the simulator lives at its repository path under /opt/tpwarden, so both
# ``import lab.vllm_sim`` and ``import vllm_sim`` work, whichever its launcher uses.
_IMAGE_PKG = "/opt/tpwarden/lab/vllm_sim"
_IGNORED = ("__pycache__", ".pytest_cache")

DOCKERFILE = f"""\
FROM {{base}}
COPY opt /opt
RUN chmod -R a+rX /opt/tpwarden && (chmod a+x {_IMAGE_PKG}/bin/* 2>/dev/null || true)
ENV PYTHONPATH=/opt/tpwarden:/opt/tpwarden/lab \\
    PATH={_IMAGE_PKG}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
LABEL io.tpwarden.lab.inputs={{digest}}
ENTRYPOINT []
CMD ["vllm", "--help"]
"""


@dataclass(frozen=True)
class LabImages:
    base: str
    sim: str
    sim_latest: str = SIM_LATEST


def _sim_files(source: Path) -> list[Path]:
    return sorted(
        p
        for p in source.rglob("*")
        if p.is_file() and not any(part in _IGNORED for part in p.parts)
    )


def sim_inputs_hash(source: Path, base_tag: str) -> str:
    digest = hashlib.sha256(base_tag.encode() + DOCKERFILE.encode())
    for path in _sim_files(source):
        digest.update(str(path.relative_to(source)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _has_image(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def ensure_images(
    cache: Path,
    client: docker.DockerClient | None = None,
    sim_source: Path = SIM_SOURCE,
    on_step: StepCallback = no_steps,
) -> LabImages:
    """Build the base and simulator images if missing; return their tags."""
    try:
        client = client or docker.from_env()
        base = _ensure_base(cache, client, on_step)
        sim = _ensure_sim(cache, client, base, sim_source, on_step)
    except docker.errors.DockerException as exc:
        raise LabError(f"docker: {exc}") from exc
    return LabImages(base=base, sim=sim)


def _ensure_base(cache: Path, client: docker.DockerClient, on_step: StepCallback) -> str:
    spec = rootfs.BASE_ROOTFS
    tag = f"{BASE_REPO}:{spec.inputs_hash(rootfs.sources_bytes())}"
    if _has_image(client, tag):
        on_step("image base", f"cached {tag}")
        return tag
    tarball = rootfs.ensure_rootfs(spec, cache, on_step=on_step)
    on_step("image base", f"docker import -> {tag}")
    # the docker CLI, not docker-py: its import_image_from_stream fails on engine 20.10
    # ("header line too long"); the CLI streams the tarball correctly.
    host.run(["docker", "import", "--message", "tpwarden lab base", str(tarball), tag])
    if not _has_image(client, tag):
        raise LabError(f"docker import did not produce {tag}")
    tarball.unlink()  # the image is the cache now
    return tag


def _ensure_sim(
    cache: Path, client: docker.DockerClient, base: str, source: Path, on_step: StepCallback
) -> str:
    if not source.is_dir():
        raise LabError(f"the vLLM simulator package is missing: {source}")
    digest = sim_inputs_hash(source, base)
    tag = f"{SIM_REPO}:{digest}"
    if not _has_image(client, tag):
        on_step("image vllm-sim", f"docker build -> {tag}")
        with tempfile.TemporaryDirectory(dir=cache, prefix="sim-build-") as ctx:
            _write_context(Path(ctx), source, base, digest)
            try:
                client.images.build(path=ctx, tag=tag, rm=True, forcerm=True, pull=False)
            except docker.errors.BuildError as exc:
                log = "".join(str(c.get("stream", "")) for c in exc.build_log)[-2000:]
                raise LabError(f"building {tag} failed: {exc.msg}\n{log}") from exc
    else:
        on_step("image vllm-sim", f"cached {tag}")
    client.images.get(tag).tag(SIM_REPO, "latest")
    return tag


def _write_context(ctx: Path, source: Path, base: str, digest: str) -> None:
    (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base, digest=digest))
    pkg = ctx / _IMAGE_PKG.lstrip("/")
    shutil.copytree(source, pkg, ignore=shutil.ignore_patterns(*_IGNORED))
    for parent in (pkg.parent, pkg.parent.parent):  # lab and cluster: bare packages
        (parent / "__init__.py").touch()
