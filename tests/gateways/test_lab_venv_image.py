"""The lab's one venv-image build (lab/venv_image.py) against the real engine: a venv folder and
a side file go into the context, the image is built once per inputs hash, tagged :latest, and
the next call finds it cached. The bench client, the real engine and the eval client images
are built this way (their own Dockerfiles run python checks the tiny image cannot)."""

from __future__ import annotations

import subprocess
import uuid

from tpwarden.lab.venv_image import digest, ensure_venv_image, image_id


def test_a_venv_image_is_built_once_tagged_latest_and_then_cached(tiny_image, tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /somewhere\n")
    (venv / "bin" / "marker").write_text("in-the-venv\n")
    side = tmp_path / "side.txt"
    side.write_text("beside-the-venv\n")
    repo = f"tpwarden-test/venv-image-{uuid.uuid4().hex[:8]}"
    key = digest(b"test", side.read_bytes())
    dockerfile = (
        f"FROM {tiny_image}\nCOPY venv /opt/v\nCOPY side.txt /side.txt\n"
        "RUN cat /opt/v/bin/marker /side.txt\n"
    )
    steps: list[str] = []
    try:
        tag = ensure_venv_image(
            repo, key, dockerfile, venv, cache=tmp_path, files={"side.txt": side},
            on_step=lambda step, text: steps.append(text),
        )  # fmt: skip
        assert tag == f"{repo}:{key}" and steps[0].startswith("docker build")
        assert image_id(tag) is not None and image_id(f"{repo}:latest") == image_id(tag)
        shown = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", tag, "cat", "/opt/v/bin/marker",
             "/side.txt"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert shown == "in-the-venv\nbeside-the-venv\n"
        assert not list(tmp_path.glob("venv-image-*"))  # the context is gone
        steps.clear()
        assert ensure_venv_image(repo, key, dockerfile, venv, on_step=lambda s, t: steps.append(t))
        assert steps == [f"cached {tag}"]
    finally:
        for t in (f"{repo}:{key}", f"{repo}:latest"):
            subprocess.run(["docker", "rmi", "-f", t], capture_output=True)
