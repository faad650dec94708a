"""An offline wheelhouse for one node platform, built on the control machine.

The nodes have no package index, and the field's nodes (aarch64 Grace, CPython 3.x) need not
match the control machine (often x86_64). So the wheelhouse is built *for the target*:

* tpwarden's own wheel, built from a copy of the source tree with ``SOURCE_DATE_EPOCH`` fixed, so
  the same source gives the same bytes (and a second provisioning run has nothing to install);
  with no source tree (tpwarden installed from a wheel), repacked from the installed distribution
  (`repack`), its dependencies read from the installed metadata and pinned to the
  versions this control machine runs;
* its runtime dependencies, resolved here (markers evaluated for the target, versions pinned to
  requirements/constraints.txt when listed there), each downloaded with ``pip download --no-deps
  --only-binary=:all: --platform ... --python-version ... --abi ...``;
* a dependency with no wheel for the target is fetched as an sdist and built here if, and only
  if, it builds a pure-Python (``py3-none-any``) wheel; otherwise it is reported as missing.

Run on the control machine (the playbook does, delegated to localhost)::

    python -m tpwarden.cluster.provision.wheelhouse --python-version 3.11 --machine aarch64 \
        --glibc 2.39 [--source /path/to/tpwarden] --cache ~/.cache/tpwarden/wheelhouse

``--source`` defaults to the checkout this code runs from, and to the installed distribution when
there is none.

It prints one JSON document: ``dir``, ``id`` (a digest of the wheels), ``wheels``,
``built_from_sdist``, ``missing``. Exit 0 when complete, 1 when a dependency has no wheel.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from tpwarden.cluster.provision import repack as provision_repack

SOURCE_DATE_EPOCH = "1700000000"  # fixed: same source, same wheel bytes
# What the wheel is built from besides the package folders (`source_items`)
SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE")
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}


class Runner(Protocol):
    """Runs a command (pip) and returns its result; tests inject a fake."""

    def __call__(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]: ...


@dataclass(frozen=True)
class Target:
    """The node's interpreter and platform (from the node itself, never assumed)."""

    python_version: str  # "3.11"
    machine: str  # "x86_64", "aarch64"
    glibc: str = "2.17"  # the node's glibc: manylinux tags up to it are accepted

    @property
    def key(self) -> str:
        return f"cp{self.python_version.replace('.', '')}-{self.machine}-glibc{self.glibc}"

    @property
    def abi(self) -> str:
        return "cp" + self.python_version.replace(".", "")

    def platforms(self) -> list[str]:
        """manylinux tags this node can run, newest first (pip takes several ``--platform``),
        down to manylinux_2_5 with the legacy aliases: some binary wheels (py-spy's x86_64 one)
        are tagged manylinux1 only."""
        major, minor = (int(x) for x in self.glibc.split(".")[:2])
        tags = [f"manylinux_{major}_{m}_{self.machine}" for m in range(minor, 4, -1)]
        legacy = [f"manylinux{name}_{self.machine}" for name in ("2014", "2010", "1")]
        return [*tags, *legacy, f"linux_{self.machine}"]

    def marker_env(self) -> dict[str, str]:
        env = {k: str(v) for k, v in default_environment().items()}
        env.update(
            python_version=self.python_version,
            python_full_version=self.python_version + ".0",
            platform_machine=self.machine,
            platform_system="Linux",
            sys_platform="linux",
            os_name="posix",
            implementation_name="cpython",
            platform_python_implementation="CPython",
        )
        return env


@dataclass
class Wheelhouse:
    dir: Path
    wheels: list[str] = field(default_factory=list)
    built_from_sdist: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        """Digest of the wheels' names and bytes: what a node's install marker records."""
        h = hashlib.sha256()
        for name in sorted(self.wheels):
            h.update(name.encode() + b"\0" + _sha256(self.dir / name).encode() + b"\n")
        return h.hexdigest()[:16]

    def to_json(self) -> dict[str, object]:
        return {
            "dir": str(self.dir),
            "id": self.id,
            "wheels": sorted(self.wheels),
            "built_from_sdist": self.built_from_sdist,
            "missing": self.missing,
        }


# --- pure parts -------------------------------------------------------------------------------


