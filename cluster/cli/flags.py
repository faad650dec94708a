"""`tpwarden flags`: the `vllm serve` flag table of the serving image.

`fetch` runs the image's own vLLM argument parser in a throwaway container on the head and
caches the table on this machine by image ID (tpwarden.cluster.vllm.flag_fetch); `inventory check` and
`plan` then check every rendered flag against it. `provision` fetches it too, after its run
(`after_provision`). `show` says which table applies to the inventory, without touching a node.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text
from tpwarden.cluster import flag_tables
from tpwarden.cluster.cli.common import (
    DEFAULT_INVENTORY,
    InventoryOption,
    JsonOption,
    console,
    emit_json,
    err_console,
    handle_errors,
    load,
)
from tpwarden.cluster.control.nodes import NodeConnector
from tpwarden.cluster.errors import ConfigError, TpwardenError
from tpwarden.cluster.spec import ClusterSpec
from tpwarden.cluster.vllm.flag_fetch import FetchResult, fetch_table

app = typer.Typer(
    help="The `vllm serve` flag table, read from the serving image.", no_args_is_help=True
)


def fetch_on_head(spec: ClusterSpec, *, refresh: bool = False) -> FetchResult:
    connector = NodeConnector(spec.ssh)
    try:
        return fetch_table(spec, connector.docker(spec.head), refresh=refresh)
    finally:
        connector.close()


@app.command("fetch")
@handle_errors
def fetch(
    inventory: InventoryOption = DEFAULT_INVENTORY,
    refresh: Annotated[
        bool,
        typer.Option("--refresh", help="Run the parser again even if this image ID is cached."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Read the flag table from the serving image's own vLLM; cache it here by image ID.

    The image's python3 runs vLLM's argument parser in a throwaway container on the head (no
    network, removed afterwards). Exit 2 if the image reports another vllm_version.

    Example: tpwarden flags fetch -i inventory.yml
    """
    spec = load(inventory)
    result = fetch_on_head(spec, refresh=refresh)
    if as_json:
        emit_json("flags fetch", {"ok": result.mismatch is None, **result.to_json()})
    else:
        how = "cached already" if result.reused else "read from the image"
        console.print(
            Text(
                f"vLLM {result.vllm_version} in {result.image} ({result.image_id[:19]}): "
                f"{result.options} options, {how} -> {result.path}"
            ),
            highlight=False,
        )
    if result.mismatch:
        raise ConfigError(
            result.mismatch,
            file=str(inventory),
            key="tpwarden.vllm_version",
            hint=f"set it to {result.vllm_version!r}",
        )


@app.command("show")
@handle_errors
def show(inventory: InventoryOption = DEFAULT_INVENTORY, as_json: JsonOption = False) -> None:
    """Say which flag table `inventory check` and `plan` use (no node is contacted).

    Exit 2 if none applies, with the command that fetches it.

    Example: tpwarden flags show -i inventory.yml
    """
    spec = load(inventory)
    version, image = spec.serving.vllm_version, spec.serving.image
    table = flag_tables.table_for(version, image)
    if table is None:
        raise ConfigError(
            flag_tables.missing_message(version, image),
            file=str(inventory),
            key="tpwarden.vllm_version",
            hint=flag_tables.fetch_hint(str(inventory)),
        )
    doc = {"vllm_version": table.version, "source": table.source, "image": image}
    mismatch = flag_tables.mismatch_message(version, image, table)
    if as_json:
        emit_json("flags show", {"ok": mismatch is None, **doc, "mismatch": mismatch})
    else:
        console.print(Text(f"vLLM {table.version}: {table.source} table for {image}"))
    if mismatch:
        raise ConfigError(mismatch, file=str(inventory), key="tpwarden.vllm_version")


def after_provision(spec: ClusterSpec, quiet: bool) -> dict[str, Any]:
    """`provision` fetches the image's table once the image is on the head. A failure is fatal
    (`ok` false) only where no shipped table covers the version; else it is a warning."""
    if not quiet:
        where = f"{spec.serving.image} on {spec.head.name}"
        console.print(Text(f"flag table: reading vLLM's parser in {where} ..."))
    try:
        result = fetch_on_head(spec)
    except TpwardenError as exc:
        fallback = flag_tables.shipped(spec.serving.vllm_version) is not None
        if not quiet:
            level = ("warning:", "yellow") if fallback else ("error:", "bold red")
            tail = f"; plan uses the shipped {spec.serving.vllm_version} table" if fallback else ""
            err_console.print(Text.assemble(level, f" flag table: {exc}{tail}"), highlight=False)
        return {"ok": fallback, "error": str(exc)}
    if not quiet:
        line = f"flag table: vLLM {result.vllm_version} from {result.image} -> {result.path}"
        console.print(Text(line + (f" ({result.mismatch})" if result.mismatch else "")))
    return {"ok": result.mismatch is None, **result.to_json()}
