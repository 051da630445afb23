//! Keeps [`ApiState::access`] current: watches, **in the operator's own namespace only**,
//! Secrets labelled `steward.dev/api-user` (users) and ConfigMaps labelled
//! `steward.dev/api-role` (roles: the ConfigMap's name, or its key `name`; key `permissions`,
//! as [`parse_role`] reads it), and rebuilds the access table on every change. Users and roles
//! anywhere else are ignored: whoever may write Secrets in some application namespace must not
//! be able to mint an API admin.
//!
//! A Secret or ConfigMap that does not parse is skipped with a Warning log line and Event
//! naming it and the reason (a key's name, never a value or a hash); so is a second Secret for
//! a user name already taken (the first by Secret name wins) and a role named like a built-in
//! one (built-in roles cannot be overridden).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::access::{AccessTable, ApiUser, USER_LABEL};
use super::permissions::{Role, builtin_roles, parse_role};
use super::server::ApiState;

/// The label that makes a ConfigMap an API role.
pub const ROLE_LABEL: &str = "steward.dev/api-role";

/// An object skipped while building the table, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its resource version (a change is reported again).
    pub version: String,
    /// Why (never a value).
    pub reason: String,
    /// The object, for the Event.
    pub reference: ObjectReference,
}

fn skipped<K: Resource<DynamicType = ()>>(kind: &'static str, o: &K, reason: String) -> Skipped {
    Skipped {
        kind,
        name: o.meta().name.clone().unwrap_or_default(),
        version: o.meta().resource_version.clone().unwrap_or_default(),
        reason,
        reference: o.object_ref(&()),
    }
}

/// (pure) The access table of these user Secrets and role ConfigMaps, and what was skipped.
pub fn table_of(secrets: &[Arc<Secret>], maps: &[Arc<ConfigMap>]) -> (AccessTable, Vec<Skipped>) {
    let mut problems = Vec::new();
    let builtin: BTreeSet<String> = builtin_roles().into_iter().map(|r| r.name).collect();
    let mut maps: Vec<&Arc<ConfigMap>> = maps.iter().collect();
    maps.sort_by_key(|m| m.name_any());
    let mut roles: Vec<Role> = Vec::new();
    for map in maps {
        let data = map.data.clone().unwrap_or_default();
        let name = data
            .get("name")
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| map.name_any());
        let reason = if builtin.contains(&name) {
            Some(format!("role {name} is built in and cannot be redefined"))
        } else if roles.iter().any(|r| r.name == name) {
            Some(format!(
                "role {name} is already defined by another ConfigMap"
            ))
        } else {
            match data.get("permissions") {
                None => Some("key permissions is missing".to_owned()),
                Some(text) => match parse_role(&name, text) {
                    Ok(role) => {
                        roles.push(role);
                        None
                    }
                    Err(e) => Some(e),
                },
            }
        };
        if let Some(reason) = reason {
            problems.push(skipped("ConfigMap", map.as_ref(), reason));
        }
    }
    let mut secrets: Vec<&Arc<Secret>> = secrets.iter().collect();
    secrets.sort_by_key(|s| s.name_any());
    let mut users: Vec<ApiUser> = Vec::new();
    for secret in secrets {
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        match ApiUser::from_data(&data) {
            Ok(user) if users.iter().any(|u| u.name == user.name) => problems.push(skipped(
                "Secret",
                secret.as_ref(),
                format!("user {} is already defined by another Secret", user.name),
            )),
            Ok(user) => users.push(user),
            Err(reason) => problems.push(skipped("Secret", secret.as_ref(), reason)),
        }
    }
    (AccessTable::new(users, roles), problems)
}

