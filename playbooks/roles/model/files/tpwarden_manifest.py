"""tpwarden model manifest: size + sha256 of every file in a model directory.

Runs on a node with its own python3 (standard library only), copied there by Ansible's script
module. Parameters come from the environment (nothing is built into a command line):

    TPWARDEN_MANIFEST_ACTION  ensure | check
    TPWARDEN_MANIFEST_DIR     the model directory
    TPWARDEN_MANIFEST_TEXT    check: the reference manifest's text
    TPWARDEN_MANIFEST_VERIFY  check: sha256 (read every byte, default) | size (quick)
    TPWARDEN_MANIFEST_DRY     ensure: 1 = report what would be written, write nothing

ensure: write DIR/MANIFEST.sha256 if it is missing (first use) and print it.
check:  compare DIR with the reference manifest; print the differences (never copies).

Manifest lines: "<sha256>  <size>  <relative path>", sorted by path, after one header line.
"""

import hashlib
import json
import os
import sys
import tempfile

NAME = "MANIFEST.sha256"
HEADER = "# tpwarden manifest v1: sha256  size_bytes  path"


def scan(root, verify="sha256"):
    """{relpath: (size, sha256 or None)} for every regular file under root (the manifest
    itself excluded); symlinks are followed, as the server reads through them."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if rel == NAME or not os.path.isfile(full):
                continue
            size = os.path.getsize(full)
            out[rel] = (size, _sha256(full) if verify == "sha256" else None)
    return out


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


def main():
    env = os.environ
    action, root = env.get("TPWARDEN_MANIFEST_ACTION"), env.get("TPWARDEN_MANIFEST_DIR", "")
    doc = {"action": action, "dir": root, "ok": True, "error": None}
    try:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root} is not a directory on this node")
        if action == "ensure":
            doc.update(ensure(root, env.get("TPWARDEN_MANIFEST_DRY") == "1"))
        elif action == "check":
            verify = env.get("TPWARDEN_MANIFEST_VERIFY", "sha256")
            reference = parse(env.get("TPWARDEN_MANIFEST_TEXT", ""))
            doc.update(compare(reference, scan(root, verify)))
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
