#!/usr/bin/env bash
# Writes PostgreSQL's own settings catalogue (pg_settings: name, type, unit, range, enum values)
# of the installed major version to crates/operator/src/postgres/validate/pg<major>_settings.tsv,
# the file the operator checks spec.parameters against. Uses single-user mode on a throw-away
# data directory; run it after installing another PostgreSQL major to add its catalogue.
set -euo pipefail
cd "$(dirname "$0")/.."
# `scripts/pg-settings.sh [MAJOR]`: that installed major version, else the newest.
if [ -n "${1:-}" ]; then bin="/usr/lib/postgresql/$1/bin"; else
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
major=$(basename "$(dirname "$bin")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [ "$(id -u)" = 0 ]; then chown postgres "$tmp"; fi
as_postgres "$bin/initdb" -D "$tmp/data" -A trust -U postgres >/dev/null
out="crates/operator/src/postgres/validate/pg${major}_settings.tsv"
{
  echo "# pg_settings of PostgreSQL $("$bin/postgres" --version | awk '{print $3}'), written by scripts/pg-settings.sh: name, vartype, unit, min_val, max_val, enumvals"
  echo "COPY (SELECT name, vartype, coalesce(unit, ''), coalesce(min_val, ''), coalesce(max_val, ''), coalesce(array_to_string(enumvals, ','), '') FROM pg_settings ORDER BY name) TO STDOUT;" \
    | as_postgres "$bin/postgres" --single -D "$tmp/data" -j postgres 2>/dev/null \
    | sed 's/^backend> //' | awk -F'\t' 'NF == 6'
} > "$out"
echo "wrote $out ($(grep -vc '^#' "$out") settings)"
