//! (pure) The Jobs of a major-version upgrade (`PostgresUpgrade`): `pg_upgrade` from the old
//! primary's claim into a new claim, and `vacuumdb --analyze-in-stages` on the upgraded primary
//! (`pg_upgrade` does not carry the planner's statistics over).
//!
//! The `pg_upgrade` Job's image holds both versions' binaries under
//! `/usr/lib/postgresql/<version>/bin`, as `tianon/postgres-upgrade:<from>-to-<to>` does (and
//! Debian's packages lay out); its script, [`UPGRADE_SCRIPT`]:
//! - is done at once when the new claim holds a finished upgrade (a re-run after the Job's Pod
//!   was lost once `pg_upgrade` had succeeded);
//! - refuses old data of another version than the one the cluster ran;
//! - `initdb`s the new version into the new claim the way the instances' entrypoint does (same
//!   superuser, SCRAM, data checksums, UTF8, locale C: `pg_upgrade` needs them to match);
//! - runs `pg_upgrade --check`; when it fails, prints `pg_upgrade --check failed` and the
//!   report's lines and exits 3 — nothing was written to the old claim;
//! - runs `pg_upgrade` in copy mode (the old claim is only read: it is the way back), then
//!   marks the new claim finished.
//!
//! The password reaches `pg_upgrade` through a 0600 passfile on the new claim, removed when the
//! script ends however it ends, never an argument or the log.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use steward_api::pgupgrade::PostgresUpgrade;

use crate::postgres::build::instance::{
    mount, postgres_security_context, secret_env, secret_volume, value_env,
};
use crate::postgres::build::secrets::PASSWORD_KEY;
use crate::postgres::names::{DATA_MOUNT, ENGINE, PORT, SUPERUSER, SUPERUSER_MOUNT};
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::{Labels, child_meta};

/// The component label of the upgrade's Jobs and their Pods.
pub const UPGRADE_COMPONENT: &str = "upgrade";
/// Where the old primary's claim is mounted in the `pg_upgrade` Job (read: copy mode).
pub const OLD_DATA_MOUNT: &str = "/var/lib/postgresql/old";
/// The exit status of the `pg_upgrade` Job when `pg_upgrade --check` refused the data.
pub const CHECK_FAILED_EXIT: i32 = 3;
/// The line the Job prints before the report of a failed `pg_upgrade --check`.
pub const CHECK_FAILED: &str = "pg_upgrade --check failed";

const CONTAINER: &str = "upgrade";
const OLD_VOLUME: &str = "old-data";
const NEW_VOLUME: &str = "data";
const SUPERUSER_VOLUME: &str = "superuser";

/// The `pg_upgrade` Job of upgrade `name`.
pub fn upgrade_job_name(upgrade: &str) -> String {
    format!("{upgrade}-pg-upgrade")
}

/// The statistics Job of upgrade `name`.
pub fn analyze_job_name(upgrade: &str) -> String {
    format!("{upgrade}-analyze")
}

/// The default image of the `pg_upgrade` Job: one with both versions' binaries.
pub fn default_upgrade_image(from: &str, to: &str) -> String {
    format!("tianon/postgres-upgrade:{from}-to-{to}")
}

/// The image the instances run after the upgrade: the upgrade's, else `postgres:<to>`.
pub fn target_image(upgrade: &PostgresUpgrade) -> String {
    upgrade
        .spec
        .image
        .clone()
        .unwrap_or_else(|| format!("postgres:{}", upgrade.spec.to_version))
}

/// What the `pg_upgrade` Job works on.
pub struct UpgradeJob<'a> {
    /// The major version the old data is.
    pub from: &'a str,
    /// The major version to move to.
    pub to: &'a str,
    /// The old primary's claim (read).
    pub old_claim: &'a str,
    /// The new claim (written).
    pub new_claim: &'a str,
}

