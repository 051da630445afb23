//! UpdateStatus — runs first and last (seed 002). The first run reads the machine-readable
//! status once for the whole pass (`pass.db`) and front-loads the analysis later steps use: each
//! process group's conditions (`MissingPod`, `MissingPVC`, `PodPending`, `PodFailing`,
//! `ResourcesTerminating`, `MissingProcesses`, `ProcessIsMarkedAsExcluded`,
//! `IncorrectPodSpec`, `IncorrectConfigMap`, `IncorrectCommandLine`), its address and zone,
//! the connection string, `configured`, the running version, the live configuration and
//! health. The last run sets the generations of what is still to do (`needsGrow`,
//! `needsShrink`, `needsBounce`, `needsPodDeletion`, `needsConfigurationChange`,
//! `needsCoordinatorChange`, `hasPendingRemoval`, `hasUnhealthyProcess`,
//! `missingDatabaseStatus`) and requeues while any is set. When only Pods of removed process
//! groups are still terminating, `reconciled` is set with `hasPendingRemoval` (seed 002,
//! "Tracking Reconciliation Stages"). Never writes; the runtime writes status once per pass.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PodStatus;
use steward_api::common::condition_types;
use steward_api::foundationdb::{ClusterHealth, DatabaseConfiguration, ProcessClass};

use super::{
    SOON, class_of, condition, conditions as c, desired, group_claim, group_pods, set_condition,
};
use crate::conditions::Status;
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::admin::ops;
use crate::foundationdb::admin::status::DbStatus;
use crate::foundationdb::build::{self, CURRENT_CONFIGURATION, ENVIRONMENT, SPEC_HASH};
use crate::foundationdb::plan;
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdateStatus;

#[async_trait]
impl SubReconciler<FdbPass> for UpdateStatus {
    fn name(&self) -> &'static str {
        "UpdateStatus"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        if !pass.observed {
            pass.observed = true;
            observe(pass).await?;
            return Ok(Outcome::Continue);
        }
        analyse(pass);
        Ok(conclude(pass))
    }
}

/// Reads the database status once (when any Pod runs) and records what it says.
async fn observe(pass: &mut FdbPass) -> Result<(), Error> {
    // Set again by a step that waits for the global lock on this pass: a need that went away
    // (the change reverted, the work done) must not hold `reconciled` back for good.
    pass.core.status.generations.needs_lock = None;
    let targets = pass.targets();
    if targets.is_empty() || pass.status.connection_string.is_none() {
        pass.db_error =
            Some("no process group has a running Pod with a cluster file yet".to_owned());
    } else {
        let admin = pass.admin()?;
        match ops::status(admin.as_ref(), &targets).await {
            Ok(db) => pass.db = Some(db),
            Err(e) => pass.db_error = Some(e.to_string()),
        }
    }
    if let Some(db) = pass.db.clone() {
        record_database(pass, &db);
    }
    analyse(pass);
    Ok(())
}

fn record_database(pass: &mut FdbPass, db: &DbStatus) {
    if !db.cluster.connection_string.is_empty() {
        pass.status.connection_string = Some(db.cluster.connection_string.clone());
    }
    if db.configured() {
        pass.status.configured = true;
    }
    let mut versions: BTreeMap<&str, usize> = BTreeMap::new();
    for p in db.cluster.processes.values() {
        if !p.version.is_empty() {
            *versions.entry(p.version.as_str()).or_default() += 1;
        }
    }
    if let Some((v, _)) = versions.into_iter().max_by_key(|(_, n)| *n) {
        pass.status.running_version = Some(v.to_owned());
    }
    if let Some(conf) = &db.cluster.configuration {
        pass.status.database_configuration = live_configuration(conf);
    }
    pass.status.health = ClusterHealth {
        available: db.available(),
        healthy: db.client.database_status.healthy,
        full_replication: db.cluster.data.state.healthy,
        data_moving_bytes: db.cluster.data.moving_data.in_flight_bytes
            + db.cluster.data.moving_data.in_queue_bytes,
    };
}

