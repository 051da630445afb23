//! Tests of the statement parser.

use super::*;
use serde_json::json;

fn p(sql: &str) -> Statement {
    match parse(sql, &[json!("arg1"), json!(2)]) {
        Ok(s) => s,
        Err(e) => panic!("{sql}: {e}"),
    }
}

#[test]
fn user_statements() {
    assert_eq!(
        p(r#"CREATE USER "system" WITH (password = 'pw')"#),
        Statement::CreateUser {
            name: "system".into(),
            password: Some(Secret("pw".into()))
        }
    );
    assert_eq!(
        p("create user App password 'x'"),
        Statement::CreateUser {
            name: "app".into(),
            password: Some(Secret("x".into()))
        }
    );
    assert_eq!(
        p("CREATE USER bob"),
        Statement::CreateUser {
            name: "bob".into(),
            password: None
        }
    );
    assert_eq!(
        p("ALTER USER app SET (password = ?)"),
        Statement::AlterUserPassword {
            name: "app".into(),
            password: Some(Secret("arg1".into()))
        }
    );
    assert_eq!(
        p("ALTER USER app SET (password = NULL)"),
        Statement::AlterUserPassword {
            name: "app".into(),
            password: None
        }
    );
    assert_eq!(
        p("DROP USER IF EXISTS app;"),
        Statement::DropUser {
            name: "app".into(),
            if_exists: true
        }
    );
    assert_eq!(
        p(r#"GRANT ALL PRIVILEGES TO "system""#),
        Statement::Grant {
            privileges: Privilege::ALL.to_vec(),
            users: vec!["system".into()],
            revoke: false
        }
    );
    assert_eq!(
        p("REVOKE DQL, DML FROM a, b"),
        Statement::Grant {
            privileges: vec![Privilege::Dql, Privilege::Dml],
            users: vec!["a".into(), "b".into()],
            revoke: true
        }
    );
    assert!(parse("GRANT DQL ON SCHEMA doc TO a", &[]).is_err());
    let debug = format!("{:?}", p("CREATE USER x WITH (password = 'hunter2')"));
    assert!(!debug.contains("hunter2"));
}

#[test]
fn settings_and_license() {
    assert_eq!(
        p(r#"SET GLOBAL PERSISTENT "cluster.routing.allocation.exclude._name" = 'a,b'"#),
        Statement::SetGlobal {
            persistent: true,
            settings: vec![(
                "cluster.routing.allocation.exclude._name".into(),
                json!("a,b")
            )]
        }
    );
    assert_eq!(
        p("SET GLOBAL stats.enabled = false, indices.recovery.max_bytes_per_sec = $2"),
        Statement::SetGlobal {
            persistent: false,
            settings: vec![
                ("stats.enabled".into(), json!(false)),
                ("indices.recovery.max_bytes_per_sec".into(), json!(2))
            ]
        }
    );
    assert_eq!(
        p(r#"RESET GLOBAL "cluster.routing.allocation.exclude._name""#),
        Statement::ResetGlobal {
            keys: vec!["cluster.routing.allocation.exclude._name".into()]
        }
    );
    assert_eq!(
        p("SET LICENSE 'abc'"),
        Statement::SetLicense {
            key: Secret("abc".into())
        }
    );
    assert_eq!(p("SET extra_float_digits = 3"), Statement::NoOp("SET"));
}

#[test]
fn refresh_show_and_delete() {
    assert_eq!(
        parse_in("REFRESH TABLE t, s.u", &[], "app"),
        Ok(Statement::Refresh {
            tables: vec![TableName::new("app", "t"), TableName::new("s", "u")]
        })
    );
    assert!(matches!(p("SHOW TABLES"), Statement::Query(_)));
    assert!(matches!(p("SHOW SCHEMAS LIKE 'd%'"), Statement::Query(_)));
    assert!(matches!(p("SHOW COLUMNS FROM t"), Statement::Query(_)));
    assert!(matches!(
        p("DELETE FROM t WHERE id = 1"),
        Statement::Delete(_)
    ));
    let Statement::CreateTable { columns, .. } = p(
        "CREATE TABLE t (a TIMESTAMP WITH TIME ZONE NOT NULL, b ARRAY(TEXT), c bigint[], d varchar(3) DEFAULT 'x', e geo_point)",
    ) else {
        panic!("not a CREATE TABLE");
    };
    let text = || Box::new(DataType::Text);
    assert_eq!(
        columns,
        vec![
            ("a".into(), DataType::TimestampTz),
            ("b".into(), DataType::Array(text())),
            ("c".into(), DataType::Array(Box::new(DataType::BigInt))),
            ("d".into(), DataType::Text),
            ("e".into(), DataType::Undefined),
        ]
    );
}

#[test]
fn create_table_with_crate_clauses() {
    assert_eq!(
        p(
            "CREATE TABLE IF NOT EXISTS doc.t (id INT PRIMARY KEY, \"Name\" TEXT, o OBJECT(DYNAMIC) AS (x INT), PRIMARY KEY (id)) CLUSTERED BY (id) INTO 6 SHARDS WITH (number_of_replicas = '0-1', refresh_interval = 1000)"
        ),
        Statement::CreateTable {
            name: TableName::new("doc", "t"),
            if_not_exists: true,
            shards: Some(6),
            replicas: Some(Replicas::Range {
                min: 0,
                max: Some(1)
            }),
            columns: vec![
                ("id".into(), DataType::Integer),
                ("Name".into(), DataType::Text),
                ("o".into(), DataType::Object)
            ],
        }
    );
    assert!(matches!(
        p("ALTER TABLE t SET (number_of_replicas = 2)"),
        Statement::AlterTableReplicas {
            replicas: Replicas::Fixed(2),
            ..
        }
    ));
}

#[test]
fn queries_go_to_sqlparser_with_numbered_placeholders() {
    match p(
        "SELECT node['name'], count(*) FROM sys.shards WHERE table_name = ? AND id = ? GROUP BY 1",
    ) {
        Statement::Query(q) => assert!(q.to_string().contains("$2")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p("INSERT INTO t (a) VALUES (1)"),
        Statement::Insert(_)
    ));
    assert!(matches!(
        p("UPDATE sys.node_checks SET acknowledged = TRUE WHERE id = 1"),
        Statement::Update(_)
    ));
    assert!(parse("SELEC 1", &[]).is_err());
    assert!(
        parse("TRUNCATE t", &[]).is_err_and(|e| e.code == super::super::ErrorCode::Unsupported)
    );
}
