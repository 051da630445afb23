//! Shell pods: env, volumes, user, logs, exec, deletion.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Api;
use serde_json::json;

use crate::common::*;

const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn shell_pod_gets_env_volumes_user_logs_exec_and_is_cleaned_up_on_delete() {
    let env = start(10).await;
    let node = Api::<Node>::all(env.client.clone())
        .get("steward-test")
        .await
        .unwrap();
    let st = node.status.unwrap();
    assert!(
        st.conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    assert_eq!(
        st.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
        i32::from(env.node().kubelet_addr().port())
    );
    env.create::<Secret>(
        json!({"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}}),
    )
    .await;
    env.create::<ConfigMap>(json!({"metadata": {"name": "cfg"}, "data": {"mode": "fast", "file.txt": "hello from configmap"}})).await;
    env.create::<Pod>(json!({
        "metadata": {"name": "shell", "labels": {"app": "shell"}},
        "spec": {
            "securityContext": {"runAsUser": 65534},
            "containers": [{
                "name": "main",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "echo uid=$(id -u); echo pw=$PW mode=$MODE name=$NAME url=$URL; cat /config/file.txt; echo; hostname; touch /scratch/x && echo scratch-ok; exec sleep 300"],
                "env": [
                    {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                    {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "URL", "value": "http://$(POD_IP):2379"}
                ],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/config"},
                    {"name": "scratch", "mountPath": "/scratch"}
                ]
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "scratch", "emptyDir": {}}
            ]
        }
    }))
    .await;
    let pod = env.wait_ready("shell", T).await;
    let ip = pod_ip(&pod);
    assert_eq!(ip.octets()[..3], [127, 1, 10]);
    let st = pod.status.clone().unwrap();
    assert_eq!(st.host_ip.as_deref(), Some("127.0.0.1"));
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());

    // Logs: the container saw its env, volumes and user.
    let mut logs = String::new();
    for _ in 0..50 {
        logs = env.logs("shell", "main", "").await.1;
        if logs.contains("scratch-ok") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(logs.contains("uid=65534"), "{logs}");
    assert!(
        logs.contains(&format!(
            "pw=s3cret mode=fast name=shell url=http://{ip}:2379"
        )),
        "{logs}"
    );
    assert!(logs.contains("hello from configmap"), "{logs}");
    assert!(logs.contains("\nshell\n"), "hostname: {logs}");
    assert!(logs.contains("scratch-ok"), "{logs}");
    let (_, ts) = env
        .logs("shell", "main", "tailLines=1&timestamps=true")
        .await;
    assert!(ts.ends_with("scratch-ok\n") && ts.starts_with("20"), "{ts}");
    // The volume is only visible inside the pod's mount namespace.
    assert!(!std::path::Path::new("/config/file.txt").exists());

    // Exec: stdout, stderr, exit code, the container's mounts and user.
    let r = env
        .exec(
            "shell",
            "main",
            &[
                "sh",
                "-c",
                "cat /config/file.txt; id -u; echo oops >&2; exit 3",
            ],
        )
        .await;
    assert_eq!(r.protocol, "v5.channel.k8s.io");
    assert_eq!(r.stdout, "hello from configmap65534\n");
    assert_eq!(r.stderr, "oops\n");
    assert_eq!(r.exit_code(), 3, "{:?}", r.status);
    assert_eq!(r.status["reason"], "NonZeroExitCode");
    assert_eq!(r.close_code, Some(1000), "kubectl needs a normal close");
    let r = exec(
        env.node().kubelet_addr(),
        &env.ns,
        "shell",
        "main",
        &["cat", "/etc/hosts"],
        "v4.channel.k8s.io",
    )
    .await;
    assert_eq!(r.protocol, "v4.channel.k8s.io");
    assert_eq!(r.exit_code(), 0);
    assert!(r.stdout.contains(&format!("{ip}\tshell")), "{}", r.stdout);

    // ConfigMap changes reach the mounted volume.
    env.api::<ConfigMap>()
        .patch(
            "cfg",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"file.txt": "updated"}})),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while env
        .exec("shell", "main", &["cat", "/config/file.txt"])
        .await
        .stdout
        != "updated"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "configMap volume not refreshed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Following logs streams until the container ends (here: when the pod is deleted).
    let addr = env.node().kubelet_addr();
    let follow =
        tokio::spawn(
            async move { kubelet_get(addr, "/containerLogs/t/shell/main?follow=true").await },
        );
    assert_eq!(
        env.logs("shell", "main", "limitBytes=9").await,
        (200, "uid=65534".to_string())
    );

    // A process an exec left behind dies with the container.
    let r = env
        .exec(
            "shell",
            "main",
            &["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"],
        )
        .await;
    let leftover: i32 = r.stdout.trim().parse().unwrap();
    assert!(process_alive(leftover));

    // Deletion: the process goes, and so does the object.
    let pid = env.container_pid(&pod, "main");
    assert!(process_alive(pid));
    env.delete_pod("shell").await;
    wait_process_gone(pid, T).await;
    wait_process_gone(leftover, T).await;
    env.wait_gone("shell", T).await;
    let (code, followed) = follow.await.unwrap();
    assert_eq!(code, 200);
    assert!(
        followed.starts_with("uid=65534\n") && followed.ends_with("scratch-ok\n"),
        "{followed}"
    );
    let pod_dir = env.dir.path().join("pods").join(pod.metadata.uid.unwrap());
    for _ in 0..50 {
        if !pod_dir.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!pod_dir.exists(), "pod directory removed");
    env.shutdown().await;
}

