#!/usr/bin/env bash
# Stops what up.sh started, by its pid files in $REALK8S_HOME/run (node agent first, etcd last).
# Leaves the certificates, kubeconfig, logs and binaries; `down.sh --purge` also removes the
# etcd data, the node agent's state and the PV directories.
set -uo pipefail
REALK8S_HOME=${REALK8S_HOME:-/root/.cache/real-k8s}
RUN=$REALK8S_HOME/run
stop() { # name
  local pidf=$RUN/$1.pid pid
  [ -f "$pidf" ] || return 0
  pid=$(cat "$pidf")
  if kill -0 "$pid" 2>/dev/null; then
    echo "[down] stopping $1 ($pid)"
    # The recycler is a shell loop; take its children (sleep, kubectl) with it.
    [ "$1" = pv-recycler ] && pkill -TERM -P "$pid" 2>/dev/null
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "[down] $1 ($pid) still running after 10s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$pidf"
}
for c in steward-node pv-recycler kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
if [ "${1:-}" = --purge ]; then rm -rf "$RUN/etcd-data" "$RUN/node" "$RUN/pv"; fi
