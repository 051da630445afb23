//! The stand-in's `crash` against an in-process node: in process through `crash::run`, and as
//! the built binary (a `crash` symlink to it, and the `crash` subcommand) the way the operator
//! runs it with `kubectl exec`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::process::Stdio;

use serde_json::Value;
use steward_cratedb_standin::crash;
use tokio::io::AsyncWriteExt;

async fn start() -> SocketAddr {
    common::one_node().await.addr
}

/// Runs crash in process: (exit code, stdout, stderr).
async fn crash(args: &[&str], password: Option<&str>, stdin: &str) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = crash::run(
        args.iter().map(|a| (*a).to_owned()).collect(),
        password.map(str::to_owned),
        &mut stdin.as_bytes(),
        &mut out,
        &mut err,
    )
    .await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[tokio::test]
async fn crash_runs_commands_and_stdin_and_fails_with_the_servers_message() {
    let addr = start().await;
    let host = format!("http://{addr}");
    let (code, out, err) = crash(
        &[
            "--hosts",
            &host,
            "--verify-ssl",
            "false",
            "-c",
            "SELECT name FROM sys.nodes",
        ],
        None,
        "",
    )
    .await;
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out,
        "+---------+\n| name    |\n+---------+\n| crate-0 |\n+---------+\n"
    );

    // Several statements from standard input (how the operator sends the license).
    let (code, out, err) = crash(
        &["--hosts", &addr.to_string(), "--format", "json"],
        None,
        "SET LICENSE 'standin:acme:5';\nCREATE USER system WITH (password = 's3cret');\nGRANT AL TO system;\nSELECT license['issued_to'] AS issued_to FROM sys.cluster;\n",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows, serde_json::json!([{"issued_to": "acme"}]));

    // The password comes from CRATEPW; a wrong one is refused without being echoed.
    let (code, out, err) = crash(
        &[
            "--hosts",
            &host,
            "-U",
            "system",
            "--format",
            "json_row",
            "-c",
            "CREATE USER other; SELECT name FROM sys.users WHERE name = 'other'",
        ],
        Some("s3cret"),
        "",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "{\"name\":\"other\"}\n"), "{err}");
    let (wrong, _, wrong_err) = crash(
        &["--hosts", &host, "-U", "system", "-c", "SELECT 1"],
        Some("nope"),
        "",
    )
    .await;
    assert_eq!(wrong, 1);
    assert!(wrong_err.contains("UnauthorizedException"), "{wrong_err}");
    assert!(!wrong_err.contains("nope"));

    // The first error stops the run: exit 1, the server's message on stderr.
    let (code, out, err) = crash(
        &["--hosts", &host],
        None,
        "CREATE USER system; CREATE USER never_created",
    )
    .await;
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert_eq!(
        err.trim(),
        "RoleAlreadyExistsException[Role 'system' already exists]"
    );
    let (_, out, _) = crash(
        &[
            "--hosts",
            &host,
            "--format",
            "csv",
            "-c",
            "SELECT name FROM sys.users WHERE name = 'never_created'",
        ],
        None,
        "",
    )
    .await;
    assert_eq!(out, "name\n");

    // An unreachable first host falls over to the next one.
    let (code, _, err) = crash(
        &[
            "--hosts",
            "127.0.0.1:9",
            &host,
            "-c",
            "SELECT 1 FROM sys.cluster",
        ],
        None,
        "",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = crash(
        &["--hosts", "127.0.0.1:9", "-c", "SELECT 1 FROM sys.cluster"],
        None,
        "",
    )
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("Server not available"), "{err}");
}

#[tokio::test]
async fn the_binary_is_crash_under_that_name() {
    let addr = start().await;
    let bin = env!("CARGO_BIN_EXE_cratedb-standin");
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("crash");
    std::os::unix::fs::symlink(bin, &link).unwrap();

    let mut child = tokio::process::Command::new(&link)
        .args(["--hosts", &format!("http://{addr}"), "--format", "json"])
        .env("CRATEPW", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"CREATE USER via_stdin;\nSELECT name FROM sys.users WHERE name = 'via_stdin';")
        .await
        .unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(output.status.success(), "{output:?}");
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows, serde_json::json!([{"name": "via_stdin"}]));

    // The subcommand form, and a failure's exit code and message.
    let output = tokio::process::Command::new(bin)
        .args([
            "crash",
            "--hosts",
            &addr.to_string(),
            "-c",
            "CREATE USER via_stdin",
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim(),
        "RoleAlreadyExistsException[Role 'via_stdin' already exists]"
    );
}
