//! What kube-controller-manager puts in every namespace: the serviceaccounts controller's
//! `default` ServiceAccount and the root-ca-cert-publisher's `kube-root-ca.crt` ConfigMap. Both
//! appear shortly after the namespace does and come back when deleted; a namespace being deleted
//! gets neither. The embedded server serves plain HTTP and has no certificate authority, so the
//! ConfigMap's `ca.crt` is empty (documented in `docs/local-control-plane.md`).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::Changes;
use super::writes::create_obj;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;

const ROOT_CA: &str = "kube-root-ca.crt";
const DEFAULT_SA: &str = "default";

fn namespaces() -> GroupResource {
    GroupResource::new("", "namespaces")
}

fn service_accounts() -> GroupResource {
    GroupResource::new("", "serviceaccounts")
}

fn config_maps() -> GroupResource {
    GroupResource::new("", "configmaps")
}

/// The namespaces a pass looks at: every one, or those whose namespace object, `default`
/// ServiceAccount or root CA ConfigMap changed.
fn touched(state: &State, changes: &Changes) -> BTreeSet<String> {
    if changes.is_all() {
        return state
            .list(&namespaces(), None)
            .filter_map(|n| meta::name(n).map(String::from))
            .collect();
    }
    let mut out = BTreeSet::new();
    out.extend(
        changes
            .objects(&namespaces())
            .filter_map(|n| meta::name(n).map(String::from)),
    );
    for (gr, name) in [(service_accounts(), DEFAULT_SA), (config_maps(), ROOT_CA)] {
        out.extend(
            changes
                .objects(&gr)
                .filter(|o| meta::name(o) == Some(name))
                .filter_map(|o| meta::namespace(o).map(String::from)),
        );
    }
    out
}

/// Whether a namespace takes new objects (it exists and is not being deleted).
fn active(ns: &Value) -> bool {
    !meta::is_deleting(ns)
        && meta::get_path(ns, "status.phase").and_then(Value::as_str) != Some("Terminating")
}

/// One pass: creates what is missing in the namespaces that changed.
pub fn reconcile(state: &mut State, changes: &Changes) {
    for ns in touched(state, changes) {
        if !state.get(&namespaces(), "", &ns).is_some_and(active) {
            continue;
        }
        if state.get(&service_accounts(), &ns, DEFAULT_SA).is_none() {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": DEFAULT_SA, "namespace": ns}});
            create_obj(
                state,
                &service_accounts(),
                &ns,
                sa,
                "serviceaccount-controller",
            );
        }
        if state.get(&config_maps(), &ns, ROOT_CA).is_none() {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA, "namespace": ns, "annotations": {
                    "kubernetes.io/description": "The CA bundle for verifying the API server from inside the cluster. Empty: the Steward local control plane serves plain HTTP and has no certificate authority."}},
                "data": {"ca.crt": ""}});
            create_obj(state, &config_maps(), &ns, cm, "root-ca-cert-publisher");
        }
    }
}