def read_constraints(text: str) -> dict[str, str]:
    """``name==version`` lines -> {canonical name: version}."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*([^\s;]+)", line)
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def runtime_requirements(pyproject: str) -> list[Requirement]:
    """``[project].dependencies`` of a pyproject.toml (extras are not installed on nodes)."""
    doc = tomllib.loads(pyproject)
    return [Requirement(r) for r in doc["project"].get("dependencies", [])]


def resolve(
    roots: list[Requirement],
    target: Target,
    pins: dict[str, str],
    requires_of: Callable[[str], list[str] | None],
) -> dict[str, str | None]:
    """Walk the dependency tree for ``target``: {canonical name: pinned version or None}.

    ``requires_of(name)`` gives a distribution's own requirements (from the control machine's
    installed metadata); None when it is not installed here (then it is pinned from
    constraints or left to pip, and its own dependencies cannot be followed: reported).
    A requirement's extras are followed as pip does (``typepy[datetime]`` brings pytz); a
    distribution asked for again with an extra not yet seen is walked again with it."""
    env = target.marker_env()
    out: dict[str, str | None] = {}
    extras_seen: dict[str, set[str]] = {}
    todo = [r for r in roots if r.marker is None or r.marker.evaluate(env | {"extra": ""})]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = {canonicalize_name(e) for e in req.extras}
        if name in out and extras <= extras_seen[name]:
            continue
        extras_seen[name] = extras_seen.get(name, set()) | extras
        out[name] = pins.get(name)
        for text in requires_of(name) or []:
            sub = Requirement(text)
            if _applies(sub, env, extras_seen[name]):
                todo.append(sub)
    return dict(sorted(out.items()))


def _applies(req: Requirement, env: dict[str, str], extras: set[str]) -> bool:
    """Whether a requirement's marker holds on the target with none or one of ``extras``."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate(env | {"extra": e}) for e in ("", *sorted(extras)))


def source_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in _source_files(root):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# --- I/O --------------------------------------------------------------------------------------


def source_items(root: Path) -> tuple[str, ...]:
    """What the wheel is built from: pyproject, README, LICENSE and every folder that pyproject's
    ``package-dir`` maps (cluster/, node/, watchdog/, playbooks/). Read from pyproject, so a new
    folder there is packed and hashed without a second list to keep in step."""
    pyproject = root / "pyproject.toml"
    try:
        doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RuntimeError(f"cannot read {pyproject}: {exc}") from exc
    package_dir = doc.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return (*SOURCE_FILES, *sorted({str(folder) for folder in package_dir.values()}))


def _source_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for item in source_items(root):
        p = root / item
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files.extend(
                f
                for f in p.rglob("*")
                if f.is_file() and not _SKIP_PARTS & set(f.parts) and f.suffix != ".pyc"
            )
    return sorted(files)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _installed_requires(name: str) -> list[str] | None:
    try:
        return md.requires(name) or []
    except md.PackageNotFoundError:
        return None


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)


def _pip() -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def build_tpwarden_wheel(source: Path, out: Path, run: Runner = _run) -> Path:
    """Build tpwarden's wheel from a private copy of ``source`` (the tree is not written to)."""
    digest = source_digest(source)
    out.mkdir(parents=True, exist_ok=True)
    done = out / f".tpwarden-{digest}"
    if done.is_file():
        return out / done.read_text().strip()
    with tempfile.TemporaryDirectory(prefix="tpwarden-src-") as tmp:
        for f in _source_files(source):
            dst = Path(tmp) / f.relative_to(source)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)
        wheel_dir = Path(tmp) / "_wheel"
        env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, PYTHONHASHSEED="0")
        done_run = run([*_pip(), "wheel", "--no-deps", "-q", "-w", str(wheel_dir), tmp], env)
        if done_run.returncode != 0:
            raise RuntimeError(f"building the tpwarden wheel failed: {done_run.stderr[-2000:]}")
        (wheel,) = wheel_dir.glob("tpwarden-*.whl")
        for old in out.glob("tpwarden-*.whl"):
            old.unlink()
        shutil.copyfile(wheel, out / wheel.name)
    for old in out.glob(".tpwarden-*"):
        old.unlink()
    done.write_text(wheel.name + "\n")
    return out / wheel.name


def tpwarden_wheel(
    source: Path | None, out: Path, run: Runner = _run, dist: md.Distribution | None = None
) -> Path:
    """The nodes' tpwarden wheel: built from ``source`` when there is a source tree, otherwise
    repacked from the installed distribution (``dist``, this Python's tpwarden by default)."""
    if source is not None:
        return build_tpwarden_wheel(source, out, run)
    installed = dist or provision_repack.installed_distribution()
    return provision_repack.repack(installed, out, int(SOURCE_DATE_EPOCH))


def installed_versions() -> dict[str, str]:
    """{canonical name: version} of every distribution installed in this Python."""
    return {canonicalize_name(d.metadata["Name"]): d.version for d in md.distributions()}


def _download_args(target: Target) -> list[str]:
    args = ["--no-deps", "--only-binary=:all:", "--implementation", "cp"]
    args += ["--python-version", target.python_version, "--abi", target.abi, "--abi", "abi3"]
    args += ["--abi", "none"]
    for tag in target.platforms():
        args += ["--platform", tag]
    return args


