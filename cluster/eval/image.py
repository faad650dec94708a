"""The eval client image: the bench client image plus an lm-eval venv, as one cached layer.

Built FROM the client image (``tpwarden-lab/vllm-client:latest`` in the lab), so a change to
that image by its owners only rebuilds this small layer. The venv comes from
``tools/lm_eval/install.sh`` on this machine (no network inside the build); it reuses the vLLM
venv's torch/transformers through a .pth file, so the base must have that venv at the same path.
Tag: ``tpwarden-lab/eval-client:<hash of base image id, Dockerfile, install stamp>``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tpwarden.cluster.eval.presets import LM_EVAL_VERSION, EvalError

EVAL_REPO = "tpwarden-lab/eval-client"
EVAL_VENV = Path(os.environ.get("TPWARDEN_LMEVAL_VENV", f"/opt/tpwarden-lmeval-{LM_EVAL_VERSION}"))

DOCKERFILE = """\
FROM {base}
COPY venv {venv}
RUN cd {venv} \\
 && sed -i -e 's|^home = .*|home = /usr/bin|' \\
      -e 's|^executable = .*|executable = /usr/bin/python3.11|' -e '/^command = /d' pyvenv.cfg \\
 && for n in python python3 python3.11; do ln -sf /usr/bin/python3.11 bin/$n; done \\
 && bin/python -m lm_eval run --help > /dev/null
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/hf \\
    PYTHONUNBUFFERED=1
LABEL io.tpwarden.eval.inputs={digest}
ENTRYPOINT []
CMD ["python", "-m", "lm_eval", "run", "--help"]
"""


def _image_id(tag: str) -> str | None:
    r = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True
    )
    return r.stdout.strip() if r.returncode == 0 else None


def inputs_hash(base_id: str, venv: Path) -> str:
    stamp = venv / ".tpwarden-install-stamp"
    h = hashlib.sha256()
    for part in (
        base_id.encode(),
        DOCKERFILE.encode(),
        stamp.read_bytes() if stamp.is_file() else b"",
    ):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def ensure_eval_image(base_tag: str, venv: Path = EVAL_VENV, timeout_s: float = 1800) -> str:
    """Build (once per input hash) and return the eval client image tag."""
    base_id = _image_id(base_tag)
    if base_id is None:
        raise EvalError(f"base client image {base_tag} not found")
    if not (venv / "lib").is_dir():
        raise EvalError(f"{venv} missing: run tools/lm_eval/install.sh")
    digest = inputs_hash(base_id, venv)
    tag = f"{EVAL_REPO}:{digest}"
    if _image_id(tag) is None:
        with tempfile.TemporaryDirectory(prefix="eval-build-") as ctx:
            ctx_path = Path(ctx)
            (ctx_path / "Dockerfile").write_text(
                DOCKERFILE.format(base=base_tag, venv=venv, digest=digest)
            )
            shutil.copytree(venv, ctx_path / "venv", symlinks=True)
            env = {**os.environ, "DOCKER_BUILDKIT": "0"}
            r = subprocess.run(
                ["docker", "build", "-q", "-t", tag, str(ctx_path)],
                capture_output=True, text=True, timeout=timeout_s, env=env,
            )  # fmt: skip
            if r.returncode != 0:
                raise EvalError(f"docker build {tag} failed:\n{r.stderr[-2000:]}")
    subprocess.run(["docker", "tag", tag, f"{EVAL_REPO}:latest"], check=True, capture_output=True)
    return tag
