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
# How busy the machine's cores were while pytest ran (/proc/stat: user nice system irq softirq
# steal, in clock ticks), printed at the end beside each test's own figure (tests/conftest.py).
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
busy_start=$(busy_ticks)
pytest_start=$SECONDS
# Each pytest process writes a JUnit report (build/test-report-*.xml): bench/test_tiers.py breaks
# the run down by tier afterwards, and lists its 25 slowest tests.
mkdir -p build
rm -f build/test-report*.xml
PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider)
if [ "$#" -gt 0 ]; then
  # A selection of your own (paths, -k, -m, ...): one pytest process, as asked.
  rc=0
  "${PYTEST[@]}" --junitxml=build/test-report.xml "$@" || rc=$?
else
  # The whole suite, in three pytest processes (issue 35, item 2). The tiers that share the lab
  # run one after the other: first the real engine's (engine, fidelity: CPU-bound, alone on the
  # machine), then the lab's (gateways, lab: mostly waiting on boots, probes and windows). The
  # pure tiers (unit, vllm_parser, packaging, sim: no lab, no fixed ports) run beside the lab's,
  # in a second process with its own temporary folder; their output is printed when they end.
  rc=0
  echo "==> pytest 1/2: the real engine's tiers (tests/engine, tests/fidelity)"
  "${PYTEST[@]}" --junitxml=build/test-report-engine.xml tests/engine tests/fidelity || rc=$?
  echo "==> pytest 2/2: the lab's tiers (tests/gateways, tests/lab), and beside them the pure" \
       "tiers (tests/unit, tests/vllm_parser, tests/packaging, tests/sim; output in" \
       "build/test-pure.log, printed when they end)"
  "${PYTEST[@]}" --basetemp=/tmp/tpwarden-pure-tests --junitxml=build/test-report-pure.xml \
    tests/unit tests/vllm_parser tests/packaging tests/sim > build/test-pure.log 2>&1 &
  pure=$!
  trap 'kill "$pure" 2>/dev/null || true' EXIT  # an interrupted run leaves no pytest behind
  "${PYTEST[@]}" --junitxml=build/test-report-lab.xml tests/gateways tests/lab || rc=$?
  pure_rc=0
  wait "$pure" || pure_rc=$?
  trap - EXIT
  echo "==> the pure tiers (exit ${pure_rc}):"
  cat build/test-pure.log
  [ "$pure_rc" -eq 0 ] || rc=$pure_rc
fi
busy_s=$(( ($(busy_ticks) - busy_start) / $(getconf CLK_TCK) ))
wall_s=$(( SECONDS - pytest_start ))
echo "==> pytest took ${wall_s} s; the machine's cores were busy ${busy_s} CPU-s of" \
     "$(( wall_s * $(nproc) )) ($(nproc) cores): that work alone fills every core for" \
     "$(( busy_s / $(nproc) )) s, however the tests are scheduled"
if compgen -G "build/test-report*.xml" >/dev/null; then
  echo "==> each tier's share of the run (bench/test_tiers.py)"
  .venv/bin/python bench/test_tiers.py || true
fi
exit "$rc"