fn container_status(p: &Pod) -> k8s_openapi::api::core::v1::ContainerStatus {
    p.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone()
}

fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

#[tokio::test]
async fn restart_policies_back_off_and_previous_logs() {
    let env = start(11).await;
    let pod = |name: &str, policy: &str, script: &str| {
        json!({"metadata": {"name": name}, "spec": {"restartPolicy": policy,
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}]}})
    };
    env.create::<Pod>(pod("crash", "Always", "echo run-$(date +%s%N); exit 2"))
        .await;
    env.create::<Pod>(pod("never", "Never", "exit 1")).await;
    let mut once = pod(
        "once",
        "OnFailure",
        "test -f /s/failed-once || { touch /s/failed-once; exit 1; }; echo done",
    );
    once["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "s", "mountPath": "/s"}]);
    once["spec"]["volumes"] = json!([{"name": "s", "emptyDir": {}}]);
    env.create::<Pod>(once).await;

    let crash = env
        .wait_pod("crash", "3 restarts", T, |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| c[0].restart_count >= 3)
        })
        .await;
    assert_eq!(phase(&crash), "Running");
    let cs = container_status(&crash);
    let last = cs.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 2);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    env.wait_pod("crash", "CrashLoopBackOff", T, |p| {
        waiting_reason(p).as_deref() == Some("CrashLoopBackOff")
    })
    .await;
    let (code, current) = env.logs("crash", "c", "").await;
    let (_, previous) = env.logs("crash", "c", "previous=true").await;
    assert_eq!(code, 200);
    assert!(
        current.starts_with("run-") && previous.starts_with("run-") && current != previous,
        "{current} / {previous}"
    );

    let never = env
        .wait_pod("never", "Failed", T, |p| phase(p) == "Failed")
        .await;
    let t = container_status(&never).state.unwrap().terminated.unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
    let once = env
        .wait_pod("once", "Succeeded", T, |p| phase(p) == "Succeeded")
        .await;
    assert_eq!(container_status(&once).restart_count, 1);
    let ready = once
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
    // Finished pods keep their object and logs.
    assert!(env.logs("once", "c", "").await.1.contains("done"));
    env.shutdown().await;
}

