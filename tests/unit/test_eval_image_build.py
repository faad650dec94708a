"""`eval image build` without a head: the base image's facts (the real script, run by this
Python), the wheels chosen from the lm-eval venv's metadata less what the base has, the
Dockerfile and build context, and the head-side flow against a fake Docker API (facts
container, offline build with no network, a build error, a base without pip). The real build
on a head is not run here (docs/eval.md says so)."""

from __future__ import annotations

import io
import json
import platform
import subprocess
import sys
import tarfile

import pytest
from tpwarden.cluster.containers.gateway import ImageBuildFailed
from tpwarden.cluster.containers.job import OneShot, OneShotResult
from tpwarden.cluster.eval.image_build import (
    CLOSURE,
    FACTS_SCRIPT,
    BaseFacts,
    Dist,
    build_context,
    closure_json,
    closure_metadata,
    dockerfile,
    inputs_digest,
    roots,
    shipped_metadata,
    venv_metadata,
    wheels_needed,
)
from tpwarden.cluster.eval.image_head import build, plan_image, wheel_files
from tpwarden.cluster.eval.presets import EVAL_VENV, EvalError, EvalInputError
from tpwarden.cluster.provision.wheelhouse import Target

META = {
    "lm-eval": Dist(
        "0.4.13", ("datasets>=2.16", 'aiohttp; extra == "api"', 'torch; extra == "hf"')
    ),
    "datasets": Dist("5.2.0", ("pyarrow>=15", "numpy")),
    "pyarrow": Dist("26.0.1", ()),
    "numpy": Dist("2.3.0", ()),
    "aiohttp": Dist("3.14.5", ("yarl",)),
    "yarl": Dist("1.25.1", ()),
    "transformers": Dist("4.57.0", ("tokenizers", "numpy")),
    "tokenizers": Dist("0.22.0", ()),
}
TARGET = Target("3.12", "aarch64", "2.39")
FACTS = BaseFacts("aarch64", "3.12", "2.39", True, "/usr/bin/python3.12", {"numpy": "1.26.4"})


def test_the_facts_script_runs_and_parses():
    out = subprocess.run([sys.executable, "-c", FACTS_SCRIPT], capture_output=True, text=True)
    facts = BaseFacts.parse("a banner the base prints\n" + out.stdout)
    assert facts.machine == platform.machine() and facts.executable == sys.executable
    assert facts.python == "{}.{}".format(*sys.version_info[:2]) and "typer" in facts.installed
    with pytest.raises(EvalError, match="printed no facts"):
        BaseFacts.parse("python3: not found")


def test_wheels_are_the_closure_less_what_the_base_has():
    assert [str(r) for r in roots(META)] == ["lm_eval[api]==0.4.13", "transformers"]
    base = {"numpy": "1.26.4", "transformers": "4.51.0"}
    wheels = wheels_needed(META, TARGET, base)
    assert wheels == {
        "aiohttp": "3.14.5", "datasets": "5.2.0", "lm-eval": "0.4.13", "pyarrow": "26.0.1",
        "yarl": "1.25.1",
    }  # fmt: skip
    # no torch (the hf extra), nothing the base has, nor its dependencies (tokenizers)
    assert "tokenizers" in wheels_needed(META, TARGET, {})
    with pytest.raises(EvalInputError, match="not 0.4.13"):
        roots({**META, "lm-eval": Dist("0.4.12", ())})


def test_the_installed_lm_eval_venv_gives_a_closure_without_torch():
    if not (EVAL_VENV / "lib").is_dir():
        pytest.skip(f"{EVAL_VENV} absent (README setup: tools/lm_eval/install.sh)")
    wheels = wheels_needed(venv_metadata(EVAL_VENV), TARGET, {})
    assert wheels["lm-eval"] == "0.4.13" and "datasets" in wheels and "tiktoken" in wheels
    assert "transformers" in wheels and "torch" not in wheels
    assert "pytz" in wheels  # pytablewriter -> typepy[datetime] -> pytz: an extra followed


