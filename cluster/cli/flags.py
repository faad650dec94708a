"""`tpwarden flags`: the `vllm serve` flag table of the serving image.

`fetch` runs the image's own vLLM argument parser in a throwaway container on the head and
caches the table on this machine by image ID (tpwarden.cluster.vllm.flag_fetch); `inventory check` and
`plan` then check every rendered flag against it. `provision` fetches it too, after its run
(`tpwarden.cluster.operations.flags`). `show` says which table applies to the inventory, without touching a node.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text
from tpwarden.cluster import flag_tables
from tpwarden.cluster.cli.common import console, emit_json, handle_errors, load, refuse_with
from tpwarden.cluster.cli.options import DEFAULT_INVENTORY, InventoryOption, JsonOption
from tpwarden.cluster.errors import ConfigError
from tpwarden.cluster.operations.flags import fetch_on_head

app = typer.Typer(
    help="The `vllm serve` flag table, read from the serving image.", no_args_is_help=True
)


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
    if result.mismatch:
        exc = ConfigError(
            result.mismatch,
            file=str(inventory),
            key="tpwarden.vllm_version",
            hint=f"set it to {result.vllm_version!r}",
        )
        refuse_with("flags fetch", result.to_json(), exc, as_json)
    if as_json:
        emit_json("flags fetch", {"ok": True, **result.to_json()})
    else:
        how = "cached already" if result.reused else "read from the image"
        console.print(
            Text(
                f"vLLM {result.vllm_version} in {result.image} ({result.image_id[:19]}): "
                f"{result.options} options, {how} -> {result.path}"
            ),
            highlight=False,
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
    if mismatch:
        exc = ConfigError(mismatch, file=str(inventory), key="tpwarden.vllm_version")
        if not as_json:
            console.print(Text(f"vLLM {table.version}: {table.source} table for {image}"))
        refuse_with("flags show", {**doc, "mismatch": mismatch}, exc, as_json)
    if as_json:
        emit_json("flags show", {"ok": True, **doc, "mismatch": None})
    else:
        console.print(Text(f"vLLM {table.version}: {table.source} table for {image}"))
