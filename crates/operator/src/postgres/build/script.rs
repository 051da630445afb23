//! (pure) The entrypoint every PostgreSQL instance Pod runs (`sh <CONFIG_MOUNT>/entrypoint.sh`,
//! stored in the cluster's ConfigMap), and the readiness probe's command.
//!
//! The script's contract with the Pod:
//! - env: `PGDATA` (= [`names::PGDATA`]), `PGROLE` (`primary` | `replica`, from the Pod's
//!   [`names::ROLE_LABEL`] label), `POD_IP`, `INSTANCE` (the instance name), `PRIMARY_HOST`
//!   (the `-primary` Service's DNS name); `initdb`, `pg_basebackup`, `pg_rewind`, `pg_isready`
//!   and `postgres` on the PATH;
//! - mounts: [`names::CONFIG_MOUNT`] with `postgresql.conf` and `pg_hba.conf`;
//!   [`names::SUPERUSER_MOUNT`] and [`names::REPLICATION_MOUNT`] with `username` and `password`;
//!   the data volume at [`names::DATA_MOUNT`], writable by the container's user (`fsGroup`).
//!
//! What it does, by what it finds:
//! - no data (`$PGDATA/PG_VERSION` missing), `primary`: `initdb` (SCRAM, data checksums so that
//!   `pg_rewind` works) into a temporary directory, then moved into place;
//! - no data, `replica`: `pg_basebackup` from the primary as the replication user into a
//!   temporary directory, retried while the primary is not there yet; `standby.signal` is
//!   created in it before it is moved into place (so a complete clone is recognisable);
//! - data without `standby.signal`, `replica`: a former primary (the operator recreates a former
//!   primary's Pod as a replica after a fail-over or switchover) rejoins with `pg_rewind` from
//!   the primary, then gets `standby.signal`. If `pg_rewind` fails, it clones afresh and only once
//!   the clone is complete moves the old data to `pgdata.diverged` (replacing an older one);
//!   data is never deleted before its replacement exists;
//! - otherwise it starts what is there; a restored data directory (`recovery.signal`, written
//!   by `pgbackrest restore`) recovers to its target and promotes itself
//!   (`recovery_target_action=promote`). Without `recovery.signal`, the recovery settings a
//!   restore left in `postgresql.auto.conf` are removed first.
//!
//! It never promotes and never removes `standby.signal`: only the operator promotes (the fencing
//! rule). It never prints a password (no `set -x`; passwords go only into a 0600 passfile in the
//! data volume, which libpq reads through `PGPASSFILE` / `passfile=`; the passfile is rewritten
//! every 10 s so rotated passwords reach reconnecting standbys). `postgres` runs in the
//! background so that SIGTERM (and SIGINT) to the script become SIGINT to `postgres`, its *fast*
//! shutdown (SIGTERM would be a *smart* shutdown waiting for every client), repeated every
//! second until it is gone (a shell starts background commands with SIGINT ignored, so one sent
//! before `postgres` installs its handlers would be lost); the script exits with `postgres`'s
//! status.
//!
//! Besides `PGDATA`, the data volume holds `.pgpass`, `run/` (the Unix socket directory),
//! `pgdata.init` and `pgdata.clone` (temporary), `pgdata.diverged` (a former primary's data
//! replaced by a clone) and `pgdata.incomplete` (whatever stood at `PGDATA` without
//! `PG_VERSION`).
//!
//! [`postgresql_conf`] and [`pg_hba_conf`] are the two configuration files next to it.

use std::collections::BTreeMap;

use crate::postgres::names;

