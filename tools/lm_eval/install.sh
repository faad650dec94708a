#!/usr/bin/env bash
# Build the lm-evaluation-harness venv that `tpwarden eval` copies into its client image
# (lm_eval[api]: the API models need tenacity/aiohttp, which the bare package lacks).
#
# It sits on top of the CPU vLLM venv (tools/vllm/install-cpu.sh): a .pth file puts that venv's
# site-packages on the path, so torch/transformers/tokenizers are reused (pip sees them as
# installed) and only lm_eval and what it adds (datasets, evaluate, sqlitedict, ...) land here.
# The client image has the vLLM venv at the same path, so the .pth holds there too.
#
#   bash tools/lm_eval/install.sh [VENV] [VLLM_VENV]
set -euo pipefail
LM_EVAL_VERSION=0.4.13
VENV=${1:-/opt/tpwarden-lmeval-$LM_EVAL_VERSION}
BASE=${2:-/opt/tpwarden-vllm-0.33.0}
PY=$BASE/bin/python
[ -x "$PY" ] || { echo "no $PY: run tools/vllm/install-cpu.sh first" >&2; exit 2; }
rm -rf "$VENV.tmp"
"$PY" -m venv --without-pip "$VENV.tmp"
base_sp=$("$PY" -c 'import site; print(site.getsitepackages()[0])')
own_sp=$("$VENV.tmp/bin/python" -c 'import site; print(site.getsitepackages()[0])')
echo "$base_sp" > "$own_sp/zz-tpwarden-vllm.pth"
"$PY" -m pip --python "$VENV.tmp/bin/python" install --no-input -q "lm_eval[api]==$LM_EVAL_VERSION"
"$VENV.tmp/bin/python" -m lm_eval run --help > /dev/null
rm -rf "$VENV" && mv "$VENV.tmp" "$VENV"
# pyvenv.cfg and scripts name the temp path; the image re-points the interpreter and we run
# lm_eval as `python -m lm_eval`, so script shebangs do not matter.
sed -i "s|$VENV.tmp|$VENV|g" "$VENV/pyvenv.cfg"
echo "lm_eval==$LM_EVAL_VERSION $(date -u +%FT%TZ)" > "$VENV/.tpwarden-install-stamp"
echo "installed lm_eval $LM_EVAL_VERSION into $VENV"
