//! Real databases as pods: etcd (Debian's /usr/bin/etcd through the image map) and
//! PostgreSQL (Debian's postgresql-15 bin directory), with PVCs that survive the pod, Service
//! names through the hosts files and ClusterIPs through the service proxy.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use serde_json::{Value, json};

use crate::common::*;

const T: Duration = Duration::from_secs(30);

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn etcd_pod() -> Value {
    json!({
        "metadata": {"name": "etcd-0", "labels": {"app": "etcd"}},
        "spec": {
            "hostname": "etcd-0",
            "subdomain": "etcd-peers",
            "containers": [{
                "name": "etcd",
                "image": "quay.io/coreos/etcd:v3.5.17",
                "command": ["/usr/local/bin/etcd"],
                "args": [
                    "--name=etcd-0",
                    "--data-dir=/var/lib/etcd/data",
                    "--listen-client-urls=http://$(POD_IP):2379",
                    "--advertise-client-urls=http://$(POD_IP):2379",
                    "--listen-peer-urls=http://$(POD_IP):2380",
                    "--initial-advertise-peer-urls=http://$(POD_IP):2380",
                    "--initial-cluster=etcd-0=http://$(POD_IP):2380"
                ],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"name": "client", "containerPort": 2379}, {"name": "peer", "containerPort": 2380}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": "client"}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 2379}, "periodSeconds": 1, "failureThreshold": 5},
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "etcd-data"}}]
        }
    })
}

