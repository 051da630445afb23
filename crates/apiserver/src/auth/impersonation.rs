//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`), as upstream's impersonation filter
//! does it: the requester needs the `impersonate` verb on each thing it asks to be — `users`
//! (or `serviceaccounts` in their namespace, for a `system:serviceaccount:<ns>:<name>` user) and
//! `groups` in the core group, `uids` and `userextras/<key>` in `authentication.k8s.io` — and the
//! request then runs as that user: its groups are the impersonated ones (a ServiceAccount's own
//! groups for a ServiceAccount) plus `system:authenticated`.
//!
//! 1.36 turns constrained impersonation (KEP-5284) on by default, which changes the refusal:
//! a requester without the legacy permission is refused on the request itself, with the verb
//! `impersonate-on:<mode>:<verb>` (`serviceaccount` for a ServiceAccount, `user-info` for any
//! other user). Not modelled: granting impersonation through the constrained verbs
//! (`impersonate:<mode>` plus `impersonate-on:<mode>:<verb>`) and the `associated-node` mode.

use axum::http::HeaderMap;

use super::{Attributes, User, authorize, forbidden, index::Decision};
use crate::status::ApiError;
use crate::store::State;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

fn attrs(
    group: &str,
    resource: &str,
    subresource: &str,
    namespace: &str,
    name: &str,
) -> Attributes {
    Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        path: String::new(),
        group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

/// The user the request runs as: `requester`, or whom it impersonates when it may. `request`
/// is what the request asks to do (a refusal names it, as 1.36 does).
pub fn impersonate(
    state: &mut State,
    requester: User,
    headers: &HeaderMap,
    request: &Attributes,
) -> Result<User, ApiError> {
    let users = values(headers, USER);
    let groups = values(headers, GROUP);
    let uids = values(headers, UID);
    let extras: Vec<(String, &str)> = headers
        .iter()
        .filter_map(|(k, v)| {
            let key = k.as_str().strip_prefix(EXTRA)?;
            Some((key.to_string(), v.to_str().ok()?))
        })
        .collect();
    let Some(&name) = users.first() else {
        if groups.is_empty() && uids.is_empty() && extras.is_empty() {
            return Ok(requester);
        }
        return Err(ApiError::internal(
            "requested impersonation of groups, a uid or extras without impersonating a user",
        ));
    };
    if users.len() > 1 || uids.len() > 1 {
        return Err(ApiError::bad_request(
            "only one user and one uid may be impersonated",
        ));
    }
    let mut checks = Vec::new();
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    let mode = match service_account {
        Some(_) => "serviceaccount",
        None => "user-info",
    };
    let mut user = match service_account {
        Some((ns, sa)) => {
            checks.push(attrs("", "serviceaccounts", "", ns, sa));
            User::service_account(ns, sa, "")
        }
        None => {
            checks.push(attrs("", "users", "", "", name));
            User {
                name: name.to_string(),
                uid: String::new(),
                groups: Vec::new(),
            }
        }
    };
    for g in &groups {
        checks.push(attrs("", "groups", "", "", g));
    }
    if let Some(uid) = uids.first() {
        checks.push(attrs("authentication.k8s.io", "uids", "", "", uid));
        user.uid = (*uid).to_string();
    }
    for (key, value) in &extras {
        checks.push(attrs("authentication.k8s.io", "userextras", key, "", value));
    }
    for check in &checks {
        if let Decision::Deny = authorize(state, &requester, check) {
            let constrained = Attributes {
                verb: format!("impersonate-on:{mode}:{}", request.verb),
                ..request.clone()
            };
            return Err(forbidden(&requester, &constrained));
        }
    }
    for g in groups {
        if !user.groups.iter().any(|have| have == g) {
            user.groups.push(g.to_string());
        }
    }
    let implicit = if user.name == "system:anonymous" {
        "system:unauthenticated"
    } else {
        "system:authenticated"
    };
    if !user.groups.iter().any(|g| g == implicit) {
        user.groups.push(implicit.to_string());
    }
    Ok(user)
}