/// Where the script finds its inputs and how patient it is. [`Layout::pod`] is the Pod's; tests
/// run the script against temporary directories and fake binaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The data volume (the passfile, the socket directory and the temporary directories live
    /// here, next to `PGDATA`).
    pub data_mount: String,
    /// The ConfigMap's mount.
    pub config_mount: String,
    /// The superuser Secret's mount.
    pub superuser_mount: String,
    /// The replication Secret's mount.
    pub replication_mount: String,
    /// PostgreSQL's port, on the instance and on the `-primary` Service.
    pub port: i32,
    /// How often the script tries to reach the primary (clone, rejoin) before it gives up and
    /// exits non-zero (the kubelet then restarts it with back-off).
    pub attempts: u32,
    /// Seconds between two attempts (a `sleep` argument).
    pub retry_seconds: String,
}

impl Layout {
    /// The layout of an instance Pod ([`names`]): 60 attempts 2 s apart.
    pub fn pod() -> Self {
        Self {
            data_mount: names::DATA_MOUNT.to_owned(),
            config_mount: names::CONFIG_MOUNT.to_owned(),
            superuser_mount: names::SUPERUSER_MOUNT.to_owned(),
            replication_mount: names::REPLICATION_MOUNT.to_owned(),
            port: names::PORT,
            attempts: 60,
            retry_seconds: "2".to_owned(),
        }
    }
}

/// The entrypoint of an instance Pod.
pub fn entrypoint() -> String {
    render(&Layout::pod())
}

/// The entrypoint for `layout`. Paths must not contain single quotes or spaces.
pub fn render(layout: &Layout) -> String {
    TEMPLATE
        .replace("@DATA_MOUNT@", &layout.data_mount)
        .replace("@CONFIG_MOUNT@", &layout.config_mount)
        .replace("@SUPERUSER_MOUNT@", &layout.superuser_mount)
        .replace("@REPLICATION_MOUNT@", &layout.replication_mount)
        .replace("@PORT@", &layout.port.to_string())
        .replace("@ATTEMPTS@", &layout.attempts.to_string())
        .replace("@RETRY_SECONDS@", &layout.retry_seconds)
}

/// The readiness probe's exec command: ready when `postgres` accepts connections on the Pod IP
/// (a standby once it is consistent).
pub fn readiness_command() -> Vec<String> {
    vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!("exec pg_isready -q -h \"$POD_IP\" -p {}", names::PORT),
    ]
}

/// Steward's defaults in `postgresql.conf`, before the user's parameters: what streaming
/// replication, hot standbys and `pg_rewind` need, and logs on stderr (the container log).
pub const DEFAULT_PARAMETERS: &[(&str, &str)] = &[
    ("wal_level", "replica"),
    ("hot_standby", "on"),
    ("max_wal_senders", "10"),
    ("max_replication_slots", "10"),
    ("wal_keep_size", "256MB"),
    ("password_encryption", "scram-sha-256"),
    ("wal_log_hints", "on"),
    ("log_destination", "stderr"),
    ("logging_collector", "off"),
];

/// Whether `name` can be written as a `postgresql.conf` parameter name (letters, digits, `_`,
/// and `.` for extension parameters; not starting with a digit or a dot).
pub fn is_parameter_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// A `postgresql.conf` string literal: single quotes doubled, backslashes and line breaks
/// escaped (the file's parser reads C-style escapes in quoted values).
pub fn quote_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `postgresql.conf`: [`DEFAULT_PARAMETERS`], then the user's `parameters` (validated by
/// `validate`; a later line wins, so a user's value replaces a default). Every value is quoted.
/// A name that cannot be written (see [`is_parameter_name`]) is left out with a comment; the
/// validator refuses such specs first. Settings the entrypoint passes on the command line
/// (`listen_addresses`, `port`, `unix_socket_directories`, `cluster_name`, `primary_conninfo`,
/// `hba_file`) override the file.
pub fn postgresql_conf(parameters: &BTreeMap<String, String>) -> String {
    let mut out = String::from(
        "# Generated by Steward from spec.parameters; edits are overwritten.\n\
         # Steward's defaults first; the user's parameters follow (the last setting wins).\n",
    );
    for (name, value) in DEFAULT_PARAMETERS {
        out.push_str(&format!("{name} = {}\n", quote_value(value)));
    }
    if !parameters.is_empty() {
        out.push_str("# spec.parameters\n");
    }
    for (name, value) in parameters {
        if is_parameter_name(name) {
            out.push_str(&format!("{name} = {}\n", quote_value(value)));
        } else {
            out.push_str("# (a parameter with an invalid name was left out)\n");
        }
    }
    out
}

