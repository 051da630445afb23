//! Pod deletion: graceful on a node (a fake Node without a kubelet here, so Pods stay
//! terminating until force-deleted, as on a real cluster), immediate when unbound.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{env, eventually};

/// A Pod that no scheduler picks up (unknown scheduler name) unless `node` binds it.
fn pod(name: &str, node: Option<&str>, grace: i64) -> Pod {
    let mut spec = json!({"schedulerName": "steward-conformance-none", "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "c", "image": "busybox:1"}],
        "tolerations": [{"key": "steward.dev/conformance", "operator": "Exists"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn grace(seconds: u32) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(seconds),
        ..Default::default()
    }
}

fn deletion(p: &Pod) -> (Option<String>, Option<i64>) {
    (
        p.metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        p.metadata.deletion_grace_period_seconds,
    )
}

#[tokio::test]
async fn pod_deletion_is_graceful_on_a_node() {
    let mut env = env("poddel").await;
    let api: Api<Pod> = env.api();

    // Unbound: gone at once.
    env.pod(&pod("unbound", None, 30)).await;
    api.delete("unbound", &DeleteParams::default())
        .await
        .unwrap();
    assert!(api.get_opt("unbound").await.unwrap().is_none());

    // Bound to a node: marked, kept until a delete with grace 0.
    let node = env.node("n1").await;
    env.pod(&pod("bound", Some(&node), 30)).await;
    let deleted = api
        .delete("bound", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("a Pod on a node is deleted gracefully");
    let (ts, secs) = deletion(&deleted);
    assert!(ts.is_some());
    assert_eq!(secs, Some(30));
    let kept = api.get("bound").await.unwrap();
    assert_eq!(deletion(&kept), (ts.clone(), Some(30)));
    // A longer period does not extend it; a shorter one shortens it.
    api.delete("bound", &grace(60)).await.unwrap();
    assert_eq!(deletion(&api.get("bound").await.unwrap()), (ts, Some(30)));
    api.delete("bound", &grace(10)).await.unwrap();
    assert_eq!(
        api.get("bound")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(10)
    );
    // The kubelet's final delete.
    api.delete("bound", &grace(0)).await.unwrap();
    assert!(api.get_opt("bound").await.unwrap().is_none());
    env.finish().await;
}

#[tokio::test]
async fn namespace_deletion_waits_for_terminating_pods() {
    let mut env = env("nspods").await;
    let node = env.node("n1").await;
    let nsapi = Api::<Namespace>::all(env.client.clone());
    let name = format!("{}-x", env.ns);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    nsapi.create(&PostParams::default(), &ns).await.unwrap();
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &name);
    let mut created = None;
    for _ in 0..100 {
        match api
            .create(&PostParams::default(), &pod("p", Some(&node), 2))
            .await
        {
            Ok(p) => {
                created = Some(p);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    assert!(created.is_some(), "pod created");
    nsapi.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("pod terminating", || async {
        api.get_opt("p")
            .await
            .unwrap()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    let phase =
        |n: Option<Namespace>| -> Value { json!(n.and_then(|n| n.status).and_then(|s| s.phase)) };
    assert_eq!(
        phase(nsapi.get_opt(&name).await.unwrap()),
        json!("Terminating")
    );
    api.delete("p", &grace(0)).await.unwrap();
    eventually("namespace gone", || async {
        nsapi.get_opt(&name).await.unwrap().is_none()
    })
    .await;
    env.finish().await;
}

/// Fake Nodes that count as Ready (fresh heartbeat, capacity), labelled with their hostname,
/// `steward.dev/conformance-ns` (the test's namespace, for node selectors) and
/// `steward.dev/conformance-zone` (their base name).
async fn ready_nodes(env: &mut crate::support::Env, bases: &[&str]) -> Vec<String> {
    use k8s_openapi::api::core::v1::Node;
    let mut nodes = Vec::new();
    for base in bases {
        let name = env.node(base).await;
        let api: Api<Node> = Api::all(env.client.clone());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "kubernetes.io/hostname": name, "steward.dev/conformance-ns": env.ns,
                "steward.dev/conformance-zone": base}}})),
        )
        .await
        .unwrap();
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "ready", "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}})),
        )
        .await
        .unwrap();
        nodes.push(name);
    }
    nodes
}

/// Where a Pod was bound, once the scheduler bound it.
async fn bound(api: &Api<Pod>, name: &str) -> String {
    for _ in 0..300 {
        if let Some(n) = api.get(name).await.unwrap().spec.and_then(|s| s.node_name) {
            return n;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{name} was not scheduled")
}

/// Whether the scheduler said a Pod is unschedulable with a message containing `why`.
async fn refused(api: &Api<Pod>, name: &str, why: &str) -> bool {
    api.get(name)
        .await
        .ok()
        .and_then(|p| p.status)
        .and_then(|s| s.conditions)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && c.message.as_deref().is_some_and(|m| m.contains(why))
            })
        })
}

