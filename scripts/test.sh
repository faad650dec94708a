#!/usr/bin/env bash
# The test command: set up what is missing, lint, then every test tier (unit, real vLLM parser,
# lab: real sshd, Docker, systemd-nspawn and Ansible; one lab per run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# The test run owns the machine's lab lanes: what an earlier demo left running (its watchdog, the
# serving containers, the thermal agents, the lab nodes) would fight the lab tests for ports and
# for the server. `tpwarden lab down` stops all of it, in each lane (issue 50: lane 1 for the lab
# tiers, lane 2 for the real engine's). A lane's lock says whether another run (tests or the
# demo) is using it right now: then refuse at once rather than fail halfway.
LANE_LOCKS=(/run/lock/tpwarden-lab.lock /run/lock/tpwarden-lab-2.lock)
mkdir -p /run/lock
for lane in 1 2; do
  lock=${LANE_LOCKS[$((lane - 1))]}
  if ! flock -n "$lock" true; then
    echo "lab lane $lane is in use by another run (it holds $lock); wait for it or stop it" >&2
    exit 1
  fi
  state=${TPWARDEN_LAB_ROOT:-/var/lib/tpwarden-lab}
  [ "$lane" = 1 ] || state=$state/lane$lane
  if .venv/bin/tpwarden lab status --lane "$lane" >/dev/null 2>&1 \
     || [ -s "$state/watchdog/watchdog.lock" ]; then
    echo "==> stopping what an earlier demo left running in lab lane $lane (tpwarden lab down)"
    flock -n "$lock" .venv/bin/tpwarden lab down --lane "$lane"
  fi
done
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
# The machine's memory in use (MemTotal - MemAvailable), sampled every 2 s: its peak is printed
# at the end (issue 50: two lanes and the pure tiers stay within the machine with margin).
mem_peak=build/test-mem-peak-kib
echo 0 > "$mem_peak"
(
  peak=0
  while :; do
    used=$(awk '/^MemTotal:/{t=$2} /^MemAvailable:/{a=$2} END{print t-a}' /proc/meminfo)
    if [ "$used" -gt "$peak" ]; then peak=$used; echo "$peak" > "$mem_peak"; fi
    sleep 2
  done
) &
sampler=$!
# Each pytest process writes a JUnit report (build/test-report-*.xml): bench/test_tiers.py breaks
# the run down by tier afterwards, and lists its 25 slowest tests.
mkdir -p build
rm -f build/test-report*.xml
PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider)
if [ "$#" -gt 0 ]; then
  # A selection of your own (paths, -k, -m, ...): one pytest process, as asked (on lab lane 1,
  # unless TPWARDEN_LAB_LANE says otherwise).
  rc=0
  "${PYTEST[@]}" --junitxml=build/test-report.xml "$@" || rc=$?