/// `pg_hba.conf`: SCRAM-SHA-256 for everything — local connections, streaming replication as
/// the replication user, and any database from any address.
pub fn pg_hba_conf() -> String {
    let user = names::REPLICATION_USER;
    format!(
        "# Generated by Steward; edits are overwritten.\n\
         # TYPE  DATABASE     USER  ADDRESS    METHOD\n\
         local   all          all              scram-sha-256\n\
         host    replication  {user}  0.0.0.0/0  scram-sha-256\n\
         host    replication  {user}  ::/0       scram-sha-256\n\
         host    all          all   0.0.0.0/0  scram-sha-256\n\
         host    all          all   ::/0       scram-sha-256\n"
    )
}

const TEMPLATE: &str = r#"#!/bin/sh
# The entrypoint of a Steward PostgreSQL instance (generated by Steward; do not edit).
# Env: PGDATA, PGROLE (primary|replica), POD_IP, INSTANCE, PRIMARY_HOST.
# It prepares the data directory and runs postgres. It never promotes and never removes
# standby.signal: only the operator promotes. It never prints a password.
set -eu
umask 077

DATA_MOUNT='@DATA_MOUNT@'
CONFIG_DIR='@CONFIG_MOUNT@'
SUPERUSER_DIR='@SUPERUSER_MOUNT@'
REPLICATION_DIR='@REPLICATION_MOUNT@'
PORT=@PORT@
ATTEMPTS=@ATTEMPTS@
RETRY_SECONDS=@RETRY_SECONDS@

PASSFILE="$DATA_MOUNT/.pgpass"
SOCKET_DIR="$DATA_MOUNT/run"
INIT_DIR="$DATA_MOUNT/pgdata.init"
CLONE_DIR="$DATA_MOUNT/pgdata.clone"
DIVERGED_DIR="$DATA_MOUNT/pgdata.diverged"
INCOMPLETE_DIR="$DATA_MOUNT/pgdata.incomplete"

log() { printf 'steward-entrypoint[%s]: %s\n' "${INSTANCE:-}" "$*" >&2; }
die() { log "$*"; exit 1; }

: "${PGDATA:?must be set}" "${PGROLE:?must be set}" "${POD_IP:?must be set}"
: "${INSTANCE:?must be set}" "${PRIMARY_HOST:?must be set}"
case "$PGROLE" in
  primary|replica) ;;
  *) die "PGROLE must be primary or replica, not '$PGROLE'" ;;
esac
for f in "$SUPERUSER_DIR/username" "$SUPERUSER_DIR/password" \
         "$REPLICATION_DIR/username" "$REPLICATION_DIR/password"; do
  [ -r "$f" ] || die "$f is missing"
done
SUPERUSER=$(cat "$SUPERUSER_DIR/username")
REPLICATION_USER=$(cat "$REPLICATION_DIR/username")

export PGPASSFILE="$PASSFILE"
export PGCONNECT_TIMEOUT=5
CLONE_CONNINFO="host=$PRIMARY_HOST port=$PORT user=$REPLICATION_USER passfile=$PASSFILE"
PRIMARY_CONNINFO="$CLONE_CONNINFO application_name=$INSTANCE"
SOURCE_CONNINFO="host=$PRIMARY_HOST port=$PORT user=$SUPERUSER dbname=postgres passfile=$PASSFILE"

