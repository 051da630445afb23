//! Service ClusterIP allocation: allocated from the service range, requested addresses checked
//! (outside the range, already allocated), `None` for headless Services, released on delete.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{api_err, env, eventually};

fn svc(name: &str, cluster_ip: Option<&str>) -> Service {
    let mut spec = json!({"ports": [{"port": 80}]});
    if let Some(ip) = cluster_ip {
        spec["clusterIP"] = json!(ip);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn ip_of(s: &Service) -> String {
    s.spec
        .as_ref()
        .unwrap()
        .cluster_ip
        .clone()
        .unwrap_or_default()
}

#[tokio::test]
async fn cluster_ips_are_allocated_checked_and_released() {
    let env = env("clusterip").await;
    let api: Api<Service> = env.api();
    let pp = PostParams::default();
    let a = api.create(&pp, &svc("a", None)).await.unwrap();
    let ip = ip_of(&a);
    assert!(ip.parse::<std::net::Ipv4Addr>().is_ok(), "{ip}");
    assert_eq!(
        a.spec.as_ref().unwrap().cluster_ips.as_deref(),
        Some(&[ip.clone()][..])
    );
    if !env.real {
        assert!(ip.starts_with("127.96."), "loopback service range: {ip}");
    }

    let taken = api_err(api.create(&pp, &svc("b", Some(&ip))).await);
    assert_eq!((taken.code, taken.reason.as_str()), (422, "Invalid"));
    assert!(
        taken.message.contains("provided IP is already allocated"),
        "{}",
        taken.message
    );
    let outside = api_err(api.create(&pp, &svc("c", Some("192.0.2.1"))).await);
    assert_eq!(outside.code, 422);
    assert!(
        outside.message.contains("spec.clusterIPs")
            && outside.message.contains(
                "failed to allocate IP 192.0.2.1: the provided network does not match the current range"
            ),
        "{}",
        outside.message
    );

    let headless = api.create(&pp, &svc("h", Some("None"))).await.unwrap();
    assert_eq!(ip_of(&headless), "None");

    // The address cannot change once set.
    let moved = api_err(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterIP": "None"}})),
        )
        .await,
    );
    assert_eq!(moved.code, 422);

    // Deleting the Service releases its address.
    api.delete("a", &DeleteParams::default()).await.unwrap();
    eventually("address released", || async {
        api.create(&pp, &svc("d", Some(&ip))).await.is_ok()
    })
    .await;
    env.finish().await;
}
