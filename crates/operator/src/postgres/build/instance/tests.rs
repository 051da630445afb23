//! Tests of the instance claim and Pod.

use super::*;
use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use steward_api::common::{RetentionPolicy, StorageSpec};
use steward_api::postgres::{InstanceStorage, NodeLabel};

use crate::postgres::build::config::{config_hash, config_map};
use crate::postgres::build::pdb::budget;
use crate::postgres::build::service::{primary_service, replicas_service};
use crate::postgres::validate::tests::{cluster, validated};

fn build(owner: &PostgresCluster, ordinal: u32, role: InstanceRole) -> Pod {
    let v = validated(owner);
    let config = config_map(owner, &v).unwrap();
    pod(owner, &v, ordinal, role, &config_hash(&config)).unwrap()
}

fn hash_of(owner: &PostgresCluster) -> String {
    spec_hash(&build(owner, 1, InstanceRole::Replica))
        .unwrap()
        .to_owned()
}

fn labels(pod: &Pod) -> &BTreeMap<String, String> {
    pod.metadata.labels.as_ref().unwrap()
}

fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    selector.iter().all(|(k, v)| labels(pod).get(k) == Some(v))
}

fn env(container: &Container) -> BTreeMap<String, EnvVar> {
    container
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| (e.name.clone(), e))
        .collect()
}

#[test]
fn a_pod_runs_postgres_with_its_claim_config_and_secrets() {
    let owner = cluster("demo", 3, "16");
    let pod = build(&owner, 1, InstanceRole::Replica);
    assert_eq!(pod.metadata.name.as_deref(), Some("demo-1"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("db"));
    let owner_ref = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner_ref.kind.as_str(), owner_ref.controller),
        ("PostgresCluster", Some(true))
    );
    assert_eq!(labels(&pod)[INSTANCE_LABEL], "demo-1");
    assert_eq!(labels(&pod)[ROLE_LABEL], "replica");

    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("demo-1"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    let security = spec.security_context.as_ref().unwrap();
    assert_eq!(
        (
            security.run_as_user,
            security.run_as_group,
            security.fs_group
        ),
        (Some(999), Some(999), Some(999))
    );
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(spec.containers.len(), 1, "no metrics sidecar unless asked");

    let c = &spec.containers[0];
    assert_eq!(c.name, "postgres");
    assert_eq!(c.image.as_deref(), Some("postgres:16"));
    assert_eq!(
        c.command.clone().unwrap(),
        ["sh", "/etc/steward/config/entrypoint.sh"]
    );
    let env = env(c);
    let field = |name: &str| {
        env[name]
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path
            .clone()
    };
    assert_eq!(field("POD_IP"), "status.podIP");
    assert_eq!(field("PGROLE"), "metadata.labels['steward.dev/role']");
    assert_eq!(env["INSTANCE"].value.as_deref(), Some("demo-1"));
    assert_eq!(
        env["PRIMARY_HOST"].value.as_deref(),
        Some("demo-primary.db.svc")
    );
    assert_eq!(env["PGDATA"].value.as_deref(), Some(PGDATA));
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("postgres"), 5432)
    );
    let probe = c.readiness_probe.as_ref().unwrap();
    assert_eq!(
        probe.exec.as_ref().unwrap().command,
        Some(script::readiness_command())
    );
    assert_eq!(
        (probe.period_seconds, probe.failure_threshold),
        (Some(2), Some(3))
    );

    let mounts: BTreeMap<String, (String, Option<bool>)> = c
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .map(|m| (m.name, (m.mount_path, m.read_only)))
        .collect();
    assert_eq!(mounts["pgdata"], (DATA_MOUNT.to_owned(), None));
    assert_eq!(mounts["config"], (CONFIG_MOUNT.to_owned(), Some(true)));
    assert_eq!(
        mounts["superuser"],
        (SUPERUSER_MOUNT.to_owned(), Some(true))
    );
    assert_eq!(
        mounts["replication"],
        (REPLICATION_MOUNT.to_owned(), Some(true))
    );
    let volumes: BTreeMap<String, Volume> = spec
        .volumes
        .clone()
        .unwrap()
        .into_iter()
        .map(|v| (v.name.clone(), v))
        .collect();
    assert_eq!(
        volumes["pgdata"]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "demo-1-pgdata"
    );
    let config = volumes["config"].config_map.as_ref().unwrap();
    assert_eq!(
        (config.name.as_str(), config.default_mode),
        ("demo-config", Some(0o444))
    );
    let secret = |v: &str| {
        volumes[v]
            .secret
            .as_ref()
            .unwrap()
            .secret_name
            .clone()
            .unwrap()
    };
    assert_eq!(secret("superuser"), "demo-superuser");
    assert_eq!(secret("replication"), "demo-replication");
    assert_eq!(mounts.len(), volumes.len(), "every volume is mounted");
}

