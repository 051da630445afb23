//! Drives a stand-in node over the PostgreSQL wire protocol with tokio-postgres, as the
//! operator does when it creates and rotates users as `system`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

async fn start() -> SocketAddr {
    common::one_node().await.psql_addr
}

async fn connect(
    addr: SocketAddr,
    user: &str,
    password: Option<&str>,
) -> Result<Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(addr.ip().to_string())
        .port(addr.port())
        .user(user)
        .dbname("doc")
        .connect_timeout(Duration::from_secs(5));
    if let Some(p) = password {
        config.password(p);
    }
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_owned())
        .unwrap_or_else(|| panic!("not a database error: {e:?}"))
}

/// The text rows of a simple query.
async fn rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn users_over_the_postgres_wire_protocol() {
    let addr = start().await;

    // `crate` without a password is trusted; results come as text rows with column names.
    let admin = connect(addr, "crate", None).await.unwrap();
    let msgs = admin
        .simple_query("SELECT name FROM sys.nodes")
        .await
        .unwrap();
    let Some(SimpleQueryMessage::Row(row)) = msgs.get(1) else {
        panic!("{msgs:?}")
    };
    assert_eq!(row.columns()[0].name(), "name");
    assert_eq!(row.get(0), Some("crate-0"));
    assert!(matches!(
        msgs.last(),
        Some(SimpleQueryMessage::CommandComplete(1))
    ));

    admin
        .batch_execute(
            r#"CREATE USER "system" WITH (password = 'sys;pw'); GRANT ALL PRIVILEGES TO "system""#,
        )
        .await
        .unwrap();

    // A wrong password and an unknown user are refused with 28P01, without the password.
    for (user, pw) in [("system", "wrong-secret"), ("nobody", "nobody-secret")] {
        let e = connect(addr, user, Some(pw)).await.err().unwrap();
        assert_eq!(sqlstate(&e), "28P01");
        let message = e.as_db_error().unwrap().message().to_owned();
        assert!(
            message.contains("password authentication failed"),
            "{message}"
        );
        assert!(!message.contains(pw), "{message}");
    }

    // The operator's path: log in as `system`, create a user, tolerate "already exists".
    let system = connect(addr, "system", Some("sys;pw")).await.unwrap();
    system
        .batch_execute("CREATE USER alice WITH (password = 'a-1')")
        .await
        .unwrap();
    let e = system
        .simple_query("CREATE USER alice WITH (password = 'a-1')")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42710");
    assert!(
        e.as_db_error()
            .unwrap()
            .message()
            .contains("already exists"),
        "{e:?}"
    );
    // The extended protocol with a text parameter (tokio-postgres' `execute`).
    let n = system
        .execute("CREATE USER bob WITH (password = $1)", &[&"b-1"])
        .await
        .unwrap();
    assert_eq!(n, 1);
    let e = system
        .execute("CREATE USER bob WITH (password = $1)", &[&"b-1"])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42710");
    let found = system
        .query("SELECT name FROM sys.users WHERE name = $1", &[&"bob"])
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].get::<_, String>("name"), "bob");

    // The new user logs in; without privileges it may not create users (42501).
    let alice = connect(addr, "alice", Some("a-1")).await.unwrap();
    assert_eq!(
        rows(&alice, "SELECT 1 + 1 AS two").await,
        vec![vec![Some("2".to_owned())]]
    );
    let e = alice.simple_query("CREATE USER mallory").await.unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    connect(addr, "bob", Some("b-1")).await.unwrap();

    // Rotation: ALTER USER, then the old password fails and the new one works.
    system
        .batch_execute("ALTER USER alice SET (password = 'a-2')")
        .await
        .unwrap();
    let e = connect(addr, "alice", Some("a-1")).await.err().unwrap();
    assert_eq!(sqlstate(&e), "28P01");
    connect(addr, "alice", Some("a-2")).await.unwrap();
    // A connection opened before the change keeps working, as in CrateDB.
    assert_eq!(rows(&alice, "SELECT 'ok'").await.len(), 1);
}
