//! Authentication and RBAC as a real server enforces them: ServiceAccount tokens from
//! TokenRequest, Roles allowing and denying (with upstream's 403 wording), subresources,
//! `resourceNames`, ClusterRole aggregation, escalation prevention, access reviews and
//! `SelfSubjectReview`. The test's own credentials are admin on both the embedded server and a
//! real cluster.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SubjectAccessReview};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::support::{Env, api_err, cm, env, eventually};

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// Creates Role `name` with `rules` and binds it to ServiceAccount `sa` of the test namespace.
async fn grant(env: &Env, name: &str, sa: &str, rules: Value) {
    let pp = PostParams::default();
    env.api::<Role>()
        .create(
            &pp,
            &obj(json!({"metadata": {"name": name}, "rules": rules})),
        )
        .await
        .unwrap();
    bind(env, name, "Role", name, sa).await;
}

async fn bind(env: &Env, name: &str, role_kind: &str, role: &str, sa: &str) {
    env.api::<RoleBinding>()
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": env.ns}]})),
        )
        .await
        .unwrap();
}

fn user(env: &Env, sa: &str) -> String {
    format!("system:serviceaccount:{}:{sa}", env.ns)
}

fn pod(name: &str) -> Pod {
    obj(json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
}

#[tokio::test]
async fn a_role_allows_what_it_grants_and_nothing_else() {
    let env = env("rbac-role").await;
    let sa = env.service_account("reader").await;
    grant(
        &env,
        "pod-reader",
        "reader",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(sa.clone(), &env.ns);
    eventually("the binding takes effect", || async {
        pods.list(&ListParams::default()).await.is_ok()
    })
    .await;
    let s = api_err(pods.create(&PostParams::default(), &pod("p")).await);
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        format!(
            "pods is forbidden: User \"{}\" cannot create resource \"pods\" in API group \"\" in the namespace \"{}\"",
            user(&env, "reader"),
            env.ns
        )
    );
    let other: Api<Pod> = Api::namespaced(sa.clone(), "default");
    let s = api_err(other.list(&ListParams::default()).await);
    assert_eq!(
        s.message,
        format!(
            "pods is forbidden: User \"{}\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"",
            user(&env, "reader")
        )
    );
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), &env.ns);
    let s = api_err(cms.get("x").await);
    assert_eq!(
        s.message,
        format!(
            "configmaps \"x\" is forbidden: User \"{}\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"{}\"",
            user(&env, "reader"),
            env.ns
        )
    );
    let all: Api<Pod> = Api::all(sa.clone());
    let s = api_err(all.list(&ListParams::default()).await);
    assert!(
        s.message
            .ends_with("cannot list resource \"pods\" in API group \"\" at the cluster scope"),
        "{}",
        s.message
    );
    // A bad token is not anonymous: 401.
    let bogus: Api<Pod> = Api::namespaced(env.client_with_token("not-a-token"), &env.ns);
    let s = api_err(bogus.list(&ListParams::default()).await);
    assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"));
    // Deleting the ServiceAccount invalidates its tokens.
    env.api::<ServiceAccount>()
        .delete("reader", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the token stops working", || async {
        matches!(pods.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 401)
    })
    .await;
    env.finish().await;
}

#[tokio::test]
async fn subresources_and_resource_names_narrow_a_grant() {
    let env = env("rbac-narrow").await;
    let sa = env.service_account("narrow").await;
    env.pod(&pod("p")).await;
    let pp = PostParams::default();
    for name in ["a", "b"] {
        env.api::<ConfigMap>()
            .create(&pp, &cm(name, json!({"k": name})))
            .await
            .unwrap();
    }
    grant(&env, "narrow", "narrow", json!([
        {"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get", "list", "update"]},
    ])).await;
    let pods: Api<Pod> = Api::namespaced(sa.clone(), &env.ns);
    eventually("the binding takes effect", || async {
        pods.get_status("p").await.is_ok()
    })
    .await;
    let s = api_err(pods.get("p").await);
    assert_eq!(s.code, 403);
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), &env.ns);
    assert_eq!(cms.get("a").await.unwrap().data.unwrap()["k"], "a");
    let s = api_err(cms.get("b").await);
    assert!(
        s.message.starts_with("configmaps \"b\" is forbidden"),
        "{}",
        s.message
    );
    // A list is allowed only when a field selector names the object.
    let s = api_err(cms.list(&ListParams::default()).await);
    assert_eq!(s.code, 403);
    let one = cms
        .list(&ListParams::default().fields("metadata.name=a"))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);
    let mut a = cms.get("a").await.unwrap();
    a.data = Some([("k".to_string(), "changed".to_string())].into());
    cms.replace("a", &pp, &a).await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn cluster_roles_aggregate_the_rules_of_labelled_roles() {
    let env = env("rbac-aggregate").await;
    let label = format!("conformance.steward.dev/aggregate-to-{}", env.ns);
    let (agg, part) = (format!("{}-agg", env.ns), format!("{}-part", env.ns));
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    let pp = PostParams::default();
    roles
        .create(
            &pp,
            &obj(json!({"metadata": {"name": agg},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label.clone(): "true"}}]}})),
        )
        .await
        .unwrap();
    roles
        .create(
            &pp,
            &obj(
                json!({"metadata": {"name": part, "labels": {label.clone(): "true"}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]}),
            ),
        )
        .await
        .unwrap();
    eventually("the aggregated role gathers the rules", || async {
        roles
            .get(&agg)
            .await
            .ok()
            .and_then(|r| r.rules)
            .is_some_and(|rules| {
                rules.len() == 1
                    && rules[0].resources.as_deref() == Some(&["secrets".to_string()][..])
            })
    })
    .await;
    let sa = env.service_account("agg").await;
    bind(&env, "agg", "ClusterRole", &agg, "agg").await;
    let secrets: Api<Secret> = Api::namespaced(sa, &env.ns);
    eventually("the aggregated grant takes effect", || async {
        secrets.list(&ListParams::default()).await.is_ok()
    })
    .await;
    for name in [&agg, &part] {
        roles.delete(name, &DeleteParams::default()).await.unwrap();
    }
    env.finish().await;
}