def test_dockerfile_installs_offline_with_the_bases_python_and_names_its_inputs():
    text = dockerfile("vllm/vllm-openai:v0.33.0", FACTS, "abc123")
    assert text.startswith("FROM vllm/vllm-openai:v0.33.0\n")
    assert "/usr/bin/python3.12 -m pip install --no-index" in text
    assert '"lm_eval[api]==0.4.13" "transformers"' in text
    assert "ln -s /usr/bin/python3.12 /usr/local/bin/python" in text  # the runner runs `python`
    assert "python -m lm_eval run --help" in text and "io.tpwarden.eval.inputs=abc123" in text
    a = inputs_digest("sha256:1", {"x": "1"}, FACTS)
    assert a != inputs_digest("sha256:2", {"x": "1"}, FACTS)
    assert a != inputs_digest("sha256:1", {"x": "2"}, FACTS)


def test_context_and_pinned_wheel_files(tmp_path):
    for name in ("yarl-1.25.1-cp312-cp312-manylinux_2_17_aarch64.whl",
                 "yarl-1.20.0-cp312-cp312-manylinux_2_17_aarch64.whl",
                 "lm_eval-0.4.13-py3-none-any.whl", "other-1.0-py3-none-any.whl"):  # fmt: skip
        (tmp_path / name).write_bytes(b"whl")
    files = wheel_files(tmp_path, {"yarl": "1.25.1", "lm-eval": "0.4.13"})
    assert [f.name for f in files] == [
        "lm_eval-0.4.13-py3-none-any.whl",
        "yarl-1.25.1-cp312-cp312-manylinux_2_17_aarch64.whl",
    ]
    with tarfile.open(fileobj=io.BytesIO(build_context("FROM x\n", files))) as tar:
        assert tar.getnames() == ["Dockerfile", *(f"wheels/{f.name}" for f in files)]


class FakeGw:
    """The Docker gateway's seam for the eval image (image_id, run_once, build_image)."""

    node = "node1"

    def __init__(self, facts: dict, build_stream: list[dict], images: set[str]):
        self.facts, self.stream, self.images = facts, build_stream, images
        self.jobs: list[OneShot] = []
        self.build_kwargs: dict = {}

    def image_id(self, ref):
        return f"sha256:{abs(hash(ref))}" if ref in self.images else None

    def run_once(self, job: OneShot) -> OneShotResult:
        self.jobs.append(job)
        return OneShotResult(0, "banner\n" + json.dumps(self.facts) + "\n", "")

    def build_image(self, context, tag, *, timeout_s, on_line):
        self.build_kwargs = {"tag": tag, "timeout_s": timeout_s, "context": context.read()}
        for chunk in self.stream:  # the engine's stream, as the real gateway reads it
            if "error" in chunk:
                raise ImageBuildFailed(f"docker build {tag} failed: {chunk['error']}")
            on_line(chunk["stream"].rstrip())


BASE_FACTS = {"machine": "aarch64", "python": "3.12", "glibc": "2.39", "pip": True,
              "executable": "/usr/bin/python3.12", "installed": {"numpy": "1.26.4"}}  # fmt: skip


def _meta(monkeypatch):
    monkeypatch.setattr("tpwarden.cluster.eval.image_head.venv_metadata", lambda venv: META)


