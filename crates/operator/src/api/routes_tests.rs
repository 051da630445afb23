//! The write routes end to end against the embedded API server (no node agent: the objects
//! the API writes are checked, not what the controllers then do — the CLI's e2e test does
//! that), with the audit log captured.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, RwLock};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value, json};
use steward_api::cratedb::CrateCluster;
use steward_api::pgbackrest::{PostgresBackup, PostgresRestore};
use steward_api::postgres::PostgresCluster;
use tower::ServiceExt;

use super::access::{AccessTable, ApiUser, LoginLimiter, hash_password};
use super::server::{ApiState, router};
use super::tokens::TokenKey;
use crate::clock::ManualClock;

fn user(name: &str, roles: &str) -> ApiUser {
    let data = BTreeMap::from([
        ("username".to_owned(), name.as_bytes().to_vec()),
        (
            "password-hash".to_owned(),
            hash_password(&format!("{name}-pw")).unwrap().into_bytes(),
        ),
        ("roles".to_owned(), roles.as_bytes().to_vec()),
    ]);
    ApiUser::from_data(&data).unwrap()
}

fn basic(name: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{name}:{name}-pw"))
    )
}

async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, basic("ann"));
    let body = match body {
        Some(v) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let response = app
        .clone()
        .oneshot(builder.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_write_routes_create_scale_restart_fail_over_and_manage_users_backups_schedules_and_policies()
 {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let plane = crate::embedded::Embedded::start(&["team"]).await.unwrap();
    let state = Arc::new(ApiState {
        client: plane.client.clone(),
        access: RwLock::new(AccessTable::new(vec![user("ann", "admin")], Vec::new())),
        limiter: Mutex::new(LoginLimiter::default()),
        tokens: TokenKey::new(&[3; 32]).unwrap(),
        clock: Arc::new(ManualClock::new("2026-11-26T10:00:00Z".parse().unwrap())),
    });
    let app = router(state);
    let base = "/api/v1/namespaces/team/clusters";

    // Create: the engine's defaults, the request's fields, extra spec fields merged in.
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(
            json!({"engine": "postgres", "name": "pg", "instances": 2, "storage": "2Gi",
            "spec": {"parameters": {"max_connections": "40"}}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["spec"]["storage"]["size"], "2Gi");
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "etcd", "name": "kv", "instances": 3})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["spec"]["replicas"], 3);
    // The API server's validation passes through with its code and words.
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "postgres", "name": "big", "instances": 12})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("instances"),
        "{body}"
    );
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "mysql", "name": "x", "instances": 1})),
    )
    .await;
    assert_eq!(
        (status, body["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(400))
    );
    let (status, _) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "etcd", "name": "kv", "instances": 3})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = call(&app, "POST", base, None).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a missing body is a 400: {body}"
    );

    // Names in paths are Kubernetes names: an encoded `/` or `..` never reaches the client.
    for bad in ["pg%2F..%2F..%2Fsecrets", "..", "PG", "pg%00"] {
        let (status, body) = call(&app, "GET", &format!("{base}/postgres/{bad}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["code"], 400);
    }

    // Update: a merge patch of the spec; the size goes through scale.
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("{base}/postgres/pg"),
        Some(json!({"spec": {"parameters": {"work_mem": "8MB"}}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["spec"]["parameters"]["work_mem"], "8MB");
    assert_eq!(body["spec"]["parameters"]["max_connections"], "40");
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("{base}/postgres/pg"),
        Some(json!({"spec": {"instances": 3}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["message"].as_str().unwrap().contains("scale"));

    // Scale and restart answer 202 with the generation that carries them.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/etcd/kv/scale"),
        Some(json!({"instances": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        (body["action"].as_str(), body["generation"].as_i64()),
        (Some("scale"), Some(2))
    );
    let (status, body) = call(&app, "POST", &format!("{base}/postgres/pg/restart"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let pgs: Api<PostgresCluster> = Api::namespaced(plane.client.clone(), "team");
    let pg = pgs.get("pg").await.unwrap();
    assert_eq!(
        pg.spec.pod_template.annotations[super::clusters::RESTARTED_AT],
        "2026-11-26T10:00:00Z"
    );

    // Fail-over: candidates come from status; a target must be an instance; etcd has none.
    let (status, body) = call(&app, "GET", &format!("{base}/postgres/pg/failover"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["candidates"], json!([]));
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/failover"),
        Some(json!({"target": "pg-9"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/failover"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["switchoverId"].as_str().unwrap().to_owned();
    assert_eq!(pgs.get("pg").await.unwrap().spec.switchover.unwrap().id, id);
    let (status, _) = call(&app, "GET", &format!("{base}/etcd/kv/failover"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Users: a Secret and a spec entry; rotation rewrites the Secret; deletion removes both.
    let password = "s3cret-Password-42";
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/users"),
        Some(json!({"name": "app", "databases": ["app"], "password": password})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["secret"], "pg-user-app");
    let secrets: Api<Secret> = Api::namespaced(plane.client.clone(), "team");
    let stored = |s: Secret| s.data.unwrap()["password"].0.clone();
    assert_eq!(
        stored(secrets.get("pg-user-app").await.unwrap()),
        password.as_bytes()
    );
    assert_eq!(pgs.get("pg").await.unwrap().spec.users[0].name, "app");
    let (status, _) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/users"),
        Some(json!({"name": "app"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = call(&app, "GET", &format!("{base}/postgres/pg/users"), None).await;
    assert_eq!(
        (status, body["users"][0]["name"].clone()),
        (StatusCode::OK, json!("app"))
    );
    let rotated = "an0ther-Password-43";
    let (status, body) = call(
        &app,
        "PUT",
        &format!("{base}/postgres/pg/users/app/password"),
        Some(json!({"password": rotated})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        stored(secrets.get("pg-user-app").await.unwrap()),
        rotated.as_bytes()
    );
    let (status, _) = call(&app, "GET", &format!("{base}/etcd/kv/users"), None).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "etcd clusters have no users"
    );

    // Backups and restores are objects the controllers act on.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/backups"),
        Some(json!({"type": "diff"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let backup = body["name"].as_str().unwrap().to_owned();
    let backups: Api<PostgresBackup> = Api::namespaced(plane.client.clone(), "team");
    assert_eq!(
        backups.get(&backup).await.unwrap().spec.type_.as_str(),
        "diff"
    );
    let (status, body) = call(&app, "GET", &format!("{base}/postgres/pg/backups"), None).await;
    assert_eq!(
        (status, body["backups"][0]["name"].clone()),
        (StatusCode::OK, json!(backup))
    );
    let (status, body) = call(
        &app,
        "GET",
        &format!("/api/v1/namespaces/team/backups/{backup}"),
        None,
    )
    .await;
    assert_eq!(
        (status, body["type"].clone()),
        (StatusCode::OK, json!("diff"))
    );
    let (status, _) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/backups"),
        Some(json!({"type": "weekly"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/restore"),
        Some(json!({"targetTime": "2026-11-26T09:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let restores: Api<PostgresRestore> = Api::namespaced(plane.client.clone(), "team");
    let r = restores.get(body["name"].as_str().unwrap()).await.unwrap();
    assert_eq!(
        r.spec.target.clone().unwrap().time.as_deref(),
        Some("2026-11-26T09:00:00Z")
    );
    // It can be followed (GET …/restores/{name}); its refusal's reason is there once the
    // operator wrote it; another cluster's restore is not this one's.
    let one = format!(
        "{base}/postgres/pg/restores/{}",
        body["name"].as_str().unwrap()
    );
    let mut refused = r.clone();
    refused.status = Some(steward_api::pgbackrest::PostgresRestoreStatus {
        phase: Some(steward_api::pgbackrest::RestorePhase::Failed),
        message: Some("refused; nothing was changed".into()),
        error: Some("the repository pg-repo has no stanza yet".into()),
        ..Default::default()
    });
    restores
        .replace_status(
            r.metadata.name.as_deref().unwrap(),
            &Default::default(),
            &refused,
        )
        .await
        .unwrap();
    let (status, shown) = call(&app, "GET", &one, None).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(
        (&shown["phase"], &shown["error"], &shown["cluster"]),
        (
            &json!("Failed"),
            &json!("the repository pg-repo has no stanza yet"),
            &json!("pg")
        )
    );
    let (status, _) = call(&app, "GET", &one.replace("/pg/", "/other/"), None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a restore of another cluster"
    );
    let (status, _) = call(
        &app,
        "GET",
        &format!("{base}/postgres/pg/restores/none"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A major-version upgrade: a PostgresUpgrade; a bad version is the API's 400, an engine
    // without upgrade objects says how its version changes.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/upgrade"),
        Some(json!({"toVersion": "16", "withoutBackup": true})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["toVersion"], "16");
    let upgrades: Api<steward_api::pgupgrade::PostgresUpgrade> =
        Api::namespaced(plane.client.clone(), "team");
    let u = upgrades.get(body["name"].as_str().unwrap()).await.unwrap();
    assert_eq!(
        (
            u.spec.cluster.as_str(),
            u.spec.to_version.as_str(),
            u.spec.without_backup
        ),
        ("pg", "16", true)
    );
    // It can be followed (GET …/upgrades/{name}); its refusal's reason is there once the
    // operator wrote it.
    let one = format!(
        "{base}/postgres/pg/upgrades/{}",
        body["name"].as_str().unwrap()
    );
    let mut refused = u.clone();
    refused.status = Some(steward_api::pgupgrade::PostgresUpgradeStatus {
        phase: Some(steward_api::pgupgrade::UpgradePhase::Failed),
        message: Some("refused; nothing was changed".into()),
        error: Some("the cluster already runs PostgreSQL 16".into()),
        ..Default::default()
    });
    upgrades
        .replace_status(
            u.metadata.name.as_deref().unwrap(),
            &Default::default(),
            &refused,
        )
        .await
        .unwrap();
    let (status, shown) = call(&app, "GET", &one, None).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(
        (&shown["phase"], &shown["error"], &shown["toVersion"]),
        (
            &json!("Failed"),
            &json!("the cluster already runs PostgreSQL 16"),
            &json!("16")
        )
    );
    let (status, _) = call(
        &app,
        "GET",
        &format!("{base}/postgres/pg/upgrades/none"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "GET", &one.replace("/pg/", "/other/"), None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "an upgrade of another cluster"
    );
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/postgres/pg/upgrade"),
        Some(json!({"toVersion": "sixteen"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Schedules and policies: create, list, delete; the API server validates them.
    let schedules = "/api/v1/namespaces/team/schedules";
    let (status, body) = call(
        &app,
        "POST",
        schedules,
        Some(json!({"name": "nightly", "spec": {"cluster": "pg", "schedule": "0 0 1 * * *", "type": "pgbackrest", "pgbackrest": {"type": "full"}}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        schedules,
        Some(json!({"name": "bad", "spec": {"cluster": "pg", "schedule": "0 0 1 * * *", "type": "policy"}})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "CEL says a policy schedule needs spec.policy: {body}"
    );
    let (status, body) = call(&app, "GET", schedules, None).await;
    assert_eq!(
        (status, body["schedules"][0]["name"].clone()),
        (StatusCode::OK, json!("nightly"))
    );
    let (status, _) = call(&app, "DELETE", &format!("{schedules}/nightly"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, "DELETE", &format!("{schedules}/nightly"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let policies = "/api/v1/namespaces/team/policies";
    let (status, body) = call(
        &app,
        "POST",
        policies,
        Some(json!({"name": "grants", "spec": {"sql": "SELECT 1"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = call(&app, "GET", policies, None).await;
    assert_eq!(
        (status, body["policies"][0]["spec"]["sql"].clone()),
        (StatusCode::OK, json!("SELECT 1"))
    );
    let (status, _) = call(&app, "DELETE", &format!("{policies}/grants"), None).await;
    assert_eq!(status, StatusCode::OK);

    // Deleting the user takes the Secret the API made; deleting a cluster answers 202.
    let (status, body) = call(
        &app,
        "DELETE",
        &format!("{base}/postgres/pg/users/app"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(secrets.get_opt("pg-user-app").await.unwrap().is_none());
    assert!(pgs.get("pg").await.unwrap().spec.users.is_empty());
    let (status, _) = call(&app, "DELETE", &format!("{base}/etcd/kv"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = call(&app, "DELETE", &format!("{base}/etcd/kv"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Every mutating call left an audit line naming user, permission and object — and no
    // password anywhere in the log.
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let audit: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("steward::audit"))
        .collect();
    for expected in [
        "permission=CreateCluster",
        "permission=ScaleCluster",
        "permission=RestartCluster",
        "permission=Failover",
        "permission=CreateUser",
        "permission=UpdateUser",
        "permission=DeleteUser",
        "permission=CreateBackup",
        "permission=Restore",
        "permission=DeleteCluster",
    ] {
        assert!(
            audit
                .iter()
                .any(|l| l.contains(expected) && l.contains("user=ann")),
            "no audit line with {expected}:\n{log}"
        );
    }
    assert!(
        audit
            .iter()
            .any(|l| l.contains("object=/api/v1/namespaces/team/clusters/etcd/kv/scale"))
    );
    assert!(
        !audit.iter().any(|l| l.contains("permission=ShowCluster")),
        "reads are not audited"
    );
    assert!(
        !log.contains(password) && !log.contains(rotated),
        "a password reached the log"
    );
}

#[tokio::test]
async fn cratedb_clusters_are_created_scaled_by_node_set_restarted_and_refuse_what_does_not_apply()
{
    let plane = crate::embedded::Embedded::start(&["team"]).await.unwrap();
    let state = Arc::new(ApiState {
        client: plane.client.clone(),
        access: RwLock::new(AccessTable::new(vec![user("ann", "admin")], Vec::new())),
        limiter: Mutex::new(LoginLimiter::default()),
        tokens: TokenKey::new(&[3; 32]).unwrap(),
        clock: Arc::new(ManualClock::new("2026-11-26T10:00:00Z".parse().unwrap())),
    });
    let app = router(state);
    let base = "/api/v1/namespaces/team/clusters";
    let crates: Api<CrateCluster> = Api::namespaced(plane.client.clone(), "team");
    let message = |body: &Value| body["message"].as_str().unwrap_or_default().to_owned();

    // Create: cluster name = resource name, the version, 3 masters and the request's data set;
    // extra spec fields merged in.
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(
            json!({"engine": "cratedb", "name": "cc", "instances": 1, "nodeSet": "hot",
            "storage": "2Gi",
            "spec": {"cluster": {"license": {"secretKeyRef": {"name": "lic", "key": "license"}}}}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["engine"], "cratedb");
    let c = crates.get("cc").await.unwrap();
    assert_eq!(
        (
            c.spec.cluster.name.as_str(),
            c.spec.cluster.version.as_str()
        ),
        ("cc", "4.8.4")
    );
    assert_eq!(c.spec.nodes.master.replicas, 3);
    assert_eq!(
        (
            c.spec.nodes.data[0].name.as_str(),
            c.spec.nodes.data[0].replicas,
            c.spec.nodes.data[0].disk.size.as_str()
        ),
        ("hot", 1, "2Gi")
    );
    assert_eq!(c.spec.cluster.license.unwrap().secret_key_ref.name, "lic");
    // What a create request cannot express is a 400 naming it.
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "cratedb", "name": "m", "instances": 1, "nodeSet": "master"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "postgres", "name": "p", "instances": 1, "nodeSet": "hot"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("nodeSet is for cratedb"), "{body}");
    // The API server's schema still speaks (a version that is no x.y.z).
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "cratedb", "name": "v", "instances": 1, "version": "latest"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    // Listed and shown with the other engines.
    let (status, body) = call(&app, "GET", base, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["clusters"][0]["engine"], "cratedb", "{body}");
    let (status, body) = call(&app, "GET", &format!("{base}/cratedb/cc"), None).await;
    assert_eq!(
        (status, body["spec"]["nodes"]["data"][0]["name"].clone()),
        (StatusCode::OK, json!("hot"))
    );

    // Scale names the node set; without one (or an unknown one) the answer names the sets.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/cratedb/cc/scale"),
        Some(json!({"replicas": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("master, hot"), "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/cratedb/cc/scale"),
        Some(json!({"replicas": 2, "nodeSet": "cold"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("master, hot"), "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/cratedb/cc/scale"),
        Some(json!({"replicas": 2, "nodeSet": "master"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/cratedb/cc/scale"),
        Some(json!({"replicas": 2, "nodeSet": "hot"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        (body["action"].as_str(), body["generation"].as_i64()),
        (Some("scale"), Some(2))
    );
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/cratedb/cc/scale"),
        Some(json!({"instances": 4, "nodeSet": "master"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let c = crates.get("cc").await.unwrap();
    assert_eq!(
        (c.spec.nodes.master.replicas, c.spec.nodes.data[0].replicas),
        (4, 2)
    );

    // Update: a merge patch, but not of the node sets' sizes.
    let (status, body) = call(
        &app,
        "PATCH",
        &format!("{base}/cratedb/cc"),
        Some(json!({"spec": {"restart": {"greenReadings": 1, "greenIntervalSeconds": 1}}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["spec"]["restart"]["greenReadings"], 1);
    for patch in [
        json!({"nodes": {"master": {"replicas": 5}}}),
        json!({"nodes": {"data": [{"name": "hot", "replicas": 3}]}}),
    ] {
        let (status, body) = call(
            &app,
            "PATCH",
            &format!("{base}/cratedb/cc"),
            Some(json!({ "spec": patch })),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{patch}: {body}");
        assert!(message(&body).contains("scale"), "{body}");
    }

    // Restart: the annotation, as for the other engines.
    let (status, body) = call(&app, "POST", &format!("{base}/cratedb/cc/restart"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        crates
            .get("cc")
            .await
            .unwrap()
            .spec
            .pod_template
            .annotations[super::clusters::RESTARTED_AT],
        "2026-11-26T10:00:00Z"
    );

    // Fail-over does not apply: a 400 saying why, for the candidates and the action.
    for method in ["GET", "POST"] {
        let (status, body) = call(
            &app,
            method,
            &format!("{base}/cratedb/cc/failover"),
            (method == "POST").then(|| json!({})),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method}: {body}");
        assert!(message(&body).contains("CrateDB has no primary"), "{body}");
    }

    // Users: a Secret and a `spec.users` entry; no PostgreSQL options; rotation; deletion.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/cratedb/cc/users"),
        Some(json!({"name": "app", "password": "Crate-Password-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        (body["secret"].clone(), body["privileges"].clone()),
        (json!("cc-user-app"), json!("ALL"))
    );
    let secrets: Api<Secret> = Api::namespaced(plane.client.clone(), "team");
    let stored = |s: Secret| s.data.unwrap()["password"].0.clone();
    assert_eq!(
        stored(secrets.get("cc-user-app").await.unwrap()),
        b"Crate-Password-1"
    );
    let c = crates.get("cc").await.unwrap();
    assert_eq!(
        (
            c.spec.users[0].name.as_str(),
            c.spec.users[0].password.secret_key_ref.name.as_str()
        ),
        ("app", "cc-user-app")
    );
    for bad in [
        json!({"name": "app2", "databases": ["x"]}),
        json!({"name": "app2", "superuser": true}),
        json!({"name": "system"}),
    ] {
        let (status, body) =
            call(&app, "POST", &format!("{base}/cratedb/cc/users"), Some(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    let (status, _) = call(
        &app,
        "POST",
        &format!("{base}/cratedb/cc/users"),
        Some(json!({"name": "app"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = call(&app, "GET", &format!("{base}/cratedb/cc/users"), None).await;
    assert_eq!(
        (status, body["users"][0]["name"].clone()),
        (StatusCode::OK, json!("app"))
    );
    let (status, body) = call(
        &app,
        "PUT",
        &format!("{base}/cratedb/cc/users/app/password"),
        Some(json!({"password": "Crate-Password-2"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        stored(secrets.get("cc-user-app").await.unwrap()),
        b"Crate-Password-2"
    );
    let (status, body) = call(
        &app,
        "DELETE",
        &format!("{base}/cratedb/cc/users/app"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(message(&body).contains("CrateDB keeps the user"), "{body}");
    assert!(secrets.get_opt("cc-user-app").await.unwrap().is_none());
    assert!(crates.get("cc").await.unwrap().spec.users.is_empty());

    // Backups, restores and schedules: not supported, said plainly.
    for (method, path, body) in [
        ("GET", format!("{base}/cratedb/cc/backups"), None),
        (
            "POST",
            format!("{base}/cratedb/cc/backups"),
            Some(json!({})),
        ),
        (
            "POST",
            format!("{base}/cratedb/cc/restore"),
            Some(json!({})),
        ),
        (
            "POST",
            "/api/v1/namespaces/team/schedules".to_owned(),
            Some(
                json!({"name": "nightly", "spec": {"cluster": "cc", "schedule": "0 0 1 * * *",
                "type": "pgbackrest", "pgbackrest": {"type": "full"}}}),
            ),
        ),
    ] {
        let (status, answer) = call(&app, method, &path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
        assert!(
            message(&answer).contains("not supported for cratedb"),
            "{answer}"
        );
    }

    // Delete.
    let (status, _) = call(&app, "DELETE", &format!("{base}/cratedb/cc"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = call(&app, "DELETE", &format!("{base}/cratedb/cc"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn etcd_backups_are_snapshots_and_a_restore_seeds_a_new_cluster_from_one() {
    use steward_api::common::Condition;
    use steward_api::etcd::{
        EtcdBackup, EtcdBackupStatus, EtcdCluster, EtcdClusterStatus, SnapshotPhase,
    };

    let plane = crate::embedded::Embedded::start(&["team"]).await.unwrap();
    let state = Arc::new(ApiState {
        client: plane.client.clone(),
        access: RwLock::new(AccessTable::new(vec![user("ann", "admin")], Vec::new())),
        limiter: Mutex::new(LoginLimiter::default()),
        tokens: TokenKey::new(&[3; 32]).unwrap(),
        clock: Arc::new(ManualClock::new("2026-11-26T10:00:00Z".parse().unwrap())),
    });
    let app = router(state);
    let base = "/api/v1/namespaces/team/clusters";
    let message = |body: &Value| body["message"].as_str().unwrap_or_default().to_owned();
    let backups: Api<EtcdBackup> = Api::namespaced(plane.client.clone(), "team");
    let clusters: Api<EtcdCluster> = Api::namespaced(plane.client.clone(), "team");
    let (status, body) = call(
        &app,
        "POST",
        base,
        Some(json!({"engine": "etcd", "name": "kv", "instances": 3, "storage": "2Gi"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // A backup is one snapshot: an EtcdBackup of the cluster, named by the time.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/etcd/kv/backups"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        (&body["name"], &body["type"], &body["method"]),
        (
            &json!("kv-20261126100000"),
            &json!("full"),
            &json!("snapshot")
        )
    );
    let made = backups.get("kv-20261126100000").await.unwrap();
    assert_eq!((made.spec.cluster.as_str(), made.spec.retain), ("kv", None));
    for bad in [json!({"type": "diff"}), json!({"method": "pgbackrest"})] {
        let (status, body) = call(
            &app,
            "POST",
            &format!("{base}/etcd/kv/backups"),
            Some(bad.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(
            message(&body).contains("an etcd backup is a snapshot"),
            "{body}"
        );
    }
    // Nothing to restore before a snapshot completed; the named one is not.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/etcd/kv/restore"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        message(&body).contains("kv has no Completed backup"),
        "{body}"
    );
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/etcd/kv/restore"),
        Some(json!({"backup": "kv-20261126100000"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        message(&body).contains("backup kv-20261126100000 is Pending, not Completed"),
        "{body}"
    );

    // The controller's word, as it writes it: Completed, with the snapshot's facts; an older
    // failed one and another cluster's snapshot beside it.
    let mut done = made.clone();
    done.status = Some(EtcdBackupStatus {
        phase: Some(SnapshotPhase::Completed),
        revision: Some(112),
        size_bytes: Some(20480),
        start_time: Some("2026-11-26T10:00:01Z".into()),
        completion_time: Some("2026-11-26T10:00:03Z".into()),
        ..Default::default()
    });
    backups
        .replace_status("kv-20261126100000", &Default::default(), &done)
        .await
        .unwrap();
    let mut other = made.clone();
    other.metadata = kube::api::ObjectMeta {
        name: Some("elsewhere".into()),
        namespace: Some("team".into()),
        ..Default::default()
    };
    other.spec.cluster = "other".into();
    backups.create(&Default::default(), &other).await.unwrap();
    let (status, body) = call(&app, "GET", &format!("{base}/etcd/kv/backups"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed = body["backups"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "only kv's snapshots: {body}");
    assert_eq!(
        (
            &listed[0]["phase"],
            &listed[0]["label"],
            &listed[0]["sizeBytes"],
            &listed[0]["completionTime"]
        ),
        (
            &json!("Completed"),
            &json!("revision 112"),
            &json!(20480),
            &json!("2026-11-26T10:00:03Z")
        )
    );
    let (status, body) = call(
        &app,
        "GET",
        "/api/v1/namespaces/team/backups/kv-20261126100000",
        None,
    )
    .await;
    assert_eq!(
        (status, body["method"].clone()),
        (StatusCode::OK, json!("snapshot"))
    );
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/etcd/kv/restore"),
        Some(json!({"backup": "elsewhere"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "another cluster's: {body}");

    // A snapshot is restored as it was taken.
    for bad in [
        json!({"targetTime": "2026-11-26T09:00:00Z"}),
        json!({"version": 7}),
    ] {
        let (status, body) = call(
            &app,
            "POST",
            &format!("{base}/etcd/kv/restore"),
            Some(bad.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(message(&body).contains("as it was taken"), "{body}");
    }

    // The restore: a new cluster of kv's shape seeded from the newest Completed snapshot; kv
    // itself is not changed.
    let before = clusters.get("kv").await.unwrap();
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/etcd/kv/restore"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let name = "kv-restore-20261126100000";
    assert_eq!(
        (&body["name"], &body["cluster"], &body["phase"]),
        (&json!(name), &json!(name), &json!("Pending"))
    );
    assert!(
        message(&body).contains(name) && message(&body).contains("revision 112"),
        "{body}"
    );
    let new = clusters.get(name).await.unwrap();
    assert_eq!(
        new.spec.data_source.as_ref().map(|d| d.backup.as_str()),
        Some("kv-20261126100000")
    );
    assert_eq!(
        (new.spec.replicas, &new.spec.version, &new.spec.storage.size),
        (3, &before.spec.version, &"2Gi".to_owned())
    );
    assert_eq!(
        new.metadata.labels.as_ref().unwrap()["steward.dev/restored-from"],
        "kv"
    );
    let after = clusters.get("kv").await.unwrap();
    assert_eq!(
        (after.spec, after.metadata.generation),
        (before.spec, before.metadata.generation)
    );
    // It shows in the cluster list as any cluster does.
    let (_, body) = call(&app, "GET", base, None).await;
    assert!(
        body["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == name),
        "{body}"
    );

    // Followed from the new cluster's status: waiting for its operator, then failed for good
    // when its snapshot is lost; only as a restore of kv.
    let one = format!("{base}/etcd/kv/restores/{name}");
    let (status, shown) = call(&app, "GET", &one, None).await;
    assert_eq!(
        (status, shown["phase"].clone()),
        (StatusCode::OK, json!("Pending"))
    );
    let (status, _) = call(&app, "GET", &one.replace("/kv/", "/other/"), None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a restore of another cluster"
    );
    let (status, _) = call(&app, "GET", &format!("{base}/etcd/kv/restores/kv"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "kv is no restore");
    let why = "EtcdBackup kv-20261126100000 does not exist";
    let mut waiting = new.clone();
    let mut status_of = EtcdClusterStatus::default();
    status_of.common.conditions = vec![Condition {
        type_: "Degraded".into(),
        status: "True".into(),
        reason: "SnapshotNotReady".into(),
        message: why.into(),
        last_transition_time: "2026-11-26T10:00:05Z".into(),
        observed_generation: Some(1),
    }];
    waiting.status = Some(status_of);
    clusters
        .replace_status(name, &Default::default(), &waiting)
        .await
        .unwrap();
    let (_, shown) = call(&app, "GET", &one, None).await;
    assert_eq!(
        shown["phase"], "Pending",
        "the snapshot is still there: {shown}"
    );
    backups
        .delete("kv-20261126100000", &Default::default())
        .await
        .unwrap();
    let (status, shown) = call(&app, "GET", &one, None).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(
        (&shown["phase"], &shown["error"]),
        (&json!("Failed"), &json!(why))
    );

    // Without a Completed snapshot left, a second restore is refused.
    let (status, body) = call(
        &app,
        "POST",
        &format!("{base}/etcd/kv/restore"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A schedule of an etcd cluster's snapshots is no longer refused.
    let (status, body) = call(
        &app,
        "POST",
        "/api/v1/namespaces/team/schedules",
        Some(
            json!({"name": "kv-nightly", "spec": {"cluster": "kv", "schedule": "0 0 1 * * *",
            "type": "etcd-snapshot", "successfulRunsHistoryLimit": 3}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