/// A Pod update may change a container's image (its one mutable field): kubelet kills the
/// container and starts it again with the new image at once, whatever the restart policy; the
/// status names the new image and counts the restart. A stand-in's image is passed to it.
#[tokio::test]
async fn a_changed_image_restarts_its_container_at_once() {
    let env = start(25).await;
    env.create::<Pod>(json!({"metadata": {"name": "img"}, "spec": {"restartPolicy": "Never",
        "containers": [
            {"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", "echo start-$STEWARD_STANDIN_IMAGE-; exec sleep 300"]},
            {"name": "other", "image": "busybox:1.36", "command": ["sleep", "300"]}
        ]}}))
    .await;
    let before = env.wait_ready("img", T).await;
    let other_pid = env.container_pid(&before, "other");
    let patch = json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "foundationdb/fdb-kubernetes-monitor:7.3.43"}]);
    env.pods()
        .patch(
            "img",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::<serde_json::Value>::Json(serde_json::from_value(patch).unwrap()),
        )
        .await
        .unwrap();
    let after = env
        .wait_pod(
            "img",
            "the container restarted with its new image",
            T,
            |p| {
                let c = status_of(p, "c");
                c.restart_count == 1
                    && c.image == "foundationdb/fdb-kubernetes-monitor:7.3.43"
                    && c.state.as_ref().is_some_and(|s| s.running.is_some())
            },
        )
        .await;
    assert_eq!(phase(&after), "Running");
    let last = status_of(&after, "c")
        .last_state
        .unwrap()
        .terminated
        .unwrap();
    assert!(
        last.message
            .as_deref()
            .unwrap_or_default()
            .contains("definition changed"),
        "{last:?}"
    );
    // The other container did not move.
    assert_eq!(status_of(&after, "other").restart_count, 0);
    assert_eq!(env.container_pid(&after, "other"), other_pid);
    let mut logs = String::new();
    for _ in 0..50 {
        logs = env.logs("img", "c", "").await.1;
        if logs.contains("start-") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        logs.contains("start-foundationdb/fdb-kubernetes-monitor:7.3.43-"),
        "{logs}"
    );
    let (_, previous) = env.logs("img", "c", "previous=true").await;
    assert!(previous.contains("start--"), "{previous}");
    env.shutdown().await;
}

#[tokio::test]
async fn init_containers_run_in_order_before_containers() {
    let env = start(12).await;
    env.create::<Pod>(json!({"metadata": {"name": "init"}, "spec": {
        "initContainers": [
            {"name": "one", "image": "busybox", "command": ["sh", "-c", "echo one > /work/order"], "volumeMounts": [{"name": "w", "mountPath": "/work"}]},
            {"name": "two", "image": "busybox", "command": ["sh", "-c", "echo two >> /work/order"], "volumeMounts": [{"name": "w", "mountPath": "/work"}]}
        ],
        "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "cat /work/order; exec sleep 300"],
            "volumeMounts": [{"name": "w", "mountPath": "/work"}]}],
        "volumes": [{"name": "w", "emptyDir": {}}]
    }}))
    .await;
    let pod = env.wait_ready("init", T).await;
    let inits = pod.status.unwrap().init_container_statuses.unwrap();
    assert!(inits.iter().all(|c| {
        c.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code
            == 0
    }));
    let r = env.exec("init", "main", &["cat", "/work/order"]).await;
    assert_eq!(r.stdout, "one\ntwo\n");
    env.shutdown().await;
}

