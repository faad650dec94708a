"""The experiment plan file (plan.yml), read and validated before anything runs.

    restore_by: "06:30"          # local time in `tz` (default: the report's zone), or "+02:00"
    tz: Asia/Seoul
    margin_min: 10               # kept free before the deadline
    bench: quick                 # optional: none, quick or full (as `rollout --bench`)
    eval: {preset: gsm8k, limit: 200}
    variants:
      - name: no-drafter
        set: ["drafter=null"]    # `rollout --set` items, or a mapping {drafter: null}
      - name: thinking
        request: {chat_template_kwargs: {enable_thinking: true}}

A `set` variant restarts the server on the changed settings; a `request` variant changes only
what each request carries (no restart). Every error is a ConfigError at the plan's file and
line, naming the key and a fix (exit 2); nothing reaches a node.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.eval.catalog import PRESETS
from tpwarden.cluster.inventory.yaml_guard import MAX_FILE_BYTES, check_yaml
from tpwarden.cluster.report_settings import clock_time, zone_name
from tpwarden.cluster.rollout.edit import Change, change_of, parse_set

PathKey = tuple[str | int, ...]
RESERVED = ("production", "production-start", "production-end")
BENCH_PRESETS = ("none", "quick", "full")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Sampling(_Model):
    """Sampling parameters a request carries (OpenAI and vLLM's extra ones)."""

    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0)


class RequestChange(_Model):
    """What a request-only variant changes: no restart."""

    chat_template_kwargs: JSONObject = Field(default_factory=dict)
    sampling: Sampling = Sampling()


class EvalChoice(_Model):
    preset: str
    limit: int | None = Field(None, ge=1)

    @field_validator("preset")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"unknown eval preset {value!r} (presets: {', '.join(PRESETS)})")
        return value


class Variant(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,47}$")
    set: list[str] | dict[str, JSONValue] = Field(default_factory=list)
    request: RequestChange | None = None
    note: str | None = None

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED:
            raise ValueError(f"{value!r} is reserved for production's own measurements")
        return value

    @property
    def restarts(self) -> bool:
        """A variant with settings to change restarts the server on them (unless production
        already has them: `check.VariantCheck.restarts` is the answer against an inventory)."""
        return bool(self.set)


class ExperimentPlan(_Model):
    restore_by: str = Field(pattern=r"^\+?\d{1,2}:\d{2}$")
    tz: str | None = None
    margin_min: int = Field(10, ge=0, le=240)
    bench: Literal["none", "quick", "full"] = "none"
    eval: EvalChoice | None = None
    variants: list[Variant] = Field(min_length=1)

    @field_validator("restore_by")
    @classmethod
    def _clock(cls, value: str) -> str:
        clock_time(value.removeprefix("+").zfill(5))
        return value

    @field_validator("tz")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return None if value is None else zone_name(value)


@dataclass(frozen=True)
class LoadedPlan:
    """A validated plan, where each of its values came from, and each variant's changes."""

    path: str
    plan: ExperimentPlan
    lines: dict[PathKey, int] = field(default_factory=dict)
    changes: dict[str, tuple[Change, ...]] = field(default_factory=dict)

    def line(self, path: PathKey) -> int | None:
        """The line of the value at `path`, or of the closest enclosing one."""
        for end in range(len(path), -1, -1):
            found = self.lines.get(tuple(path[:end]))
            if found is not None:
                return found
        return None

    def error(self, path: PathKey, message: str, hint: str | None = None) -> ConfigError:
        return ConfigError(
            message, file=self.path, line=self.line(path), key=_dotted(path), hint=hint
        )


