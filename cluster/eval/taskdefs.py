"""lm-eval's own task definitions, read from an installed lm_eval package's `tasks/` folder:
a task's config with its `include:` chain merged, a group's leaf tasks (through subgroups and
tags). Used to check the presets against lm-eval 0.4.13 and to find each task's datasets for
`eval datasets fetch`.

lm-eval ships ~14,000 task YAMLs. Indexing reads each file's text and looks only at its
top-level `task:`/`group:`/`tag:` lines (a full YAML parse of all of them takes tens of
seconds); only the files a name resolves to are parsed, with a loader that keeps lm-eval's
`!function` tags as strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.eval.presets import EvalError

_KEY = r"""^["']?({key})["']?\s*:\s*"""
_SCALAR = r"""["']?([\w.\-]+)["']?\s*(?:#.*)?$"""
_TASK = re.compile(_KEY.format(key="task") + _SCALAR, re.M)
_GROUP = re.compile(_KEY.format(key="group") + _SCALAR, re.M)
_TAG_SCALAR = re.compile(_KEY.format(key="tag") + _SCALAR, re.M)
_TAG_FLOW = re.compile(_KEY.format(key="tag") + r"\[(.*)\]", re.M)
_TAG_BLOCK = re.compile(_KEY.format(key="tag") + r"\n((?:[ \t]+-[^\n]*\n?)+)", re.M)
_MAX_DEPTH = 10


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads lm-eval's `!function module.name` as the string it names."""


def _function(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return f"!function {loader.construct_scalar(node)}"  # type: ignore[arg-type]


_Loader.add_constructor("!function", _function)


@dataclass(frozen=True)
class TaskIndex:
    """Where each task, group and tag of a `tasks/` folder is defined."""

    root: Path
    tasks: Mapping[str, Path] = field(default_factory=dict)
    groups: Mapping[str, Path] = field(default_factory=dict)
    tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # tag -> task names


def _tags(text: str) -> list[str]:
    out = [m.group(2) for m in _TAG_SCALAR.finditer(text)]
    for m in _TAG_FLOW.finditer(text):
        out += [t.strip().strip("'\"") for t in m.group(2).split(",") if t.strip()]
    for m in _TAG_BLOCK.finditer(text):
        out += [line.strip()[1:].strip().strip("'\"") for line in m.group(2).splitlines()]
    return out


def index_tasks(root: Path) -> TaskIndex:
    """Scan every `*.yaml` under `root` (first definition of a name wins, in path order)."""
    tasks: dict[str, Path] = {}
    groups: dict[str, Path] = {}
    tags: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.yaml")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        group = _GROUP.search(text)
        task = _TASK.search(text)
        if group and not task:  # a group file: `task:` is a list
            groups.setdefault(group.group(2), path)
        elif task:
            name = task.group(2)
            tasks.setdefault(name, path)
            for tag in _tags(text):
                tags.setdefault(tag, []).append(name)
    return TaskIndex(root, tasks, groups, {k: tuple(v) for k, v in tags.items()})


def load_config(path: Path, depth: int = 0) -> JSONObject:
    """A task YAML with its `include:` chain merged (the including file's keys win)."""
    if depth > _MAX_DEPTH:
        raise EvalError(f"{path}: include chain deeper than {_MAX_DEPTH}")
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader) or {}
    except (OSError, yaml.YAMLError) as e:
        raise EvalError(f"{path}: not a readable task YAML ({e})") from None
    include = doc.pop("include", None)
    if not include:
        return dict(doc)
    base = load_config(path.parent / str(include), depth + 1)
    return {**base, **doc}


def resolve(index: TaskIndex, name: str, depth: int = 0) -> list[JSONObject]:
    """The leaf task configs `name` (a task, a group or a tag) runs, in definition order."""
    if depth > _MAX_DEPTH:
        raise EvalError(f"{name}: group nesting deeper than {_MAX_DEPTH}")
    if name in index.tasks:
        return [load_config(index.tasks[name])]
    if name in index.groups:
        group = load_config(index.groups[name])
        out: list[JSONObject] = []
        for entry in group.get("task") or []:
            out += _entry(index, entry, index.groups[name], depth)
        return out
    if name in index.tags:
        return [cfg for t in index.tags[name] for cfg in resolve(index, t, depth + 1)]
    raise EvalError(f"{name}: no task, group or tag of that name under {index.root}")


def _entry(index: TaskIndex, entry: JSONValue, where: Path, depth: int) -> list[JSONObject]:
    """One item of a group's `task:` list: a name, or an inline config over a named task."""
    if isinstance(entry, str):
        return resolve(index, entry, depth + 1)
    if isinstance(entry, Mapping) and isinstance(entry.get("task"), str):
        inline = dict(entry)
        base: JSONObject = {}
        if inline["task"] in index.tasks:
            base = load_config(index.tasks[inline["task"]])
        elif "include" in inline:
            base = load_config(where.parent / str(inline.pop("include")))
        return [{**base, **inline}]
    if isinstance(entry, Mapping) and isinstance(entry.get("group"), str):
        return resolve(index, entry["group"], depth + 1)
    raise EvalError(f"{where}: group entry {entry!r} is neither a name nor a task config")


def tasks_dir(venv: Path) -> Path | None:
    """`lm_eval/tasks` inside a venv (any python3.x), or None when lm_eval is not there."""
    found = sorted(venv.glob("lib/python3*/site-packages/lm_eval/tasks"))
    return found[-1] if found else None


def dataset_refs(configs: list[JSONObject]) -> list[JSONObject]:
    """The distinct datasets a list of leaf configs load: path, name and kwargs."""
    seen: dict[str, JSONObject] = {}
    for cfg in configs:
        path = cfg.get("dataset_path")
        if not path:
            continue
        ref = {
            "path": path,
            "name": cfg.get("dataset_name"),
            "kwargs": dict(cfg.get("dataset_kwargs") or {}),
        }
        seen.setdefault(repr(sorted(ref.items(), key=lambda kv: kv[0])), ref)
    return list(seen.values())