#[tokio::test]
async fn missing_config_and_unknown_images_wait_with_reasons() {
    let env = start(13).await;
    env.create::<Pod>(
        json!({"metadata": {"name": "needs-secret"}, "spec": {"containers": [{
        "name": "c", "image": "busybox", "command": ["sh", "-c", "echo $X; exec sleep 300"],
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "later", "key": "x"}}}]}]}}),
    )
    .await;
    env.create::<Pod>(
        json!({"metadata": {"name": "no-image"}, "spec": {"containers": [{
        "name": "c", "image": "acme/unknown:1.0"}]}}),
    )
    .await;
    let p = env
        .wait_pod("needs-secret", "CreateContainerConfigError", T, |p| {
            waiting_reason(p).as_deref() == Some("CreateContainerConfigError")
        })
        .await;
    let msg = container_status(&p)
        .state
        .unwrap()
        .waiting
        .unwrap()
        .message
        .unwrap();
    assert_eq!(msg, "secret \"later\" not found");
    let p = env
        .wait_pod("no-image", "ErrImageNeverPull", T, |p| {
            waiting_reason(p).as_deref() == Some("ErrImageNeverPull")
        })
        .await;
    assert_eq!(phase(&p), "Pending");
    assert!(
        container_status(&p)
            .state
            .unwrap()
            .waiting
            .unwrap()
            .message
            .unwrap()
            .contains("acme/unknown:1.0")
    );
    env.create::<Pod>(
        json!({"metadata": {"name": "needs-claim"}, "spec": {"containers": [{
        "name": "c", "image": "busybox", "command": ["sleep", "300"],
        "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "later"}}]}}),
    )
    .await;
    let p = env
        .wait_pod("needs-claim", "a claim message", T, |p| {
            waiting_reason(p).as_deref() == Some("ContainerCreating")
                && container_status(p)
                    .state
                    .unwrap()
                    .waiting
                    .unwrap()
                    .message
                    .is_some()
        })
        .await;
    assert_eq!(phase(&p), "Pending");
    assert_eq!(
        container_status(&p)
            .state
            .unwrap()
            .waiting
            .unwrap()
            .message
            .unwrap(),
        "persistentvolumeclaim \"later\" not found"
    );
    env.create::<Secret>(json!({"metadata": {"name": "later"}, "stringData": {"x": "now"}}))
        .await;
    env.create::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
        json!({"metadata": {"name": "later"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    env.wait_ready("needs-secret", T).await;
    env.wait_ready("needs-claim", T).await;
    env.shutdown().await;
}

#[tokio::test]
async fn probes_drive_readiness_and_liveness_restarts() {
    let env = start(14).await;
    env.create::<Pod>(json!({"metadata": {"name": "probed"}, "spec": {
        "containers": [{
            "name": "c", "image": "busybox",
            "command": ["sh", "-c", "rm -f /state/dead; exec sleep 300"],
            "volumeMounts": [{"name": "state", "mountPath": "/state"}],
            "readinessProbe": {"exec": {"command": ["test", "-f", "/state/ready"]}, "periodSeconds": 1, "failureThreshold": 1},
            "livenessProbe": {"exec": {"command": ["sh", "-c", "! test -f /state/dead"]}, "periodSeconds": 1, "failureThreshold": 2}
        }],
        "volumes": [{"name": "state", "emptyDir": {}}]
    }}))
    .await;
    let p = env
        .wait_pod("probed", "Running", T, |p| phase(p) == "Running")
        .await;
    assert!(!is_ready(&p));
    assert_eq!(
        env.exec("probed", "c", &["touch", "/state/ready"])
            .await
            .exit_code(),
        0
    );
    env.wait_ready("probed", T).await;
    assert_eq!(
        env.exec("probed", "c", &["rm", "/state/ready"])
            .await
            .exit_code(),
        0
    );
    env.wait_pod("probed", "not Ready", T, |p| !is_ready(p))
        .await;
    assert_eq!(
        env.exec("probed", "c", &["touch", "/state/dead"])
            .await
            .exit_code(),
        0
    );
    let p = env
        .wait_pod("probed", "a liveness restart", T, |p| {
            container_status(p).restart_count == 1 && phase(p) == "Running"
        })
        .await;
    let last = container_status(&p).last_state.unwrap().terminated.unwrap();
    assert!(
        last.message
            .unwrap_or_default()
            .contains("Liveness probe failed")
    );
    env.shutdown().await;
}

#[tokio::test]
async fn graceful_deletion_kills_then_deletes_and_shutdown_keeps_pods() {
    let env = start(15).await;
    // A finalizer makes the API server set deletionTimestamp instead of removing the Pod.
    env.create::<Pod>(json!({"metadata": {"name": "held", "finalizers": ["test.steward.dev/hold"]}, "spec": {
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "trap 'echo bye; exit 0' TERM; while true; do sleep 0.1; done"]}]}}))
    .await;
    let pod = env.wait_ready("held", T).await;
    let pid = env.container_pid(&pod, "c");
    env.delete_pod("held").await;
    wait_process_gone(pid, T).await;
    // The agent's own delete with grace 0 cannot remove a Pod with a finalizer; drop it.
    env.pods()
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    env.wait_gone("held", T).await;

    // Shutdown stops processes and keeps the Pod; a new agent runs it again.
    env.create::<Pod>(json!({"metadata": {"name": "survivor"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}))
        .await;
    let pod = env.wait_ready("survivor", T).await;
    let pid = env.container_pid(&pod, "c");
    let ip = pod_ip(&pod);
    let mut env = env;
    env.node.take().unwrap().shutdown().await;
    assert!(!process_alive(pid));
    let node = Api::<Node>::all(env.client.clone())
        .get("steward-test")
        .await
        .unwrap();
    assert!(
        node.status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False")
    );
    assert!(env.pods().get_opt("survivor").await.unwrap().is_some());
    env.node = Some(start_node(&env.client, env.dir.path(), 15).await);
    let pod = env
        .wait_pod("survivor", "running again", T, |p| {
            is_ready(p) && container_status(p).restart_count == 1
        })
        .await;
    assert_eq!(pod_ip(&pod), ip, "the pod keeps its address");
    let pid2 = env.container_pid(&pod, "c");
    assert_ne!(pid, pid2);
    // Dropping the handle without shutdown still kills the processes.
    drop(env.node.take());
    wait_process_gone(pid2, T).await;
    env.shutdown().await;
}

fn status_of(p: &Pod, container: &str) -> k8s_openapi::api::core::v1::ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .cloned()
        .unwrap_or_else(|| panic!("no status for container {container}"))
}

fn condition(p: &Pod, type_: &str) -> (String, Option<String>) {
    let c = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .cloned()
        .unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status, c.reason)
}

#[tokio::test]
async fn a_pod_held_by_a_finalizer_reports_its_end_and_keeps_its_address_until_gone() {
    let mut env = start(18).await;
    // restartPolicy Always: one container exits 0 on SIGTERM, the other crash-loops.
    env.create::<Pod>(json!({"metadata": {"name": "held", "finalizers": ["test.steward.dev/hold"]}, "spec": {
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {"name": "graceful", "image": "busybox", "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]},
            {"name": "crashing", "image": "busybox", "command": ["sh", "-c", "exit 2"]}
        ]}}))
    .await;
    let pod = env
        .wait_pod("held", "running and crash-looping", T, |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| cs.len() == 2)
                && status_of(p, "graceful").state.unwrap().running.is_some()
                && status_of(p, "crashing").restart_count >= 2
        })
        .await;
    let ip = pod_ip(&pod);
    assert_eq!(ip, std::net::Ipv4Addr::new(127, 1, 18, 1));
    let pid = env.container_pid(&pod, "graceful");
    env.delete_pod("held").await;
    wait_process_gone(pid, T).await;

    // The final status goes out before the agent's delete with grace 0 (which the finalizer
    // blocks): terminated containers, not ready, a terminal phase.
    let held = env
        .wait_pod("held", "the agent's final delete", T, |p| {
            p.metadata.deletion_grace_period_seconds == Some(0)
        })
        .await;
    assert_eq!(phase(&held), "Failed", "one container exited non-zero");
    let graceful = status_of(&held, "graceful");
    let t = graceful.state.unwrap().terminated.unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    assert!(!graceful.ready);
    let crashing = status_of(&held, "crashing");
    assert!(crashing.restart_count >= 2 && !crashing.ready);
    let t = crashing.state.unwrap().terminated.unwrap();
    assert!(
        t.exit_code != 0 && t.reason.as_deref() == Some("Error"),
        "{t:?}"
    );
    for ty in ["Ready", "ContainersReady"] {
        assert_eq!(
            condition(&held, ty),
            ("False".to_string(), Some("PodFailed".to_string()))
        );
    }
    assert_eq!(pod_ip(&held), ip);
    assert!(address_in_use(ip), "the held pod's address stays taken");

    // Across an agent restart too: the new agent takes the address back from the Pod's
    // status, so a new Pod gets another one.
    env.node.take().unwrap().shutdown().await;
    env.node = Some(start_node(&env.client, env.dir.path(), 18).await);
    env.create::<Pod>(json!({"metadata": {"name": "next"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}))
        .await;
    let next = env.wait_ready("next", T).await;
    assert_ne!(pod_ip(&next), ip, "two pods, one address");
    assert!(address_in_use(ip));
    let again = env.pods().get("held").await.unwrap();
    assert_eq!(phase(&again), "Failed");
    assert_eq!(pod_ip(&again), ip);

    // Once the object is gone the address is free again.
    env.pods()
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    env.wait_gone("held", T).await;
    let deadline = std::time::Instant::now() + T;
    while address_in_use(ip) {
        assert!(std::time::Instant::now() < deadline, "{ip} still taken");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.shutdown().await;
}

#[tokio::test]
async fn kube_rs_logs_and_exec_go_through_the_api_server() {
    use futures::{AsyncBufReadExt, TryStreamExt};
    use kube::api::{AttachParams, LogParams};
    use tokio::io::AsyncReadExt;

    let env = start(16).await;
    env.create::<Pod>(json!({"metadata": {"name": "talk"}, "spec": {"containers": [{
        "name": "c", "image": "busybox", "command": ["sh", "-c", "echo hello; echo world; exec sleep 300"]}]}}))
    .await;
    env.wait_ready("talk", T).await;
    let params = LogParams {
        container: Some("c".into()),
        ..Default::default()
    };
    let deadline = std::time::Instant::now() + T;
    loop {
        let logs = env.pods().logs("talk", &params).await.unwrap();
        if logs == "hello\nworld\n" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{logs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let follow = LogParams {
        follow: true,
        tail_lines: Some(1),
        ..params.clone()
    };
    let mut lines = env
        .pods()
        .log_stream("talk", &follow)
        .await
        .unwrap()
        .lines();
    assert_eq!(lines.try_next().await.unwrap().as_deref(), Some("world"));

    let mut attached = env
        .pods()
        .exec(
            "talk",
            ["sh", "-c", "read x; echo got-$x; echo err >&2; exit 4"],
            &AttachParams::default().stdin(true).stderr(true),
        )
        .await
        .unwrap();
    let mut stdin = attached.stdin().unwrap();
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"input\n").await.unwrap();
    let mut stdout = String::new();
    attached
        .stdout()
        .unwrap()
        .read_to_string(&mut stdout)
        .await
        .unwrap();
    let mut stderr = String::new();
    attached
        .stderr()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let status = attached.take_status().unwrap().await.unwrap();
    assert_eq!(stdout, "got-input\n");
    assert_eq!(stderr, "err\n");
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    attached.join().await.unwrap();
    env.shutdown().await;
}

#[tokio::test]
async fn a_status_changed_by_someone_else_is_written_again() {
    // The agent's status must be what the API server shows, whoever wrote last: kubelet's
    // status manager compares the server's copy with its own and writes again when they
    // differ. Two writers this agent shares Pods with: the node lifecycle controller (Ready
    // False while the Node is not ready; nothing sets it back but the agent) and a write of the
    // agent's own that got lost, leaving the Pod Pending without an address.
    let env = start(19).await;
    env.create::<Pod>(json!({"metadata": {"name": "drift"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}))
        .await;
    let pod = env.wait_ready("drift", T).await;
    let ip = pod_ip(&pod);
    let pid = env.container_pid(&pod, "c");
    let mut conditions = pod.status.clone().unwrap().conditions.unwrap();
    for c in conditions
        .iter_mut()
        .filter(|c| c.type_ == "Ready" || c.type_ == "ContainersReady")
    {
        c.status = "False".into();
        c.reason = Some("NodeNotReady".into());
    }
    let params = kube::api::PatchParams::default();
    env.pods()
        .patch_status(
            "drift",
            &params,
            &kube::api::Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .unwrap();
    env.wait_ready("drift", T).await;

    env.pods()
        .patch_status(
            "drift",
            &params,
            &kube::api::Patch::Merge(json!({"status": {"phase": "Pending", "podIP": null,
                "podIPs": null, "containerStatuses": null, "conditions": null}})),
        )
        .await
        .unwrap();
    let pod = env
        .wait_pod("drift", "Running on its address again", T, |p| {
            phase(p) == "Running"
                && is_ready(p)
                && p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(&ip.to_string())
                && container_status(p).state.unwrap().running.is_some()
        })
        .await;
    assert_eq!(env.container_pid(&pod, "c"), pid, "nothing was restarted");
    env.shutdown().await;
}

/// The pid of the one process whose command line is `argv`.
fn pid_of(argv: &[&str]) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<&[u8]> = c.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
                args == argv.iter().map(|a| a.as_bytes()).collect::<Vec<_>>()
            })
        })
}

/// Issue 36: a container's processes do not outlive it, whatever they did. A child that
/// double-forks into a session and process group of its own (reparented, out of reach of a
/// signal to the container's process group) lives in the container's cgroup and dies with the
/// container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonised_child_dies_with_its_container() {
    let env = start(23).await;
    let daemon_argv = ["sleep", "4242.23"];
    env.create::<Pod>(json!({
        "metadata": {"name": "daemon"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
            "command": ["sh", "-c",
                "(setsid sleep 4242.23 </dev/null >/dev/null 2>&1 &); exec sleep 300"]}]}
    }))
    .await;
    let pod = env.wait_ready("daemon", T).await;
    let main = env.container_pid(&pod, "main");
    let mut daemon = None;
    for _ in 0..100 {
        daemon = pid_of(&daemon_argv);
        if daemon.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let daemon = daemon.expect("the daemonised child runs");
    let pgid = |pid: i32| nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
    assert_ne!(
        pgid(daemon),
        pgid(main),
        "it left the container's process group"
    );
    let cgroup = std::fs::read_to_string(format!("/proc/{daemon}/cgroup")).unwrap();
    assert!(
        cgroup.contains("/steward/"),
        "in the container's cgroup: {cgroup}"
    );
    env.delete_pod("daemon").await;
    env.wait_gone("daemon", T).await;
    wait_process_gone(daemon, T).await;
    env.shutdown().await;
}

