//! What the PostgreSQL benchmarks share: a superuser session, waiting for a cluster state, and
//! a writer that records every acknowledged insert through the `-primary` Service.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::Api;
use steward_api::postgres::{InstanceRole, PostgresCluster};

/// A session as the `steward` superuser, or `None` when the server does not answer.
pub async fn connect(host: &str, password: &str) -> Option<tokio_postgres::Client> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(host)
        .port(5432)
        .user("steward")
        .password(password)
        .dbname("postgres")
        .connect_timeout(Duration::from_secs(2));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Some(client)
}

/// The `-primary` Service's address and the superuser's password of cluster `name`.
pub async fn primary_service(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> (String, String) {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let service_ip = services
        .get(&format!("{name}-primary"))
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets.get(&format!("{name}-superuser")).await.unwrap();
    let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
    (service_ip, password)
}

/// Ready, `want` instances, every replica streaming, nothing in progress.
pub fn settled(c: &PostgresCluster, want: i32) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.ready_instances == want
            && s.instances.len() == usize::try_from(want).unwrap()
            && s.instances
                .iter()
                .all(|i| i.ready && (i.role == InstanceRole::Primary || i.streaming))
            && s.common.operation.is_none()
            && s.pending_failover.is_none()
    })
}

pub async fn until(
    api: &Api<PostgresCluster>,
    name: &str,
    what: &str,
    ok: impl Fn(&PostgresCluster) -> bool,
) -> (Duration, PostgresCluster) {
    let started = Instant::now();
    loop {
        if let Ok(c) = api.get(name).await
            && ok(&c)
        {
            return (started.elapsed(), c);
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{name}: never {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A writer inserting every 10 ms through the `-primary` Service, recording when each insert
/// was acknowledged and by which server address.
pub struct Writer {
    acked: Arc<Mutex<Vec<(Instant, String)>>>,
    /// When an insert or a connection attempt failed.
    failed: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    /// A writer on cluster `name`'s `-primary` Service as its superuser, half a second after
    /// its first insert.
    pub async fn for_cluster(client: &kube::Client, namespace: &str, name: &str) -> Self {
        let (service_ip, password) = primary_service(client, namespace, name).await;
        let writer = Self::start(service_ip, password).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        writer
    }

    pub async fn start(service_ip: String, password: String) -> Self {
        let c = connect(&service_ip, &password).await.unwrap();
        c.batch_execute("CREATE TABLE IF NOT EXISTS w (at timestamptz)")
            .await
            .unwrap();
        let acked = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (acked, failed, stop) = (acked.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move {
                let mut client = Some(c);
                while !stop.load(Ordering::Relaxed) {
                    if client.is_none() {
                        client = connect(&service_ip, &password).await;
                        if client.is_none() {
                            failed.lock().unwrap().push(Instant::now());
                        }
                    }
                    if let Some(c) = &client {
                        let insert = c.query_one(
                            "INSERT INTO w VALUES (now()) RETURNING host(inet_server_addr())",
                            &[],
                        );
                        match tokio::time::timeout(Duration::from_secs(2), insert).await {
                            Ok(Ok(row)) => acked
                                .lock()
                                .unwrap()
                                .push((Instant::now(), row.get::<_, String>(0))),
                            _ => {
                                failed.lock().unwrap().push(Instant::now());
                                client = None;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        Self {
            acked,
            failed,
            stop,
            task,
        }
    }

    /// Waits for the first failed write or connection after `since`.
    pub async fn first_failure_after(&self, since: Instant) -> Instant {
        loop {
            let found = self
                .failed
                .lock()
                .unwrap()
                .iter()
                .find(|at| **at > since)
                .copied();
            if let Some(at) = found {
                return at;
            }
            assert!(since.elapsed() < Duration::from_secs(60), "no write failed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for the first acknowledgement after `since` (from `server`, if given).
    pub async fn first_after(&self, since: Instant, server: Option<&str>) -> Instant {
        loop {
            let found = self
                .acked
                .lock()
                .unwrap()
                .iter()
                .find(|(at, by)| *at > since && server.is_none_or(|s| s == by))
                .map(|(at, _)| *at);
            if let Some(at) = found {
                return at;
            }
            assert!(
                since.elapsed() < Duration::from_secs(300),
                "no write resumed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The longest gap between consecutive acknowledgements in `[from, to]`.
    pub fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let acked = self.acked.lock().unwrap();
        let mut times: Vec<Instant> = vec![from];
        times.extend(
            acked
                .iter()
                .map(|(at, _)| *at)
                .filter(|at| *at > from && *at < to),
        );
        times.push(to);
        times
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }

    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
    }
}
