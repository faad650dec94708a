"""tpwarden's own wheel for the nodes when there is no source tree: repacked from the installed
distribution.

A control machine set up with ``pip install 'tpwarden[control]'`` has no checkout to build the
nodes' wheel from, and pip keeps no copy of the wheel it installed (its cache is optional, keyed by
download URL, and may be pruned or disabled). What pip does keep is exact: the installed files and
their RECORD (path, sha256 and size of every file, copied from the wheel's own RECORD). A wheel is
a zip of those files and its ``.dist-info``, so it is rebuilt from them:

* every RECORD entry inside site-packages, each checked against its sha256 first: a locally
  edited install is refused, never shipped to the nodes as if it were the release;
* minus what pip itself made at install time: the console scripts outside site-packages (pip
  writes them again from ``entry_points.txt`` on the node), ``__pycache__``, and the dist-info's
  INSTALLER, REQUESTED and direct_url.json; RECORD is written anew;
* entries in a fixed order with a fixed timestamp: the same installed files give the same wheel
  bytes, so a second provisioning run has nothing to install.

Standard library only (it runs in any environment tpwarden is installed in). A checkout keeps
building from source (``wheelhouse.build_tpwarden_wheel``); `source_checkout` tells
which case this is.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import re
import stat
import time
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

DIST_NAME = "tpwarden"
# Written by pip when it installs, not part of the wheel (RECORD is rewritten)
_INSTALLER_FILES = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}
_ZIP_EPOCH_MIN = 315532800  # 1980-01-01: the earliest time a zip entry can hold


class RepackError(RuntimeError):
    """The installed distribution cannot be turned back into a wheel (named why)."""


@dataclass(frozen=True)
class Entry:
    """One file of the wheel: its name in the archive, where it is, its RECORD hash and mode."""

    arcname: str
    path: Path
    sha256: str  # RECORD's form: urlsafe base64, no padding
    executable: bool


def source_checkout() -> Path | None:
    """The tpwarden checkout this code runs from (an editable install or the tree itself), or
    None when tpwarden is installed (no ``pyproject.toml`` beside the package's folders)."""
    cluster = resources.files("tpwarden.cluster")
    if not isinstance(cluster, Path):  # a zipped import: certainly no checkout
        return None
    root = cluster.resolve().parent
    return root if (root / "pyproject.toml").is_file() and (root / "cluster").is_dir() else None


def installed_distribution(name: str = DIST_NAME) -> md.Distribution:
    """The installed distribution whose files are the tpwarden running here. Not merely the first
    one named tpwarden on sys.path: a checkout's ``tpwarden.egg-info`` or a second environment
    may shadow it. A checkout (editable install) is refused: it is built from source instead."""
    root = source_checkout()
    if root is not None:
        raise RepackError(
            f"tpwarden runs from the checkout {root} (an editable install): build the nodes' "
            "wheel from that source (--source)"
        )
    running = Path(str(resources.files("tpwarden.cluster") / "__init__.py")).resolve()
    for dist in md.distributions(name=name):
        for item in dist.files or ():
            if item.as_posix() == "tpwarden/cluster/__init__.py":
                if Path(str(item.locate())).resolve() == running:
                    return dist
    raise RepackError(f"no installed {name} distribution owns {running}: install it from a wheel")


def wheel_entries(dist: md.Distribution) -> list[Entry]:
    """The files the wheel had, from RECORD, each verified against its recorded sha256."""
    scripts = {
        ep.name for ep in dist.entry_points if ep.group in ("console_scripts", "gui_scripts")
    }
    entries: list[Entry] = []
    for item in dist.files or ():
        parts = item.parts
        if parts[0] == "..":  # outside site-packages: only the scripts pip generates may be here
            if item.name not in scripts:
                raise RepackError(f"{item} is installed outside site-packages: cannot repack it")
            continue
        if "__pycache__" in parts or item.suffix == ".pyc":
            continue
        if parts[0].endswith(".dist-info") and len(parts) == 2 and item.name in _INSTALLER_FILES:
            continue
        if item.hash is None or item.hash.mode != "sha256":
            raise RepackError(f"{item} has no sha256 in RECORD: not installed from a wheel")
        path = Path(str(item.locate()))
        got = _record_hash(path.read_bytes())
        if got != item.hash.value:
            raise RepackError(
                f"{path} differs from the installed release (RECORD): reinstall tpwarden, or "
                "provision from a checkout (--source)"
            )
        executable = bool(path.stat().st_mode & stat.S_IXUSR)
        entries.append(Entry(item.as_posix(), path, got, executable))
    if not any(e.arcname.endswith(".dist-info/METADATA") for e in entries):
        raise RepackError(f"{dist.metadata['Name']}: RECORD lists no METADATA")
    return entries


def installed_digest(entries: list[Entry]) -> str:
    """Names and (verified) hashes of the wheel's files: equal iff the repacked wheel would be."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e.arcname):
        h.update(f"{e.arcname}\0{e.sha256}\0{int(e.executable)}\n".encode())
    return h.hexdigest()[:16]


def wheel_filename(dist: md.Distribution, entries: list[Entry]) -> str:
    """``{name}-{version}-{tags}.whl`` from METADATA and the dist-info's WHEEL ``Tag`` lines."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    (wheel_file,) = [e for e in entries if e.arcname.endswith(".dist-info/WHEEL")]
    tags = [
        line.split(":", 1)[1].strip()
        for line in wheel_file.path.read_text().splitlines()
        if line.startswith("Tag:")
    ]
    if not tags:
        raise RepackError(f"{wheel_file.path} names no Tag")
    fields = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
    return f"{name}-{dist.version}-{'-'.join('.'.join(f) for f in fields)}.whl"


def repack(dist: md.Distribution, out: Path, epoch: int) -> Path:
    """Write the distribution's wheel into ``out`` (cached by `installed_digest`)."""
    entries = wheel_entries(dist)
    digest = installed_digest(entries)
    out.mkdir(parents=True, exist_ok=True)
    done = out / f".tpwarden-installed-{digest}"
    if done.is_file() and (out / done.read_text().strip()).is_file():
        return out / done.read_text().strip()
    target = out / wheel_filename(dist, entries)
    tmp = target.with_name(target.name + ".part")
    _write_wheel(tmp, entries, epoch)
    for old in out.glob("tpwarden-*.whl"):
        old.unlink()
    tmp.replace(target)
    for old in out.glob(".tpwarden-*"):
        old.unlink()
    done.write_text(target.name + "\n")
    return target


def _write_wheel(path: Path, entries: list[Entry], epoch: int) -> None:
    # the package's files first, the dist-info after, RECORD last (as wheel builders order them)
    ordered = sorted(entries, key=lambda e: (".dist-info/" in e.arcname, e.arcname))
    dist_info = next(e.arcname.split("/")[0] for e in entries if ".dist-info/" in e.arcname)
    t = time.gmtime(max(epoch, _ZIP_EPOCH_MIN))
    stamp = (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for e in ordered:
            data = e.path.read_bytes()
            zf.writestr(_info(e.arcname, stamp, e.executable), data)
            record.append(f"{e.arcname},sha256={e.sha256},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        zf.writestr(_info(f"{dist_info}/RECORD", stamp, False), "\n".join(record) + "\n")


def _info(
    name: str, stamp: tuple[int, int, int, int, int, int], executable: bool
) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=stamp)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    return info


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
