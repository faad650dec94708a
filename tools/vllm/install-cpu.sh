#!/usr/bin/env bash
# Install vLLM 0.33.0 on a CPU-only machine, enough to build its real `vllm serve` argument
# parser (VLLM_TARGET_DEVICE=cpu) and to run `vllm bench serve`. Not enough to serve a model.
#
#   tools/vllm/install-cpu.sh            # venv at ${VLLM_VENV:-/opt/tpwarden-vllm-0.33.0}
#
# Order: torch 2.13.0 CPU wheel (pinned by a constraints file so pip can never swap in a CUDA
# build), then vllm==0.33.0 --no-deps, then requirements-cpu.txt --no-deps (exact pins, the
# whole closure, GPU-only packages left out). Needs only PyPI plus the CPU torch wheel that pip's
# find-links already offer on this machine kind. Idempotent: a second run checks and exits
# (the smoke test only when the venv changed since it last passed: smoked.sh).
set -euo pipefail

VLLM_VERSION=0.33.0
TORCH_VERSION=2.13.0
VENV=${VLLM_VENV:-/opt/tpwarden-vllm-${VLLM_VERSION}}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REQS="$HERE/requirements-cpu.txt"
STAMP="$VENV/.tpwarden-install-stamp"
PY=${PYTHON:-python3.11}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# shellcheck source=tools/vllm/smoked.sh
source "$HERE/smoked.sh"
log() { printf 'install-cpu: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

want_stamp() {
    printf 'vllm=%s torch=%s reqs=%s\n' "$VLLM_VERSION" "$TORCH_VERSION" \
        "$(sha256sum "$REQS" | cut -d' ' -f1)"
}

smoke() {
    # The parser must build on the CPU platform and `vllm bench serve` must start.
    VLLM_TARGET_DEVICE=cpu VLLM_LOGGING_LEVEL=ERROR "$VENV/bin/python" - <<'PY'
import torch, vllm
assert vllm.__version__ == "0.33.0", vllm.__version__
assert torch.version.cuda is None, f"CUDA torch installed: {torch.__version__}"
from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: F401
from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args  # noqa: F401
PY
    "$VENV/bin/vllm" bench serve --help >/dev/null 2>&1 || die "vllm bench serve --help failed"
}

[[ -f "$REQS" ]] || die "missing $REQS"

exit_if_installed "$STAMP" "$VENV" "$(want_stamp)"

start=$SECONDS
command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || die "need Python 3.11 (set PYTHON=...)"
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating venv $VENV"
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/pip" install --no-input --progress-bar off)

# A local version (+cpu) is never on PyPI, so this constraint makes pip fail rather than
# fetch a CUDA torch if the CPU wheel is not on this disk.
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH_VERSION}+cpu" >"$CONSTRAINTS"

log "torch ${TORCH_VERSION} (CPU)"
"${PIP[@]}" -c "$CONSTRAINTS" "torch==${TORCH_VERSION}" \
    || die "no CPU wheel torch==${TORCH_VERSION}+cpu found (pip find-links); refusing a CUDA torch"

log "vllm ${VLLM_VERSION} --no-deps"
"${PIP[@]}" -c "$CONSTRAINTS" --no-deps "vllm==${VLLM_VERSION}"

log "requirements-cpu.txt --no-deps"
"${PIP[@]}" -c "$CONSTRAINTS" --no-deps -r "$REQS"

smoke
want_stamp >"$STAMP"
record_smoked "$VENV" "$(want_stamp)"
log "done in $((SECONDS - start)) s; venv size $(du -sh "$VENV" | cut -f1)"
