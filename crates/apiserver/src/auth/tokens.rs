//! Bearer tokens: the admin token (random, made at start, written into the kubeconfig) and
//! ServiceAccount tokens issued by `TokenRequest`. Unlike a real server, which signs JWTs that
//! stay valid across restarts, tokens here are opaque random strings held in memory: they are
//! bound to the ServiceAccount's uid (deleting or recreating the account invalidates them) and
//! expire, but a restart forgets them and they carry no audience check.

use std::collections::HashMap;

use base64::Engine;

use super::User;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;

/// What a ServiceAccount token stands for.
#[derive(Clone, Debug)]
struct Issued {
    namespace: String,
    name: String,
    uid: String,
    expires: jiff::Timestamp,
}

pub struct Tokens {
    admin: String,
    service_accounts: HashMap<String, Issued>,
}

impl Default for Tokens {
    fn default() -> Self {
        Self {
            admin: random_token(),
            service_accounts: HashMap::new(),
        }
    }
}

fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Tokens {
    pub fn admin(&self) -> &str {
        &self.admin
    }

    /// Issues a token for the ServiceAccount `namespace/name` with `uid`, valid until `expires`.
    pub fn issue(
        &mut self,
        namespace: &str,
        name: &str,
        uid: &str,
        expires: jiff::Timestamp,
    ) -> String {
        let now = jiff::Timestamp::now();
        self.service_accounts.retain(|_, t| t.expires > now);
        let token = random_token();
        self.service_accounts.insert(
            token.clone(),
            Issued {
                namespace: namespace.into(),
                name: name.into(),
                uid: uid.into(),
                expires,
            },
        );
        token
    }

    /// The user `token` authenticates, if it is valid now.
    pub fn user(&self, state: &State, token: &str) -> Option<User> {
        if constant_time_eq(token.as_bytes(), self.admin.as_bytes()) {
            return Some(User::admin());
        }
        let t = self.service_accounts.get(token)?;
        if t.expires <= jiff::Timestamp::now() {
            return None;
        }
        let sa = state.get(
            &GroupResource::new("", "serviceaccounts"),
            &t.namespace,
            &t.name,
        )?;
        if meta::uid(sa) != Some(t.uid.as_str()) || meta::is_deleting(sa) {
            return None;
        }
        Some(User::service_account(&t.namespace, &t.name, &t.uid))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn state() -> State {
        let (tx, _rx) = tokio::sync::watch::channel(0);
        State::new(tx, Arc::new(tokio::sync::Notify::new()))
    }

    #[test]
    fn tokens_follow_the_service_account_uid_and_expiry() {
        let mut s = state();
        let gr = GroupResource::new("", "serviceaccounts");
        let sa = json!({"metadata": {"name": "sa", "namespace": "default", "uid": "u1"}});
        s.put(&gr, sa.clone(), crate::store::EventType::Added);
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600);
        let mut tokens = Tokens::default();
        let t = tokens.issue("default", "sa", "u1", later);
        let user = tokens.user(&s, &t).expect("valid");
        assert_eq!(user.name, "system:serviceaccount:default:sa");
        assert!(
            user.groups
                .contains(&"system:serviceaccounts:default".to_string())
        );
        assert_eq!(tokens.user(&s, tokens.admin()), Some(User::admin()));
        assert_eq!(tokens.user(&s, "nope"), None);
        // Recreated with another uid: the old token is void.
        s.put(
            &gr,
            json!({"metadata": {"name": "sa", "namespace": "default", "uid": "u2"}}),
            crate::store::EventType::Modified,
        );
        assert_eq!(tokens.user(&s, &t), None);
        let past = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
        let expired = tokens.issue("default", "sa", "u2", past);
        assert_eq!(tokens.user(&s, &expired), None);
    }
}