/// Issue 36: nothing an agent started survives it for long. Its reaper kills the containers'
/// cgroups the moment the agent's end of the pipe closes (however the agent went: here the
/// pipe is closed by hand, as the kernel closes it when a process dies); and a new agent on
/// the same state directory kills what an earlier one left before it starts Pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_agents_containers_are_killed_by_its_reaper_or_the_next_agent() {
    use std::os::unix::process::CommandExt;
    use steward_node::cgroup::{Cgroups, destroy};
    let spawn_in = |cgroup: &std::path::Path, seconds: &str| {
        let child = std::process::Command::new("sleep")
            .arg(seconds)
            .process_group(0)
            .spawn()
            .unwrap();
        std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string()).unwrap();
        child
    };
    // The reaper.
    let state = tempfile::tempdir().unwrap();
    let (agent, _) = Cgroups::for_agent(state.path()).unwrap();
    let cgroup = agent.create("orphan").unwrap();
    let mut orphan = spawn_in(&cgroup, "4243.1");
    let mut reaper = std::process::Command::new(env!("CARGO_BIN_EXE_steward-node"))
        .args(["node-shim", "--reap"])
        .arg(agent.root())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        orphan.try_wait().unwrap().is_none(),
        "alive while the agent is"
    );
    drop(reaper.stdin.take());
    assert!(reaper.wait().unwrap().success());
    assert!(
        orphan.wait().unwrap().code().is_none(),
        "killed by a signal"
    );
    assert!(!agent.root().exists(), "the agent's cgroups are removed");

    // The next agent on the same state directory.
    let (earlier, _) = Cgroups::for_agent(state.path()).unwrap();
    let mut left = spawn_in(&earlier.create("left").unwrap(), "4243.2");
    let env = start(24).await;
    let mut cfg = node_config(state.path(), 25);
    cfg.name = "steward-test-next".into();
    let node = steward_node::start(env.client.clone(), cfg).await.unwrap();
    assert!(
        left.wait().unwrap().code().is_none(),
        "killed before Pods start"
    );
    assert!(!earlier.root().exists());
    node.shutdown().await;
    let _ = destroy(&cgroup);
    env.shutdown().await;
}