/// (pure) The `pg_upgrade` Job, owned by the `PostgresUpgrade`, one attempt. The old claim is
/// bound where the old primary ran, so the Job runs there, and the new claim binds beside it.
pub fn upgrade_job(
    upgrade: &PostgresUpgrade,
    cluster: &ValidatedPostgresCluster,
    what: &UpgradeJob<'_>,
) -> Option<Job> {
    let name = upgrade.metadata.name.clone()?;
    let image = upgrade
        .spec
        .upgrade_image
        .clone()
        .unwrap_or_else(|| default_upgrade_image(what.from, what.to));
    let names = cluster.names();
    let volumes = vec![
        claim_volume(OLD_VOLUME, what.old_claim),
        claim_volume(NEW_VOLUME, what.new_claim),
        secret_volume(SUPERUSER_VOLUME, names.superuser_secret()),
    ];
    let container = Container {
        name: CONTAINER.into(),
        image: Some(image),
        command: Some(vec!["sh".into(), "-c".into(), UPGRADE_SCRIPT.into()]),
        env: Some(vec![
            value_env("FROM_VERSION", what.from),
            value_env("TO_VERSION", what.to),
            value_env("PGBINOLD", format!("/usr/lib/postgresql/{}/bin", what.from)),
            value_env("PGBINNEW", format!("/usr/lib/postgresql/{}/bin", what.to)),
            value_env("OLD_MOUNT", OLD_DATA_MOUNT),
            value_env("NEW_MOUNT", DATA_MOUNT),
            value_env("SUPERUSER_DIR", SUPERUSER_MOUNT),
        ]),
        volume_mounts: Some(vec![
            mount(OLD_VOLUME, OLD_DATA_MOUNT, false),
            mount(NEW_VOLUME, DATA_MOUNT, false),
            mount(SUPERUSER_VOLUME, SUPERUSER_MOUNT, true),
        ]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    job(
        upgrade,
        cluster,
        upgrade_job_name(&name),
        container,
        volumes,
        0,
    )
}

/// (pure) The statistics Job: `vacuumdb --all --analyze-in-stages` against the primary's
/// Service as Steward's superuser (the password from its Secret, in the environment of the
/// Job's Pod only), with the new version's image. A few attempts.
pub fn analyze_job(
    upgrade: &PostgresUpgrade,
    cluster: &ValidatedPostgresCluster,
    image: &str,
) -> Option<Job> {
    let name = upgrade.metadata.name.clone()?;
    let names = cluster.names();
    let container = Container {
        name: CONTAINER.into(),
        image: Some(image.to_owned()),
        command: Some(vec![
            "vacuumdb".into(),
            "--all".into(),
            "--analyze-in-stages".into(),
            format!("--host={}", names.primary_host()),
            format!("--port={PORT}"),
            format!("--username={SUPERUSER}"),
            "--no-password".into(),
        ]),
        env: Some(vec![secret_env(
            "PGPASSWORD",
            &names.superuser_secret(),
            PASSWORD_KEY,
        )]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    job(
        upgrade,
        cluster,
        analyze_job_name(&name),
        container,
        Vec::new(),
        2,
    )
}

fn claim_volume(name: &str, claim: &str) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: None,
        }),
        ..Default::default()
    }
}

