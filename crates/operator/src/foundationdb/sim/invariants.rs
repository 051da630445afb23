//! The invariants, checked at every deletion the operator makes (on the store and the model as
//! they are at that moment, before the deletion), and the liveness check once events stop.

use std::collections::BTreeSet;

use steward_api::foundationdb::ProcessClass;

use super::api::{GroupView, Objects};
use super::world::World;
use crate::foundationdb::admin::model::State;
use crate::foundationdb::admin::status::coordinators_of;
use crate::foundationdb::build::{PORT, claim_name};

fn excluded(state: &State, address: &str, id: &str) -> bool {
    let ip = address.split(':').next().unwrap_or(address);
    state
        .excluded
        .iter()
        .any(|e| e == address || e == ip || *e == format!("locality_instance_id:{id}"))
}

impl Objects {
    fn address(&self, id: &str) -> Option<String> {
        self.ips.get(id).map(|ip| format!("{ip}:{PORT}"))
    }

    /// The group's Pod is missing or terminating, or its process does not run.
    fn down(&self, state: &State, id: &str) -> bool {
        !self.pods.contains_key(id)
            || self.terminating.contains_key(id)
            || self
                .address(id)
                .is_none_or(|a| !state.processes.contains_key(&a))
    }

    /// A storage group whose process still holds data: not excluded, or excluded and draining.
    fn holds_data(&self, state: &State, g: &GroupView) -> bool {
        g.class == ProcessClass::Storage.as_str()
            && self
                .address(&g.id)
                .is_none_or(|a| !excluded(state, &a, &g.id) || state.draining.contains(&a))
    }
}

/// Invariants 1–4 for the operator's deletion of `kind` `name`.
pub(super) fn on_delete(o: &Objects, kind: &str, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let id = if kind == "PVC" {
        o.groups
            .iter()
            .find(|g| claim_name(&g.id) == name)
            .map_or(name.to_owned(), |g| g.id.clone())
    } else {
        name.to_owned()
    };
    let at = format!("pass {} {}: delete {kind} {name}", o.pass, o.step);
    let Some(g) = o.groups.iter().find(|g| g.id == id) else {
        out.push(format!("{at}: not a process group of the pass's status"));
        return out;
    };
    let state = o.model.state();
    let address = o.address(&id).unwrap_or_default();
    if g.removing && !g.exclusion_skipped {
        let coordinators = coordinators_of(&state.connection_string);
        if kind == "Pod" && coordinators.contains(&address) {
            out.push(format!(
                "invariant 1: {at} while {address} is a coordinator ({})",
                state.connection_string
            ));
        }
        if !excluded(&state, &address, &id) {
            out.push(format!("invariant 2: {at} before {address} was excluded"));
        } else if state.draining.contains(&address) {
            out.push(format!(
                "invariant 2: {at} while {address} is still draining (its data has not moved)"
            ));
        }
    } else if kind == "PVC" {
        out.push(format!("{at}: the claim of a group not being removed"));
    }
    if kind != "Pod" {
        return out;
    }
    let zone = o.zone(&id);
    if o.step == "UpdatePods" {
        let down: Vec<&str> = o
            .groups
            .iter()
            .filter(|h| !h.removing && o.zone(&h.id) != zone && o.down(&state, &h.id))
            .map(|h| h.id.as_str())
            .collect();
        if !down.is_empty() {
            out.push(format!(
                "invariant 3: {at} (zone {zone}) while {down:?} of another zone are down"
            ));
        }
    }
    if o.holds_data(&state, g) && !o.down(&state, &id) {
        let before: BTreeSet<String> = o
            .groups
            .iter()
            .filter(|h| o.holds_data(&state, h) && o.down(&state, &h.id))
            .map(|h| o.zone(&h.id))
            .collect();
        let mut after = before.clone();
        after.insert(zone.clone());
        if after.len() >= 2 && after.len() > before.len() {
            let down: Vec<&str> = o
                .groups
                .iter()
                .filter(|h| o.holds_data(&state, h) && o.down(&state, &h.id))
                .map(|h| h.id.as_str())
                .collect();
            out.push(format!(
                "invariant 4: {at} (zone {zone}, storage holding data) while storage processes \
                 holding data are down in zones {before:?}: {down:?}"
            ));
        }
    }
    out
}

impl World {
    /// Invariant 5: converged (every class at its count with a Pod and a process, nothing
    /// marked for removal, the generation reconciled, the template's labels on every Pod).
    pub(super) fn converged(&self) -> Result<(), String> {
        let Some(status) = self.cluster.status.as_ref() else {
            return Err("no status".into());
        };
        let o = super::api::lock(&self.api);
        let state = self.model.state();
        for class in ProcessClass::ALL {
            let want = match class {
                ProcessClass::Storage => self.cluster.spec.process_counts.storage,
                ProcessClass::Log => self.cluster.spec.process_counts.log,
                ProcessClass::Stateless => self.cluster.spec.process_counts.stateless,
            };
            let groups: Vec<_> = status
                .process_groups
                .iter()
                .filter(|g| g.process_class == Some(class))
                .collect();
            if groups.len() != usize::try_from(want).unwrap_or(0) {
                return Err(format!(
                    "{} groups of {}, {want} wanted",
                    groups.len(),
                    class.as_str()
                ));
            }
            for g in groups {
                if o.down(&state, &g.process_group_id) {
                    return Err(format!("{} is down", g.process_group_id));
                }
            }
        }
        if let Some(g) = status
            .process_groups
            .iter()
            .find(|g| g.removal_timestamp.is_some())
        {
            return Err(format!("{} still marked for removal", g.process_group_id));
        }
        let generation = self.cluster.metadata.generation;
        if status.common.generations.reconciled != generation {
            return Err(format!(
                "reconciled {:?}, generation {generation:?}: {:?}",
                status.common.generations.reconciled, status.common.generations
            ));
        }
        if state.configuration.is_none() {
            return Err("not configured".into());
        }
        // The template's labels reach every Pod in place (UpdateLabels).
        for (name, pod) in o
            .pods
            .iter()
            .filter(|(n, _)| !o.terminating.contains_key(*n))
        {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            for (k, v) in &self.cluster.spec.pod_template.labels {
                if labels.get(k) != Some(v) {
                    return Err(format!("Pod {name} lacks the template label {k}={v}"));
                }
            }
        }
        Ok(())
    }

    /// Checks after every pass and event: the violations the API recorded, and what must
    /// always hold of the model.
    pub(super) fn check(&mut self) {
        let violations = std::mem::take(&mut super::api::lock(&self.api).violations);
        if let Some(v) = violations.first() {
            self.fail(v.clone());
        }
        let news = self
            .model
            .state()
            .changes
            .iter()
            .filter(|c| c.starts_with("configure new"))
            .count();
        if news > 1 {
            self.fail("configure new ran twice".into());
        }
    }
}
