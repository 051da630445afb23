#!/usr/bin/env bash
# The test command: installs prerequisites, checks formatting and lints, runs every test of the
# workspace, then checks the deploy artefacts offline (helm lint/template, kubernetes-validate).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prereqs.sh
# A clean clone builds once: incremental caches only cost disk there (they doubled the target
# directory, and a CI run once failed with "No space left on device" while linking).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
export KUBECTL="${KUBECTL:-${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/kubectl-venv/bin/kubectl}"
export SCHEMATHESIS="${SCHEMATHESIS:-${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/schemathesis-venv/bin/st}"
export STEWARD_CRATEDB_CLIENTS_VENV="${STEWARD_CRATEDB_CLIENTS_VENV:-${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/cratedb-clients-venv}"

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "==> tests"
bash scripts/leftovers.sh sweep
status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast || status=$?
else
  cargo test --workspace --locked --no-fail-fast || status=$?
fi
# No process of the run may outlive it (issue 36).
bash scripts/leftovers.sh check || status=1
[ "$status" -eq 0 ] || exit "$status"

echo "==> deploy artefacts"
bash .ci/check-deploy.sh
