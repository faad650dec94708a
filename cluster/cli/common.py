"""Shared CLI plumbing: the inventory option, error rendering and exit codes.

Exit codes: 0 all well, 1 an operation failed or the cluster is unhealthy, 2 bad input
(inventory or arguments; nothing was run). No other code leaves the CLI: a library error with
another code is reported as 1.

JSON: every command that acts or reports takes ``--json`` and prints exactly one JSON document on
stdout, success or failure, built here and only here (`emit_json`, `emit_failure`): the envelope
``schema_version``, ``command``, ``ok``, ``dry_run``, then the command's fields; on failure also
``error: {kind, message, hint, exit_code}``. ``schema_version`` is SCHEMA_VERSION (bumped when a
field changes meaning or goes away; new fields may appear without a bump). The JSON Schema of the
envelope ships as package data: ``tpwarden/cluster/data/cli-envelope.schema.json``.

Text: user, log and inventory text is never rich markup: print it through `Text` or `plain`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

# The options every command shares live in `cli.options`; named here too for older imports.
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY as DEFAULT_INVENTORY
from tpwarden.cluster.cli.options import InventoryOption as InventoryOption
from tpwarden.cluster.cli.options import JsonOption as JsonOption
from tpwarden.cluster.errors import ConfigError, TpwardenError

if TYPE_CHECKING:  # the settings (pydantic) load only when a command reads an inventory
    from tpwarden.cluster.spec import ClusterSpec

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


SCHEMA_VERSION = 1
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def envelope(command: str, doc: dict[str, Any], version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The one JSON envelope: schema_version, command, ok, dry_run, then ``doc``'s fields
    (``ok`` defaults to true and ``dry_run`` to false when ``doc`` does not say). A document
    that is not ok always carries its ``error`` (issue 52 item 10): one the command gave, else
    one said from the document's own fields (`failure_message`)."""
    head = {
        "schema_version": version,
        "command": command,
        "ok": bool(doc.get("ok", True)),
        "dry_run": bool(doc.get("dry_run", False)),
    }
    out = {**head, **{k: v for k, v in doc.items() if k not in head}}
    if not head["ok"] and not isinstance(out.get("error"), dict):
        out["error"] = {
            "kind": "failed",
            "message": failure_message(command, doc),
            "hint": "",
            "exit_code": EXIT_FAILED,
        }
    return out


def failure_message(command: str, doc: dict[str, Any]) -> str:
    """What went wrong, in the words of a failed document's own fields: its reason or message,
    the sources it could not read, the nodes that failed, the notes of its verdict."""
    for key in ("reason", "message"):
        if isinstance(doc.get(key), str) and doc[key]:
            return str(doc[key])
    for key in ("unread", "unreachable"):
        if isinstance(doc.get(key), dict) and doc[key]:
            return "not read: " + "; ".join(f"{k} ({v})" for k, v in sorted(doc[key].items()))
    failed = [_failed_part(part) for part in _parts(doc)]
    if any(failed):
        return "; ".join(f for f in failed if f)
    verdict, notes = doc.get("verdict"), doc.get("notes")
    if verdict:
        said = "; ".join(str(n) for n in notes) if isinstance(notes, list) and notes else ""
        return f"{verdict}: {said}" if said else str(verdict)
    return f"{command}: not ok"


def emit_json(
    command: str, doc: dict[str, Any], version: int = SCHEMA_VERSION, indent: int | None = None
) -> None:
    """Print the one JSON document of ``command`` (see the module docstring)."""
    print(json.dumps(envelope(command, doc, version), default=str, indent=indent))


def emit_failure(command: str, kind: str, message: str, hint: str, code: int) -> None:
    """The failure document: the envelope with ``ok`` false and ``error``."""
    error = {"kind": kind, "message": message, "hint": hint, "exit_code": code}
    emit_json(command, {"ok": False, "error": error})


def _parts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A document's per-node (or per-host) parts, named: a list of objects, or a map."""
    parts: list[dict[str, Any]] = []
    for key in ("outcomes", "nodes", "hosts"):
        got = doc.get(key)
        if isinstance(got, list):
            parts += [p for p in got if isinstance(p, dict)]
        elif isinstance(got, dict):
            parts += [{"node": k, **v} for k, v in got.items() if isinstance(v, dict)]
    return parts


