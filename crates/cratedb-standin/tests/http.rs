//! Drives a stand-in node over HTTP, as CrateDB's HTTP clients do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

async fn start() -> SocketAddr {
    // reqwest is built without a default TLS provider in this workspace.
    let _ = rustls::crypto::ring::default_provider().install_default();
    common::one_node().await.addr
}

async fn sql(
    addr: SocketAddr,
    auth: Option<(&str, &str)>,
    stmt: &str,
    args: Value,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client
        .post(format!("http://{addr}/_sql"))
        .json(&json!({"stmt": stmt, "args": args}));
    if let Some((u, p)) = auth {
        req = req.basic_auth(u, Some(p));
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn sql_endpoint_speaks_cratedb_shapes() {
    let addr = start().await;
    let root: Value = reqwest::get(format!("http://{addr}/"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(root["name"], "crate-0");

    // Without credentials a request runs as the trusted `crate` superuser.
    let (status, body) = sql(addr, None, "SELECT name FROM sys.nodes", json!([])).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cols"], json!(["name"]));
    assert_eq!(body["rows"], json!([["crate-0"]]));
    assert_eq!(body["rowcount"], 1);
    assert!(body["duration"].is_number());

    let (status, _) = sql(
        addr,
        None,
        r#"CREATE USER "system" WITH (password = ?)"#,
        json!(["pw"]),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = sql(
        addr,
        None,
        r#"CREATE USER "system" WITH (password = 'pw')"#,
        json!([]),
    )
    .await;
    assert_eq!((status, body["error"]["code"].clone()), (409, json!(4099)));
    assert_eq!(
        body["error"]["message"],
        "RoleAlreadyExistsException[Role 'system' already exists]"
    );
    sql(addr, None, r#"GRANT ALL PRIVILEGES TO "system""#, json!([])).await;

    let (status, body) = sql(addr, Some(("system", "wrong")), "SELECT 1", json!([])).await;
    assert_eq!((status, body["error"]["code"].clone()), (401, json!(4010)));
    assert!(
        !body.to_string().contains("wrong"),
        "the password never appears in an error"
    );

    let system = Some(("system", "pw"));
    let (status, body) = sql(
        addr,
        system,
        "CREATE TABLE t (id INT) CLUSTERED INTO 3 SHARDS WITH (number_of_replicas = '0-1')",
        json!([]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let mut health = Value::Null;
    for _ in 0..200 {
        let (_, body) = sql(
            addr,
            system,
            "SELECT health FROM sys.health ORDER BY severity DESC LIMIT 1",
            json!([]),
        )
        .await;
        health = body["rows"][0][0].clone();
        if health == "GREEN" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(health, "GREEN", "the tick loop starts the shards");
    let (_, body) = sql(
        addr,
        system,
        "INSERT INTO t (id) VALUES (?), (?)",
        json!([1, 2]),
    )
    .await;
    assert_eq!(body["rowcount"], 2);
    let (_, body) = sql(addr, system, "SELECT count(*) FROM t", json!([])).await;
    assert_eq!(body["rows"], json!([[2]]));

    let (status, body) = sql(addr, system, "SELEKT 1", json!([])).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!(4000)));
    let (status, body) = sql(addr, system, "SELECT * FROM missing", json!([])).await;
    assert_eq!((status, body["error"]["code"].clone()), (404, json!(4041)));
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/_sql"))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
}
