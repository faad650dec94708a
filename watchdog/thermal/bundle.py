"""The self-contained agent zipapp for nodes that have only Debian's python3 (+ pynvml).

It holds ``servectl/cluster/durable.py``, ``errors.py``, ``gpu.py``, ``memory.py``,
``servectl/watchdog/thermal/*`` and the pure-Python
``prometheus_client`` package of this interpreter; package ``__init__`` files are minimal stubs
so that nothing else of servectl is imported on the node. Byte-for-byte reproducible (fixed
timestamps, sorted entries), so its sha256 says whether a node runs the current build.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import prometheus_client

_STAMP = (2020, 1, 1, 0, 0, 0)
_MAIN = "import sys\nfrom servectl.watchdog.thermal.nodeapp import main\nsys.exit(main())\n"
_STUBS = {
    "servectl/__init__.py": '"""servectl (node-side subset)."""\n',
    "servectl/cluster/__init__.py": '"""servectl (node-side subset)."""\n',
    "servectl/watchdog/__init__.py": '"""servectl (node-side subset)."""\n',
}
# Subpackages of prometheus_client for frameworks the agent does not use.
_SKIP_PROM = {"twisted", "django", "aiohttp"}


def _sources() -> dict[str, bytes]:
    root = Path(__file__).resolve().parents[2]
    files: dict[str, bytes] = {"__main__.py": _MAIN.encode()}
    files.update({k: v.encode() for k, v in _STUBS.items()})
    for module in ("durable.py", "errors.py", "gpu.py", "memory.py"):
        files[f"servectl/cluster/{module}"] = (root / "cluster" / module).read_bytes()
    for p in sorted((root / "watchdog" / "thermal").glob("*.py")):
        files[f"servectl/watchdog/thermal/{p.name}"] = p.read_bytes()
    prom = Path(prometheus_client.__file__).resolve().parent
    for p in sorted(prom.rglob("*.py")):
        rel = p.relative_to(prom)
        if rel.parts[0] in _SKIP_PROM:
            continue
        files[f"prometheus_client/{rel.as_posix()}"] = p.read_bytes()
    return files


def build_zipapp_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in sorted(_sources().items()):
            z.writestr(zipfile.ZipInfo(name, _STAMP), data)
    return b"#!/usr/bin/env python3\n" + buf.getvalue()


def build_zipapp(dest: str | Path) -> tuple[Path, str]:
    """Write the zipapp to ``dest``; return its path and sha256 hex digest."""
    data = build_zipapp_bytes()
    dest = Path(dest)
    dest.write_bytes(data)
    dest.chmod(0o600)
    return dest, hashlib.sha256(data).hexdigest()
