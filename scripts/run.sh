#!/usr/bin/env bash
# Runs Steward on this machine without a Kubernetes cluster: installs prerequisites, builds the
# binary, then `steward dev up` starts the local control plane in the background (embedded API
# server, node agent running Pods as local processes, the operator) and applies
# examples/etcd-cluster.yaml and examples/postgres-cluster.yaml — a real three-member etcd
# cluster and a real PostgreSQL primary with two streaming replicas. Needs root (the node agent gives
# each container its own mount namespace). Stop it with `target/release/steward dev down`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prereqs.sh
cargo build --locked --release -p steward-operator
./target/release/steward dev up -f examples/etcd-cluster.yaml -f examples/postgres-cluster.yaml "$@"
echo "==> waiting for the example clusters (etcd, PostgreSQL)"
for _ in $(seq 1 120); do
  status="$(./target/release/steward dev status)"
  if grep -q "example: 3/3 ready members" <<<"$status" &&
    grep -q "demo-pg: 3/3 ready instances" <<<"$status"; then
    break
  fi
  sleep 1
done
./target/release/steward dev status
echo "kubectl: export KUBECONFIG=$PWD/.steward/dev/kubeconfig; kubectl get etcd,etcdpeers,pg,pods"
echo "CLI:     ./target/release/steward show cluster   (settings: .steward/dev/cli.yaml; docs/api.md)"
echo "stop:    ./target/release/steward dev down"
