"""Build the lab's NVML stand-in (``libnvidia-ml.so.1``) from ``nvml_stub.c``.

The stub is compiled against NVIDIA's real ``nvml.h`` so its exports carry NVIDIA's exact
signatures and constants. The header comes from the PyPI package ``nvidia-nvml-dev`` (headers
only). Where it is looked for, in order:

1. ``$TPWARDEN_NVML_INCLUDE`` (a directory holding ``nvml.h``);
2. an installed ``nvidia-nvml-dev`` in this interpreter (``nvidia/cu*/include/nvml.h``);
3. a cached copy in ``OUT_DIR/.nvml-dev/``, fetched once with ``pip download`` (no install).

The build is cached: it reruns only when the source, the header or the compiler flags change.

Usage: ``python -m tpwarden.lab.nvml.build OUT_DIR`` prints the path of the built library.
"""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tpwarden.cluster.errors import LabError

SOURCE = Path(__file__).with_name("nvml_stub.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
NVML_DEV_REQUIREMENT = "nvidia-nvml-dev==13.5.37"
CFLAGS = (
    "-shared",
    "-fPIC",
    "-O2",
    "-Wall",
    "-Wno-deprecated-declarations",
    "-fvisibility=hidden",
    f"-Wl,-soname,{LIBRARY_NAME}",
)
_TIMEOUT_S = 300


def find_nvml_header(cache_dir: Path) -> Path:
    """Return the path of NVIDIA's ``nvml.h``, downloading ``nvidia-nvml-dev`` if needed."""
    env_dir = os.environ.get("TPWARDEN_NVML_INCLUDE")
    if env_dir:
        header = Path(env_dir) / "nvml.h"
        if not header.is_file():
            raise LabError(f"TPWARDEN_NVML_INCLUDE={env_dir} holds no nvml.h")
        return header
    for entry in sys.path:
        hits = sorted(glob.glob(os.path.join(entry, "nvidia", "cu*", "include", "nvml.h")))
        if hits:
            return Path(hits[-1])
    cached = cache_dir / "nvml.h"
    if cached.is_file():
        return cached
    return _download_header(cache_dir)


def _download_header(cache_dir: Path) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        argv = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--quiet", "-d", tmp, NVML_DEV_REQUIREMENT,
        ]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LabError(f"cannot fetch {NVML_DEV_REQUIREMENT}: {exc}") from exc
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise LabError(
                f"pip download {NVML_DEV_REQUIREMENT} failed ({proc.returncode}): {tail}; "
                "install it or set TPWARDEN_NVML_INCLUDE to a directory holding nvml.h"
            )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise LabError(f"pip download {NVML_DEV_REQUIREMENT} produced no wheel")
        with zipfile.ZipFile(wheels[0]) as whl:
            names = [n for n in whl.namelist() if n.endswith("/include/nvml.h")]
            if not names:
                raise LabError(f"{wheels[0].name} holds no include/nvml.h")
            data = whl.read(names[0])
        partial = cache_dir / "nvml.h.part"
        partial.write_bytes(data)
        partial.replace(cache_dir / "nvml.h")
    return cache_dir / "nvml.h"


def _fingerprint(source: Path, header: Path, cc: str) -> str:
    digest = hashlib.sha256()
    for part in (source.read_bytes(), header.read_bytes(), " ".join((cc, *CFLAGS)).encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def build_nvml_stub(out_dir: Path) -> Path:
    """Compile the stub into ``out_dir/libnvidia-ml.so.1`` (cached) and return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    header = find_nvml_header(out_dir / ".nvml-dev")
    cc = os.environ.get("CC", "gcc")
    library = out_dir / LIBRARY_NAME
    stamp = out_dir / f"{LIBRARY_NAME}.sha256"
    fingerprint = _fingerprint(SOURCE, header, cc)
    if library.is_file() and stamp.is_file() and stamp.read_text().strip() == fingerprint:
        return library
    partial = out_dir / f".{LIBRARY_NAME}.{os.getpid()}.tmp"
    argv = [cc, *CFLAGS, "-I", str(header.parent), "-o", str(partial), str(SOURCE)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"cannot run {cc} to build the NVML stub: {exc}") from exc
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise LabError(f"building the NVML stub failed ({proc.returncode}):\n{proc.stderr.strip()}")
    partial.replace(library)
    stamp.write_text(fingerprint + "\n")
    return library


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m tpwarden.lab.nvml.build OUT_DIR\n")
        return 2
    try:
        path = build_nvml_stub(Path(args[0]))
    except LabError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
