#!/usr/bin/env bash
# Runs Steward on this machine without a Kubernetes cluster: installs prerequisites, builds the
# binary, then `steward dev up` starts the local control plane in the background (embedded API
# server, node agent running Pods as local processes, the operator) and applies
# examples/etcd-cluster.yaml, examples/postgres-cluster.yaml and examples/cratedb-cluster.yaml —
# a real three-member etcd cluster, a real PostgreSQL primary with two streaming replicas, and a
# CrateDB cluster of 3 masters and two data sets on the CrateDB stand-in (CrateDB cannot run
# here; docs/cratedb-standin.md). Needs root (the node agent gives
# each container its own mount namespace). Stop it with `target/release/steward dev down`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prereqs.sh
# The node agent runs the CrateDB stand-in for CrateDB images, found next to the steward binary.
cargo build --locked --release -p steward-operator -p steward-cratedb-standin
./target/release/steward dev up -f examples/etcd-cluster.yaml -f examples/postgres-cluster.yaml \
  -f examples/cratedb-cluster.yaml "$@"
echo "==> waiting for the example clusters (etcd, PostgreSQL, CrateDB)"
for _ in $(seq 1 120); do
  status="$(./target/release/steward dev status)"
  if grep -q "example: 3/3 ready members" <<<"$status" &&
    grep -q "demo-pg: 3/3 ready instances" <<<"$status" &&
    grep -q "demo-crate: 7/7 nodes in the cluster, health=GREEN, bootstrapped=true" <<<"$status"; then
    break
  fi
  sleep 1
done
./target/release/steward dev status
echo "kubectl: export KUBECONFIG=$PWD/.steward/dev/kubeconfig; kubectl get etcd,etcdpeers,pg,crate,pods"
echo "CLI:     ./target/release/steward show cluster   (settings: .steward/dev/cli.yaml; docs/api.md)"
echo "stop:    ./target/release/steward dev down"