#[test]
fn services_and_the_budget_select_pods_by_role() {
    let owner = cluster("demo", 3, "16");
    let v = validated(&owner);
    let primary = build(&owner, 0, InstanceRole::Primary);
    let replica = build(&owner, 1, InstanceRole::Replica);
    let select =
        |svc: &k8s_openapi::api::core::v1::Service| svc.spec.clone().unwrap().selector.unwrap();
    let to_primary = select(&primary_service(&owner, &v).unwrap());
    let to_replicas = select(&replicas_service(&owner, &v).unwrap());
    assert!(selects(&to_primary, &primary) && !selects(&to_primary, &replica));
    assert!(selects(&to_replicas, &replica) && !selects(&to_replicas, &primary));
    let pdb = budget(&owner, &v)
        .unwrap()
        .spec
        .unwrap()
        .selector
        .unwrap()
        .match_labels
        .unwrap();
    assert!(selects(&pdb, &replica) && !selects(&pdb, &primary));
    let all = v.names().instances_selector();
    assert!(selects(&all, &primary) && selects(&all, &replica));
    assert_eq!(
        (role_of(&primary), role_of(&replica)),
        (Some(InstanceRole::Primary), Some(InstanceRole::Replica))
    );
}

#[test]
fn the_role_is_not_part_of_the_spec_hash() {
    let owner = cluster("demo", 3, "16");
    let as_primary = build(&owner, 1, InstanceRole::Primary);
    let as_replica = build(&owner, 1, InstanceRole::Replica);
    assert_ne!(labels(&as_primary), labels(&as_replica));
    assert_eq!(spec_hash(&as_primary), spec_hash(&as_replica));
    assert_eq!(as_primary.spec, as_replica.spec);
    let mut template_role = owner.clone();
    template_role
        .spec
        .pod_template
        .labels
        .insert(ROLE_LABEL.into(), "primary".into());
    let pod = build(&template_role, 1, InstanceRole::Replica);
    assert_eq!(
        labels(&pod)[ROLE_LABEL],
        "replica",
        "the template cannot set the role"
    );
    assert_eq!(spec_hash(&pod), spec_hash(&as_replica));
}

