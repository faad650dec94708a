#!/usr/bin/env bash
# mypy over the installed packages, `tpwarden.cluster`, `tpwarden.node`, `tpwarden.watchdog` and the
# lab (`tpwarden.lab`, installed from the checkout's lab/).
# The editable install maps those names to cluster/, node/ and watchdog/ with an import hook that mypy
# cannot follow (it reads files, it imports nothing), so mypy reads them through a link tree,
# build/typecheck/tpwarden/{cluster,node,watchdog} -> the repository's folders: the same module names
# the code imports, the settings in pyproject's [tool.mypy]. Extra arguments go to mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=build/typecheck/tpwarden
mkdir -p "$tree"
ln -sfn ../../../cluster "$tree/cluster"
ln -sfn ../../../watchdog "$tree/watchdog"
ln -sfn ../../../node "$tree/node"
ln -sfn ../../../lab "$tree/lab"
exec env MYPYPATH=build/typecheck .venv/bin/mypy -p tpwarden.cluster -p tpwarden.node -p tpwarden.watchdog -p tpwarden.lab "$@"
