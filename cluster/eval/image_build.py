"""`eval image build`: the lm-eval client image, built on the head for the head's platform.

The base is an image the head already runs (the bench client image; by default the serving
image, which has Python and transformers for the node's architecture). Its facts come from the
base itself (a throwaway container: machine, Python, glibc, pip, installed distributions), never
assumed. The wheels are chosen on the control machine: lm_eval 0.4.13 with its `api` extra and
transformers, their dependency closure walked from the lm-eval venv's installed metadata and
pinned to the versions it holds (the versions the lab runs), less what the base already has;
each is downloaded for the head's platform (`provision.wheelhouse`: pip download --no-deps
--only-binary for the target, a pure-Python sdist built to a wheel). The head builds offline
(`--no-index`, no network in the build) from a context streamed through its Docker gateway.

Tag: ``tpwarden/eval-client:<digest of base image id, Dockerfile, wheel pins>``; an image with
that tag is not built again.

The pins need no checkout: an installed tpwarden carries them as package data
(`cluster/data/lm_eval_0.4.13_closure.json`: version and requirements of every distribution the
closure can reach on an x86_64 or aarch64 node, written from the lm-eval venv by
`tools/lm_eval/dump_closure.py`, a unit test holding it to that venv). The venv is read when it
is there (`--venv`, or the default path of tools/lm_eval/install.sh), else the shipped pins.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import json
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from tpwarden.cluster.eval.presets import LM_EVAL_VERSION, EvalError, EvalInputError
from tpwarden.cluster.provision.wheelhouse import Target, resolve

REPO = "tpwarden/eval-client"
# The closure's pins, shipped as package data (see the module's docstring)
CLOSURE = Path(__file__).resolve().parents[1] / "data" / f"lm_eval_{LM_EVAL_VERSION}_closure.json"
# The nodes an eval image is built for: the closure covers each (markers differ per platform)
CLOSURE_TARGETS = tuple(
    Target(python_version=py, machine=machine, glibc="2.35")
    for machine in ("x86_64", "aarch64")
    for py in ("3.10", "3.11", "3.12", "3.13")
)
INSTALL = (f"lm_eval[api]=={LM_EVAL_VERSION}", "transformers")  # the tokenizer backend
WHEELS_DIR = "/tmp/tpwarden-wheels"

# Run by the base image's python3 in a throwaway container (no network).
FACTS_SCRIPT = """\
import importlib.metadata as md, json, platform, sys
try:
    import pip
    has_pip = True
except ImportError:
    has_pip = False
installed = {}
for d in md.distributions():
    name = d.metadata["Name"]
    if name:
        installed[name] = d.version
print(json.dumps({"machine": platform.machine(), "python": "%d.%d" % sys.version_info[:2],
                  "glibc": platform.libc_ver()[1], "pip": has_pip,
                  "executable": sys.executable, "installed": installed}))
"""

DOCKERFILE = """\
FROM {base}
COPY wheels {wheels}
ENV PIP_BREAK_SYSTEM_PACKAGES=1
RUN {python} -m pip install --no-index --no-cache-dir --find-links {wheels} {install} \\
 && rm -rf {wheels} \\
 && (command -v python > /dev/null || ln -s {python} /usr/local/bin/python) \\
 && python -m lm_eval run --help > /dev/null
ENV HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/hf \\
    PYTHONUNBUFFERED=1
LABEL io.tpwarden.eval.inputs={digest}
ENTRYPOINT []
CMD ["python", "-m", "lm_eval", "run", "--help"]
"""


@dataclass(frozen=True)
class BaseFacts:
    """What the base image runs, from the base itself."""

    machine: str
    python: str  # "3.12"
    glibc: str
    pip: bool
    executable: str
    installed: Mapping[str, str]  # canonical name -> version

    @classmethod
    def parse(cls, output: str) -> BaseFacts:
        """The last JSON line of FACTS_SCRIPT's output (a base may print a banner first)."""
        for line in reversed(output.strip().splitlines()):
            if line.startswith("{"):
                doc = json.loads(line)
                installed = {str(canonicalize_name(k)): str(v) for k, v in doc["installed"].items()}
                return cls(
                    doc["machine"], doc["python"], doc["glibc"] or "2.17", bool(doc["pip"]),
                    doc["executable"], installed,
                )  # fmt: skip
        raise EvalError(f"the base image's python3 printed no facts:\n{output[-1000:]}")

    def target(self) -> Target:
        return Target(python_version=self.python, machine=self.machine, glibc=self.glibc)


@dataclass(frozen=True)
class Dist:
    version: str
    requires: tuple[str, ...]