/// A claim bound to a PersistentVolume (as a real cluster's PV controller binds it) is that
/// volume's hostPath, as kubelet mounts it: what the Pod writes is in the volume's directory,
/// so it follows the claim to any Node of the machine — the agent's own claim directory held
/// it before, and an etcd member evicted to another agent on a real cluster came back without
/// its WAL.
#[tokio::test]
async fn a_claim_bound_to_a_host_path_volume_is_that_path() {
    let env = start(26).await;
    let host = env.dir.path().join("pv-data");
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(env.client.clone());
    let pv = serde_json::from_value(json!({"metadata": {"name": format!("pv-{}", env.ns)},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": host.to_str().unwrap(), "type": "DirectoryOrCreate"}}}))
    .unwrap();
    pvs.create(&Default::default(), &pv).await.unwrap();
    env.create::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(json!({
        "metadata": {"name": "bound"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": format!("pv-{}", env.ns),
                 "resources": {"requests": {"storage": "1Gi"}}}}))
        .await;
    env.create::<Pod>(
        json!({"metadata": {"name": "writer"}, "spec": {"containers": [{
        "name": "c", "image": "busybox",
        "command": ["sh", "-c", "echo kept > /d/file && exec sleep 300"],
        "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "bound"}}]}}),
    )
    .await;
    env.wait_ready("writer", T).await;
    let deadline = std::time::Instant::now() + T;
    while !host.join("file").exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        std::fs::read_to_string(host.join("file")).unwrap_or_default(),
        "kept\n",
        "the Pod's write is in the volume's hostPath"
    );
    // A volume of a source this machine cannot mount leaves the Pod waiting, saying why.
    let nfs = serde_json::from_value(json!({"metadata": {"name": format!("nfs-{}", env.ns)},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "nfs": {"server": "nfs.example", "path": "/x"}}}))
    .unwrap();
    pvs.create(&Default::default(), &nfs).await.unwrap();
    env.create::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(json!({
        "metadata": {"name": "remote"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": format!("nfs-{}", env.ns),
                 "resources": {"requests": {"storage": "1Gi"}}}}))
        .await;
    env.create::<Pod>(
        json!({"metadata": {"name": "on-nfs"}, "spec": {"containers": [{
        "name": "c", "image": "busybox", "command": ["sleep", "300"],
        "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "remote"}}]}}),
    )
    .await;
    let p = env
        .wait_pod("on-nfs", "a volume message", T, |p| {
            waiting_reason(p).as_deref() == Some("ContainerCreating")
                && container_status(p)
                    .state
                    .and_then(|s| s.waiting)
                    .and_then(|w| w.message)
                    .is_some_and(|m| m.contains("only hostPath and local volumes"))
        })
        .await;
    assert_eq!(phase(&p), "Pending");
    let _ = pvs
        .delete(&format!("pv-{}", env.ns), &Default::default())
        .await;
    let _ = pvs
        .delete(&format!("nfs-{}", env.ns), &Default::default())
        .await;
    env.shutdown().await;
}

/// With a first Pod IP in 198.18.0.0/15 the agent routes that range on `lo` and Pods get
/// addresses there — addresses a real API server accepts as endpoints, unlike loopback ones —
/// and serve on them as they do on loopback.
#[tokio::test]
async fn pods_get_routed_addresses_from_the_routed_range() {
    let env = start(27).await;
    let dir = env.dir.path().join("routed-node");
    let mut cfg = node_config(&dir, 27);
    cfg.name = "steward-routed".into();
    cfg.pod_ip_base = std::net::Ipv4Addr::new(198, 18, 27, 1);
    cfg.service_proxy = false;
    let routed = steward_node::start(env.client.clone(), cfg).await.unwrap();
    env.create::<Pod>(json!({"metadata": {"name": "web"}, "spec": {
        "nodeName": "steward-routed",
        "containers": [{"name": "c", "image": "busybox",
            "command": ["python3", "-m", "http.server", "18080", "--bind", "$(POD_IP)"],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "readinessProbe": {"tcpSocket": {"port": 18080}, "periodSeconds": 1}}]}}))
        .await;
    let p = env.wait_ready("web", T).await;
    let ip: std::net::Ipv4Addr = p.status.unwrap().pod_ip.unwrap().parse().unwrap();
    assert_eq!(ip.octets()[..2], [198, 18], "{ip}");
    let mut stream = tokio::net::TcpStream::connect((ip, 18080)).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    routed.shutdown().await;
    env.shutdown().await;
}