def _failed_part(part: dict[str, Any]) -> str:
    """ "node1: why" for a part that failed, else ""."""
    name = part.get("node") or part.get("host") or "?"
    why = part.get("message") or part.get("error") or part.get("reason")
    result = str(part.get("result") or "")
    if part.get("ok") is False or part.get("reachable") is False:
        return f"{name}: {why or 'failed'}"
    if result.startswith(("unreachable", "failed", "error")):
        return f"{name}: {result}"
    counts = [k for k in ("failed", "unreachable") if isinstance(part.get(k), int) and part[k]]
    return f"{name}: {' and '.join(counts)}" if counts else ""


def positive(value: float | None) -> float | None:
    """An option callback: the value must be greater than 0 (typer's `min` is inclusive)."""
    if value is not None and value <= 0:
        raise typer.BadParameter(f"{value:g} is not greater than 0")
    return value


def plain(text: object) -> str:
    """User, log or inventory text made safe to embed in rich markup (the one escaping helper:
    "[/etc/ssh]" or "[rank1]" print as written, never as a style or a MarkupError)."""
    return escape(str(text))


def _current_command() -> str:
    """The running command's path without the program name ("watchdog hold")."""
    from typer._click.globals import get_current_context  # deferred: only on a failure

    ctx = get_current_context(silent=True)
    return " ".join(ctx.command_path.split()[1:]) if ctx is not None else "tpwarden"


def exit_code(code: int) -> int:
    """Only 0, 1 and 2 leave the CLI (README); anything else is "an operation failed"."""
    return code if code in (EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT) else EXIT_FAILED


def handle_errors(func: F) -> F:
    """Turn tpwarden errors, and OSErrors on user-named paths, into one red line and the right
    exit code, never a traceback; with ``--json`` (an ``as_json`` argument) also the failure
    envelope on stdout."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            fail("config", exc.render(), exc.hint or "", EXIT_BAD_INPUT, kwargs)
        except TpwardenError as exc:
            code = exit_code(exc.exit_code)
            fail("input" if code == 2 else "failed", str(exc), "", code, kwargs)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            fail("io", f"{where}{exc.strerror or exc}", "", EXIT_FAILED, kwargs)

    wrapper.handles_errors = True  # type: ignore[attr-defined]  # checked by the command walk
    return wrapper  # type: ignore[return-value]


def fail(kind: str, message: str, hint: str, code: int, kwargs: dict[str, Any]) -> None:
    """Report a failure (the error line, and the JSON envelope when --json) and exit ``code``."""
    err_console.print(error_line(message), highlight=False, soft_wrap=True)
    if kwargs.get("as_json"):
        emit_failure(_current_command(), kind, message, hint, code)
    raise typer.Exit(code) from None


def refuse_with(command: str, fields: dict[str, Any], exc: ConfigError, as_json: bool) -> NoReturn:
    """Bad input found after the command's facts were gathered: the error line, and with
    ``--json`` ONE document, the facts (``fields``) and the error together; exit 2."""
    if not as_json:
        raise exc
    err_console.print(error_line(exc.render()), highlight=False, soft_wrap=True)
    error = {"kind": "config", "message": exc.render(), "hint": exc.hint or "",
             "exit_code": EXIT_BAD_INPUT}  # fmt: skip
    emit_json(command, {**fields, "ok": False, "error": error})
    raise typer.Exit(EXIT_BAD_INPUT)


def error_line(message: str) -> Text:
    """Messages quote user text (paths, keys, values): never let rich read it as markup."""
    return Text.assemble(("error:", "bold red"), " ", message)


def load(inventory: Path, *, flag_table: bool = False) -> ClusterSpec:
    """`flag_table`: also refuse an inventory no `vllm serve` flag table fits (check, plan)."""
    from tpwarden.cluster.inventory.load import load_inventory  # not for --help or TAB (issue 30)

    return load_inventory(inventory, flag_table=flag_table)