/// The live configuration in the spec's terms (`None` when it names a mode Steward does not
/// know).
fn live_configuration(
    conf: &crate::foundationdb::admin::status::Configuration,
) -> Option<DatabaseConfiguration> {
    let spec = serde_json::json!({
        "redundancyMode": conf.redundancy_mode,
        "storageEngine": conf.storage_engine,
        "logs": conf.logs,
        "commitProxies": conf.commit_proxies,
        "grvProxies": conf.grv_proxies,
        "resolvers": conf.resolvers,
    });
    serde_json::from_value(spec).ok()
}

fn pod_pending(status: Option<&PodStatus>) -> bool {
    status.is_none_or(|s| s.phase.as_deref().is_none_or(|p| p == "Pending"))
}

fn pod_failing(status: Option<&PodStatus>) -> bool {
    status.is_some_and(|s| {
        s.phase.as_deref() == Some("Failed")
            || (s.phase.as_deref() == Some("Running")
                && s.container_statuses
                    .iter()
                    .flatten()
                    .any(|c| c.state.as_ref().is_some_and(|st| st.running.is_none())))
    })
}

/// The process's command line without the program.
fn arguments_of(command_line: &str) -> &str {
    let trimmed = command_line.trim();
    if trimmed.starts_with("--") {
        trimmed
    } else {
        trimmed.split_once(' ').map_or("", |(_, rest)| rest.trim())
    }
}