fn job<K>(
    owner: &K,
    cluster: &ValidatedPostgresCluster,
    name: String,
    container: Container,
    volumes: Vec<Volume>,
    backoff_limit: i32,
) -> Option<Job>
where
    K: Resource<DynamicType = ()>,
{
    let labels = Labels::new(ENGINE, &cluster.name, UPGRADE_COMPONENT);
    let metadata = child_meta(owner, name, &labels, &BTreeMap::new())?;
    owner.meta().uid.as_ref()?;
    let node_selector = cluster.pod_template.node_selector.clone();
    Some(Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(backoff_limit),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.to_map()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    node_selector: (!node_selector.is_empty()).then_some(node_selector),
                    tolerations: (!cluster.pod_template.tolerations.is_empty())
                        .then(|| cluster.pod_template.tolerations.clone()),
                    volumes: (!volumes.is_empty()).then_some(volumes),
                    security_context: Some(postgres_security_context()),
                    restart_policy: Some("Never".into()),
                    enable_service_links: Some(false),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// The `pg_upgrade` Job's script (see the module documentation). Env: `FROM_VERSION`,
/// `TO_VERSION`, `PGBINOLD`, `PGBINNEW`, `OLD_MOUNT`, `NEW_MOUNT`, `SUPERUSER_DIR`.
pub const UPGRADE_SCRIPT: &str = r#"set -eu
umask 077
log() { printf 'steward-upgrade: %s\n' "$*" >&2; }
OLD_DATA="$OLD_MOUNT/pgdata"
NEW_DATA="$NEW_MOUNT/pgdata"
WORK="$NEW_MOUNT/pg_upgrade"
DONE="$NEW_MOUNT/upgraded-from-$FROM_VERSION"
if [ -f "$DONE" ] && [ -f "$NEW_DATA/PG_VERSION" ]; then
  log "the new claim already holds the upgraded data"
  exit 0
fi
[ -f "$OLD_DATA/PG_VERSION" ] || { log "the old claim holds no data directory ($OLD_DATA)"; exit 1; }
old=$(cat "$OLD_DATA/PG_VERSION")
[ "$old" = "$FROM_VERSION" ] || { log "the old data is PostgreSQL $old, not $FROM_VERSION"; exit 1; }
for b in "$PGBINOLD/postgres" "$PGBINNEW/postgres" "$PGBINNEW/pg_upgrade" "$PGBINNEW/initdb"; do
  [ -x "$b" ] || { log "$b is missing from this image"; exit 1; }
done
SUPERUSER=$(cat "$SUPERUSER_DIR/username")
rm -rf "$NEW_DATA" "$WORK"
mkdir -p "$WORK"
escaped() { sed -e 's/[\\:]/\\&/g' "$1"; }
printf '*:*:*:%s:%s\n' "$SUPERUSER" "$(escaped "$SUPERUSER_DIR/password")" > "$WORK/.pgpass"
chmod 600 "$WORK/.pgpass"
trap 'rm -f "$WORK/.pgpass"' EXIT
export PGPASSFILE="$WORK/.pgpass"
log "initdb of PostgreSQL $TO_VERSION"
"$PGBINNEW/initdb" -D "$NEW_DATA" -U "$SUPERUSER" --pwfile="$SUPERUSER_DIR/password" \
  --auth-host=scram-sha-256 --auth-local=scram-sha-256 --data-checksums -E UTF8 --locale=C >/dev/null
cd "$WORK"
set -- -b "$PGBINOLD" -B "$PGBINNEW" -d "$OLD_DATA" -D "$NEW_DATA" -U "$SUPERUSER" -s "$WORK" \
  -p 50432 -P 50433
log "pg_upgrade --check ($FROM_VERSION -> $TO_VERSION)"
if ! "$PGBINNEW/pg_upgrade" --check "$@" > "$WORK/check.log" 2>&1; then
  echo "pg_upgrade --check failed:"
  sed -n '/fatal/,$p' "$WORK/check.log" | grep -v '^$' | head -20 || :
  for f in $(find "$NEW_DATA/pg_upgrade_output.d" -name '*.txt' 2>/dev/null | head -3); do
    echo "$(basename "$f"):"; head -c 600 "$f"; echo
  done
  exit 3
fi
log "pg_upgrade ($FROM_VERSION -> $TO_VERSION), copy mode"
if ! "$PGBINNEW/pg_upgrade" "$@" > "$WORK/upgrade.log" 2>&1; then
  tail -n 30 "$WORK/upgrade.log"
  exit 1
fi
touch "$DONE"
log "upgraded to PostgreSQL $TO_VERSION"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn upgrade() -> PostgresUpgrade {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "PostgresUpgrade",
            "metadata": {"name": "to16", "namespace": "team", "uid": "u-1"},
            "spec": {"cluster": "db", "toVersion": "16"}
        }))
        .unwrap()
    }

    fn cluster() -> ValidatedPostgresCluster {
        let c: steward_api::postgres::PostgresCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "PostgresCluster",
            "metadata": {"name": "db", "namespace": "team", "uid": "c-1"},
            "spec": {"version": "15", "instances": 2, "storage": {"size": "1Gi"}}
        }))
        .unwrap();
        crate::postgres::validate::validate(&c).unwrap()
    }

    #[test]
    fn the_upgrade_job_reads_the_old_claim_and_writes_the_new_one() {
        let what = UpgradeJob {
            from: "15",
            to: "16",
            old_claim: "db-0-pgdata",
            new_claim: "db-0-pgdata-r1",
        };
        let job = upgrade_job(&upgrade(), &cluster(), &what).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("to16-pg-upgrade"));
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let claims: Vec<(&str, &str)> = pod
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| {
                let c = v.persistent_volume_claim.as_ref()?;
                Some((v.name.as_str(), c.claim_name.as_str()))
            })
            .collect();
        assert_eq!(
            claims,
            [("old-data", "db-0-pgdata"), ("data", "db-0-pgdata-r1")]
        );
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("tianon/postgres-upgrade:15-to-16"));
        let env: BTreeMap<&str, &str> = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
            .collect();
        assert_eq!(env["PGBINOLD"], "/usr/lib/postgresql/15/bin");
        assert_eq!(env["PGBINNEW"], "/usr/lib/postgresql/16/bin");
        // No password in the Job's spec: it is read from the mounted Secret.
        assert!(c.env.iter().flatten().all(|e| e.value_from.is_none()));
        assert_eq!(job.spec.as_ref().unwrap().backoff_limit, Some(0));
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
    }

    #[test]
    fn the_analyze_job_runs_vacuumdb_in_stages_on_the_primary() {
        let job = analyze_job(&upgrade(), &cluster(), "postgres:16").unwrap();
        let c = &job
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0];
        let cmd = c.command.clone().unwrap().join(" ");
        assert!(
            cmd.starts_with("vacuumdb --all --analyze-in-stages --host=db-primary"),
            "{cmd}"
        );
        assert_eq!(c.image.as_deref(), Some("postgres:16"));
        assert_eq!(target_image(&upgrade()), "postgres:16");
    }
}
