#!/usr/bin/env bash
# Runs Steward on this machine without a Kubernetes cluster: installs prerequisites, builds the
# binary, then `steward dev up` starts the local control plane in the background (embedded API
# server, node agent running Pods as local processes, the operator) and applies
# examples/etcd-cluster.yaml — a real three-member etcd cluster. Needs root (the node agent gives
# each container its own mount namespace). Stop it with `target/release/steward dev down`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prereqs.sh
cargo build --locked --release -p steward-operator
./target/release/steward dev up -f examples/etcd-cluster.yaml "$@"
echo "==> waiting for the example cluster"
for _ in $(seq 1 60); do
  if ./target/release/steward dev status | grep -q "example: 3/3 ready members"; then
    break
  fi
  sleep 1
done
./target/release/steward dev status
echo "kubectl: export KUBECONFIG=$PWD/.steward/dev/kubeconfig; kubectl get etcd,etcdpeers,pods"
echo "stop:    ./target/release/steward dev down"
