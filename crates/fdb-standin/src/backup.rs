//! Backup and restore: not modelled yet; `cluster.layers` says so.

use serde_json::{Value, json};

use crate::proto::DbState;

/// `cluster.layers`: `_valid`, and `backup` when a backup was started.
pub fn layers(state: &DbState) -> Value {
    match &state.backup {
        None => json!({"_valid": true}),
        Some(b) => json!({"_valid": true, "backup": {
            "tags": {b.tag.clone(): {
                "current_container": b.url,
                "running_backup": b.state == "running",
                "running_backup_is_restorable": false,
                "last_restorable_version": null,
            }},
            "paused": b.paused,
        }}),
    }
}