/// Retries an HTTP call until it answers 200 (the proxy listener and etcd need a moment).
async fn http_ok(addr: SocketAddr, path: &str, body: &str) -> String {
    let deadline = Instant::now() + T;
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(2), async {
            let s = tokio::net::TcpStream::connect(addr).await.ok()?;
            drop(s);
            Some(http(addr, "POST", path, Some(body)).await)
        })
        .await;
        if let Ok(Some((200, text))) = attempt {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{addr}{path}: no 200 answer ({attempt:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn etcd_pod_serves_through_dns_and_cluster_ip_and_keeps_its_data() {
    let env = start(20).await;
    env.create::<PersistentVolumeClaim>(json!({"metadata": {"name": "etcd-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .await;
    env.create::<Pod>(etcd_pod()).await;
    let pod = env.wait_ready("etcd-0", T).await;
    let ip = pod_ip(&pod);
    let pvc = env
        .api::<PersistentVolumeClaim>()
        .get("etcd-data")
        .await
        .unwrap();
    let pvc_status = pvc.status.unwrap();
    assert_eq!(pvc_status.phase.as_deref(), Some("Bound"));
    assert_eq!(pvc_status.capacity.unwrap()["storage"].0, "1Gi");

    // Services created after the pod show up in its hosts file (same inode, updated in place).
    env.create::<Service>(json!({"metadata": {"name": "etcd"}, "spec": {"clusterIP": "127.96.20.10",
        "selector": {"app": "etcd"}, "ports": [{"name": "client", "port": 2379, "targetPort": "client"}]}}))
    .await;
    env.create::<Service>(json!({"metadata": {"name": "etcd-peers"}, "spec": {"clusterIP": "None",
        "publishNotReadyAddresses": true, "selector": {"app": "etcd"}, "ports": [{"name": "peer", "port": 2380}]}}))
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let hosts = env
            .exec("etcd-0", "etcd", &["cat", "/etc/hosts"])
            .await
            .stdout;
        // (The pod's own line names it `etcd-0.etcd-peers.t.svc.cluster.local` from the start;
        // the headless Service's record follows once its endpoints list the pod.)
        if hosts.contains("127.96.20.10\tetcd.t.svc.cluster.local etcd.t.svc etcd.t etcd\n")
            && hosts.contains(&format!(
                "{ip}\tetcd-0.etcd-peers.t.svc.cluster.local etcd-0.etcd-peers.t.svc "
            ))
            && env.node().resolve("etcd-0.etcd-peers.t") == Some(ip)
        {
            break;
        }
        assert!(Instant::now() < deadline, "hosts file not updated: {hosts}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        env.node().resolve("etcd.t.svc.cluster.local"),
        Some("127.96.20.10".parse().unwrap())
    );
    assert_eq!(env.node().resolve("etcd-0.etcd-peers.t"), Some(ip));
    let cluster_hosts = std::fs::read_to_string(env.node().hosts_file()).unwrap();
    assert!(
        cluster_hosts.contains("127.96.20.10\tetcd.t.svc.cluster.local"),
        "{cluster_hosts}"
    );

    // Write through the ClusterIP proxy, read from the pod IP.
    let svc = SocketAddr::from((env.node().resolve("etcd.t.svc").unwrap(), 2379));
    let put = json!({"key": b64("greeting"), "value": b64("hello")}).to_string();
    http_ok(svc, "/v3/kv/put", &put).await;
    let range = json!({"key": b64("greeting")}).to_string();
    let got = http_ok(SocketAddr::from((ip, 2379)), "/v3/kv/range", &range).await;
    assert!(got.contains(&b64("hello")), "{got}");

    // Delete: etcd stops, the claim's data stays (in a directory keyed by the claim's UID); a
    // new pod finds it.
    let pid = env.container_pid(&pod, "etcd");
    env.delete_pod("etcd-0").await;
    wait_process_gone(pid, T).await;
    env.wait_gone("etcd-0", T).await;
    let volume = env.dir.path().join(format!(
        "volumes/t/etcd-data-{}",
        pvc.metadata.uid.clone().unwrap()
    ));
    assert!(volume.join("data/member").is_dir());
    env.create::<Pod>(etcd_pod()).await;
    let pod = env.wait_ready("etcd-0", T).await;
    assert_ne!(pod_ip(&pod), ip, "a new pod gets a new address");
    let got = http_ok(svc, "/v3/kv/range", &range).await;
    assert!(got.contains(&b64("hello")), "{got}");

    // Deleting the claim while a pod uses it leaves it terminating (pvc-protection); a new pod
    // on it waits, as kubelet makes it wait.
    let claims = env.api::<PersistentVolumeClaim>();
    claims
        .delete("etcd-data", &Default::default())
        .await
        .unwrap();
    let terminating = claims.get("etcd-data").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let mut late = etcd_pod();
    late["metadata"] = json!({"name": "late"});
    late["spec"]["hostname"] = json!("late");
    env.create::<Pod>(late).await;
    let waiting = env
        .wait_pod("late", "a message about the claim", T, |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.message.as_ref())
                .is_some_and(|m| m.contains("is being deleted"))
        })
        .await;
    assert_eq!(phase(&waiting), "Pending");
    // Once no pod uses it, the claim goes; a claim of the same name is a new, empty volume.
    env.delete_pod("late").await;
    env.delete_pod("etcd-0").await;
    env.wait_gone("late", T).await;
    env.wait_gone("etcd-0", T).await;
    let deadline = Instant::now() + T;
    while claims.get_opt("etcd-data").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the claim was not released");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.create::<PersistentVolumeClaim>(json!({"metadata": {"name": "etcd-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .await;
    env.create::<Pod>(etcd_pod()).await;
    env.wait_ready("etcd-0", T).await;
    let got = http_ok(svc, "/v3/kv/range", &range).await;
    assert!(
        !got.contains(&b64("hello")),
        "a new claim starts empty: {got}"
    );
    assert!(
        volume.join("data/member").is_dir(),
        "the old volume's directory stays on the host"
    );
    env.shutdown().await;
}

fn passwd_ids(user: &str) -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{user}:")))
        .unwrap();
    let f: Vec<&str> = line.split(':').collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

fn postgres_pod(uid: u32, gid: u32) -> Value {
    let data = "/var/lib/postgresql/data";
    json!({
        "metadata": {"name": "pg-0", "labels": {"app": "pg"}},
        "spec": {
            "securityContext": {"runAsUser": uid, "fsGroup": gid},
            "initContainers": [{
                "name": "initdb",
                "image": "postgres:15",
                "command": ["sh", "-c", format!(
                    "test -f {data}/pgdata/PG_VERSION && exit 0; initdb -D {data}/pgdata --auth=trust -U postgres && echo 'host all all 127.0.0.0/8 trust' >> {data}/pgdata/pg_hba.conf")],
                "volumeMounts": [{"name": "data", "mountPath": data}]
            }],
            "containers": [{
                "name": "postgres",
                "image": "postgres:15",
                "args": ["-D", format!("{data}/pgdata"), "-c", "listen_addresses=$(POD_IP)", "-c", "unix_socket_directories=/var/run/postgresql"],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"name": "pg", "containerPort": 5432}],
                "readinessProbe": {"exec": {"command": ["sh", "-c", "pg_isready -h $POD_IP"]}, "periodSeconds": 1},
                "volumeMounts": [
                    {"name": "data", "mountPath": data},
                    {"name": "run", "mountPath": "/var/run/postgresql"}
                ]
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "pg-data"}},
                {"name": "run", "emptyDir": {}}
            ]
        }
    })
}

async fn psql(host: &str, sql: &str) -> String {
    let out = tokio::process::Command::new("psql")
        .args(["-h", host, "-U", "postgres", "-d", "postgres", "-tAc", sql])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "psql -h {host} {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn postgres_pod_runs_as_postgres_and_keeps_its_data() {
    let env = start(21).await;
    let (uid, gid) = passwd_ids("postgres");
    env.create::<PersistentVolumeClaim>(json!({"metadata": {"name": "pg-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .await;
    env.create::<Service>(
        json!({"metadata": {"name": "pg"}, "spec": {"clusterIP": "127.96.21.10",
        "selector": {"app": "pg"}, "ports": [{"port": 5432, "targetPort": "pg"}]}}),
    )
    .await;
    env.create::<Pod>(postgres_pod(uid, gid)).await;
    let pod = env.wait_ready("pg-0", T).await;
    let ip = pod_ip(&pod).to_string();
    assert_eq!(psql(&ip, "select current_user").await, "postgres");
    psql(&ip, "create table t (x int); insert into t values (42)").await;
    let r = env
        .exec(
            "pg-0",
            "postgres",
            &["sh", "-c", "id -u; ls -a /var/run/postgresql"],
        )
        .await;
    assert!(r.stdout.starts_with(&format!("{uid}\n")), "{}", r.stdout);
    assert!(r.stdout.contains(".s.PGSQL.5432"), "{}", r.stdout);

    let pid = env.container_pid(&pod, "postgres");
    env.delete_pod("pg-0").await;
    wait_process_gone(pid, T).await;
    env.wait_gone("pg-0", T).await;
    env.create::<Pod>(postgres_pod(uid, gid)).await;
    env.wait_ready("pg-0", T).await;
    // Through the ClusterIP this time.
    let deadline = Instant::now() + T;
    loop {
        let out = tokio::process::Command::new("psql")
            .args([
                "-h",
                "127.96.21.10",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-tAc",
                "select x from t",
            ])
            .output()
            .await
            .unwrap();
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.shutdown().await;
}

fn crate_pod() -> Value {
    json!({
        "metadata": {"name": "crate-0", "labels": {"app": "crate"}},
        "spec": {
            "hostname": "crate-0",
            "containers": [{
                "name": "crate",
                "image": "crate/crate:5.10.1",
                "command": ["crate"],
                "args": [
                    "-Ccluster.name=t",
                    "-Cnode.name=crate-0",
                    "-Cnetwork.host=$(POD_IP)",
                    "-Cpath.data=/data/data0",
                    "-Cdiscovery.seed_hosts=crate-0.t.svc.cluster.local"
                ],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"name": "http", "containerPort": 4200}, {"name": "psql", "containerPort": 5432}],
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    })
}

/// A CrateDB image runs the CrateDB stand-in (`crate`), and `kubectl exec … crash` reaches it,
/// as the CrateDB engine's Pods and bootstrap do. Needs the stand-in built next to the test
/// binary (`cargo build -p steward-cratedb-standin`; `cargo test --workspace` builds it).
#[tokio::test]
async fn crate_pod_runs_the_standin_and_crash_execs_into_it() {
    assert!(
        steward_node::find_cratedb_standin().is_some(),
        "the CrateDB stand-in is not built: cargo build -p steward-cratedb-standin (or set {})",
        steward_node::CRATEDB_STANDIN_ENV
    );
    let env = start(22).await;
    env.create::<Pod>(crate_pod()).await;
    let pod = env.wait_ready("crate-0", T).await;
    let ip = pod_ip(&pod);
    let (status, root) = http(SocketAddr::from((ip, 4200)), "GET", "/", None).await;
    assert_eq!(status, 200, "{root}");
    assert!(root.contains("\"name\":\"crate-0\""), "{root}");
    let host = format!("http://{ip}:4200");
    let r = env
        .exec(
            "crate-0",
            "crate",
            &["crash", "--hosts", &host, "--verify-ssl", "false", "--format", "json", "-c", "CREATE USER system WITH (password = 'pw'); SELECT name FROM sys.users WHERE name = 'system'"],
        )
        .await;
    assert_eq!(r.exit_code(), 0, "{r:?}");
    assert!(r.stdout.contains("\"name\": \"system\""), "{r:?}");
    let r = env
        .exec(
            "crate-0",
            "crate",
            &["crash", "--hosts", &host, "-c", "CREATE USER system"],
        )
        .await;
    assert_eq!(r.exit_code(), 1, "{r:?}");
    assert!(r.stderr.contains("RoleAlreadyExistsException"), "{r:?}");
    // The cluster state is kept in path.data on the Pod's volume.
    let kept = env
        .exec(
            "crate-0",
            "crate",
            &["cat", "/data/data0/standin-cluster-state.json"],
        )
        .await;
    assert!(kept.stdout.contains("\"system\""), "{kept:?}");
    env.shutdown().await;
}
