#!/usr/bin/env bash
# Processes the test suite leaves behind (issue 36). The suite's node agents keep each
# container in a cgroup named after the agent's state directory, a temporary directory
# (`<cgroup2>/steward/tmp_.tmp*`); other test processes (real etcd, PostgreSQL) run with their
# data under /tmp/.tmp*.
#   leftovers.sh sweep   kill what an earlier, killed run left (before the tests)
#   leftovers.sh check   fail, naming them, if any process of the run is still there (after)
# `steward dev` planes (state under the repository) are never touched.
set -euo pipefail

mode="${1:-check}"
cgroup2="$(findmnt -t cgroup2 -n -o TARGET 2>/dev/null | head -n1 || true)"

# Pids in the suite's container cgroups.
cgroup_pids() {
  [ -n "$cgroup2" ] && [ -d "$cgroup2/steward" ] || return 0
  find "$cgroup2/steward" -path "$cgroup2/steward/tmp_.tmp*" -name cgroup.procs -print0 2>/dev/null |
    xargs -0 -r cat 2>/dev/null || true
}

# This script's ancestors (whatever runs the test command), never counted.
ancestors() {
  local pid=$$
  while [ "$pid" -gt 1 ] 2>/dev/null; do
    echo "$pid"
    pid="$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null || echo 1)"
  done
}

# Pids of the programs the tests start (databases, stand-ins, Steward's own binaries) whose
# command line names a test's temporary directory.
tmp_pids() {
  local pid args exe mine
  mine=" $(ancestors | tr '\n' ' ') "
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    case "$mine" in *" $pid "*) continue ;; esac
    exe="$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null || true)")"
    case "$exe" in
      etcd | etcdctl | postgres | pgbackrest | psql | cratedb-standin | steward | steward-node | \
        prometheus-postgres-exporter | sleep) ;;
      *) continue ;;
    esac
    args="$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)"
    case "$args" in
      *"/tmp/.tmp"*) echo "$pid" ;;
    esac
  done
}

left() { { cgroup_pids; tmp_pids; } | sort -un; }

# Removes the suite's emptied cgroups, deepest first.
prune() {
  [ -n "$cgroup2" ] && [ -d "$cgroup2/steward" ] || return 0
  find "$cgroup2/steward" -mindepth 1 -depth -type d -path "$cgroup2/steward/tmp_.tmp*" \
    -exec rmdir {} + 2>/dev/null || true
}

case "$mode" in
  sweep)
    pids="$(left)"
    if [ -n "$pids" ]; then
      echo "==> killing $(wc -w <<<"$pids") process(es) an earlier test run left"
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
      sleep 1
    fi
    prune
    ;;
  check)
    # The agents' reapers sweep as their agents go: give them a moment.
    for _ in $(seq 1 20); do
      [ -z "$(left)" ] && break
      sleep 0.5
    done
    pids="$(left)"
    if [ -n "$pids" ]; then
      echo "error: the test run left these processes behind:" >&2
      # shellcheck disable=SC2086
      ps -o pid,ppid,pgid,etimes,args -p "$(tr '\n' ',' <<<"$pids" | sed 's/,$//')" >&2 || true
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
      sleep 1
      prune
      exit 1
    fi
    prune
    echo "==> no process of the test run is left"
    ;;
  *)
    echo "usage: $0 sweep|check" >&2
    exit 2
    ;;
esac
