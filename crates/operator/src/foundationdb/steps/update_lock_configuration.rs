//! UpdateLockConfiguration — writes the spec's deny list into the database (seed 002): an entry
//! sets `…/denyList/<id>` to the ID, an entry with `allow: true` clears it; IDs the spec does
//! not name are left as they are, so instances never undo each other's entries. Waits for an
//! available database.

use async_trait::async_trait;

use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::admin::ops;
use crate::foundationdb::lock::deny_list_changes;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdateLockConfiguration;

#[async_trait]
impl SubReconciler<FdbPass> for UpdateLockConfiguration {
    fn name(&self) -> &'static str {
        "UpdateLockConfiguration"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let changes = deny_list_changes(&pass.cluster);
        if changes.is_empty() || !pass.db.as_ref().is_some_and(|d| d.available()) {
            return Ok(Outcome::Continue);
        }
        let admin = pass.admin()?;
        let targets = pass.targets();
        for (key, want) in changes {
            let have = ops::get(admin.as_ref(), &targets, &key)
                .await
                .map_err(|e| pass.database_error(&e))?;
            if have == want {
                continue;
            }
            let id = String::from_utf8_lossy(
                &key[key.iter().rposition(|b| *b == b'/').map_or(0, |i| i + 1)..],
            )
            .into_owned();
            match &want {
                Some(value) => ops::set(admin.as_ref(), &targets, &key, value).await,
                None => ops::clear(admin.as_ref(), &targets, &key).await,
            }
            .map_err(|e| pass.database_error(&e))?;
            pass.core.event(
                EventType::Normal,
                "DenyListUpdated",
                "UpdateLockConfiguration",
                if want.is_some() {
                    format!("lock ID {id} is now denied the global lock")
                } else {
                    format!("lock ID {id} may take the global lock again")
                },
            );
        }
        Ok(Outcome::Continue)
    }
}
