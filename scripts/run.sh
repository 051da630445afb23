#!/usr/bin/env bash
# Runs Steward on this machine without a Kubernetes cluster: builds the binary, then runs the
# operator end to end against the embedded API server (`steward self-check`). Once the node
# agent and `steward dev` exist this starts a database cluster under the local control plane.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prereqs.sh
cargo build --locked --release -p steward-operator
exec ./target/release/steward self-check "$@"
