//! The disruption controller (policy/v1): computes every PodDisruptionBudget's status with
//! `plan::status` over the Pods of its namespace that its selector selects, finding each Pod
//! controller's scale as upstream's finders do — a ReplicaSet controlled by a Deployment counts
//! the Deployment's `replicas`; any other controller is read through its kind's `scale`
//! subresource (apps kinds, custom resources whose CRD declares one); a kind without one is an
//! error (`<resource>.<group> does not implement the scale subresource`). Status is written
//! through the status subresource; no Events are recorded. Event-driven ([`Changes`]): a pass
//! recomputes only the budgets that changes may affect ([`affected`]).

pub mod plan;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::Value;

use super::Changes;
use super::workload::{controller_of, selects};
use super::writes;
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::store::{EventType, State, WatchEvent};

const MANAGER: &str = "disruption-controller";

fn def_of(state: &State, api_version: &str, kind: &str) -> Option<std::sync::Arc<ResourceDef>> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    state
        .registry
        .all()
        .find(|d| d.group == group && d.version == version && d.kind == kind)
        .cloned()
}

/// The scale of the controller `owner` names in `ns` (see `plan::ScaleOf`).
pub fn scale_of(state: &State, owner: &Value, ns: &str) -> Result<Option<(String, i64)>, String> {
    let api_version = owner["apiVersion"].as_str().unwrap_or_default();
    let kind = owner["kind"].as_str().unwrap_or_default();
    let name = owner["name"].as_str().unwrap_or_default();
    let uid = owner["uid"].as_str().unwrap_or_default();
    if kind == "ReplicaSet"
        && api_version == "apps/v1"
        && let Some(rs) = state.get(&GroupResource::new("apps", "replicasets"), ns, name)
        && meta::uid(rs) == Some(uid)
        && let Some(d_ref) = controller_of(rs).filter(|r| r["kind"] == "Deployment")
        && let Some(d) = state.get(
            &GroupResource::new("apps", "deployments"),
            ns,
            d_ref["name"].as_str().unwrap_or_default(),
        )
        && meta::uid(d) == d_ref["uid"].as_str()
    {
        let n = meta::get_path(d, "spec.replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        return Ok(Some((meta::uid(d).unwrap_or_default().to_string(), n)));
    }
    let def = def_of(state, api_version, kind)
        .ok_or_else(|| format!("no matches for kind \"{kind}\" in version \"{api_version}\""))?;
    let Some(scale) = &def.scale else {
        return Err(format!(
            "{} does not implement the scale subresource",
            def.gr().qualified()
        ));
    };
    let Some(obj) = state.get(&def.gr(), ns, name) else {
        return Ok(None);
    };
    if meta::uid(obj) != Some(uid) {
        return Ok(None);
    }
    let n = meta::get_path(obj, &scale.spec_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Ok(Some((uid.to_string(), n)))
}

/// What the controller keeps between passes: when a budget's `disruptedPods` entry expires.
#[derive(Debug, Default)]
pub struct Memory {
    due: HashMap<(String, String), jiff::Timestamp>,
}

/// Whether a change may change what a budget expects: a controller with a scale subresource
/// scaled or deleted. (A controller just created has no Pods yet; each Pod it makes is a change
/// of its own.)
fn rescaled(state: &State, event: &WatchEvent) -> bool {
    let Some(scale) = state
        .registry
        .storage_def(&event.gr)
        .and_then(|d| d.scale.clone())
    else {
        return false;
    };
    let replicas = |o: &Value| meta::get_path(o, &scale.spec_replicas_path).cloned();
    match (&event.etype, &event.prev) {
        (EventType::Deleted, _) => true,
        (_, Some(prev)) => replicas(prev) != replicas(&event.object),
        (_, None) => false,
    }
}

/// The budgets (namespace, name) a pass recomputes: all on a full pass or when a
/// CustomResourceDefinition was written; else those that
/// changed, those whose selector a changed Pod satisfies (before or after the change, from the
/// store's selector index), every budget of a namespace where a controller was scaled, and
/// those whose eviction record is due.
fn affected(
    state: &State,
    changes: &Changes,
    memory: &Memory,
    now: jiff::Timestamp,
) -> BTreeSet<(String, String)> {
    let gr = GroupResource::new("policy", "poddisruptionbudgets");
    let key = State::key_of;
    // A CustomResourceDefinition written may add or drop the scale subresource budgets read.
    let crds = GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
    let events = match changes {
        Changes::Events(events) if !events.iter().any(|e| e.gr == crds) => events,
        _ => return state.list(&gr, None).map(key).collect(),
    };
    let mut out: BTreeSet<(String, String)> = changes.objects(&gr).map(key).collect();
    let pods_gr = GroupResource::new("", "pods");
    for pod in changes.objects(&pods_gr) {
        let Some(ns) = meta::namespace(pod) else {
            continue;
        };
        for name in state.indexes().selecting(&gr, ns, meta::labels_ref(pod)) {
            out.insert((ns.to_string(), name));
        }
    }
    let rescaled: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.gr != gr && e.gr != pods_gr && rescaled(state, e))
        .filter_map(|e| meta::namespace(&e.object))
        .collect();
    for ns in rescaled {
        out.extend(state.list(&gr, Some(ns)).map(key));
    }
    out.extend(
        memory
            .due
            .iter()
            .filter(|(_, due)| **due <= now)
            .map(|(k, _)| k.clone()),
    );
    out
}

/// The Pods a budget's selector may select: those carrying the rarest of its `matchLabels`
/// pairs (from the store's label index), or every Pod of its namespace when it has none.
fn candidates<'a>(state: &'a State, selector: Option<&Value>, ns: &'a str) -> Vec<&'a Value> {
    selector
        .and_then(|s| s["matchLabels"].as_object())
        .and_then(|m| state.pods_by_rarest_pair(ns, m))
        .unwrap_or_else(|| {
            state
                .list(&GroupResource::new("", "pods"), Some(ns))
                .collect()
        })
}

/// One pass over the budgets that changes may affect (see [`affected`]); returns when the
/// next eviction record expires. A pass costs what changed, not the Pods and budgets stored.
pub fn reconcile(
    state: &mut State,
    changes: &Changes,
    now: jiff::Timestamp,
    memory: &mut Memory,
) -> Option<Duration> {
    let gr = GroupResource::new("policy", "poddisruptionbudgets");
    let affected = affected(state, changes, memory, now);
    if changes.is_all() {
        memory.due.clear();
    }
    let planned: Vec<(String, String, Value)> = {
        let st: &State = state;
        let mut planned = Vec::new();
        for (ns, name) in affected {
            let Some(pdb) = st.get(&gr, &ns, &name) else {
                memory.due.remove(&(ns, name));
                continue;
            };
            let selector = meta::get_path(pdb, "spec.selector");
            let pods: Vec<&Value> = candidates(st, selector, &ns)
                .into_iter()
                .filter(|p| selects(selector, meta::labels_ref(p)))
                .collect();
            let (status, recheck) =
                plan::status(pdb, &pods, &|o: &Value, n: &str| scale_of(st, o, n), now);
            match recheck {
                Some(r) => {
                    let due = now
                        .checked_add(jiff::SignedDuration::try_from(r).unwrap_or_default())
                        .unwrap_or(now);
                    memory.due.insert((ns.clone(), name.clone()), due);
                }
                None => {
                    memory.due.remove(&(ns.clone(), name.clone()));
                }
            }
            planned.push((ns, name, status));
        }
        planned
    };
    for (ns, name, status) in planned {
        writes::status(state, &gr, &ns, &name, MANAGER, status);
    }
    memory
        .due
        .values()
        .min()
        .map(|due| Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventType;
    use serde_json::json;
    use std::sync::Arc;

    fn pdb(name: &str, selector: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "n", "uid": format!("u-{name}")},
            "spec": {"minAvailable": 1, "selector": selector}})
    }

    fn pod(name: &str, app: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "n", "uid": format!("u-{name}"),
            "labels": {"app": app, "managed-by": "steward"}}})
    }

    #[test]
    fn a_pass_recomputes_only_the_budgets_a_change_may_affect() {
        let mut state = State::new(
            tokio::sync::watch::channel(0).0,
            Arc::new(tokio::sync::Notify::new()),
        );
        let (pdbs, pods) = (
            GroupResource::new("policy", "poddisruptionbudgets"),
            GroupResource::new("", "pods"),
        );
        for i in 0..50 {
            let sel = json!({"matchLabels": {"app": format!("a{i}"), "managed-by": "steward"}});
            state.put(&pdbs, pdb(&format!("b{i}"), sel), EventType::Added);
            state.put(
                &pods,
                pod(&format!("p{i}"), &format!("a{i}")),
                EventType::Added,
            );
        }
        let exprs =
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a7"]}]});
        state.put(&pdbs, pdb("exprs", exprs), EventType::Added);
        let memory = Memory::default();
        let now = jiff::Timestamp::now();
        let names = |set: BTreeSet<(String, String)>| -> Vec<String> {
            set.into_iter().map(|(_, n)| n).collect()
        };
        // The first pass sees everything.
        assert_eq!(affected(&state, &Changes::All, &memory, now).len(), 51);

        // One Pod relabelled: the budgets that selected it before and after, and the one whose
        // selector the index cannot answer.
        let seen = state.rv;
        state.put(&pods, pod("p3", "a4"), EventType::Modified);
        let changes = Changes::since(&state, Some(seen));
        assert_eq!(
            names(affected(&state, &changes, &memory, now)),
            ["b3", "b4", "exprs"]
        );

        // A budget changed: that budget only.
        let seen = state.rv;
        let sel = json!({"matchLabels": {"app": "a9", "managed-by": "steward"}});
        state.put(&pdbs, pdb("b9", sel), EventType::Modified);
        let changes = Changes::since(&state, Some(seen));
        assert_eq!(names(affected(&state, &changes, &memory, now)), ["b9"]);

        // An eviction record due: that budget, at its time.
        let mut memory = Memory::default();
        let later = now + jiff::SignedDuration::from_secs(60);
        memory.due.insert(("n".into(), "b20".into()), later);
        let nothing = Changes::since(&state, Some(state.rv));
        assert!(affected(&state, &nothing, &memory, now).is_empty());
        assert_eq!(names(affected(&state, &nothing, &memory, later)), ["b20"]);
    }
}
