//! CrateDB's own clients against a stand-in node, as a user of `steward dev` would try them:
//! `crash` (CrateDB's shell, from PyPI), the `crate` Python DB-API client (HTTP), psycopg
//! (PostgreSQL protocol) and `psql`.
//!
//! The Python clients live in a venv that `scripts/prereqs.sh` installs (pinned versions):
//! `$STEWARD_CRATEDB_CLIENTS_VENV`, else `${STEWARD_CI_CACHE:-$HOME/.cache/steward-ci}/
//! cratedb-clients-venv`. `psql` is found on the PATH. A missing client makes its test print
//! `SKIPPED: …` and check nothing — except under CI (`CI` set), where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

/// A node on free ports: (HTTP, PostgreSQL).
async fn start() -> (SocketAddr, SocketAddr) {
    let running = common::one_node().await;
    (running.addr, running.psql_addr)
}

fn venv() -> PathBuf {
    if let Some(v) = std::env::var_os("STEWARD_CRATEDB_CLIENTS_VENV") {
        return PathBuf::from(v);
    }
    let cache = std::env::var_os("STEWARD_CI_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/steward-ci"),
        PathBuf::from,
    );
    cache.join("cratedb-clients-venv")
}

/// The client's executable, or `None` after printing why the test checks nothing (a failure
/// under CI, where scripts/prereqs.sh installs every client).
fn client(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path);
    }
    let reason = format!(
        "{what} not found at {} (scripts/prereqs.sh installs it)",
        path.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{reason}");
    println!("SKIPPED: {reason}");
    eprintln!("SKIPPED: {reason}");
    None
}

fn psql() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("psql"))
            .find(|p| p.is_file())
    });
    client(
        found.unwrap_or_else(|| PathBuf::from("psql")),
        "psql (postgresql-client)",
    )
}

