"""A rejected command line (click's usage errors) as one `error:` line with the fix, instead of
typer's boxed panel; with --json also the failure envelope on stdout (issue 30, items 1 and 6)."""

from __future__ import annotations

import sys

from typer import _click as click


def usage_error(exc: click.ClickException, argv: list[str]) -> int:
    """Print ``exc`` and return the exit code (2 for usage errors: nothing was run)."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # the help was printed already
        return exc.exit_code
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "tpwarden"
    message = " ".join(exc.format_message().split())
    hint = f"see `{path} --help`"
    print(f"error: {message} ({hint})", file=sys.stderr)
    if "--json" in argv:
        from tpwarden.cluster.cli.common import emit_failure  # deferred: common loads rich

        command = " ".join(path.split()[1:]) or "tpwarden"
        emit_failure(command, "usage", message, hint, exc.exit_code)
    return exc.exit_code