/// Watches users and roles in `namespace` and rebuilds `state.access` on every change, until
/// `shutdown` is cancelled. Until both watches have listed once, the table stays as it is;
/// `loaded` is told when it was first built.
pub async fn run(
    client: Client,
    namespace: String,
    state: Arc<ApiState>,
    shutdown: CancellationToken,
    loaded: tokio::sync::oneshot::Sender<()>,
) {
    let mut loaded = Some(loaded);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "steward-api".into(),
            instance: None,
        },
    );
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let maps_api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let (secrets, secrets_writer) = reflector::store();
    let (maps, maps_writer) = reflector::store();
    let secret_events = watcher(secrets_api, watcher::Config::default().labels(USER_LABEL))
        .default_backoff()
        .reflect(secrets_writer)
        .map(|e| (true, e.map(|e| matches!(e, watcher::Event::InitDone))));
    let map_events = watcher(maps_api, watcher::Config::default().labels(ROLE_LABEL))
        .default_backoff()
        .reflect(maps_writer)
        .map(|e| (false, e.map(|e| matches!(e, watcher::Event::InitDone))));
    let events = futures::stream::select(secret_events, map_events)
        .take_until(async move { shutdown.cancelled().await });
    let mut events = std::pin::pin!(events);
    let (mut secrets_listed, mut maps_listed) = (false, false);
    let mut reported: HashSet<(&'static str, String, String)> = HashSet::new();
    while let Some((is_secret, event)) = events.next().await {
        match event {
            Ok(init_done) => {
                if init_done {
                    if is_secret {
                        secrets_listed = true;
                    } else {
                        maps_listed = true;
                    }
                }
                if secrets_listed && maps_listed {
                    rebuild(&state, &secrets, &maps, &recorder, &mut reported).await;
                    if let Some(tx) = loaded.take() {
                        let _ = tx.send(());
                    }
                }
            }
            Err(err) => tracing::warn!(
                namespace = %namespace,
                error = %err,
                "API: watching users (Secrets labelled {USER_LABEL}) and roles (ConfigMaps labelled {ROLE_LABEL})"
            ),
        }
    }
}

async fn rebuild(
    state: &ApiState,
    secrets: &Store<Secret>,
    maps: &Store<ConfigMap>,
    recorder: &Recorder,
    reported: &mut HashSet<(&'static str, String, String)>,
) {
    let (table, problems) = table_of(&secrets.state(), &maps.state());
    match state.access.write() {
        Ok(mut access) => *access = table,
        Err(_) => {
            tracing::error!(
                "API: the access table's lock is poisoned; users and roles not updated"
            );
            return;
        }
    }
    let mut current = HashSet::new();
    for p in problems {
        let key = (p.kind, p.name.clone(), p.version.clone());
        current.insert(key.clone());
        if reported.contains(&key) {
            continue;
        }
        tracing::warn!(kind = p.kind, name = %p.name, reason = %p.reason, "API: skipped");
        let event = Event {
            type_: EventType::Warning,
            reason: if p.kind == "Secret" {
                "InvalidApiUser".into()
            } else {
                "InvalidApiRole".into()
            },
            note: Some(p.reason.clone()),
            action: "LoadAccess".into(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&event, &p.reference).await {
            tracing::debug!(error = %err, name = %p.name, "API: publishing an Event failed");
        }
    }
    // Forget what is fixed or gone, so it is reported again if it comes back.
    *reported = current;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::access::hash_password;
    use crate::api::permissions::Permission;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    fn user_secret(name: &str, user: &str, hash: &str, roles: &str) -> Arc<Secret> {
        Arc::new(Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            data: Some(
                [
                    ("username", user),
                    ("password-hash", hash),
                    ("roles", roles),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
            ),
            ..Default::default()
        })
    }

    fn role_map(name: &str, data: &[(&str, &str)]) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        })
    }

    #[test]
    fn users_and_roles_build_the_table_and_what_does_not_parse_is_skipped_by_name() {
        let hash = hash_password("pw").unwrap();
        let secrets = [
            user_secret("a-bob", "bob", &hash, "backup"),
            user_secret("b-bob", "bob", &hash, "admin"),
            user_secret("c-eve", "eve", "not-a-hash", "admin"),
        ];
        let maps = [
            role_map("backup", &[("permissions", "ShowBackup, CreateBackup")]),
            role_map("sneaky", &[("name", "readonly"), ("permissions", "*")]),
            role_map("typo", &[("permissions", "ShowEverything")]),
        ];
        let (table, skipped) = table_of(&secrets, &maps);
        let bob = table.user("bob").unwrap();
        assert_eq!(bob.roles, ["backup"]);
        assert!(
            table
                .authorize(bob, Permission::CreateBackup, Some("x"))
                .is_ok()
        );
        assert!(
            table
                .authorize(bob, Permission::ScaleCluster, Some("x"))
                .is_err()
        );
        assert!(table.user("eve").is_none());
        let reasons: Vec<(String, String)> = skipped
            .iter()
            .map(|s| (s.name.clone(), s.reason.clone()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "sneaky".into(),
                    "role readonly is built in and cannot be redefined".into()
                ),
                (
                    "typo".into(),
                    "role typo: unknown permissions ShowEverything".into()
                ),
                (
                    "b-bob".into(),
                    "user bob is already defined by another Secret".into()
                ),
                (
                    "c-eve".into(),
                    "key password-hash is not an argon2 PHC string".into()
                ),
            ]
        );
        assert!(skipped.iter().all(|s| !s.reason.contains(&hash)));
    }
}
