//! Escalation prevention on RBAC writes, as upstream's RBAC storage does: a Role or ClusterRole
//! may only grant what its writer already holds (in the role's namespace, or cluster-wide for a
//! ClusterRole) unless the writer may `escalate` it; an `aggregationRule` needs full authority;
//! a binding may only reference a role whose permissions the writer holds unless the writer may
//! `bind` it. `system:masters` and the server's own writes are exempt.

use serde_json::Value;

use super::index::{Decision, RBAC_GROUP, role_ref_rules};
use super::rules::Rule;
use super::{Attributes, User, authorize, requester};
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::status::{ApiError, ApiResult};
use crate::store::State;

/// Refuses a write of `obj` (replacing `old`, if any) that would grant more than the requester
/// holds.
pub fn check(
    state: &mut State,
    def: &ResourceDef,
    old: Option<&Value>,
    obj: &Value,
) -> ApiResult<()> {
    if def.group != RBAC_GROUP {
        return Ok(());
    }
    let Some(user) = requester() else {
        return Ok(());
    };
    if user.is_master() {
        return Ok(());
    }
    let ns = meta::namespace(obj).unwrap_or_default().to_string();
    let name = meta::name(obj).unwrap_or_default().to_string();
    let gr = GroupResource::new(RBAC_GROUP, &def.plural);
    let denied = |detail: String| {
        ApiError::forbidden(format!(
            "{} \"{name}\" is forbidden: {detail}",
            gr.qualified()
        ))
        .with_details(serde_json::json!({"name": name, "group": RBAC_GROUP, "kind": def.plural}))
    };
    match def.kind.as_str() {
        "Role" | "ClusterRole" => {
            let unchanged = old.is_some_and(|o| {
                o.get("rules") == obj.get("rules")
                    && o.get("aggregationRule") == obj.get("aggregationRule")
            });
            if unchanged || may(state, &user, "escalate", &def.plural, &ns, &name) {
                return Ok(());
            }
            let held = state.rbac_index().rules_for(&user, &ns);
            if obj.get("aggregationRule").is_some_and(|a| !a.is_null()) {
                let full = [
                    Rule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..Rule::default()
                    },
                    Rule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                        ..Rule::default()
                    },
                ];
                if !covered(&full, &held).is_empty() {
                    return Err(denied(
                        "must have cluster-admin privileges to use the aggregationRule".into(),
                    ));
                }
            }
            let missing = covered(&Rule::list(obj), &held);
            if missing.is_empty() {
                Ok(())
            } else {
                Err(denied(not_held(&user, &missing)))
            }
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let role_ref = obj.get("roleRef").cloned().unwrap_or(Value::Null);
            let unchanged = old.is_some_and(|o| {
                o.get("roleRef") == obj.get("roleRef") && o.get("subjects") == obj.get("subjects")
            });
            let role_kind = role_ref["kind"].as_str().unwrap_or_default();
            let role_resource = if role_kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            let role_name = role_ref["name"].as_str().unwrap_or_default().to_string();
            if unchanged || may(state, &user, "bind", role_resource, &ns, &role_name) {
                return Ok(());
            }
            let Some(rules) = role_ref_rules(state, &ns, &role_ref) else {
                return Err(denied(format!(
                    "{role_resource}.{RBAC_GROUP} \"{role_name}\" not found"
                )));
            };
            let held = state.rbac_index().rules_for(&user, &ns);
            let missing = covered(&rules, &held);
            if missing.is_empty() {
                Ok(())
            } else {
                Err(denied(not_held(&user, &missing)))
            }
        }
        _ => Ok(()),
    }
}

fn may(state: &mut State, user: &User, verb: &str, resource: &str, ns: &str, name: &str) -> bool {
    let a = Attributes {
        verb: verb.into(),
        resource_request: true,
        group: RBAC_GROUP.into(),
        resource: resource.into(),
        namespace: ns.into(),
        name: name.into(),
        ..Attributes::default()
    };
    matches!(authorize(state, user, &a), Decision::Allow(_))
}

/// The requested rules `held` does not cover.
fn covered(requested: &[Rule], held: &[Rule]) -> Vec<Rule> {
    let refs: Vec<&Rule> = held.iter().collect();
    requested
        .iter()
        .filter(|r| !r.covered_by(&refs))
        .cloned()
        .collect()
}

fn not_held(user: &User, missing: &[Rule]) -> String {
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    let rules: Vec<String> = missing.iter().map(Rule::compact).collect();
    format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        groups.join(" "),
        rules.join("\n")
    )
}
