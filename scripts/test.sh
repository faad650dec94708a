#!/usr/bin/env bash
# The test command: set up what is missing, lint, then every test tier (unit, real vLLM parser,
# lab: real sshd, Docker, systemd-nspawn and Ansible; one lab per run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "==> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "==> pytest"
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