#[tokio::test]
async fn granting_permissions_not_held_is_refused() {
    let env = env("rbac-escalate").await;
    let sa = env.service_account("writer").await;
    grant(&env, "writer", "writer", json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    ])).await;
    let roles: Api<Role> = Api::namespaced(sa.clone(), &env.ns);
    let pp = PostParams::default();
    let held: Role = obj(
        json!({"metadata": {"name": "held"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    );
    eventually("the binding takes effect", || async {
        roles.create(&pp, &held).await.is_ok()
    })
    .await;
    let more: Role = obj(
        json!({"metadata": {"name": "more"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    );
    let s = api_err(roles.create(&pp, &more).await);
    assert_eq!(s.code, 403);
    assert!(
        s.message
            .starts_with("roles.rbac.authorization.k8s.io \"more\" is forbidden: user"),
        "{}",
        s.message
    );
    assert!(
        s.message
            .contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        s.message
    );
    let bindings: Api<RoleBinding> = Api::namespaced(sa.clone(), &env.ns);
    let to_admin = |role: &str| -> RoleBinding {
        obj(json!({"metadata": {"name": format!("to-{role}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": env.ns}]}))
    };
    let s = api_err(bindings.create(&pp, &to_admin("cluster-admin")).await);
    assert_eq!(s.code, 403);
    // Binding a role whose permissions the writer holds is fine.
    bindings
        .create(
            &pp,
            &obj(json!({"metadata": {"name": "to-held"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "held"},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": env.ns}]})),
        )
        .await
        .unwrap();
    // With `escalate`, the same Role may be created.
    grant(&env, "escalator", "writer", json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}])).await;
    eventually("escalate takes effect", || async {
        roles.create(&pp, &more).await.is_ok()
    })
    .await;
    env.finish().await;
}

async fn ssar(client: &Client, attrs: Value) -> bool {
    let review: SelfSubjectAccessReview = obj(json!({"spec": attrs}));
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

#[tokio::test]
async fn access_reviews_answer_for_oneself_and_for_others() {
    let env = env("rbac-review").await;
    let sa = env.service_account("asker").await;
    grant(
        &env,
        "asker",
        "asker",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
    )
    .await;
    let list =
        json!({"resourceAttributes": {"namespace": env.ns, "verb": "list", "resource": "pods"}});
    let delete = json!({"resourceAttributes": {"namespace": env.ns, "verb": "delete", "resource": "pods", "name": "p"}});
    eventually("the binding takes effect", || async {
        ssar(&sa, list.clone()).await
    })
    .await;
    assert!(!ssar(&sa, delete.clone()).await);
    assert!(
        ssar(&env.client, delete.clone()).await,
        "the admin may do anything"
    );
    assert!(
        ssar(
            &sa,
            json!({"nonResourceAttributes": {"path": "/version", "verb": "get"}})
        )
        .await
    );
    let sar = |spec: Value| -> SubjectAccessReview {
        let mut spec = spec;
        spec["user"] = json!(user(&env, "asker"));
        spec["groups"] = json!(["system:serviceaccounts", "system:authenticated"]);
        obj(json!({"spec": spec}))
    };
    let reviews: Api<SubjectAccessReview> = Api::all(env.client.clone());
    let allowed = reviews
        .create(&PostParams::default(), &sar(list.clone()))
        .await
        .unwrap();
    assert!(allowed.status.unwrap().allowed);
    let denied = reviews
        .create(&PostParams::default(), &sar(delete))
        .await
        .unwrap();
    assert!(!denied.status.unwrap().allowed);
    // The ServiceAccount may not ask about others.
    let s = api_err(
        Api::<SubjectAccessReview>::all(sa.clone())
            .create(&PostParams::default(), &sar(list))
            .await,
    );
    assert_eq!(s.code, 403);
    let me = Api::<SelfSubjectReview>::all(sa)
        .create(&PostParams::default(), &obj(json!({})))
        .await
        .unwrap();
    let info = me.status.unwrap().user_info.unwrap();
    assert_eq!(info.username.as_deref(), Some(user(&env, "asker").as_str()));
    let groups = info.groups.unwrap();
    assert!(
        groups.contains(&format!("system:serviceaccounts:{}", env.ns)),
        "{groups:?}"
    );
    assert!(
        groups.contains(&"system:authenticated".to_string()),
        "{groups:?}"
    );
    env.finish().await;
}

#[tokio::test]
async fn token_requests_are_validated_and_anonymous_requests_mostly_denied() {
    let env = env("rbac-token").await;
    let api: Api<ServiceAccount> = env.api();
    let request = obj(json!({"spec": {"audiences": [], "expirationSeconds": 60}}));
    let s = api_err(
        api.create_token_request("missing", &PostParams::default(), &request)
            .await,
    );
    assert_eq!(s.code, 404);
    env.service_account_token("short").await;
    let s = api_err(
        api.create_token_request("short", &PostParams::default(), &request)
            .await,
    );
    assert_eq!(s.code, 422);
    assert!(
        s.message
            .contains("may not specify a duration less than 10 minutes"),
        "{}",
        s.message
    );
    if !env.real {
        // A real cluster may disable anonymous requests altogether (401); ours allows them and
        // RBAC grants them only the public information.
        let mut cfg = env.config.clone();
        cfg.auth_info = Default::default();
        let anonymous = Client::try_from(cfg).unwrap();
        assert_eq!(anonymous.apiserver_version().await.unwrap().major, "1");
        let s = api_err(
            Api::<Pod>::namespaced(anonymous, &env.ns)
                .list(&ListParams::default())
                .await,
        );
        assert_eq!(
            s.message,
            format!(
                "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"{}\"",
                env.ns
            )
        );
    }
    env.finish().await;
}

/// A client with the test's admin credentials that impersonates `user` (and `groups`).
fn impersonating(env: &Env, user: &str, groups: &[&str]) -> Client {
    let mut cfg = env.config.clone();
    cfg.auth_info.impersonate = Some(user.to_string());
    if !groups.is_empty() {
        cfg.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    }
    Client::try_from(cfg).unwrap()
}

#[tokio::test]
async fn impersonation_runs_the_request_as_someone_else_when_allowed() {
    let env = env("rbac-impersonate").await;
    let robot = user(&env, "robot");
    env.service_account_token("robot").await;
    // Admin impersonates the ServiceAccount, which may do nothing yet.
    let as_robot: Api<Pod> = Api::namespaced(impersonating(&env, &robot, &[]), &env.ns);
    let denied = api_err(as_robot.list(&ListParams::default()).await);
    assert_eq!(denied.code, 403);
    assert!(
        denied
            .message
            .contains(&format!("User \"{robot}\" cannot list resource \"pods\"")),
        "{}",
        denied.message
    );
    grant(
        &env,
        "robot-lists",
        "robot",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
    )
    .await;
    eventually("the impersonated ServiceAccount may list Pods", || async {
        as_robot.list(&ListParams::default()).await.is_ok()
    })
    .await;
    // The impersonated user's identity as the server sees it.
    let review: SelfSubjectReview = obj(json!({"apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview"}));
    let me = Api::<SelfSubjectReview>::all(impersonating(&env, &robot, &[]))
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let info = me.status.unwrap().user_info.unwrap();
    assert_eq!(info.username.as_deref(), Some(robot.as_str()));
    let groups = info.groups.unwrap_or_default();
    assert!(
        groups.contains(&format!("system:serviceaccounts:{}", env.ns)),
        "{groups:?}"
    );
    assert!(
        groups.contains(&"system:authenticated".to_string()),
        "{groups:?}"
    );
    // A ServiceAccount may not impersonate without the impersonate verb.
    let mut cfg = env.config.clone();
    let token = env.service_account_token("plain").await;
    cfg.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        impersonate: Some("someone".into()),
        ..Default::default()
    };
    let refused = api_err(
        Api::<ConfigMap>::namespaced(Client::try_from(cfg).unwrap(), &env.ns)
            .list(&ListParams::default())
            .await,
    );
    // 1.36 (constrained impersonation on by default) refuses on the request itself, with the
    // verb `impersonate-on:<mode>:<verb>`.
    assert_eq!(refused.code, 403);
    assert_eq!(refused.reason, "Forbidden");
    assert!(
        refused.message.contains(&format!(
            "configmaps is forbidden: User \"{}\" cannot impersonate-on:user-info:list resource \"configmaps\" in API group \"\" in the namespace \"{}\"",
            user(&env, "plain"),
            env.ns
        )),
        "{}",
        refused.message
    );
    env.finish().await;
}
