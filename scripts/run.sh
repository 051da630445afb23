#!/usr/bin/env bash
# Runs Steward on this machine without a Kubernetes cluster: installs prerequisites, builds the
# binary, then `steward dev up` starts the local control plane in the background (embedded API
# server, node agent running Pods as local processes, the operator) and applies
# examples/etcd-cluster.yaml, examples/postgres-cluster.yaml, examples/cratedb-cluster.yaml and
# examples/foundationdb-cluster.yaml — a real three-member etcd cluster, a real PostgreSQL
# primary with two streaming replicas, a CrateDB cluster of 3 masters and two data sets, and a
# FoundationDB cluster of four process groups, the last two on stand-ins (CrateDB and
# FoundationDB cannot run here; docs/cratedb-standin.md, docs/foundationdb-standin.md).
# Needs root (the node agent gives
# each container its own mount namespace). Stop it with `target/release-fast/steward dev down`.
#
# The build uses the `release-fast` profile (Cargo.toml: no whole-program LTO, parallel codegen
# units): what is shipped and benchmarked is the `release` profile, which takes far longer to
# build on a small machine (docs/performance.md, "A newcomer's first run").
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prereqs.sh run
# The node agent runs the stand-ins for CrateDB's and FoundationDB's images, found next to the
# steward binary.
cargo build --locked --profile release-fast -p steward-operator -p steward-cratedb-standin \
  -p steward-fdb-standin --bin steward --bin cratedb-standin --bin fdb-standin
bin=./target/release-fast
$bin/steward dev up -f examples/etcd-cluster.yaml -f examples/postgres-cluster.yaml \
  -f examples/cratedb-cluster.yaml -f examples/foundationdb-cluster.yaml "$@"
echo "==> waiting for the example clusters (etcd, PostgreSQL, CrateDB, FoundationDB)"
for _ in $(seq 1 120); do
  status="$($bin/steward dev status)"
  if grep -q "example: 3/3 ready members" <<<"$status" &&
    grep -q "demo-pg: 3/3 ready instances" <<<"$status" &&
    grep -q "demo-crate: 7/7 nodes in the cluster, health=GREEN, bootstrapped=true" <<<"$status" &&
    grep -q "demo-fdb: 4/4 process groups, configured=true, available=true, reconciled=true" <<<"$status"; then
    break
  fi
  sleep 1
done
$bin/steward dev status
echo "kubectl: export KUBECONFIG=$PWD/.steward/dev/kubeconfig; kubectl get etcd,etcdpeers,pg,crate,fdb,pods"
echo "CLI:     $bin/steward show cluster   (settings: .steward/dev/cli.yaml; docs/api.md)"
echo "stop:    $bin/steward dev down"
