//! Random events: Pod kills, operator restarts, spec edits, table edits and user edits.

use futures::executor::block_on;
use rand::Rng;

use super::operator::Memory;
use super::world::{Phase, World};
use crate::cratedb::admin::ops;
use crate::cratedb::admin::{CrateError, Login};
use crate::resources::secrets::Password;

impl World {
    pub(super) fn event(&mut self) {
        match self.rng.random_range(0..100) {
            0..30 => self.kill(),
            30..40 => {
                self.note("operator restart".into());
                self.memory = Memory::default();
                self.stats.operator_restarts += 1;
            }
            40..65 => {
                let set = self.rng.random_range(0..self.sets.len());
                let replicas = if set == 0 {
                    self.rng.random_range(3..=5)
                } else {
                    self.rng.random_range(1..=4)
                };
                self.note(format!("spec: {} {replicas}", self.sets[set].name));
                self.wanted[set] = replicas;
            }
            65..73 => {
                self.note("spec: restart".into());
                self.restart_trigger += 1;
            }
            73..88 => self.alter_table(),
            _ => self.user_edit(),
        }
    }

    fn kill(&mut self) {
        let live: Vec<(usize, i32)> = self
            .sets
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.pods
                    .iter()
                    .filter(|(_, p)| !matches!(p.phase, Phase::Terminating(_)))
                    .map(move |(&o, _)| (i, o))
            })
            .collect();
        if live.is_empty() {
            return;
        }
        let (i, o) = live[self.rng.random_range(0..live.len())];
        self.stats.kills += 1;
        if self.rng.random_bool(0.5) {
            self.note(format!("kill: container of {}", self.node_name(i, o)));
            let ticks = self.rng.random_range(0..=3);
            self.set_phase(i, o, Phase::Crashed(ticks));
            self.leave(i, o);
        } else {
            self.note(format!("kill: delete Pod {}", self.node_name(i, o)));
            self.delete_pod(i, o, 0);
        }
    }

    fn alter_table(&mut self) {
        let tables: Vec<String> = self
            .cluster()
            .tables()
            .map(|t| t.name.to_string())
            .collect();
        if tables.is_empty() {
            return;
        }
        let table = &tables[self.rng.random_range(0..tables.len())];
        let replicas = match self.rng.random_range(0..4) {
            0 => "'0-1'".to_owned(),
            1 => "'0-all'".to_owned(),
            // Copies that fit the data nodes kept (more would keep the cluster YELLOW, and a
            // rolling restart waits for GREEN: it would fail at its deadline, by design).
            _ => {
                let kept: i32 = self.sets[1..]
                    .iter()
                    .zip(&self.wanted[1..])
                    .map(|(s, &w)| w.min(s.replicas))
                    .sum();
                self.rng.random_range(0..kept.max(1)).to_string()
            }
        };
        let stmt = format!("ALTER TABLE {table} SET (number_of_replicas = {replicas})");
        let done = self.sql_as_crate(&stmt);
        self.note(format!("{stmt}: {done:?}"));
    }

    /// Creates a user or rotates one's password the way `ReconcileUsers` does, then checks
    /// the logins.
    fn user_edit(&mut self) {
        let nodes = self.endpoints();
        let create = self.users.len() < 4 && (self.users.is_empty() || self.rng.random_bool(0.3));
        if create {
            let name = format!("u{}", self.users.len());
            let pw = format!("{name}-pw-0");
            let done = block_on(ops::create_user(
                &self.channels,
                &nodes,
                &self.system(),
                &name,
                &Password::new(&pw),
            ));
            self.note(format!("create user {name}: {done:?}"));
            if done.is_ok() {
                self.users.insert(name.clone(), pw);
                self.stats.user_changes += 1;
                self.verify_login(&name);
            }
            return;
        }
        let names: Vec<String> = self.users.keys().cloned().collect();
        let name = names[self.rng.random_range(0..names.len())].clone();
        let old = self.users.get(&name).cloned().unwrap_or_default();
        let new = format!("{name}-pw-{}", self.step);
        let login = Login {
            user: name.clone(),
            password: Password::new(&old),
        };
        let done = block_on(ops::change_password(
            &self.channels,
            &nodes,
            &login,
            &Password::new(&new),
        ));
        self.note(format!("rotate user {name}: {done:?}"));
        if done.is_ok() {
            self.users.insert(name.clone(), new);
            self.stats.user_changes += 1;
            self.verify_login(&name);
            let old_works = block_on(ops::can_log_in(&self.channels, &nodes, &login));
            if matches!(old_works, Ok(true)) {
                self.fail(format!("user {name} still logs in with its old password"));
            }
        }
    }

    /// The user logs in with its latest password (over the SQL front, then on the model); its
    /// record is what invariant 3 compares with.
    fn verify_login(&mut self, name: &str) {
        let Some(pw) = self.users.get(name).cloned() else {
            return;
        };
        let login = Login {
            user: name.to_owned(),
            password: Password::new(&pw),
        };
        let nodes = self.endpoints();
        match block_on(ops::can_log_in(&self.channels, &nodes, &login)) {
            Ok(true) | Err(CrateError::Unavailable(_)) => {}
            other => self.fail(format!("invariant 3: user {name} cannot log in: {other:?}")),
        }
        // The login just verified (the channels keep the record they checked the password of).
        let key = (name.to_owned(), pw);
        let record = self.channels.verified_record(&key.0, &key.1);
        let record = match record {
            Some(r) => r,
            None => match self.cluster().authenticate(name, Some(&key.1)) {
                Ok(u) => u.clone(),
                Err(e) => self.fail(format!("invariant 3: user {name} cannot log in: {e}")),
            },
        };
        self.user_records.insert(name.to_owned(), record);
    }
}