def load_plan(path: str | Path) -> LoadedPlan:
    """Read, bound-check (`yaml_guard`), parse and validate plan.yml; ConfigError (exit 2)
    at file:line otherwise."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", file=name, hint="give the plan file's path") from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=name) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError("file is larger than a plan needs", file=name)
    return parse_plan(data.decode("utf-8", "replace"), name)


def parse_plan(text: str, name: str = "<plan>") -> LoadedPlan:
    check_yaml(text, name)  # syntax, duplicate keys, aliases and depth, at their lines
    try:
        raw = yaml.safe_load(text)
        lines = _lines(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:  # a tag safe_load refuses, a second document
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(str(w) for w in (exc.context, exc.problem) if w)
        raise ConfigError(f"YAML: {what}", file=name,
                          line=mark.line + 1 if mark else None,
                          hint="a plan is one plain YAML document, no tags") from None  # fmt: skip
    if not isinstance(raw, dict):
        raise ConfigError("a plan is a mapping (restore_by, variants...)", file=name, line=1)
    try:
        plan = ExperimentPlan.model_validate(raw)
    except ValidationError as exc:
        raise _translate(LoadedPlan(name, _EMPTY, lines), exc) from None
    loaded = LoadedPlan(name, plan, lines)
    seen: set[str] = set()
    for i, v in enumerate(plan.variants):
        if v.name in seen:
            raise loaded.error(("variants", i, "name"), f"variant {v.name!r} is named twice",
                               hint="each variant's name is its results file: make it unique")  # fmt: skip
        seen.add(v.name)
        if not v.set and (v.request is None or v.request == RequestChange()):
            raise loaded.error(("variants", i), f"variant {v.name!r} changes nothing",
                               hint="give it `set` (restart) or `request` (no restart)")  # fmt: skip
        loaded.changes[v.name] = _changes(loaded, i, v)
    return loaded


def _changes(loaded: LoadedPlan, i: int, v: Variant) -> tuple[Change, ...]:
    """The variant's `set`, parsed as `rollout --set` parses it (one source: rollout.edit)."""
    out = []
    items = v.set.items() if isinstance(v.set, dict) else enumerate(v.set)
    for key, item in items:
        try:
            if isinstance(key, str):
                out.append(change_of(key, item))
            else:
                out.append(parse_set(str(item)))
        except ConfigError as exc:
            raise loaded.error(("variants", i, "set", key), exc.message, exc.hint) from None
    keys = [c.key for c in out]
    if len(set(keys)) != len(keys):
        raise loaded.error(("variants", i, "set"), "a key is set twice", "set each key once")
    return tuple(out)


def _lines(node: yaml.Node | None, path: PathKey = ()) -> dict[PathKey, int]:
    """Each value's (and each key's own) 1-based line, by path."""
    out: dict[PathKey, int] = {}
    if node is None:
        return out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, str(key.value))
            out.update(_lines(value, sub))
            out[sub] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(_lines(item, (*path, i)))
    return out


def _translate(loaded: LoadedPlan, exc: ValidationError) -> ConfigError:
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    path: PathKey = tuple(p for p in err["loc"] if isinstance(p, int) or p in _known(err["loc"]))
    if err["type"] == "extra_forbidden":
        fields = _fields_at(path[:-1])
        close = difflib.get_close_matches(str(path[-1]), fields, n=1, cutoff=0.6)
        fix = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(fields)}"
        return loaded.error(path, "unknown key", fix)
    if err["type"] == "missing":
        return loaded.error(path, "required key is missing", "see docs/experiments.md")
    hint = _HINTS.get(str(path[-1]) if path else "")
    if err["type"] == "string_type" and isinstance(err.get("input"), int):
        hint = 'quote it: YAML reads an unquoted 16:30 or 0600 as a number, e.g. "16:30"'
    return loaded.error(path, str(err["msg"]).removeprefix("Value error, "), hint)


_HINTS = {
    "set": "a list of rollout's --set items ['KEY=VALUE', ...] or a mapping {KEY: VALUE}",
    "name": "lower-case letters, digits, '-', '_' and '.', at most 48, e.g. no-drafter",
    "restore_by": 'a local time "06:30" or a duration from now "+02:00", quoted',
}


def _known(loc: tuple[int | str, ...]) -> set[str]:
    """The location's parts that are keys (not pydantic's union-member tags such as 'str')."""
    tags = {"str", "int", "float", "bool", "none", "list[str]", "dict[str,any]"}
    return {p for p in loc if isinstance(p, str) and p not in tags}


_MODELS: dict[str, type[BaseModel]] = {
    "": ExperimentPlan, "variants": Variant, "request": RequestChange, "sampling": Sampling,
    "eval": EvalChoice,
}  # fmt: skip


def _fields_at(path: PathKey) -> list[str]:
    names = [p for p in path if isinstance(p, str)]
    model = _MODELS.get(names[-1] if names else "", ExperimentPlan)
    return list(model.model_fields)


def _dotted(path: PathKey) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


_EMPTY = ExperimentPlan.model_construct(restore_by="+00:00", variants=[])