def test_plan_and_build_on_the_head_offline(tmp_path, monkeypatch):
    _meta(monkeypatch)
    gw = FakeGw(BASE_FACTS, [{"stream": "Step 1/6 : FROM base\n"}, {"stream": "done\n"}], {"base"})
    plan = plan_image(gw, "base", tmp_path)
    assert not plan.exists and plan.tag.startswith("tpwarden/eval-client:")
    assert gw.jobs[0].image == "base" and gw.jobs[0].argv[:2] == ("python3", "-c")
    assert not gw.jobs[0].gpus  # the facts container: throwaway, no network (run_once), no GPU
    fetched = {}

    def fetch(reqs, target, deps):
        fetched.update(reqs=reqs, key=target.key)
        for name, version in reqs.items():
            (deps / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"w")
        return [], []

    lines: list[str] = []
    done = build(gw, plan, tmp_path / "cache", fetch=fetch, log=lines.append)
    assert (
        done.built
        and fetched["key"] == "cp312-aarch64-glibc2.39"
        and "numpy" not in fetched["reqs"]
    )
    kw = gw.build_kwargs
    assert kw["tag"] == plan.tag and kw["timeout_s"] == 3600
    with tarfile.open(fileobj=io.BytesIO(kw["context"])) as tar:
        names = tar.getnames()
    assert "Dockerfile" in names and "wheels/lm_eval-0.4.13-py3-none-any.whl" in names
    assert lines == ["Step 1/6 : FROM base", "done"]


def test_build_failures_and_bad_bases_say_why(tmp_path, monkeypatch):
    _meta(monkeypatch)
    gw = FakeGw(BASE_FACTS, [{"stream": "Step 3/6 : RUN pip\n"}, {"error": "no matching dist"}],
                {"base"})  # fmt: skip
    plan = plan_image(gw, "base", tmp_path)
    with pytest.raises(EvalError, match="no matching dist"):
        build(gw, plan, tmp_path / "c", fetch=lambda r, t, d: ([], []))
    with pytest.raises(EvalError, match="no wheel for cp312-aarch64.*yarl"):
        build(gw, plan, tmp_path / "c", fetch=lambda r, t, d: ([], ["yarl==1.25.1"]))
    with pytest.raises(EvalInputError, match="has no pip"):
        plan_image(FakeGw({**BASE_FACTS, "pip": False}, [], {"base"}), "base", tmp_path)
    with pytest.raises(EvalInputError, match="not there"):
        plan_image(FakeGw(BASE_FACTS, [], set()), "base", tmp_path)
    built = FakeGw(BASE_FACTS, [], {"base"})
    again = plan_image(built, "base", tmp_path)
    built.images.add(again.tag)
    assert plan_image(built, "base", tmp_path).exists  # the same inputs: no rebuild


# -- issue 52 item 7: the pins ship with tpwarden ----------------------------------------------------


def test_the_closure_keeps_what_any_node_can_reach_and_drops_the_rest():
    closure = closure_metadata(META)
    assert "torch" not in closure  # lm_eval's hf extra is never asked for
    assert {"lm-eval", "datasets", "aiohttp", "yarl", "transformers"} <= set(closure)
    doc = json.loads(closure_json(META))
    assert doc["lm_eval"] == "0.4.13" and "cp311-aarch64-glibc2.35" in doc["targets"]


@pytest.mark.skipif(not EVAL_VENV.is_dir(), reason="no lm-eval venv (tools/lm_eval/install.sh)")
def test_the_shipped_pins_are_the_lm_eval_venvs():
    # regenerate with tools/lm_eval/dump_closure.py when the venv changes
    assert CLOSURE.read_text() == closure_json(venv_metadata(EVAL_VENV))


def test_without_a_venv_the_image_is_planned_from_the_shipped_pins(tmp_path):
    # an installed tpwarden has no tools/lm_eval/ and no venv: the plan still pins every wheel
    shipped = shipped_metadata()
    assert shipped["lm-eval"].version == "0.4.13" and "transformers" in shipped
    plan = plan_image(FakeGw(BASE_FACTS, [], {"base"}), "base", None, tmp_path / "no-venv")
    assert plan.pins_from.startswith("the pins shipped with tpwarden")
    assert plan.wheels["lm-eval"] == "0.4.13" and "numpy" not in plan.wheels  # the base has it
    assert set(plan.wheels) <= set(shipped)
    assert plan.to_json()["pins_from"] == plan.pins_from
    with pytest.raises(EvalInputError, match="no site-packages"):
        plan_image(FakeGw(BASE_FACTS, [], {"base"}), "base", tmp_path / "no-venv")
