"""Docs and docstrings name code that exists (issue 31 item 7).

What is checked, in README.md, docs/*.md and every module docstring of the repository's Python
(cluster/, node/, watchdog/, bench/, scripts/, tools/):

1. Dotted names `tpwarden.a.b`: the longest prefix that imports is a module and the rest are its
   attributes, or the name is a key of the inventory's `tpwarden` variable (its settings:
   `tpwarden.watchdog.alert_webhook` is a key, `tpwarden.watchdog.daemon` a module). The old
   import name `servectl.` never resolves. In backticks, `cluster.x`, `watchdog.x` and `node.x`
   are read as `tpwarden.` + the name (or a settings key without the prefix). A name whose
   last part is a file suffix (`tpwarden.yml`, `watchdog.lock`) is a file name, not checked.
2. Repository paths starting with cluster/, node/, watchdog/, docs/, scripts/, bench/, tools/,
   playbooks/, tests/ or requirements/ exist (a `#anchor` is cut; a `*` must match a file).
3. README's architecture tree: every entry exists under the folder it is drawn in.
4. In a module docstring, a bare file name `x.py` is a file in that module's folder; `x.py:N`
   (a file and line inside a quoted log line) is someone else's file, not checked.

Exceptions live in ALLOWED, each with its reason; an entry that no longer matches anything fails.
"""

from __future__ import annotations

import ast
import importlib
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from tpwarden.cluster.settings import TpwardenSettings

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = ("cluster", "node", "watchdog", "bench", "scripts", "tools")
TOP = r"cluster|node|watchdog|docs|scripts|bench|tools|playbooks|tests|requirements"
DOTTED = re.compile(r"(?<![\w.])(?:tpwarden|servectl)(?:\.[A-Za-z_]\w*)+")
SHORT = re.compile(r"`((?:cluster|watchdog|node)(?:\.[A-Za-z_]\w*)+)`")
PATH = re.compile(rf"(?<![\w/.~-])(?:{TOP})/[\w./*-]*")
BARE = re.compile(r"(?<![\w/.-])([\w-]+\.py)\b(?!:)")
FILE_SUFFIXES = {"yml", "yaml", "json", "jsonl", "lock", "md", "py", "sh", "txt", "toml", "whl"}

# (where, name) -> why it is allowed not to resolve. Keep it short; every entry is checked.
ALLOWED: dict[tuple[str, str], str] = {
    ("node/pyspy.py", "gloo_rank.py"): "a sample py-spy dump: the profiled process's script",
}


def texts() -> Iterator[tuple[str, str]]:
    """(where, text): the Markdown files, and each Python module's docstring."""
    for doc in DOCS:
        yield doc.relative_to(ROOT).as_posix(), doc.read_text(encoding="utf-8")
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts or "__pycache__" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            doc = ast.get_docstring(tree, clean=False)
            if doc:
                yield path.relative_to(ROOT).as_posix(), doc


def _models(annotation: typing.Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation (X, X | None, list[X], Annotated[X, ...])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def settings_key(parts: list[str]) -> bool:
    """True when `parts` is a key path of the `tpwarden` settings (a section or a field)."""
    models: list[type[BaseModel]] = [TpwardenSettings]
    for i, part in enumerate(parts):
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return False
        models = [m for f in fields for m in _models(f.annotation)]
        if not models:  # a plain field (str, dict, list): nothing further to walk
            return i == len(parts) - 1
    return True


def code_name(name: str) -> bool:
    """True when a prefix of `name` imports and the rest are attributes of it."""
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def resolves(name: str) -> bool:
    if name.rsplit(".", 1)[1] in FILE_SUFFIXES:
        return True  # a file name (tpwarden.yml), not a dotted name
    if name.startswith("servectl."):
        return False  # the old import name: nothing is installed under it any more
    parts = name.split(".")
    return code_name(name) or settings_key(parts[1:])


def path_exists(token: str) -> bool:
    token = token.split("#")[0].rstrip(".")
    if "*" in token:
        return any(ROOT.glob(token))
    return (ROOT / token).exists()


def tree_entries(readme: str) -> Iterator[str]:
    """The paths README's architecture tree draws: an entry is `name  description` at indent 0,
    2 or 4, and sits in the folder of the last entry one level up."""
    block = readme.split("## Architecture", 1)[1].split("```", 2)[1]
    folders: dict[int, str] = {}
    for line in block.splitlines():
        m = re.match(r"^( *)([\w.*/-]+/|[\w*-]+\.py)(?: |$)", line)
        if not m or len(m.group(1)) not in (0, 2, 4):
            continue
        depth, name = len(m.group(1)) // 2, m.group(2)
        path = "".join(folders[d] for d in range(depth)) + name
        if name.endswith("/"):
            folders[depth] = name
        yield path


def problems() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for where, text in texts():
        names = set(DOTTED.findall(text))
        for short in SHORT.findall(text):
            if not settings_key(short.split(".")):
                names.add("tpwarden." + short)
        found += [(where, n) for n in sorted(names) if not resolves(n)]
        found += [(where, p) for p in sorted(set(PATH.findall(text))) if not path_exists(p)]
        if where.endswith(".py"):
            folder = (ROOT / where).parent
            found += [
                (where, b) for b in sorted(set(BARE.findall(text))) if not (folder / b).exists()
            ]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found += [("README.md tree", p) for p in tree_entries(readme) if not path_exists(p)]
    return found


def test_every_name_and_path_in_the_docs_resolves() -> None:
    stale = [(w, n) for w, n in problems() if (w, n) not in ALLOWED]
    assert stale == [], "\n".join(f"{w}: {n}" for w, n in stale)


def test_every_allowed_exception_is_still_needed() -> None:
    assert set(ALLOWED) <= set(problems())


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("tpwarden.watchdog.daemon.Watchdog", True),  # a module's attribute
        ("tpwarden.watchdog.alert_webhook_format", True),  # a settings key
        ("tpwarden.report.deliver_at", True),
        ("tpwarden.secrets.api_key.env", True),  # through SecretRef | None
        ("tpwarden.watchdog.daemon.NoSuchThing", False),
        ("tpwarden.cluster.no_such_module", False),
        ("tpwarden.watchdog.no_such_key", False),
        ("servectl.secrets", False),
        ("tpwarden.yml", True),  # a file name
    ],
)
def test_the_resolver_itself(name: str, ok: bool) -> None:
    assert resolves(name) is ok


def test_the_tree_reader_sees_nested_folders() -> None:
    readme = "## Architecture\n```\ncluster/  x\n  control/  y\n    plan.py  z\n  spec.py  w\n```\n"
    assert list(tree_entries(readme)) == [
        "cluster/",
        "cluster/control/",
        "cluster/control/plan.py",
        "cluster/spec.py",
    ]