# The passfile escapes ':' and '\'. Passwords go from file to file, never into an argument of
# another program. libpq ignores a passfile with group or other permissions.
escaped() { sed -e 's/[\\:]/\\&/g' "$1"; }
write_passfile() {
  tmp="$PASSFILE.tmp"
  {
    printf '*:*:*:%s:%s\n' "$REPLICATION_USER" "$(escaped "$REPLICATION_DIR/password")"
    printf '*:*:*:%s:%s\n' "$SUPERUSER" "$(escaped "$SUPERUSER_DIR/password")"
  } > "$tmp"
  chmod 600 "$tmp"
  mv -f "$tmp" "$PASSFILE"
}

# Moves what is at $PGDATA (not a data directory: no PG_VERSION) out of the way; an empty
# directory is removed.
make_room() {
  [ -e "$PGDATA" ] || return 0
  rmdir "$PGDATA" 2>/dev/null && return 0
  log "$PGDATA has no PG_VERSION; moving it to $INCOMPLETE_DIR"
  rm -rf "$INCOMPLETE_DIR"
  mv "$PGDATA" "$INCOMPLETE_DIR"
}

init_primary() {
  log "no data, role primary: initdb"
  rm -rf "$INIT_DIR"
  initdb -D "$INIT_DIR" -U "$SUPERUSER" --pwfile="$SUPERUSER_DIR/password" \
    --auth-host=scram-sha-256 --auth-local=scram-sha-256 --data-checksums -E UTF8 --locale=C
  make_room
  mv "$INIT_DIR" "$PGDATA"
}

# A base backup of the primary in $CLONE_DIR, retried while the primary is not there yet.
# standby.signal in it marks a complete clone.
clone() {
  attempt=1
  while :; do
    rm -rf "$CLONE_DIR"
    if pg_basebackup -D "$CLONE_DIR" -d "$CLONE_CONNINFO" -X stream -c fast -w; then
      touch "$CLONE_DIR/standby.signal"
      log "cloned from $PRIMARY_HOST"
      return 0
    fi
    rm -rf "$CLONE_DIR"
    [ "$attempt" -lt "$ATTEMPTS" ] || return 1
    log "pg_basebackup from $PRIMARY_HOST failed (attempt $attempt of $ATTEMPTS); retrying"
    attempt=$((attempt + 1))
    sleep "$RETRY_SECONDS"
  done
}

wait_for_primary() {
  attempt=1
  until pg_isready -q -h "$PRIMARY_HOST" -p "$PORT" -t 5; do
    [ "$attempt" -lt "$ATTEMPTS" ] || return 1
    log "$PRIMARY_HOST does not accept connections yet (attempt $attempt of $ATTEMPTS)"
    attempt=$((attempt + 1))
    sleep "$RETRY_SECONDS"
  done
}

# Data of a former primary, role replica: rewind it onto the primary's timeline, or replace it
# with a fresh clone (keeping it as pgdata.diverged). It must never run as a primary again.
rejoin() {
  log "data of a former primary, role replica: rejoining $PRIMARY_HOST with pg_rewind"
  wait_for_primary || die "$PRIMARY_HOST does not answer; not starting this data"
  # A just-promoted primary writes its new timeline to pg_control only at its next checkpoint;
  # until then pg_rewind compares the wrong timelines and wrongly finds nothing to rewind.
  psql "$SOURCE_CONNINFO" -qAtc CHECKPOINT >/dev/null 2>&1 || log "CHECKPOINT on $PRIMARY_HOST failed; trying pg_rewind anyway"
  if pg_rewind --target-pgdata="$PGDATA" --source-server="$SOURCE_CONNINFO"; then
    touch "$PGDATA/standby.signal"
    log "pg_rewind succeeded; starting as a standby"
    return 0
  fi
  log "pg_rewind failed; cloning afresh (the old data moves to $DIVERGED_DIR once the clone is complete)"
  clone || die "could not clone from $PRIMARY_HOST; the old data is untouched"
  rm -rf "$DIVERGED_DIR"
  mv "$PGDATA" "$DIVERGED_DIR"
  mv "$CLONE_DIR" "$PGDATA"
  log "replaced the diverged data with a clone"
}

