//! Test environment: a client for the embedded server or for the cluster named by
//! `STEWARD_E2E_KUBECONFIG`, a fresh namespace per test, CRD helpers and polling.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::{Value, json};
use steward_apiserver::{ApiServerHandle, ServerConfig};

pub struct Env {
    pub client: Client,
    /// The configuration `client` was built from (admin credentials).
    pub config: Config,
    pub ns: String,
    pub real: bool,
    pub server: Option<ApiServerHandle>,
    crds: Vec<String>,
    nodes: Vec<String>,
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Lowercase letters unique to this process and call.
fn suffix() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut x =
        (n as u64 % 1_000_000_007) * 64 + COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut out = String::new();
    for _ in 0..6 {
        out.push(char::from(b'a' + (x % 26) as u8));
        x /= 26;
    }
    out
}

pub async fn env(test: &str) -> Env {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (client, server, real) = match std::env::var("STEWARD_E2E_KUBECONFIG") {
        Ok(path) if !path.is_empty() => {
            let kc = Kubeconfig::read_from(path).expect("read kubeconfig");
            let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .expect("kubeconfig");
            (cfg, None, true)
        }
        _ => {
            let h = steward_apiserver::start(ServerConfig::default())
                .await
                .expect("start server");
            let mut cfg = Config::new(h.url().parse().expect("url"));
            cfg.auth_info.token = Some(h.admin_token().into());
            (cfg, Some(h), false)
        }
    };
    let (config, client) = (client.clone(), Client::try_from(client).expect("client"));
    let ns = format!("conf-{}-{}", test.replace('_', "-"), suffix());
    let ns: String = ns
        .chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string();
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &nsobj)
        .await
        .expect("create namespace");
    Env {
        client,
        config,
        ns,
        real,
        server,
        crds: Vec::new(),
        nodes: Vec::new(),
    }
}

impl Env {
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates a CRD (group `conformance.steward.dev`, unique plural) and waits until it is
    /// established and served. Returns the resource of its storage version.
    pub async fn crd(&mut self, base: &str, versions: Value) -> ApiResource {
        let kind = format!("{base}{}", suffix());
        let plural = format!("{}s", kind.to_lowercase());
        let group = "conformance.steward.dev";
        let name = format!("{plural}.{group}");
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                "versions": versions}
        }))
        .expect("crd");
        let api = Api::<CustomResourceDefinition>::all(self.client.clone());
        api.create(&PostParams::default(), &crd)
            .await
            .expect("create crd");
        self.crds.push(name.clone());
        let established = kube::runtime::wait::await_condition(
            api,
            &name,
            kube::runtime::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .expect("established in time")
            .expect("await");
        let ar = ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version: format!("{group}/v1"),
            kind,
            plural,
        };
        // The real server needs a moment before the new resource is served.
        let dynapi: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.ns, &ar);
        eventually("CRD served", || async {
            dynapi.list(&Default::default()).await.is_ok()
        })
        .await;
        ar
    }

    /// Creates a Ready Node without a kubelet behind it (tainted so that no scheduler places
    /// Pods there), deleted by `finish`. Returns its name.
    pub async fn node(&mut self, base: &str) -> String {
        let name = format!("{}-{base}", self.ns);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"taints": [{"key": "steward.dev/conformance", "value": "fake", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node");
        Api::<Node>::all(self.client.clone())
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        self.nodes.push(name.clone());
        name
    }

    /// Creates a Pod in the test namespace, retrying while a real cluster has not yet created
    /// the namespace's default ServiceAccount.
    pub async fn pod(&self, pod: &Pod) -> Pod {
        let api: Api<Pod> = self.api();
        let mut last = None;
        for _ in 0..100 {
            match api.create(&PostParams::default(), pod).await {
                Ok(p) => return p,
                Err(kube::Error::Api(s)) if s.code == 403 => last = Some(s),
                Err(e) => panic!("create pod: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("create pod: {last:?}");
    }

    /// A client for the same server authenticating with bearer `token` only.
    pub fn client_with_token(&self, token: &str) -> Client {
        let mut cfg = self.config.clone();
        cfg.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        Client::try_from(cfg).expect("client")
    }

    /// Creates ServiceAccount `name` in the test namespace and returns a token for it from
    /// `TokenRequest` (ten minutes).
    pub async fn service_account_token(&self, name: &str) -> String {
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa");
        let api: Api<ServiceAccount> = self.api();
        api.create(&PostParams::default(), &sa)
            .await
            .expect("create service account");
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 600}}))
                .expect("token request");
        api.create_token_request(name, &PostParams::default(), &request)
            .await
            .expect("token request")
            .status
            .expect("token status")
            .token
            .expect("token")
    }

    /// A client authenticating as a new ServiceAccount `name` of the test namespace.
    pub async fn service_account(&self, name: &str) -> Client {
        let token = self.service_account_token(name).await;
        self.client_with_token(&token)
    }

    pub fn dynamic(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, ar)
    }

    pub async fn finish(self) {
        let crds = Api::<CustomResourceDefinition>::all(self.client.clone());
        for c in &self.crds {
            let _ = crds.delete(c, &DeleteParams::default()).await;
        }
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
        for n in &self.nodes {
            let _ = Api::<Node>::all(self.client.clone())
                .delete(n, &DeleteParams::default())
                .await;
        }
        if let Some(s) = self.server {
            s.shutdown().await;
        }
    }
}

/// A simple structural schema with spec.replicas (1..=10), spec.mode enum and status.
pub fn widget_versions(status: bool, scale: bool) -> Value {
    let mut subresources = json!({});
    if status {
        subresources["status"] = json!({});
    }
    if scale {
        subresources["scale"] = json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"});
    }
    json!([{
        "name": "v1", "served": true, "storage": true, "subresources": subresources,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "required": ["replicas"], "properties": {
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
                "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            "status": {"type": "object", "properties": {
                "replicas": {"type": "integer"}, "selector": {"type": "string"}, "phase": {"type": "string"},
                "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                    "items": {"type": "object", "required": ["type"], "properties": {
                        "type": {"type": "string"}, "status": {"type": "string"}}}}}}}}}
    }])
}

pub fn dynobj(ar: &ApiResource, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": name}, "spec": spec}))
        .expect("dynamic object")
}

/// Polls `check` every 100 ms for up to 30 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// The Status of a failed call.
pub fn api_err<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn rv<K: kube::Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

pub fn cm(name: &str, data: Value) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("configmap")
}

/// A raw request through the client (for content types and query parameters kube does not expose).
pub async fn raw(
    env: &Env,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> Result<Value, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", content_type)
        .body(serde_json::to_vec(&body).expect("body"))
        .expect("request");
    env.client.request::<Value>(req).await
}

pub async fn raw_text(env: &Env, path: &str) -> Result<String, kube::Error> {
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    env.client.request_text(req).await
}
