//! ApplyServices — server-side applies the `<cluster>-primary` Service (selects the Pod
//! labelled `steward.dev/role=primary`: it follows the primary through fail-overs), the
//! `<cluster>-replicas` Service (ready replicas, read-only) and the PodDisruptionBudgets of the
//! replicas and of the primary (`build::pdb`), and with backups on the repository's Service
//! `<cluster>-repo`. Identical applies are no-ops.

use async_trait::async_trait;

use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::{pdb, pgbackrest, service};
use crate::postgres::steps::validated;

/// See the module documentation.
pub struct ApplyServices;

#[async_trait]
impl SubReconciler<PostgresPass> for ApplyServices {
    fn name(&self) -> &'static str {
        "ApplyServices"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let missing = || Error::Internal {
            message: "cluster has no UID or namespace".into(),
        };
        for svc in [
            service::primary_service(&pass.cluster, &valid),
            service::replicas_service(&pass.cluster, &valid),
        ] {
            let svc = svc.ok_or_else(missing)?;
            pass.applier
                .apply_unless_current(&svc, &pass.stores.services, &mut pass.applied)
                .await?;
        }
        if let Some(repo) = pgbackrest::repo_service(&pass.cluster, &valid) {
            pass.applier
                .apply_unless_current(&repo, &pass.stores.services, &mut pass.applied)
                .await?;
        }
        for budget in [
            pdb::budget(&pass.cluster, &valid),
            pdb::primary_budget(&pass.cluster, &valid),
        ] {
            let budget = budget.ok_or_else(missing)?;
            pass.applier
                .apply_unless_current(&budget, &pass.stores.budgets, &mut pass.applied)
                .await?;
        }
        Ok(Outcome::Continue)
    }
}
