"""tpwarden model manifest: size + sha256 of every file in a model directory.

Runs on a node with its own python3 (standard library only), copied there by Ansible's script
module. Parameters come from the environment (nothing is built into a command line):

    TPWARDEN_MANIFEST_ACTION  ensure | check
    TPWARDEN_MANIFEST_DIR     the model directory
    TPWARDEN_MANIFEST_TEXT    check: the reference manifest's text
    TPWARDEN_MANIFEST_VERIFY  check: auto (default) | sha256 (read every byte) | size (quick)
    TPWARDEN_MANIFEST_STATE   check: this node's record of its last full check (a JSON file)
    TPWARDEN_MANIFEST_DRY     1 = report what would be written, write nothing (--check)

ensure: write DIR/MANIFEST.sha256 if it is missing (first use) and print it.
check:  compare DIR with the reference manifest; print the differences (never copies).

auto reads every byte (sha256) the first time on a node, and again when the manifest changed
since; otherwise it compares each file's size with the manifest and its modification time with
the node's record of the last full check, and rehashes only the files whose time moved: the
model (about 185 GB per node on the field) is not reread on every provision. What was done and
what it cost (bytes read, seconds) is in the output: `verify`, `why`, `bytes_hashed`, `seconds`.

Manifest lines: "<sha256>  <size>  <relative path>", sorted by path, after one header line.
"""

import hashlib
import json
import os
import sys
import tempfile
import time

NAME = "MANIFEST.sha256"
HEADER = "# tpwarden manifest v1: sha256  size_bytes  path"


def scan(root, verify="sha256"):
    """{relpath: (size, sha256 or None)} for every regular file under root (the manifest
    itself excluded); symlinks are followed, as the server reads through them."""
    return {rel: (size, _sha256(full) if verify == "sha256" else None)
            for rel, full, size, _ in _walk(root)}  # fmt: skip


def _walk(root):
    """(relpath, path, size, mtime_ns) of every regular file under root but the manifest."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if rel == NAME or not os.path.isfile(full):
                continue
            st = os.stat(full)
            yield rel, full, st.st_size, st.st_mtime_ns


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def render(entries):
    lines = [HEADER]
    for rel in sorted(entries):
        size, digest = entries[rel]
        lines.append(f"{digest}  {size}  {rel}")
    return "\n".join(lines) + "\n"


def parse(text):
    entries = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("  ", 2)
        if len(parts) != 3 or len(parts[0]) != 64 or not parts[1].isdigit():
            raise ValueError(f"manifest line {number} is malformed: {line[:120]!r}")
        entries[parts[2]] = (int(parts[1]), parts[0])
    return entries


def compare(reference, actual):
    """Differences between a reference manifest and a scan (sha256 None: size only)."""
    missing = sorted(set(reference) - set(actual))
    extra = sorted(set(actual) - set(reference))
    size, digest = [], []
    for rel in sorted(set(reference) & set(actual)):
        (rsize, rsha), (asize, asha) = reference[rel], actual[rel]
        if rsize != asize:
            size.append(rel)
        elif asha is not None and rsha != asha:
            digest.append(rel)
    return {
        "missing": missing,
        "size_mismatch": size,
        "sha256_mismatch": digest,
        "extra": extra,
        "ok": not (missing or size or digest),
    }


def ensure(root, dry):
    path = os.path.join(root, NAME)
    if os.path.isfile(path):
        with open(path) as f:
            text = f.read()
        parse(text)
        return {"generated": False, "text": text}
    text = render(scan(root, "sha256"))
    if not dry:
        fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=root)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    return {"generated": True, "text": text}


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def read_record(path):
    """The node's record of its last full check: {manifest, files: {rel: [size, mtime_ns]}}."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else None


def write_record(path, text, root):
    record = {
        "manifest_sha256": _digest(text),
        "checked_at": time.time(),
        "files": {rel: [size, mtime] for rel, _, size, mtime in _walk(root)},
    }
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".record-", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def quick(root, reference, record):
    """Sizes against the manifest, times against the record; files whose time moved (or that
    the record lacks) are rehashed. Returns (scan for compare(), bytes read)."""
    out, read = {}, 0
    for rel, full, size, mtime in _walk(root):
        known = record["files"].get(rel)
        if rel in reference and size == reference[rel][0] and known == [size, mtime]:
            out[rel] = (size, None)  # unchanged since the full check: its sha256 stands
            continue
        out[rel] = (size, _sha256(full) if size == reference.get(rel, (None,))[0] else None)
        read += size if out[rel][1] is not None else 0
    return out, read


def check(root, text, verify, state, dry):
    """Compare root with the reference manifest by `verify` (auto, sha256, size)."""
    reference = parse(text)
    record = read_record(state) if state and verify == "auto" else None
    start = time.monotonic()
    if verify == "auto" and record and record.get("manifest_sha256") == _digest(text):
        when = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(record.get("checked_at", 0)))
        actual, read = quick(root, reference, record)
        done = {"verify": "size+mtime", "why": f"a full sha256 check recorded at {when}"}
    elif verify == "size":
        actual, read = scan(root, "size"), 0
        done = {"verify": "size", "why": "requested (sizes only)"}
    else:
        actual = scan(root, "sha256")
        read = sum(size for size, _ in actual.values())
        why = {"sha256": "requested", "auto": "no record of a full check on this node"}[verify]
        if verify == "auto" and record:
            why = "the manifest changed since the last full check"
        done = {"verify": "sha256", "why": why}
    doc = {**compare(reference, actual), **done, "bytes_hashed": read}
    doc["seconds"] = round(time.monotonic() - start, 1)
    if doc["ok"] and done["verify"] == "sha256" and state and not dry:
        write_record(state, text, root)
        doc["recorded"] = state
    return doc


def main():
    env = os.environ
    action, root = env.get("TPWARDEN_MANIFEST_ACTION"), env.get("TPWARDEN_MANIFEST_DIR", "")
    doc = {"action": action, "dir": root, "ok": True, "error": None}
    dry = env.get("TPWARDEN_MANIFEST_DRY") == "1"
    try:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root} is not a directory on this node")
        if action == "ensure":
            doc.update(ensure(root, dry))
        elif action == "check":
            verify = env.get("TPWARDEN_MANIFEST_VERIFY") or "auto"
            if verify not in ("auto", "sha256", "size"):
                raise ValueError(f"TPWARDEN_MANIFEST_VERIFY {verify!r}: auto, sha256 or size")
            text = env.get("TPWARDEN_MANIFEST_TEXT", "")
            doc.update(check(root, text, verify, env.get("TPWARDEN_MANIFEST_STATE"), dry))
            reference = parse(text)
            doc["files"], doc["bytes"] = len(reference), sum(s for s, _ in reference.values())
        else:
            raise ValueError("TPWARDEN_MANIFEST_ACTION must be ensure or check")
    except (OSError, ValueError) as e:
        doc["ok"], doc["error"] = False, f"{type(e).__name__}: {e}"
    json.dump(doc, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
