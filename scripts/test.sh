#!/usr/bin/env bash
# The test command: set up what is missing, lint, then every test tier (unit, real vLLM parser,
# lab: real sshd, Docker, systemd-nspawn and Ansible; one lab per run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# The test run owns the machine: what an earlier demo left running (its watchdog, the serving
# containers, the thermal agents, the lab nodes) would fight the lab tests for ports and for the
# server. `tpwarden lab down` stops all of it. The lab lock says whether another run (tests or
# the demo) is using the lab right now: then refuse at once rather than fail halfway.
LAB_LOCK=${TPWARDEN_LAB_LOCK:-/run/lock/tpwarden-lab.lock}
mkdir -p "$(dirname "$LAB_LOCK")"
if ! flock -n "$LAB_LOCK" true; then
  echo "the lab is in use by another run (it holds $LAB_LOCK); wait for it or stop it" >&2
  exit 1
fi
if .venv/bin/tpwarden lab status >/dev/null 2>&1 \
   || [ -s "${TPWARDEN_LAB_ROOT:-/var/lib/tpwarden-lab}/watchdog/watchdog.lock" ]; then
  echo "==> stopping what an earlier demo left running (tpwarden lab down)"
  flock -n "$LAB_LOCK" .venv/bin/tpwarden lab down
fi
echo "==> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "==> mypy (scripts/typecheck.sh; settings in pyproject [tool.mypy])"
bash scripts/typecheck.sh
echo "==> import contracts (lint-imports; pyproject [tool.importlinter])"
.venv/bin/lint-imports
echo "==> pytest"
# The JUnit report lets bench/test_tiers.py break the run down by tier afterwards.
mkdir -p build
rc=0
.venv/bin/python -m pytest -p no:cacheprovider --junitxml=build/test-report.xml "$@" || rc=$?
if [ -s build/test-report.xml ]; then
  echo "==> each tier's share of the run (bench/test_tiers.py)"
  .venv/bin/python bench/test_tiers.py build/test-report.xml || true
fi
exit "$rc"