def fetch_dependencies(
    reqs: dict[str, str | None], target: Target, deps_dir: Path, run: Runner = _run
) -> tuple[list[str], list[str]]:
    """Download a wheel per requirement; returns (built_from_sdist, missing)."""
    specs = [f"{n}=={v}" if v else n for n, v in reqs.items()]
    done = run([*_pip(), "download", "-q", "-d", str(deps_dir), *_download_args(target), *specs])
    if done.returncode == 0:
        return [], []
    built, missing = [], []
    for spec in specs:  # one by one, to name the ones without a wheel
        one = run([*_pip(), "download", "-q", "-d", str(deps_dir), *_download_args(target), spec])
        if one.returncode == 0:
            continue
        if _pure_python_wheel(spec, deps_dir, run):
            built.append(spec)
        else:
            missing.append(spec)
    return built, missing


def _pure_python_wheel(spec: str, deps_dir: Path, run: Runner) -> bool:
    with tempfile.TemporaryDirectory(prefix="tpwarden-sdist-") as tmp:
        got = run([*_pip(), "wheel", "--no-deps", "--no-binary=:all:", "-q", "-w", tmp, spec])
        wheels = list(Path(tmp).glob("*-none-any.whl")) if got.returncode == 0 else []
        if not wheels:
            return False
        shutil.copyfile(wheels[0], deps_dir / wheels[0].name)
        return True


def build(
    target: Target,
    source: Path | None,
    cache: Path,
    run: Runner = _run,
    dist: md.Distribution | None = None,
) -> Wheelhouse:
    """Assemble ``cache/<target.key>/wheels`` for ``target`` (deps are downloaded once).

    ``source`` None: no source tree; tpwarden's wheel and requirements come from the installed
    distribution (``dist``, this Python's by default)."""
    if source is not None:
        roots = runtime_requirements((source / "pyproject.toml").read_text())
        constraints = source / "requirements" / "constraints.txt"
        pins = read_constraints(constraints.read_text()) if constraints.is_file() else {}
    else:
        dist = dist or provision_repack.installed_distribution()
        # the extras' requirements carry an `extra == ...` marker: resolve() leaves them out.
        # No constraints file without a checkout: the nodes get the versions pip resolved for
        # tpwarden on this control machine.
        roots = [Requirement(r) for r in dist.requires or []]
        pins = installed_versions()
    reqs = resolve(roots, target, pins, _installed_requires)
    base = cache / target.key
    deps_dir, wheels = base / "deps", base / "wheels"
    deps_dir.mkdir(parents=True, exist_ok=True)
    wheels.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(json.dumps(reqs, sort_keys=True).encode()).hexdigest()[:16]
    stamp = deps_dir / f".deps-{key}.json"
    if stamp.is_file():
        report = json.loads(stamp.read_text())
    else:
        built, missing = fetch_dependencies(reqs, target, deps_dir, run)
        report = {"built_from_sdist": built, "missing": missing}
        if not missing:
            stamp.write_text(json.dumps(report))
    tpwarden = tpwarden_wheel(source, base / "tpwarden", run, dist)
    wanted = {canonicalize_name(n) for n in reqs}
    house = Wheelhouse(wheels, built_from_sdist=report["built_from_sdist"])
    house.missing = report["missing"]
    keep = {tpwarden.name}
    for whl in deps_dir.glob("*.whl"):
        if canonicalize_name(whl.name.split("-")[0]) in wanted:
            keep.add(whl.name)
            _link(whl, wheels / whl.name)
    _link(tpwarden, wheels / tpwarden.name)
    for stale in wheels.glob("*.whl"):
        if stale.name not in keep:
            stale.unlink()
    house.wheels = sorted(keep)
    return house


def _link(src: Path, dst: Path) -> None:
    if dst.is_file() and dst.stat().st_size == src.stat().st_size and _sha256(dst) == _sha256(src):
        return
    dst.unlink(missing_ok=True)
    shutil.copyfile(src, dst)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tpwarden.cluster.provision.wheelhouse")
    ap.add_argument("--python-version", required=True, help="node's X.Y, e.g. 3.11")
    ap.add_argument("--machine", required=True, help="node's uname -m, e.g. aarch64")
    ap.add_argument("--glibc", default="2.17", help="node's glibc version, e.g. 2.36")
    ap.add_argument(
        "--source",
        type=Path,
        default=provision_repack.source_checkout(),
        help="tpwarden source tree (default: this checkout; none: the installed distribution)",
    )
    ap.add_argument("--cache", type=Path, required=True, help="wheelhouse cache directory")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"\d+\.\d+", args.python_version):
        ap.error(f"--python-version {args.python_version!r}: expected X.Y")
    target = Target(args.python_version, args.machine, args.glibc)
    try:
        source = args.source.resolve() if args.source else None
        house = build(target, source, args.cache.expanduser())
    except (OSError, RuntimeError, KeyError, subprocess.TimeoutExpired) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "target": target.key}))
        return 1
    print(json.dumps({"target": target.key, **house.to_json()}))
    return 1 if house.missing else 0


if __name__ == "__main__":
    sys.exit(main())
