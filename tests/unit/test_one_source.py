"""One source per default (issue 51 item 3): a default path, port or budget of the inventory's
settings is written once, and every other module reads it from there.

The thermal samples' directory was written out in five modules, the agent's port and its disk
budget in three: a change to one left the others behind. Here every settings default that is a
path, a port or a size in MB is looked for, as a literal, in the places a default is written
(a module constant, a parameter's default, a field's default, a `typer.Option` or `Field`
default) in every module of the package: it may stand once, where it is defined (a settings
field, or a named constant that the field and everyone else read; the node package's in
`cluster/durable.py`, which it may import).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel
from tpwarden.cluster import container_settings, report_settings, settings

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("cluster", "watchdog", "node")
MODELS = (settings, container_settings, report_settings)
# (module, line's name) -> why the same value there is another thing
ALLOWED: dict[tuple[str, str], str] = {
    ("watchdog/actuator.py", "EVIDENCE_MAX_CHARS"): "8000 characters of evidence, not a port",
    ("cluster/settings.py", "BENCH_OUTPUT_LEN"): "512 tokens per request, not the 512 MB budget",
}


def scoped(name: str, value: object) -> bool:
    """A path, a port or a size in MB: the defaults that were copied by hand."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return value.startswith("/")
    if isinstance(value, int | float):
        return name == "port" or name.endswith(("_port", "_mb"))
    return False


def settings_defaults() -> dict[object, str]:
    """value -> `Model.field` for every scoped default of the settings models."""
    found: dict[object, str] = {}
    for module in MODELS:
        for model in vars(module).values():
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                continue
            for name, field in model.model_fields.items():
                if scoped(name, field.default):
                    found[field.default] = f"{model.__name__}.{name}"
    return found


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def default_literals(tree: ast.AST) -> Iterator[tuple[int, str, object]]:
    """(line, what, value) for each constant written where a default is written."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                what = t.id if isinstance(t, ast.Name) else ast.unparse(t)
                yield node.lineno, what, node.value.value
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            with_default = positional[len(positional) - len(args.defaults) :]
            pairs = [*zip(with_default, args.defaults, strict=True),
                     *zip(args.kwonlyargs, args.kw_defaults, strict=True)]  # fmt: skip
            for arg, default in pairs:
                if isinstance(default, ast.Constant):
                    yield default.lineno, f"{node.name}({arg.arg}=)", default.value
        elif isinstance(node, ast.Call) and _call_name(node) in ("Option", "Argument", "Field"):
            if node.args and isinstance(node.args[0], ast.Constant):
                yield node.args[0].lineno, f"{_call_name(node)}(...)", node.args[0].value
            for kw in node.keywords:
                if kw.arg == "default" and isinstance(kw.value, ast.Constant):
                    yield kw.value.lineno, f"{_call_name(node)}(default=)", kw.value.value


def literals(text: str, rel: str, defaults: dict[object, str]) -> list[tuple[object, str]]:
    """(value, where) for each default-shaped literal in ``text`` that is a settings default."""
    out = []
    for line, what, value in default_literals(ast.parse(text)):
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        if value not in defaults or (rel, what.split("(")[0]) in ALLOWED:
            continue
        out.append((value, f"{rel}:{line} {what} = {value!r}"))
    return out


def copies(found: list[tuple[object, str]], defaults: dict[object, str]) -> list[str]:
    """Each default written in more than one place, with every place."""
    out = []
    for value, name in defaults.items():
        places = [where for v, where in found if v == value]
        if len(places) > 1:
            out.append(f"{name} ({value!r}) in {len(places)} places: " + "; ".join(places))
    return out


def test_the_check_finds_a_copied_default() -> None:
    text = 'DIR = "/var/log/tpwarden/thermal"\ndef f(port: int = 9411): ...\nPORT = 9411\n'
    defaults = {"/var/log/tpwarden/thermal": "ThermalSpec.dir", 9411: "ThermalSpec.metrics_port"}
    assert copies(literals(text, "m.py", defaults), defaults) == [
        "ThermalSpec.metrics_port (9411) in 2 places: m.py:2 f(port=) = 9411; m.py:3 PORT = 9411"
    ]


def test_the_defaults_scoped_include_the_thermal_ones() -> None:
    found = set(settings_defaults().values())
    assert {"ThermalSpec.dir", "ThermalSpec.metrics_port", "ThermalSpec.disk_budget_mb"} <= found


def test_no_settings_default_is_written_out_twice() -> None:
    defaults = settings_defaults()
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found += literals(path.read_text(encoding="utf-8"), rel, defaults)
    bad = copies(found, defaults)
    assert bad == [], "defaults written out again (read them from their one source):\n" + "\n".join(
        bad
    )