else
  # The whole suite, in three pytest processes side by side (issue 50), balanced across the
  # lab's two lanes: on lane 2 the real engine's tiers (engine, fidelity: CPU-bound), then the
  # lm-eval and bench lab tests (CPU-bound too), the ledger's ten canaries and the night's
  # deadline guard (mostly waiting; lane 1 is the longer); on lane 1 the rest of the
  # lab's tiers (gateways, lab: provisioning, the watchdog's scenarios, mostly waiting on boots,
  # probes and windows); and the pure tiers (unit, vllm_parser, packaging, sim: no lab, no fixed
  # ports) at a lower CPU priority, so they fill what the other two leave. Each has its own
  # temporary folder; lane 2's and the pure tiers' output is kept in build/test-{engine,pure}.log
  # and printed when lane 1 ends.
  rc=0
  LANE2_LAB=(tests/lab/test_eval.py tests/lab/test_eval_field.py tests/lab/test_bench.py
             tests/lab/test_ledger_noise.py tests/lab/test_experiment_guard.py)
  LANE1_SKIP=()
  for t in "${LANE2_LAB[@]}"; do LANE1_SKIP+=(--ignore="$t"); done
  echo "==> pytest: on lab lane 2 the real engine's tiers (tests/engine, tests/fidelity), then" \
       "${LANE2_LAB[*]}; beside it on lane 1 tests/gateways and the rest of tests/lab; and the" \
       "pure tiers (tests/unit, tests/vllm_parser, tests/packaging, tests/sim; nice 10)"
  TPWARDEN_LAB_LANE=2 "${PYTEST[@]}" --basetemp=/tmp/tpwarden-engine-tests -m "not alone" \
    --junitxml=build/test-report-engine.xml tests/engine tests/fidelity "${LANE2_LAB[@]}" \
    > build/test-engine.log 2>&1 &
  engine=$!
  nice -n 10 "${PYTEST[@]}" --basetemp=/tmp/tpwarden-pure-tests \
    --junitxml=build/test-report-pure.xml \
    tests/unit tests/vllm_parser tests/packaging tests/sim > build/test-pure.log 2>&1 &
  pure=$!
  # an interrupted run leaves no pytest behind
  trap 'kill "$engine" "$pure" "$sampler" 2>/dev/null || true' EXIT
  TPWARDEN_LAB_LANE=1 "${PYTEST[@]}" -m "not alone" --junitxml=build/test-report-lab.xml \
    tests/gateways tests/lab \
    "${LANE1_SKIP[@]}" || rc=$?
  engine_rc=0
  wait "$engine" || engine_rc=$?
  pure_rc=0
  wait "$pure" || pure_rc=$?
  echo "==> lab lane 2: the real engine's tiers and ${LANE2_LAB[*]} (exit ${engine_rc}):"
  cat build/test-engine.log
  echo "==> the pure tiers (exit ${pure_rc}):"
  cat build/test-pure.log
  [ "$engine_rc" -eq 0 ] || rc=$engine_rc
  [ "$pure_rc" -eq 0 ] || rc=$pure_rc
  # Tests that measure the machine's own CPUs or take both lanes (marker `alone`: every node's
  # dossier within its deadline; the two-lane test) run last, with nothing beside them: beside
  # the lanes their deadlines measure the other lanes' load, and the two-lane test would wait for
  # the other lane's lock.
  echo "==> pytest: the tests that run alone (-m alone), on lab lane 1"
  TPWARDEN_LAB_LANE=1 "${PYTEST[@]}" --basetemp=/tmp/tpwarden-alone-lab-tests -m alone \
    --junitxml=build/test-report-alone-lab.xml tests/lab || rc=$?
  flock -n /run/lock/tpwarden-lab-2.lock .venv/bin/tpwarden lab down --lane 2 >/dev/null || true
fi
kill "$sampler" 2>/dev/null || true
trap - EXIT
busy_s=$(( ($(busy_ticks) - busy_start) / $(getconf CLK_TCK) ))
wall_s=$(( SECONDS - pytest_start ))
echo "==> pytest took ${wall_s} s; the machine's cores were busy ${busy_s} CPU-s of" \
     "$(( wall_s * $(nproc) )) ($(nproc) cores): that work alone fills every core for" \
     "$(( busy_s / $(nproc) )) s, however the tests are scheduled"
echo "==> peak memory in use: $(awk '{printf "%.1f", $1 / 1048576}' "$mem_peak") GiB of" \
     "$(awk '/^MemTotal:/{printf "%.1f", $2 / 1048576}' /proc/meminfo) GiB"
if compgen -G "build/test-report*.xml" >/dev/null; then
  echo "==> each tier's share of the run (bench/test_tiers.py)"
  tiers=(.venv/bin/python bench/test_tiers.py --run-wall "$wall_s" --run-busy "$busy_s")
  [ "$#" -gt 0 ] || tiers+=(--baseline tests/baseline_test_ids.txt)
  "${tiers[@]}" || true
fi
exit "$rc"
