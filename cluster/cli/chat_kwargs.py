"""`--chat-template-kwargs JSON` of `bench sweep` and `eval run` (issue 52 item 8): the
request's own chat_template_kwargs, so thinking on costs one run instead of a restart."""

from __future__ import annotations

from typing import Annotated

import typer
from tpwarden.cluster.bench.plan import parse_chat_template_kwargs
from tpwarden.cluster.durable import JSONObject

ChatTemplateKwargs = Annotated[
    str | None,
    typer.Option(
        "--chat-template-kwargs",
        metavar="JSON",
        help="""Every request's chat_template_kwargs, e.g. '{"enable_thinking": true}' (chat """
        "endpoint; recorded in the run's manifest; the server's default stays as it is).",
    ),
]


def chat_kwargs(text: str | None) -> JSONObject | None:
    """--chat-template-kwargs JSON -> the object, or a usage error (exit 2)."""
    if text is None:
        return None
    try:
        return parse_chat_template_kwargs(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--chat-template-kwargs") from None
