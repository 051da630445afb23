//! The global lock (seed 002, "Locking Operations"): the key
//! `\xff\x02/org.foundationdb.kubernetes-operator/global` holds the tuple `(lockID, start,
//! end)`. A step that needs the lock calls [`acquire`] once per pass: a free, own, expired or
//! denied holder's lock is written for `lockDurationMinutes` from now (ours keeps its start);
//! another live holder makes the step wait; an instance on the deny list never gets it.
//! `disableLocks` skips all of this. The lock is written and then read back: fdbcli runs one
//! command at a time, so the read, the decision and the write are not one transaction as in
//! FoundationDB's operator; two instances writing within the same moment both read back the
//! later write and only its writer goes on.

use std::time::Duration;

use steward_api::foundationdb::FoundationDBCluster;

use super::FdbPass;
use super::admin::cli::{LOCK_KEY, LockDecision, LockValue, decide_lock, deny_key};
use super::admin::ops;
use crate::error::Error;
use crate::pipeline::{EventType, Outcome};

/// How soon a step waiting for the lock looks again.
pub const LOCK_RETRY: Duration = Duration::from_secs(10);

/// The lock duration of `cluster`, in seconds.
pub fn duration(cluster: &FoundationDBCluster) -> i64 {
    i64::from(cluster.spec.lock_options.lock_duration_minutes) * 60
}

fn rfc3339(seconds: i64) -> Option<String> {
    jiff::Timestamp::from_second(seconds)
        .ok()
        .map(|t| t.to_string())
}

/// Takes (or extends) the global lock for this pass. `Ok(None)`: held; `Ok(Some(outcome))`:
/// the step must return `outcome` (waiting for another holder, denied, database unavailable).
pub async fn acquire(pass: &mut FdbPass, step: &str) -> Result<Option<Outcome>, Error> {
    if pass.locked || pass.cluster.spec.lock_options.disable_locks {
        pass.locked = true;
        return Ok(None);
    }
    if !pass.db.as_ref().is_some_and(|d| d.available()) {
        return Ok(Some(Outcome::requeue(
            LOCK_RETRY,
            format!(
                "{step} needs the global lock and the database is unavailable (lockOptions.disableLocks skips the lock)"
            ),
        )));
    }
    let admin = pass.admin()?;
    let targets = pass.targets();
    let me = pass.prefix.clone();
    let now = pass.core.now.as_second();
    let cluster_name = format!("{}/{}", pass.core.namespace, pass.core.name);
    let err = |e: super::admin::FdbError| Error::Database {
        cluster: cluster_name.clone(),
        message: e.to_string(),
    };
    let current = ops::read_lock(admin.as_ref(), &targets)
        .await
        .map_err(err)?;
    let me_denied = ops::denied(admin.as_ref(), &targets, &me)
        .await
        .map_err(err)?;
    let holder_denied = match &current {
        Some(l) if l.id != me => ops::denied(admin.as_ref(), &targets, &l.id)
            .await
            .map_err(err)?,
        _ => false,
    };
    match decide_lock(
        &me,
        current.as_ref(),
        me_denied,
        holder_denied,
        now,
        duration(&pass.cluster),
    ) {
        LockDecision::Denied => {
            let message = format!(
                "this operator's lock ID {me} is on the cluster's deny list: it takes no global lock ({step} waits)"
            );
            pass.core.set_condition(
                "LockAvailable",
                crate::conditions::Status::False,
                "LockDenied",
                message.clone(),
            );
            pass.core.status.generations.needs_lock = Some(pass.core.generation);
            Ok(Some(Outcome::requeue(LOCK_RETRY, message)))
        }
        LockDecision::Held { holder, until } => {
            pass.status.lock_holder = Some(holder.clone());
            pass.status.lock_expires = rfc3339(until);
            pass.core.status.generations.needs_lock = Some(pass.core.generation);
            let message = format!(
                "{step} needs the global lock, held by {holder} until {}",
                rfc3339(until).unwrap_or_default()
            );
            pass.core.set_condition(
                "LockAvailable",
                crate::conditions::Status::False,
                "HeldByOther",
                message.clone(),
            );
            Ok(Some(Outcome::requeue(LOCK_RETRY, message)))
        }
        LockDecision::Write(value) => {
            if current.as_ref().is_some_and(|c| c.id != me) {
                pass.core.event(
                    EventType::Normal,
                    "LockTaken",
                    "TakeLock",
                    format!(
                        "took the global lock from {} (expired or denied)",
                        current.as_ref().map(|c| c.id.as_str()).unwrap_or_default()
                    ),
                );
            }
            ops::set(admin.as_ref(), &targets, LOCK_KEY, &value.pack())
                .await
                .map_err(err)?;
            let back = ops::read_lock(admin.as_ref(), &targets)
                .await
                .map_err(err)?;
            if back.as_ref().map(|l| l.id.as_str()) != Some(me.as_str()) {
                let holder = back.map(|l| l.id).unwrap_or_default();
                return Ok(Some(Outcome::requeue(
                    LOCK_RETRY,
                    format!("{step}: {holder} took the global lock at the same moment"),
                )));
            }
            pass.locked = true;
            record_held(pass, &value);
            Ok(None)
        }
    }
}

fn record_held(pass: &mut FdbPass, value: &LockValue) {
    pass.status.lock_holder = Some(value.id.clone());
    pass.status.lock_expires = rfc3339(value.end);
    pass.core.status.generations.needs_lock = None;
    pass.core.set_condition(
        "LockAvailable",
        crate::conditions::Status::True,
        "Held",
        format!("this operator ({}) holds the global lock", value.id),
    );
}

/// The deny list's keys to write (`Some(id)`) and clear (`None` values) for the spec's entries;
/// entries absent from the spec are left as they are (seed 002).
pub fn deny_list_changes(cluster: &FoundationDBCluster) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    cluster
        .spec
        .lock_options
        .deny_list
        .iter()
        .map(|e| {
            (
                deny_key(&e.id),
                (!e.allow).then(|| e.id.as_bytes().to_vec()),
            )
        })
        .collect()
}
