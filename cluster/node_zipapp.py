"""The one builder of what is zipped for the nodes: the collector and the thermal agent.

A node zipapp holds exactly the import closure of its entry module within tpwarden, read with
`ast` from the package's sources (function-level imports included, ``if TYPE_CHECKING:`` blocks
not: they never run), with minimal package ``__init__`` stubs (a package's own ``__init__`` is
not node code), the pure-Python third-party packages the app names, and a ``__main__`` that
runs the entry's ``main()``. Every other import must be the standard library or a module the
node's ``python3`` provides or can do without: anything else fails the build, so a control-side
import creeping into node code is caught here as well as by import-linter's ``node-side``
contract. The bytes are reproducible (sorted entries, fixed timestamps), so the sha256 says
whether a node runs the current build.

Standard library only (and tpwarden's errors): it reads sources, it imports none of them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import io
import json
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tpwarden.cluster.errors import TpwardenError

PACKAGE = "tpwarden"
_STAMP = (2020, 1, 1, 0, 0, 0)
_SHEBANG = b"#!/usr/bin/env python3\n"
_STUB = '"""tpwarden (node-side subset)."""\n'


class NodeZipappError(TpwardenError):
    """A node app's code imports what the node cannot have, or its sources cannot be found."""


@dataclass(frozen=True, kw_only=True)
class Bundled:
    """A pure-Python third-party package copied whole into the zipapp, less ``skip``
    (its subpackages for frameworks the app does not use)."""

    name: str
    skip: frozenset[str] = frozenset()


@dataclass(frozen=True, kw_only=True)
class NodeApp:
    """What runs on a node: ``entry`` (a module with ``main() -> int``), the third-party
    packages copied in (``bundled``), and those the node's python3 has or does without
    (``on_node``: each import of them is guarded or optional)."""

    entry: str
    bundled: tuple[Bundled, ...] = ()
    on_node: frozenset[str] = frozenset()


# pynvml (nvidia-ml-py, one pure-Python file) is bundled: the collector runs under the node's
# system python3, which has only the standard library (issue 28 item 7: nothing by hand);
# psutil: optional, /proc/meminfo stands in (cluster.memory).
_NODE_PYTHON = frozenset({"psutil"})
_PYNVML = Bundled(name="pynvml")

COLLECTOR = NodeApp(entry="tpwarden.node.collector", bundled=(_PYNVML,), on_node=_NODE_PYTHON)
THERMAL_AGENT = NodeApp(
    entry="tpwarden.node.thermal.app",
    bundled=(
        _PYNVML,
        Bundled(name="prometheus_client", skip=frozenset({"twisted", "django", "aiohttp"})),
    ),
    on_node=_NODE_PYTHON,
)


# The collector's file name on the node (`NodeSession.run_script` keeps the local name); the
# nodes' SSH gate (tpwarden.node.ssh_gate.COLLECTOR_NAME) runs a python3 script only by it.
COLLECTOR_FILE = "tpwarden-collector.pyz"


class BuiltZipapp(NamedTuple):
    path: Path
    sha256: str


@functools.cache
def _locate(module: str) -> tuple[Path, bool] | None:
    """(source file, is a package) of a tpwarden module; None when the name is no module
    (``tpwarden.x.mod.name``). Locating imports the parent packages, never the module."""
    if module == PACKAGE:
        return Path(), True  # the namespace package: no source of its own
    parent = _locate(module.rpartition(".")[0])
    if parent is None or not parent[1]:
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin), spec.submodule_search_locations is not None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that can run: all of them but the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield stmt
                yield from _runtime_nodes(stmt)
            continue
        yield child
        yield from _runtime_nodes(child)


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """Absolute names a module's source imports, anywhere in it. ``from p import n`` gives
    ``p`` and ``p.n`` (the latter counts only if it turns out to be a module)."""
    here = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, here)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def node_closure(app: NodeApp) -> dict[str, Path]:
    """tpwarden module name -> source file, for the entry and all it imports (packages are
    stubbed, so they are not in it). Raises NodeZipappError on an import the node lacks."""
    allowed = {b.name for b in app.bundled} | app.on_node
    found: dict[str, Path] = {}
    todo = [app.entry]
    while todo:
        module = todo.pop()
        located = _locate(module)
        if located is None or located[1]:
            raise NodeZipappError(f"{module}: not a module of {PACKAGE}'s sources")
        found[module] = located[0]
        for name in sorted(imports_of(located[0].read_text(), module)):
            top = name.partition(".")[0]
            if top != PACKAGE:
                if top not in sys.stdlib_module_names and top not in allowed:
                    raise NodeZipappError(
                        f"{module} imports {name}: not the standard library, not bundled "
                        "and not on the nodes' python3"
                    )
                continue
            target = _locate(name)
            if target is not None:
                if not target[1] and name not in found:
                    todo.append(name)
                continue
            parent = _locate(name.rpartition(".")[0])
            if parent is not None and parent[1]:  # `from tpwarden.x import y`, y no module
                raise NodeZipappError(f"{module} imports {name}: the node has only stub packages")
    return found


def _bundled_files(package: Bundled) -> Iterator[tuple[str, bytes]]:
    spec = importlib.util.find_spec(package.name)
    if spec is None or (not spec.submodule_search_locations and not spec.origin):
        raise NodeZipappError(f"{package.name}: not installed here, cannot bundle it")
    if not spec.submodule_search_locations:  # a single-file module (pynvml.py)
        assert spec.origin is not None
        yield f"{package.name}.py", Path(spec.origin).read_bytes()
        return
    root = Path(next(iter(spec.submodule_search_locations)))
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] not in package.skip:
            yield f"{package.name}/{rel.as_posix()}", path.read_bytes()


def node_zipapp_files(app: NodeApp) -> dict[str, bytes]:
    """Archive name -> bytes: ``__main__.py``, the closure, package stubs, bundled packages."""
    files: dict[str, bytes] = {
        "__main__.py": f"import sys\nfrom {app.entry} import main\nsys.exit(main())\n".encode()
    }
    for module, path in node_closure(app).items():
        parts = module.split(".")
        files["/".join(parts) + ".py"] = path.read_bytes()
        for depth in range(1, len(parts)):
            files.setdefault("/".join(parts[:depth]) + "/__init__.py", _STUB.encode())
    for package in app.bundled:
        files.update(_bundled_files(package))
    return files


def node_zipapp_bytes(app: NodeApp) -> bytes:
    """The zipapp itself: a python3 shebang, then sorted entries with a fixed timestamp."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in sorted(node_zipapp_files(app).items()):
            z.writestr(zipfile.ZipInfo(name, _STAMP), data)
    return _SHEBANG + buf.getvalue()


def build_node_zipapp(app: NodeApp, dest: str | Path) -> BuiltZipapp:
    """Write ``app``'s zipapp to ``dest`` (owner-only); return its path and sha256 hex digest."""
    data = node_zipapp_bytes(app)
    path = Path(dest)
    path.write_bytes(data)
    path.chmod(0o600)
    return BuiltZipapp(path, hashlib.sha256(data).hexdigest())


def main(argv: list[str] | None = None) -> int:
    """``python -m tpwarden.cluster.node_zipapp digest``: the JSON provisioning writes for
    the nodes' SSH gate (`tpwarden.node.ssh_gate`): the sha256 of the collector this install
    builds."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["digest"]:
        print("usage: python -m tpwarden.cluster.node_zipapp digest", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tpwarden-") as tmp:
        built = build_node_zipapp(COLLECTOR, Path(tmp) / COLLECTOR_FILE)
    print(json.dumps({"collector_sha256": [built.sha256]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