#[test]
fn the_hash_follows_what_needs_a_restart() {
    let base = cluster("demo", 3, "16");
    let hash = hash_of(&base);
    assert_eq!(hash, hash_of(&base), "stable");
    assert_eq!(hash.len(), 16);

    let mut changes: Vec<(&str, PostgresCluster)> = Vec::new();
    let mut c = base.clone();
    c.spec.image = Some("postgres:16.4".into());
    changes.push(("image", c));
    let mut c = base.clone();
    c.spec.parameters.insert("work_mem".into(), "8MB".into());
    changes.push(("parameters", c));
    let mut c = base.clone();
    c.spec.pod_template.resources = Some(ResourceRequirements {
        limits: Some(BTreeMap::from([("memory".into(), Quantity("1Gi".into()))])),
        ..Default::default()
    });
    changes.push(("resources", c));
    let mut c = base.clone();
    c.spec.pod_template.tolerations.push(Toleration {
        key: Some("dedicated".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    });
    changes.push(("tolerations", c));
    let mut c = base.clone();
    c.spec.anti_affinity = AntiAffinity::Required;
    changes.push(("anti-affinity", c));
    let mut c = base.clone();
    c.spec
        .pod_template
        .annotations
        .insert("rollout".into(), "2".into());
    changes.push(("annotations", c));
    let mut c = base.clone();
    c.spec.pod_template.labels.insert("team".into(), "a".into());
    changes.push(("labels", c));
    let mut c = base.clone();
    c.spec.metrics = Some(steward_api::postgres::MetricsSpec {
        image: "exporter:1".into(),
        port: 9187,
    });
    changes.push(("metrics", c));
    for (what, changed) in changes {
        assert_ne!(hash_of(&changed), hash, "{what} must change the hash");
    }

    let mut scaled = base.clone();
    scaled.spec.instances = 5;
    scaled.spec.paused = true;
    assert_eq!(
        hash_of(&scaled),
        hash,
        "scaling or pausing restarts nothing"
    );
    let v = validated(&base);
    let other_config = pod(&base, &v, 1, InstanceRole::Replica, "0000000000000000").unwrap();
    assert_ne!(
        spec_hash(&other_config).unwrap(),
        hash,
        "the config hash is part of it"
    );
    assert_eq!(
        other_config.metadata.annotations.unwrap()[CONFIG_HASH],
        "0000000000000000"
    );
}

#[test]
fn template_labels_and_annotations_are_kept_but_ours_win() {
    let mut owner = cluster("demo", 3, "16");
    let t = &mut owner.spec.pod_template;
    t.labels.insert("team".into(), "a".into());
    t.labels.insert(INSTANCE_LABEL.into(), "other".into());
    t.labels
        .insert("app.kubernetes.io/instance".into(), "other".into());
    t.annotations.insert("note".into(), "x".into());
    t.node_selector.insert("disk".into(), "ssd".into());
    let pod = build(&owner, 2, InstanceRole::Replica);
    assert_eq!(labels(&pod)["team"], "a");
    assert_eq!(labels(&pod)[INSTANCE_LABEL], "demo-2");
    assert_eq!(labels(&pod)["app.kubernetes.io/instance"], "demo");
    let annotations = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["note"], "x");
    assert!(annotations.contains_key(SPEC_HASH));
    assert_eq!(pod.spec.unwrap().node_selector.unwrap()["disk"], "ssd");
}

#[test]
fn anti_affinity_is_preferred_required_or_absent() {
    let mut owner = cluster("demo", 3, "16");
    let v = validated(&owner);
    let anti = affinity(&v).unwrap().pod_anti_affinity.unwrap();
    assert!(
        anti.required_during_scheduling_ignored_during_execution
            .is_none()
    );
    let preferred = &anti
        .preferred_during_scheduling_ignored_during_execution
        .unwrap()[0];
    assert_eq!(preferred.weight, 100);
    let term = &preferred.pod_affinity_term;
    assert_eq!(term.topology_key, "kubernetes.io/hostname");
    assert_eq!(
        term.label_selector.clone().unwrap().match_labels.unwrap(),
        v.names().instances_selector()
    );

    owner.spec.anti_affinity = AntiAffinity::Required;
    let anti = affinity(&validated(&owner))
        .unwrap()
        .pod_anti_affinity
        .unwrap();
    assert!(
        anti.preferred_during_scheduling_ignored_during_execution
            .is_none()
    );
    let required = &anti
        .required_during_scheduling_ignored_during_execution
        .unwrap()[0];
    assert_eq!(required.topology_key, "kubernetes.io/hostname");

    owner.spec.anti_affinity = AntiAffinity::None;
    assert_eq!(affinity(&validated(&owner)), None);
    let pod = build(&owner, 0, InstanceRole::Primary);
    assert!(pod.spec.unwrap().affinity.is_none());
}

#[test]
fn the_node_label_is_preferred_and_merged_with_the_template() {
    let mut owner = cluster("demo", 3, "16");
    owner.spec.node_label = Some(NodeLabel {
        key: "kubernetes.io/hostname".into(),
        value: "node-2".into(),
    });
    let template_term = PreferredSchedulingTerm {
        weight: 5,
        preference: NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "zone".into(),
                operator: "In".into(),
                values: Some(vec!["a".into()]),
            }]),
            match_fields: None,
        },
    };
    owner.spec.pod_template.affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![template_term.clone()]),
            ..Default::default()
        }),
        ..Default::default()
    });
    let merged = affinity(&validated(&owner)).unwrap();
    let node = merged.node_affinity.unwrap();
    assert!(
        node.required_during_scheduling_ignored_during_execution
            .is_none(),
        "never required"
    );
    let terms = node
        .preferred_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(terms[0], template_term, "the template's terms are kept");
    assert_eq!(terms[1].weight, 100);
    let wanted = &terms[1].preference.match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        (
            wanted.key.as_str(),
            wanted.operator.as_str(),
            wanted.values.clone().unwrap()
        ),
        ("kubernetes.io/hostname", "In", vec!["node-2".to_owned()])
    );
    assert!(
        merged.pod_anti_affinity.is_some(),
        "spreading still applies"
    );
}

