"""Write the sample night that `tpwarden report --sample` shows: cluster/data/sample-night.tar.gz.

    python tools/sample_night.py [--out cluster/data/sample-night.tar.gz]

The night is tests/unit/night_builder.py's (the real thermal agent and writer, the real watchdog
daemon, the bench writer; 20 minutes of a 4-node cluster from 22:00 KST on 2026-12-02: a heat
fault with thermal throttling on node2, node3's agent down for a while, a busy stretch, a hang
and the watchdog's restart, a bench sweep and an eval run). The archive is reproducible: sorted
entries, fixed times and owners, no gzip timestamp.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.unit.night_builder import T0, build_night  # noqa: E402

DEFAULT_OUT = ROOT / "cluster" / "data" / "sample-night.tar.gz"


def _fixed_pid(data: bytes, pid: int = 4242) -> bytes:
    lines = []
    for line in data.decode("utf-8").splitlines():
        rec = json.loads(line)
        if "pid" in rec:
            rec["pid"] = pid
        lines.append(json.dumps(rec))
    return ("\n".join(lines) + "\n").encode("utf-8")


def pack(night: Path) -> bytes:
    """The night's files as a reproducible .tar.gz (paths relative to the night)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in night.rglob("*") if p.is_file()):
            data = path.read_bytes()
            if path.name == "events.jsonl":  # the daemon's pid: this process's, not the night's
                data = _fixed_pid(data)
            info = tarfile.TarInfo(path.relative_to(night).as_posix())
            info.size, info.mode, info.mtime = len(data), 0o644, int(T0)
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tpwarden-night-") as tmp:
        night = build_night(Path(tmp))
        data = pack(night["dir"])
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data)} bytes, {night['restarts']} restart)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
