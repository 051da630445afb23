//! The RBAC authorizer's index: every binding resolved to its role's rules and filed under its
//! subjects (users — ServiceAccounts as `system:serviceaccount:{ns}:{name}` — and groups).
//! Built from the stored Roles, ClusterRoles and bindings, and rebuilt only when one of them
//! changes (`State::rbac_index`), so a request costs a few hash lookups and rule scans.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::rules::Rule;
use super::{Attributes, User};
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// One binding's grant to a subject.
#[derive(Debug)]
struct Grant {
    /// `None`: cluster-wide (ClusterRoleBinding); `Some(ns)`: a RoleBinding in `ns`.
    namespace: Option<String>,
    rules: Arc<Vec<Rule>>,
    /// `RoleBinding "b" of Role "r"`, for the allow reason.
    describe: String,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, with the reason (empty for `system:masters`).
    Allow(String),
    Deny,
}

#[derive(Debug, Default)]
pub struct Index {
    users: HashMap<String, Vec<Grant>>,
    groups: HashMap<String, Vec<Grant>>,
}

fn rbac(resource: &str) -> GroupResource {
    GroupResource::new(RBAC_GROUP, resource)
}

/// The rules a binding's `roleRef` names (empty when the role does not exist).
pub fn role_ref_rules(state: &State, namespace: &str, role_ref: &Value) -> Option<Vec<Rule>> {
    let name = role_ref.get("name").and_then(Value::as_str)?;
    let role = match role_ref.get("kind").and_then(Value::as_str)? {
        "ClusterRole" => state.get(&rbac("clusterroles"), "", name)?,
        "Role" if !namespace.is_empty() => state.get(&rbac("roles"), namespace, name)?,
        _ => return None,
    };
    Some(Rule::list(role))
}

impl Index {
    pub fn build(state: &State) -> Self {
        let mut idx = Self::default();
        let mut roles: HashMap<(String, String), Arc<Vec<Rule>>> = HashMap::new();
        let mut bindings: Vec<&Value> = state.list(&rbac("clusterrolebindings"), None).collect();
        bindings.extend(state.list(&rbac("rolebindings"), None));
        for b in bindings {
            let ns = meta::namespace(b).unwrap_or_default().to_string();
            let role_ref = &b["roleRef"];
            let role_kind = role_ref["kind"].as_str().unwrap_or_default();
            let role_name = role_ref["name"].as_str().unwrap_or_default();
            let key_ns = if role_kind == "Role" {
                ns.clone()
            } else {
                String::new()
            };
            let key = (key_ns, format!("{role_kind}/{role_name}"));
            let rules = match roles.get(&key) {
                Some(r) => r.clone(),
                None => {
                    let Some(r) = role_ref_rules(state, &ns, role_ref) else {
                        continue;
                    };
                    let r = Arc::new(r);
                    roles.insert(key, r.clone());
                    r
                }
            };
            let binding_kind = if ns.is_empty() {
                "ClusterRoleBinding"
            } else {
                "RoleBinding"
            };
            let describe = format!(
                "{binding_kind} \"{}\" of {role_kind} \"{role_name}\"",
                meta::name(b).unwrap_or_default()
            );
            for s in b["subjects"].as_array().into_iter().flatten() {
                let name = s["name"].as_str().unwrap_or_default().to_string();
                let (map, key) = match s["kind"].as_str().unwrap_or_default() {
                    "User" => (&mut idx.users, name),
                    "Group" => (&mut idx.groups, name),
                    "ServiceAccount" => {
                        let sa_ns = s["namespace"]
                            .as_str()
                            .filter(|n| !n.is_empty())
                            .unwrap_or(&ns);
                        (
                            &mut idx.users,
                            format!("system:serviceaccount:{sa_ns}:{name}"),
                        )
                    }
                    _ => continue,
                };
                map.entry(key).or_default().push(Grant {
                    namespace: (!ns.is_empty()).then(|| ns.clone()),
                    rules: rules.clone(),
                    describe: describe.clone(),
                });
            }
        }
        idx
    }

    /// Grants of `user` that apply in `namespace` (`""`: cluster-wide grants only).
    fn grants<'a>(
        &'a self,
        user: &'a User,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a Grant, String)> + 'a {
        let by_user = self
            .users
            .get(&user.name)
            .into_iter()
            .flatten()
            .map(move |g| (g, format!("User \"{}\"", user.name)));
        let by_group = user.groups.iter().flat_map(move |grp| {
            self.groups
                .get(grp)
                .into_iter()
                .flatten()
                .map(move |g| (g, format!("Group \"{grp}\"")))
        });
        by_user
            .chain(by_group)
            .filter(move |(g, _)| g.namespace.as_deref().is_none_or(|n| n == namespace))
    }

    pub fn authorize(&self, user: &User, a: &Attributes) -> Decision {
        let ns = if a.resource_request {
            a.namespace.as_str()
        } else {
            ""
        };
        for (grant, subject) in self.grants(user, ns) {
            if grant.rules.iter().any(|r| r.allows(a)) {
                return Decision::Allow(format!(
                    "RBAC: allowed by {} to {subject}",
                    grant.describe
                ));
            }
        }
        Decision::Deny
    }

    /// Every rule `user` holds in `namespace` (`""`: cluster-wide only).
    pub fn rules_for(&self, user: &User, namespace: &str) -> Vec<Rule> {
        self.grants(user, namespace)
            .flat_map(|(g, _)| g.rules.iter().cloned())
            .collect()
    }
}