#[tokio::test]
async fn topology_spread_places_pods_within_max_skew_and_refuses_beyond_it() {
    let mut env = env("spread").await;
    let nodes = ready_nodes(&mut env, &["a", "b"]).await;
    let api: Api<Pod> = env.api();
    // Two matching Pods already run in zone a (bound directly, as by another scheduler).
    for name in ["t0", "t1"] {
        let p: Pod =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "ts"}},
            "spec": {"nodeName": nodes[0], "containers": [{"name": "c", "image": "busybox"}],
                "tolerations": [{"key": "steward.dev/conformance", "operator": "Exists"}]}}))
            .unwrap();
        env.pod(&p).await;
    }
    let spread = |name: &str, extra: Value| -> Pod {
        let mut constraint = json!({"maxSkew": 1, "topologyKey": "steward.dev/conformance-zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "ts"}}});
        let mut selector = json!({"steward.dev/conformance-ns": env.ns});
        if let Some(host) = extra.get("host") {
            selector["kubernetes.io/hostname"] = host.clone();
            constraint["nodeAffinityPolicy"] = json!("Ignore");
        }
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "ts"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                "nodeSelector": selector,
                "tolerations": [{"key": "steward.dev/conformance", "operator": "Exists"}],
                "topologySpreadConstraints": [constraint]}}))
        .unwrap()
    };
    // Zone a holds 2, zone b 0: a third there would make the skew 3.
    env.pod(&spread("t2", json!({}))).await;
    assert_eq!(bound(&api, "t2").await, nodes[1]);
    // Held to zone a's Node, with zone b still counted (nodeAffinityPolicy: Ignore): 3 − 1 > 1.
    env.pod(&spread("t3", json!({"host": nodes[0]}))).await;
    eventually("t3 is refused for its spread constraint", || async {
        refused(&api, "t3", "didn't match pod topology spread constraints").await
    })
    .await;
    env.finish().await;
}

#[tokio::test]
async fn required_pod_anti_affinity_spreads_pods_and_refuses_a_third() {
    let mut env = env("anti-affinity").await;
    let nodes = ready_nodes(&mut env, &["a", "b"]).await;
    let pod = |name: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "spread"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                "nodeSelector": {"steward.dev/conformance-ns": env.ns},
                "tolerations": [{"key": "steward.dev/conformance", "operator": "Exists"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"app": "spread"}},
                    "topologyKey": "kubernetes.io/hostname"}]}}}}))
        .unwrap()
    };
    let api: Api<Pod> = env.api();
    for name in ["s0", "s1"] {
        env.pod(&pod(name)).await;
    }
    let mut placed = Vec::new();
    for name in ["s0", "s1"] {
        placed.push(bound(&api, name).await);
    }
    placed.sort();
    assert_eq!(placed, nodes, "one Pod per Node");
    env.pod(&pod("s2")).await;
    eventually("the third Pod is unschedulable", || async {
        refused(&api, "s2", "didn't match pod anti-affinity rules").await
    })
    .await;
    env.finish().await;
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// What a real server writes into a Pod it creates (issue 34: write-time conversions the
/// operator and the node agent may read back): `enableServiceLinks: true` (PodSpec defaulting),
/// `serviceAccount` mirroring `serviceAccountName` (the v1 conversion), and, for a Pod that
/// names no priority class, priority 0 with `PreemptLowerPriority` (the Priority admission
/// plugin).
#[tokio::test]
async fn created_pods_get_service_links_their_service_account_and_a_priority() {
    let env = env("pod-defaults").await;
    let api: Api<Pod> = env.api();
    let made = api
        .create(&PostParams::default(), &pod("d", None, 0))
        .await
        .unwrap();
    for p in [&made, &api.get("d").await.unwrap()] {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.enable_service_links, Some(true));
        assert_eq!(spec.service_account_name.as_deref(), Some("default"));
        #[allow(deprecated)]
        let mirrored = spec.service_account.as_deref();
        assert_eq!(mirrored, Some("default"));
        assert_eq!(spec.priority, Some(0));
        assert_eq!(
            spec.preemption_policy.as_deref(),
            Some("PreemptLowerPriority")
        );
    }
    // A Pod that turns service links off keeps its choice.
    let mut off = pod("e", None, 0);
    off.spec.as_mut().unwrap().enable_service_links = Some(false);
    let made = api.create(&PostParams::default(), &off).await.unwrap();
    assert_eq!(made.spec.unwrap().enable_service_links, Some(false));
    env.finish().await;
}
