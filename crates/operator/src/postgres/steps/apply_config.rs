//! ApplyConfig — server-side applies the `<cluster>-config` ConfigMap (postgresql.conf from
//! the defaults and `spec.parameters`, pg_hba.conf, the instance entrypoint) and remembers the
//! hash of its content: instance Pods carry it in their spec hash, so a parameter change
//! makes them stale and `RollingRestart` restarts them one at a time. With backups on it also
//! applies `<cluster>-pgbackrest` (both sides' pgBackRest configuration), whose hash joins the
//! instances' config hash. With `dataSource`, `<cluster>-pgbackrest-source` (`source.conf`,
//! which reads the source cluster's repository).

use async_trait::async_trait;

use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::{config, pgbackrest};
use crate::postgres::steps::validated;

/// See the module documentation.
pub struct ApplyConfig;

#[async_trait]
impl SubReconciler<PostgresPass> for ApplyConfig {
    fn name(&self) -> &'static str {
        "ApplyConfig"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let Some(map) = config::config_map(&pass.cluster, &valid) else {
            return Err(Error::Internal {
                message: "cluster has no UID or namespace".into(),
            });
        };
        pass.applier
            .apply_unless_current(&map, &pass.stores.config_maps, &mut pass.applied)
            .await?;
        let mut hash = config::config_hash(&map);
        if let Some(backrest) = pgbackrest::config_map(&pass.cluster, &valid) {
            pass.applier
                .apply_unless_current(&backrest, &pass.stores.config_maps, &mut pass.applied)
                .await?;
            hash = config::stable_hash(&format!("{hash}{}", config::config_hash(&backrest)));
        }
        if let Some(source) = pgbackrest::source_config_map(&pass.cluster, &valid) {
            pass.applier
                .apply_unless_current(&source, &pass.stores.config_maps, &mut pass.applied)
                .await?;
        }
        pass.config_hash = Some(hash);
        Ok(Outcome::Continue)
    }
}
