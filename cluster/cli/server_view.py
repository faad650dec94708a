"""What a client run shows of the server before it starts (`bench`, `eval run`): its API,
vLLM version, model and context, and the defaults that change what it answers (thinking, chat
template kwargs, the drafter; `bench` adds eager mode and the health verdict). The facts come
from the runners' pre-flight (`BenchRunner.preflight`, `EvalRunner.preflight`)."""

from __future__ import annotations

import json

from tpwarden.cluster.cli.common import console
from tpwarden.cluster.durable import JSONObject


def print_server(pre: JSONObject, *, bench: bool = False) -> None:
    """The server line and its defaults; for a benchmark also eager mode and health."""
    d, s = pre["server_defaults"], pre["server"]
    console.print(
        f"server {s.get('api_base')} · vLLM {s.get('version') or '?'} · model "
        f"{s.get('model_id') or '?'} · max_model_len {s.get('max_model_len') or '?'}",
        highlight=False,
    )
    eager = f", enforce_eager {d['enforce_eager']}" if bench else ""
    console.print(
        f"defaults: thinking [bold]{'on' if d['thinking'] else 'off'}[/] ({d['thinking_source']}),"
        f" chat template kwargs {json.dumps(d['chat_template_kwargs'])}, drafter "
        f"{d['drafter_method'] or 'none'} k={d['drafter_k'] or '-'}{eager}",
        highlight=False,
    )
    if bench:
        colour = "green" if pre["ok"] else "red"
        console.print(f"health: [{colour}]{pre['verdict']}[/]", highlight=False)
