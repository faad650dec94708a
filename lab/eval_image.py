"""The lab's eval client image: the bench client image plus the lm-eval venv, as one cached layer.

Built FROM the client image (``tpwarden-lab/vllm-client:latest``), so a change to that image only
rebuilds this small layer. The venv comes from ``tools/lm_eval/install.sh`` on this machine (no
network inside the build); it reuses the vLLM venv's torch/transformers through a .pth file, so
the base must have that venv at the same path. Tag: ``tpwarden-lab/eval-client:<hash of the base
image's id, the Dockerfile, the install stamp>``. On a real cluster `tpwarden eval image build`
makes the eval image on the head instead (tpwarden.cluster.eval.image_head).
"""

from __future__ import annotations

from pathlib import Path

from tpwarden.cluster.errors import LabError
from tpwarden.cluster.eval.presets import EVAL_VENV
from tpwarden.lab.venv_image import RELOCATE, digest, ensure_venv_image, image_id, install_stamp

EVAL_REPO = "tpwarden-lab/eval-client"

DOCKERFILE = (
    """\
FROM {base}
COPY venv {venv}
RUN cd {venv} \\
"""
    + RELOCATE
    + """\
 && bin/python -m lm_eval run --help > /dev/null
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/hf \\
    PYTHONUNBUFFERED=1
LABEL io.tpwarden.eval.inputs={digest}
ENTRYPOINT []
CMD ["python", "-m", "lm_eval", "run", "--help"]
"""
)


def inputs_hash(base_id: str, venv: Path) -> str:
    return digest(base_id.encode(), DOCKERFILE.encode(), install_stamp(venv))


def ensure_eval_image(base_tag: str, venv: Path = EVAL_VENV) -> str:
    """Build (once per input hash) and return the eval client image tag."""
    base_id = image_id(base_tag)
    if base_id is None:
        raise LabError(f"base client image {base_tag} not found")
    if not (venv / "lib").is_dir():
        raise LabError(f"{venv} missing: run tools/lm_eval/install.sh")
    key = inputs_hash(base_id, venv)
    text = DOCKERFILE.format(base=base_tag, venv=venv, digest=key)
    return ensure_venv_image(EVAL_REPO, key, text, venv, step="image eval-client")