#[test]
fn the_metrics_sidecar_logs_in_as_the_superuser() {
    let mut owner = cluster("demo", 3, "16");
    owner.spec.metrics = Some(steward_api::postgres::MetricsSpec {
        image: "exporter:1".into(),
        port: 9300,
    });
    let pod = build(&owner, 0, InstanceRole::Primary);
    let spec = pod.spec.unwrap();
    let m = spec
        .containers
        .iter()
        .find(|c| c.name == "metrics")
        .unwrap();
    assert_eq!(m.image.as_deref(), Some("exporter:1"));
    assert_eq!(
        m.args.clone().unwrap(),
        ["--web.listen-address=$(POD_IP):9300"]
    );
    let env = env(m);
    assert_eq!(
        env["DATA_SOURCE_URI"].value.as_deref(),
        Some("$(POD_IP):5432/postgres?sslmode=disable")
    );
    let names: Vec<&str> = m
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names[0], "POD_IP", "defined before $(POD_IP) is used");
    for (var, key) in [
        ("DATA_SOURCE_USER", "username"),
        ("DATA_SOURCE_PASS", "password"),
    ] {
        let r = env[var].value_from.clone().unwrap().secret_key_ref.unwrap();
        assert_eq!((r.name.as_str(), r.key.as_str()), ("demo-superuser", key));
    }
    let port = &m.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("metrics"), 9300)
    );
}

#[test]
fn the_claim_is_sized_per_instance_and_has_no_owner() {
    let mut owner = cluster("demo", 3, "16");
    owner.spec.storage.storage_class_name = Some("standard".into());
    owner.spec.instance_storage.push(InstanceStorage {
        ordinal: 2,
        storage: StorageSpec {
            size: "50Gi".into(),
            storage_class_name: Some("fast".into()),
            retain_on_scale_down: RetentionPolicy::Retain,
            retain_on_delete: RetentionPolicy::Retain,
        },
    });
    let v = validated(&owner);
    let size = |c: &PersistentVolumeClaim| {
        c.spec.clone().unwrap().resources.unwrap().requests.unwrap()["storage"]
            .0
            .clone()
    };
    let class = |c: &PersistentVolumeClaim| c.spec.clone().unwrap().storage_class_name;
    let first = claim(&owner, &v, 0).unwrap();
    let third = claim(&owner, &v, 2).unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("demo-0-pgdata"));
    assert_eq!(
        (size(&first), class(&first)),
        ("1Gi".to_owned(), Some("standard".to_owned()))
    );
    assert_eq!(
        (size(&third), class(&third)),
        ("50Gi".to_owned(), Some("fast".to_owned()))
    );
    assert!(
        third.metadata.owner_references.is_none(),
        "claims outlive the cluster"
    );
    let labels = third.metadata.labels.unwrap();
    assert_eq!(labels[INSTANCE_LABEL], "demo-2");
    assert_eq!(labels["app.kubernetes.io/component"], "data");
    assert_eq!(labels["app.kubernetes.io/instance"], "demo");
    assert_eq!(third.metadata.namespace.as_deref(), Some("db"));
    let access = third.spec.unwrap().access_modes.unwrap();
    assert_eq!(access, ["ReadWriteOnce"]);
}

#[test]
fn helpers_and_unsaved_owners() {
    let mut owner = cluster("demo", 1, "16");
    let v = validated(&owner);
    let mut pod = build(&owner, 0, InstanceRole::Primary);
    assert!(spec_hash(&pod).is_some());
    if let Some(l) = pod.metadata.labels.as_mut() {
        l.insert(ROLE_LABEL.into(), "leader".into());
    }
    assert_eq!(role_of(&pod), None);
    assert_eq!(role_of(&Pod::default()), None);
    assert_eq!(spec_hash(&Pod::default()), None);
    owner.metadata.uid = None;
    assert!(pod_is_none(&owner, &v));
    assert!(claim(&owner, &v, 0).is_none());
}

fn pod_is_none(owner: &PostgresCluster, v: &ValidatedPostgresCluster) -> bool {
    super::pod(owner, v, 0, InstanceRole::Primary, "h").is_none()
}