def venv_metadata(venv: Path) -> dict[str, Dist]:
    """Installed distributions of the lm-eval venv, and of the venvs its .pth files add (the
    CPU vLLM venv, for transformers and its dependencies)."""
    paths = sorted(str(p) for p in venv.glob("lib/python3*/site-packages"))
    for sp in list(paths):
        for pth in Path(sp).glob("*.pth"):
            paths += [ln.strip() for ln in pth.read_text().splitlines() if ln.startswith("/")]
    if not paths:
        raise EvalInputError(f"{venv}: no site-packages (run tools/lm_eval/install.sh)")
    out: dict[str, Dist] = {}
    for d in md.distributions(path=paths):
        name = d.metadata["Name"]
        if name and canonicalize_name(name) not in out:
            out[canonicalize_name(name)] = Dist(d.version, tuple(d.requires or ()))
    return out


def closure_metadata(meta: Mapping[str, Dist]) -> dict[str, Dist]:
    """The distributions of `meta` the install can reach on any of CLOSURE_TARGETS."""

    def requires_of(name: str) -> list[str] | None:
        dist = meta.get(name)
        return list(dist.requires) if dist else None

    pins = {n: d.version for n, d in meta.items()}
    names: set[str] = set()
    for target in CLOSURE_TARGETS:
        names |= set(resolve(roots(meta), target, pins, requires_of))
    return {n: meta[n] for n in sorted(names) if n in meta}


def closure_json(meta: Mapping[str, Dist]) -> str:
    """The shipped closure file's text for `meta` (a venv's metadata)."""
    doc = {
        "lm_eval": LM_EVAL_VERSION,
        "targets": [t.key for t in CLOSURE_TARGETS],
        "distributions": {
            n: {"version": d.version, "requires": list(d.requires)}
            for n, d in closure_metadata(meta).items()
        },
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def shipped_metadata(path: Path = CLOSURE) -> dict[str, Dist]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EvalInputError(f"the shipped lm-eval pins {path}: {exc}") from None
    return {n: Dist(d["version"], tuple(d["requires"])) for n, d in doc["distributions"].items()}


def pinned_metadata(default_venv: Path) -> tuple[dict[str, Dist], str]:
    """(metadata, where it came from) when no --venv is given: the default venv when it is
    there (a checkout with tools/lm_eval/install.sh run), else the pins tpwarden ships."""
    if default_venv.is_dir():
        return venv_metadata(default_venv), str(default_venv)
    return shipped_metadata(), f"the pins shipped with tpwarden ({CLOSURE.name})"


def roots(meta: Mapping[str, Dist]) -> list[Requirement]:
    """lm_eval pinned with its `api` extra (resolve follows extras), and transformers."""
    lm = meta.get("lm-eval")
    if lm is None or lm.version != LM_EVAL_VERSION:
        found = lm.version if lm else "none"
        raise EvalInputError(f"the lm-eval venv holds lm_eval {found}, not {LM_EVAL_VERSION}")
    return [Requirement(spec) for spec in INSTALL]


def wheels_needed(
    meta: Mapping[str, Dist], target: Target, base_installed: Mapping[str, str]
) -> dict[str, str | None]:
    """{name: pinned version} to download: the closure, less what the base has (not walked:
    the base's own dependencies are its business)."""

    def requires_of(name: str) -> list[str] | None:
        if name in base_installed:
            return []
        dist = meta.get(name)
        return list(dist.requires) if dist else None

    pins = {n: d.version for n, d in meta.items()}
    closure = resolve(roots(meta), target, pins, requires_of)
    return {n: v for n, v in closure.items() if n not in base_installed}


def dockerfile(base: str, facts: BaseFacts, digest: str) -> str:
    install = " ".join(f'"{spec}"' for spec in INSTALL)
    return DOCKERFILE.format(
        base=base, wheels=WHEELS_DIR, python=facts.executable, install=install, digest=digest
    )


def inputs_digest(base_id: str, wheels: Mapping[str, str | None], facts: BaseFacts) -> str:
    h = hashlib.sha256()
    for part in (base_id, DOCKERFILE, json.dumps(dict(wheels), sort_keys=True), facts.executable):
        h.update(hashlib.sha256(part.encode()).digest())
    return h.hexdigest()[:16]


def build_context(docker_text: str, wheel_files: list[Path]) -> bytes:
    """The build context: Dockerfile and wheels/ (gzip; wheels are already compressed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        data = docker_text.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for whl in sorted(wheel_files):
            tar.add(whl, arcname=f"wheels/{whl.name}", recursive=False)
    return buf.getvalue()


def check_base(base: str, facts: BaseFacts) -> None:
    if not facts.pip:
        raise EvalInputError(
            f"base image {base}: {facts.executable} has no pip; give --base an image whose "
            "python3 has pip (the serving image usually does)"
        )


Fetch = Callable[[dict[str, str | None], Target, Path], tuple[list[str], list[str]]]
