//! The container user: a `runAsUser` the host does not know gets an emulated passwd/group entry
//! (as the image's own `/etc/passwd` would have), and the downward API follows the Pod's
//! current labels: env variables on every container start, volumes at their next refresh.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::common::*;

const T: Duration = Duration::from_secs(20);

/// A uid and gid the host has no entry for (the official postgres image's 999 on this host).
fn unknown_id() -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let group = std::fs::read_to_string("/etc/group").unwrap();
    let known = |text: &str, id: u32| {
        text.lines()
            .any(|l| l.split(':').nth(2) == Some(id.to_string().as_str()))
    };
    (999..60_000)
        .find(|id| !known(&passwd, *id) && !known(&group, *id))
        .unwrap()
}

/// Polls the current instance's log until it contains `needle`.
async fn wait_log(env: &Env, pod: &str, needle: &str) -> String {
    let deadline = Instant::now() + T;
    loop {
        let (_, log) = env.logs(pod, "c", "").await;
        if log.contains(needle) {
            return log;
        }
        assert!(Instant::now() < deadline, "{pod}: no {needle:?} in {log:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn unknown_run_as_user_gets_a_passwd_entry_and_env_follows_labels() {
    let env = start(17).await;
    let id = unknown_id();
    // initdb refuses to run as a uid without a passwd entry; with the emulated one it works.
    let script = "echo user=$(id -un) group=$(id -gn) home=$HOME role=$ROLE file=$(cat /info/role); \
        getent passwd postgres; \
        test -f /s/d/PG_VERSION || initdb -D /s/d -U steward --auth=trust >/dev/null && echo initdb-ok; \
        sleep 1; exit 3";
    env.create::<Pod>(json!({
        "metadata": {"name": "who", "labels": {"steward.dev/role": "primary"}},
        "spec": {
            "securityContext": {"runAsUser": id, "runAsGroup": id, "fsGroup": id},
            "containers": [{
                "name": "c",
                "image": "postgres:15",
                "command": ["sh", "-c", script],
                "env": [{"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['steward.dev/role']"}}}],
                "volumeMounts": [{"name": "s", "mountPath": "/s"}, {"name": "info", "mountPath": "/info"}]
            }],
            "volumes": [
                {"name": "s", "emptyDir": {}},
                {"name": "info", "downwardAPI": {"items": [{"path": "role",
                    "fieldRef": {"fieldPath": "metadata.labels['steward.dev/role']"}}]}}
            ]
        }
    }))
    .await;
    let log = wait_log(&env, "who", "initdb-ok").await;
    assert!(
        log.contains(
            "user=postgres group=postgres home=/var/lib/postgresql role=primary file=primary"
        ),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "postgres:x:{id}:{id}:steward container user:/var/lib/postgresql:/bin/sh"
        )),
        "the name resolves to the emulated uid: {log}"
    );
    // The host's files are untouched.
    assert!(
        !std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .contains("steward container user")
    );

    // Relabel: the next start of the container sees the new value, in its env and in the
    // refreshed volume.
    let patch = json!({"metadata": {"labels": {"steward.dev/role": "replica"}}});
    env.pods()
        .patch("who", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_log(&env, "who", "role=replica file=replica").await;
    env.shutdown().await;
}