/// Runs a program: (exit code, stdout, stderr).
async fn run(program: &PathBuf, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(program).args(args).kill_on_drop(true).output(),
    )
    .await
    .expect("the client did not finish within 60 s")
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a Python script in the clients' venv that prints one JSON document.
async fn python(python: &PathBuf, script: &str, args: &[&str]) -> Value {
    let mut all = vec!["-c", script];
    all.extend_from_slice(args);
    let (code, out, err) = run(python, &all).await;
    assert_eq!(code, 0, "python failed:\n{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_from_pypi_connects_and_runs_everyday_statements() {
    let Some(crash) = client(venv().join("bin/crash"), "crash (PyPI)") else {
        return;
    };
    let (http, _) = start().await;
    let host = format!("localhost:{}", http.port());
    // On connect crash asks for `current_user, current_schema, name FROM sys.cluster`; before,
    // that failed and so did every statement.
    for stmt in [
        "CREATE TABLE t (id INT PRIMARY KEY, name TEXT, ts TIMESTAMP, score DOUBLE, flag BOOLEAN)",
        "INSERT INTO t (id, name, ts, score, flag) VALUES (1, 'one', '2024-05-01T10:00:00Z', 1.5, true), (2, 'two', NULL, 2, false)",
        "REFRESH TABLE t",
        "UPDATE t SET name = 'uno' WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
    ] {
        let (code, out, err) = run(&crash, &["--hosts", &host, "-c", stmt]).await;
        assert_eq!(code, 0, "{stmt}:\n{out}\n{err}");
        assert!(err.contains("CONNECT OK"), "{stmt}: {err}");
    }
    let (code, out, err) = run(
        &crash,
        &[
            "--hosts",
            &host,
            "--format",
            "json",
            "-c",
            "SELECT id, name, ts, score, flag, current_user AS u, current_schema AS s FROM t WHERE id = 1",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let rows: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        rows,
        json!([{"id": 1, "name": "uno", "ts": 1_714_557_600_000_i64, "score": 1.5, "flag": true, "u": "crate", "s": "doc"}])
    );
    let (code, out, err) = run(&crash, &["--hosts", &host, "-c", "SHOW TABLES"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("| t "), "{out}");
    let (code, _, err) = run(&crash, &["--hosts", &host, "-c", "DROP TABLE t"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&crash, &["--hosts", &host, "-c", "SELECT * FROM t"]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("RelationUnknown"), "{err}");
}

const CRATE_CLIENT: &str = r#"
import json, sys, datetime
from crate import client
from crate.client.converter import DefaultTypeConverter
url = sys.argv[1]
out = {}
conn = client.connect(url, converter=DefaultTypeConverter(), schema="app")
cur = conn.cursor()
cur.execute("SELECT current_user, current_schema, name FROM sys.cluster")
out["session"] = cur.fetchone()
cur.execute("CREATE TABLE t (id INT PRIMARY KEY, name TEXT, ts TIMESTAMP WITH TIME ZONE, score DOUBLE, flag BOOLEAN, tags ARRAY(TEXT))")
cur.execute("INSERT INTO t (id, name, ts, score, flag, tags) VALUES (?, ?, ?, ?, ?, ?)",
            (1, "one", "2024-05-01T10:00:00Z", 1.5, True, ["a", "b"]))
cur.execute("REFRESH TABLE t")
cur.execute("SELECT id, name, ts, score, flag, tags FROM t WHERE ts > '2024-01-01'")
row = cur.fetchone()
out["types"] = [type(v).__name__ for v in row]
out["ts"] = row[2].isoformat()
out["row"] = [row[0], row[1], row[3], row[4], row[5]]
cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_name = 't'")
out["tables"] = cur.fetchall()
cur.execute("SHOW COLUMNS FROM t")
out["columns"] = cur.fetchall()
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn crate_python_client_gets_typed_rows_in_its_default_schema() {
    let Some(py) = client(venv().join("bin/python"), "the clients' venv") else {
        return;
    };
    let (http, _) = start().await;
    let out = python(&py, CRATE_CLIENT, &[&format!("http://{http}")]).await;
    assert_eq!(out["session"], json!(["crate", "app", "crate"]));
    // `?types` answers col_types, so the client's converter makes a datetime of the timestamp.
    assert_eq!(
        out["types"],
        json!(["int", "str", "datetime", "float", "bool", "list"])
    );
    assert_eq!(out["ts"], "2024-05-01T10:00:00+00:00");
    assert_eq!(out["row"], json!([1, "one", 1.5, true, ["a", "b"]]));
    // The `schema` the client connects with (its Default-Schema header) holds the table.
    assert_eq!(out["tables"], json!([["app", "t"]]));
    assert_eq!(
        out["columns"],
        json!([
            ["flag", "boolean"],
            ["id", "integer"],
            ["name", "text"],
            ["score", "double precision"],
            ["tags", "text_array"],
            ["ts", "timestamp with time zone"]
        ])
    );
}

const PSYCOPG: &str = r#"
import json, sys, datetime
import psycopg
port = sys.argv[1]
out = {}
with psycopg.connect(f"host=127.0.0.1 port={port} user=crate dbname=doc", autocommit=True) as conn:
    out["server_version"] = conn.info.parameter_status("server_version")
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (id INT PRIMARY KEY, big BIGINT, small SMALLINT, name TEXT, ts TIMESTAMP WITH TIME ZONE, naive TIMESTAMP, score DOUBLE, r REAL, flag BOOLEAN, tags ARRAY(TEXT), nums ARRAY(INTEGER), o OBJECT)")
    when = datetime.datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=datetime.timezone.utc)
    cur.execute("INSERT INTO t (id, big, small, name, ts, naive, score, r, flag, tags, nums, o) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (1, 5000000000, 7, "one", when, "2024-05-01 12:00:00", 1.5, 0.5, True, ["a", "b\"c"], [1, 2], '{"k": 1}'))
    out["inserted"] = cur.rowcount
    cur.execute("REFRESH TABLE t")
    cur.execute("SELECT id, big, small, name, ts, naive, score, r, flag, tags, nums, o FROM t WHERE id = %s", (1,))
    row = cur.fetchone()
    out["oids"] = [d.type_code for d in cur.description]
    out["types"] = [type(v).__name__ for v in row]
    out["ts"] = row[4].isoformat()
    out["naive"] = row[5].isoformat()
    out["values"] = [row[0], row[1], row[2], row[3], row[6], row[7], row[8], row[9], row[10], row[11]]
    cur.execute("UPDATE t SET score = score * 2 WHERE id = 1")
    out["updated"] = cur.rowcount
    cur.execute("SELECT count(*), sum(score), current_user, current_schema FROM t")
    out["aggregates"] = list(cur.fetchone())
    cur.execute("DELETE FROM t WHERE flag = true")
    out["deleted"] = cur.rowcount
    cur.execute("SHOW TABLES")
    out["tables"] = cur.fetchall()
    cur.execute("DROP TABLE t")
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn psycopg_round_trips_cratedb_types() {
    let Some(py) = client(venv().join("bin/python"), "the clients' venv") else {
        return;
    };
    let (_, pg) = start().await;
    let out = python(&py, PSYCOPG, &[&pg.port().to_string()]).await;
    assert_eq!(out["server_version"], "10.5");
    assert_eq!(out["inserted"], 1);
    // CrateDB's OIDs: int4, int8, int2, varchar, timestamptz, timestamp, float8, float4, bool,
    // varchar[], int4[], json.
    assert_eq!(
        out["oids"],
        json!([23, 20, 21, 1043, 1184, 1114, 701, 700, 16, 1015, 1007, 114])
    );
    assert_eq!(
        out["types"],
        json!([
            "int", "int", "int", "str", "datetime", "datetime", "float", "float", "bool", "list",
            "list", "dict"
        ])
    );
    assert_eq!(out["ts"], "2024-05-01T10:00:00.500000+00:00");
    assert_eq!(out["naive"], "2024-05-01T12:00:00");
    assert_eq!(
        out["values"],
        json!([1, 5_000_000_000_i64, 7, "one", 1.5, 0.5, true, ["a", "b\"c"], [1, 2], {"k": 1}])
    );
    assert_eq!(out["updated"], 1);
    assert_eq!(out["aggregates"], json!([1, 3.0, "crate", "doc"]));
    assert_eq!(out["deleted"], 1);
    assert_eq!(out["tables"], json!([["t"]]));
}

#[tokio::test(flavor = "multi_thread")]
async fn psql_runs_everyday_statements_in_its_database_schema() {
    let Some(psql) = psql() else {
        return;
    };
    let (_, pg) = start().await;
    let port = pg.port().to_string();
    let base = [
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "crate",
        "-X",
        "-A",
        "-t",
        "-v",
        "ON_ERROR_STOP=1",
    ];
    let mut args: Vec<&str> = base.to_vec();
    // Without -d, psql's database is the user name: CrateDB takes it as the schema.
    args.extend_from_slice(&[
        "-c",
        "CREATE TABLE t (id INT PRIMARY KEY, ts TIMESTAMPTZ, flag BOOLEAN)",
        "-c",
        "INSERT INTO t (id, ts, flag) VALUES (1, '2024-05-01T10:00:00Z', true)",
        "-c",
        "REFRESH TABLE t",
        "-c",
        "SELECT id, ts, flag, current_schema FROM t",
        "-c",
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 't'",
    ]);
    let (code, out, err) = run(&psql, &args).await;
    assert_eq!(code, 0, "{out}\n{err}");
    // Before, every SELECT also printed "could not interpret result from server: SELECT 1 1".
    assert!(!err.contains("could not interpret"), "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "CREATE 1",
            "INSERT 0 1",
            "REFRESH 1",
            "1|2024-05-01 10:00:00.000+00|t|crate",
            "crate"
        ],
        "{err}"
    );
}