/// Sets every process group's conditions, address and zone from the caches and `pass.db`.
fn analyse(pass: &mut FdbPass) {
    let now = pass.core.now.as_second();
    let pods = group_pods(pass);
    let db = pass.db.clone();
    let mut groups = std::mem::take(&mut pass.status.process_groups);
    // Each class's monitor configuration, once.
    let configs: Vec<(ProcessClass, serde_json::Value)> = ProcessClass::ALL
        .into_iter()
        .map(|c| (c, build::monitor_config(&pass.cluster, c)))
        .collect();
    for g in &mut groups {
        let Some(class) = class_of(pass, g) else {
            continue;
        };
        g.process_class = Some(class);
        let pod = pods.get(&g.process_group_id);
        let claim = class
            .is_stateful()
            .then(|| group_claim(pass, &g.process_group_id))
            .flatten();
        if let Some(p) = pod {
            if let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) {
                // A group being removed keeps its old addresses: all of them must be excluded
                // (its Pod may have come back with a new IP) and included again at the end.
                if g.removal_timestamp.is_none() {
                    g.addresses = vec![ip];
                } else if !g.addresses.contains(&ip) {
                    g.addresses.push(ip);
                }
            }
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                g.fault_domain = Some(node);
            }
        }
        let terminating = pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
            || claim
                .as_ref()
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        set_condition(g, c::TERMINATING, terminating, now);
        set_condition(g, c::MISSING_POD, pod.is_none(), now);
        // A claim created with another size or class than the spec's: the group is to be
        // replaced (ReplaceMisconfiguredProcessGroups); one already being removed is not.
        let wanted = build::claim_spec_text(&pass.cluster.spec.storage);
        set_condition(
            g,
            c::INCORRECT_PVC_SPEC,
            g.removal_timestamp.is_none()
                && claim.as_ref().is_some_and(|cl| {
                    cl.annotations()
                        .get(build::CLAIM_SPEC)
                        .is_some_and(|h| h != wanted)
                }),
            now,
        );
        set_condition(
            g,
            c::MISSING_PVC,
            class.is_stateful() && claim.is_none(),
            now,
        );
        let pod_status = pod.and_then(|p| p.status.as_ref());
        set_condition(
            g,
            c::POD_PENDING,
            pod.is_some() && pod_pending(pod_status),
            now,
        );
        set_condition(
            g,
            c::POD_FAILING,
            pod.is_some() && pod_failing(pod_status),
            now,
        );
        // The Pod's spec and its monitor's configuration.
        let want_hash = pass
            .pod_hashes
            .entry(g.process_group_id.clone())
            .or_insert_with(|| {
                build::pod(
                    &pass.cluster,
                    &g.process_group_id,
                    class,
                    pass.status.running_version.as_deref(),
                )
                .as_ref()
                .and_then(|p| p.metadata.annotations.as_ref())
                .and_then(|a| a.get(SPEC_HASH).cloned())
            })
            .clone();
        set_condition(
            g,
            c::INCORRECT_POD_SPEC,
            pod.is_some_and(|p| p.annotations().get(SPEC_HASH) != want_hash.as_deref()),
            now,
        );
        let computed;
        let want_config = match configs.iter().find(|(c, _)| *c == class) {
            Some((_, config)) => config,
            None => {
                computed = build::monitor_config(&pass.cluster, class);
                &computed
            }
        };
        let current_config = pod
            .and_then(|p| p.annotations().get(CURRENT_CONFIGURATION))
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok());
        set_condition(
            g,
            c::INCORRECT_CONFIG_MAP,
            pod.is_some() && current_config.as_ref() != Some(want_config),
            now,
        );
        let environment: Option<BTreeMap<String, String>> = pod
            .and_then(|p| p.annotations().get(ENVIRONMENT))
            .and_then(|t| serde_json::from_str(t).ok());
        if let Some(db) = &db {
            let id = g.process_group_id.clone();
            // Only the process at the Pod's current address counts: a recreated Pod's old
            // process stays listed until the database notices it is gone.
            let addresses = g.addresses.clone();
            let processes: Vec<_> = db
                .processes_of(&id)
                .filter(|p| addresses.is_empty() || addresses.iter().any(|a| a == p.ip()))
                .collect();
            set_condition(g, c::MISSING_PROCESSES, processes.is_empty(), now);
            // Excluded by locality, or every address it has had excluded.
            let excluded = db.is_locality_excluded(&g.process_group_id)
                || if g.addresses.is_empty() {
                    processes.iter().any(|p| p.excluded)
                } else {
                    g.addresses.iter().all(|a| db.is_address_excluded(a))
                };
            set_condition(g, c::EXCLUDED, excluded, now);
            // Compared with the configuration the monitor runs: a process whose monitor has
            // not taken the new configuration yet is `IncorrectConfigMap`, not this.
            let expected = current_config
                .as_ref()
                .zip(environment.as_ref())
                .and_then(|(conf, env)| build::command_line(conf, env));
            // A process of another version than the configuration names is bounced too: an
            // upgrade's new binary runs only once the process restarts.
            let version = want_config
                .get("version")
                .and_then(serde_json::Value::as_str);
            let wrong = current_config.as_ref() == Some(want_config)
                && (expected
                    .is_some_and(|e| processes.iter().any(|p| arguments_of(&p.command_line) != e))
                    || processes
                        .iter()
                        .any(|p| !p.version.is_empty() && Some(p.version.as_str()) != version));
            set_condition(g, c::INCORRECT_COMMAND_LINE, wrong, now);
        }
    }
    pass.status.process_groups = groups;
}

fn mark(field: &mut Option<i64>, on: bool, generation: i64) {
    *field = on.then_some(generation);
}