write_passfile
mkdir -p "$SOCKET_DIR"

if [ ! -f "$PGDATA/PG_VERSION" ]; then
  if [ "$PGROLE" = primary ]; then
    init_primary
  elif [ -f "$CLONE_DIR/PG_VERSION" ] && [ -f "$CLONE_DIR/standby.signal" ]; then
    log "no data, role replica: using the complete clone of an earlier start"
    make_room
    mv "$CLONE_DIR" "$PGDATA"
  else
    log "no data, role replica: cloning from $PRIMARY_HOST"
    clone || die "could not clone from $PRIMARY_HOST"
    make_room
    mv "$CLONE_DIR" "$PGDATA"
  fi
elif [ "$PGROLE" = replica ] && [ ! -f "$PGDATA/standby.signal" ]; then
  rejoin
fi

# The recovery settings a pgBackRest restore writes to postgresql.auto.conf are for that
# recovery only. Without recovery.signal (the restored primary once promoted, a standby cloned
# from it) they are removed, so that no later standby stops at, and acts on, an old target.
AUTO_CONF="$PGDATA/postgresql.auto.conf"
if [ ! -f "$PGDATA/recovery.signal" ] && [ -f "$AUTO_CONF" ] \
   && grep -Eq '^[[:space:]]*(recovery_target|restore_command)' "$AUTO_CONF"; then
  log "removing a past restore's recovery settings from postgresql.auto.conf"
  grep -Ev '^[[:space:]]*(recovery_target|restore_command)|^# Recovery settings generated by pgBackRest' \
    "$AUTO_CONF" > "$AUTO_CONF.tmp" || :
  mv -f "$AUTO_CONF.tmp" "$AUTO_CONF"
fi

if [ -f "$PGDATA/standby.signal" ]; then mode=standby; else mode=primary; fi
log "starting postgres as a $mode (role $PGROLE)"

# The passfile is rewritten every 10 s, so that rotated passwords reach reconnecting standbys.
# The loop ends with the script (it is killed, and it checks that the script still runs).
main=$$
(
  trap - INT TERM
  while sleep 10 && kill -0 "$main" 2>/dev/null; do write_passfile || :; done
) </dev/null >/dev/null 2>&1 &
refresher=$!

# SIGTERM or SIGINT to the script: SIGINT to postgres, its fast shutdown. Repeated every second
# until postgres is gone: a shell starts background commands with SIGINT ignored, so a SIGINT
# in the instant before postgres installs its own handlers would be lost.
pid=
stopping=
trapped=
interrupt() {
  log "stopping postgres (fast shutdown)"
  (
    trap - INT TERM
    while kill -INT "$pid" 2>/dev/null; do sleep 1; done
  ) </dev/null >/dev/null 2>&1 &
}
# shellcheck disable=SC2317 # called by the trap
stop() {
  trapped=1
  [ -z "$stopping" ] || return 0
  stopping=1
  [ -z "$pid" ] || interrupt
}
trap stop INT TERM
postgres -D "$PGDATA" \
  -c config_file="$CONFIG_DIR/postgresql.conf" \
  -c hba_file="$CONFIG_DIR/pg_hba.conf" \
  -c listen_addresses="$POD_IP" \
  -c port="$PORT" \
  -c unix_socket_directories="$SOCKET_DIR" \
  -c cluster_name="$INSTANCE" \
  -c primary_conninfo="$PRIMARY_CONNINFO" &
pid=$!
# A signal that came before $pid was known.
[ -z "$stopping" ] || interrupt

# `wait` returns early (> 128) when a trapped signal arrives; wait again for the real status,
# which the shell keeps until it is waited for.
status=0
while :; do
  trapped=
  wait "$pid" && status=0 || status=$?
  if [ -z "$trapped" ] || [ "$status" -le 128 ]; then break; fi
done
kill -KILL "$refresher" 2>/dev/null || :
log "postgres exited with status $status"
exit "$status"
"#;

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