/// The generations of what is left to do, the `Available` condition, and the outcome.
fn conclude(pass: &mut FdbPass) -> Outcome {
    let generation = pass.core.generation;
    let groups = pass.status.process_groups.clone();
    let has = |t: &str| groups.iter().any(|g| condition(g, t).is_some());
    let mut grow = false;
    let mut shrink = false;
    for class in ProcessClass::ALL {
        let active = groups
            .iter()
            .filter(|g| class_of(pass, g) == Some(class) && g.removal_timestamp.is_none())
            .count();
        grow |= active < desired(pass, class);
        shrink |= active > desired(pass, class);
    }
    let removing: Vec<_> = groups
        .iter()
        .filter(|g| g.removal_timestamp.is_some())
        .collect();
    let pending_removal = !removing.is_empty()
        && removing
            .iter()
            .all(|g| g.exclusion_timestamp.is_some() || g.exclusion_skipped);
    shrink |= !removing.is_empty() && !pending_removal;
    let db = pass.db.clone();
    let config_change = db.as_ref().is_some_and(|d| d.configured())
        && !super::update_database_configuration::matches(
            &pass.cluster.spec.database_configuration,
            pass.status.database_configuration.as_ref(),
        );
    let coordinator_change = db.as_ref().is_some_and(|d| {
        let candidates = crate::foundationdb::steps::change_coordinators::preferred(pass, d);
        let want = pass.coordinators_wanted();
        plan::coordinators_need_change(&d.coordinator_addresses(), &candidates, want).is_some()
    });
    let unhealthy = has(c::MISSING_PROCESSES) || has(c::POD_FAILING) || has(c::MISSING_POD);
    let g = &mut pass.core.status.generations;
    mark(&mut g.needs_grow, grow, generation);
    mark(&mut g.needs_shrink, shrink, generation);
    mark(
        &mut g.needs_bounce,
        has(c::INCORRECT_COMMAND_LINE),
        generation,
    );
    mark(
        &mut g.needs_pod_deletion,
        has(c::INCORRECT_POD_SPEC),
        generation,
    );
    mark(&mut g.needs_configuration_change, config_change, generation);
    mark(
        &mut g.needs_coordinator_change,
        coordinator_change,
        generation,
    );
    mark(&mut g.has_pending_removal, pending_removal, generation);
    mark(&mut g.has_unhealthy_process, unhealthy, generation);
    mark(&mut g.missing_database_status, db.is_none(), generation);

    match &db {
        Some(d) if d.available() => pass.core.set_condition(
            condition_types::AVAILABLE,
            Status::True,
            "DatabaseAvailable",
            format!(
                "recovery state {}, generation {}, {} processes",
                d.cluster.recovery_state.name,
                d.cluster.generation,
                d.cluster.processes.len()
            ),
        ),
        Some(d) => pass.core.set_condition(
            condition_types::AVAILABLE,
            Status::False,
            if d.configured() {
                "DatabaseUnavailable"
            } else {
                "NotConfigured"
            },
            format!(
                "recovery state {:?}; {}",
                d.cluster.recovery_state.name,
                d.client
                    .messages
                    .iter()
                    .chain(&d.cluster.messages)
                    .map(|m| m.description.as_str())
                    .filter(|m| !m.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
        None => pass.core.set_condition(
            condition_types::AVAILABLE,
            Status::False,
            "StatusUnreadable",
            pass.db_error.clone().unwrap_or_default(),
        ),
    }

    let g = &pass.core.status.generations;
    let pending: Vec<&str> = [
        (g.needs_grow, "process groups to add"),
        (g.needs_shrink, "process groups to remove"),
        (g.needs_bounce, "processes to bounce"),
        (g.needs_pod_deletion, "Pods to recreate"),
        (g.needs_configuration_change, "a configuration change"),
        (g.needs_coordinator_change, "a coordinator change"),
        (g.has_unhealthy_process, "unhealthy process groups"),
        (g.missing_database_status, "no database status"),
        (g.needs_lock, "the global lock"),
    ]
    .into_iter()
    .filter_map(|(on, what)| on.map(|_| what))
    .chain(
        has(c::INCORRECT_PVC_SPEC)
            .then_some("process groups to replace onto claims of spec.storage"),
    )
    .collect();
    let configured = pass.status.configured;
    if pending.is_empty() && configured {
        if pending_removal {
            // Only terminating Pods of removed process groups are left (seed 002).
            pass.core.status.generations.reconciled = Some(generation);
            return Outcome::requeue(SOON, "removed process groups' resources are terminating");
        }
        return Outcome::Continue;
    }
    let mut why = pending.join(", ");
    if !configured {
        why = if why.is_empty() {
            "not configured yet".to_owned()
        } else {
            format!("{why}; not configured yet")
        };
    }
    Outcome::requeue(SOON, why)
}
