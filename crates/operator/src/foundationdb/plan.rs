//! (pure) The decisions of the FoundationDB steps that need no I/O: which process groups to
//! remove so the rest stay spread over fault domains (ChooseRemovals), how many of a class may
//! be excluded now (ExcludeProcesses' budget and missing-process rule), and which processes
//! become coordinators (ChangeCoordinators). Seed 002 gives each rule.

use std::collections::{BTreeMap, BTreeSet};

use steward_api::foundationdb::ProcessClass;

/// A process group as the planners see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Its ID.
    pub id: String,
    /// Its class.
    pub class: ProcessClass,
    /// Its number within the class.
    pub n: u32,
    /// Its zone, once its Pod is placed.
    pub zone: Option<String>,
    /// Marked for removal.
    pub removing: bool,
    /// Seconds it has had `MissingProcesses`, if it has.
    pub missing_for: Option<i64>,
    /// Its exclusion is in the database's configuration.
    pub excluded: bool,
}

/// (pure) ChooseRemovals: which of `groups` (one class, none marked yet) to mark so that `want`
/// remain, spread over as many zones as possible: a group without a zone first, then from the
/// zone with the most groups, the highest number first.
pub fn choose_removals(groups: &[Group], want: usize) -> Vec<String> {
    let mut left: Vec<&Group> = groups.iter().filter(|g| !g.removing).collect();
    let mut chosen = Vec::new();
    while left.len() > want {
        let mut per_zone: BTreeMap<Option<&str>, usize> = BTreeMap::new();
        for g in &left {
            *per_zone.entry(g.zone.as_deref()).or_default() += 1;
        }
        let pick = left
            .iter()
            .enumerate()
            .max_by_key(|(_, g)| {
                let zone = g.zone.as_deref();
                (
                    zone.is_none(),
                    per_zone.get(&zone).copied().unwrap_or(0),
                    g.n,
                )
            })
            .map(|(i, _)| i);
        let Some(i) = pick else { break };
        chosen.push(left.remove(i).id.clone());
    }
    chosen
}

/// How long a `MissingProcesses` condition holds exclusions of its class back (seed 002: 5
/// minutes).
pub const MISSING_PROCESS_GRACE_SECONDS: i64 = 300;

/// (pure) ExcludeProcesses' budget for one class (seed 002): the groups not missing a process,
/// less the desired count, less the exclusions under way; 0 while a group of the class has
/// been missing its process for less than [`MISSING_PROCESS_GRACE_SECONDS`].
pub fn exclusion_budget(groups: &[Group], desired: usize, ongoing: usize) -> Result<usize, String> {
    if let Some(g) = groups.iter().find(|g| {
        g.missing_for
            .is_some_and(|s| s < MISSING_PROCESS_GRACE_SECONDS)
    }) {
        return Err(format!(
            "{} has been missing its process for less than {MISSING_PROCESS_GRACE_SECONDS}s",
            g.id
        ));
    }
    let valid = groups.iter().filter(|g| g.missing_for.is_none()).count();
    Ok(valid.saturating_sub(desired).saturating_sub(ongoing))
}

/// A process that could be a coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// `IP:PORT`.
    pub address: String,
    /// Its class.
    pub class: ProcessClass,
    /// Its zone (`locality_zoneid`).
    pub zone: String,
}

/// The number of coordinators for replication `r` in one data centre: `2R - 1`.
pub fn coordinator_count(replication: usize) -> usize {
    (2 * replication).saturating_sub(1).max(1)
}

/// (pure) ChangeCoordinators' choice: `want` coordinators, each in another zone, from storage
/// processes, then storage and log, then every class (seed 002). `current` ones are kept when
/// they qualify, so that a change moves as few as it can. An error says why none fits.
pub fn choose_coordinators(
    candidates: &[Candidate],
    current: &[String],
    want: usize,
) -> Result<Vec<String>, String> {
    let pools: [&[ProcessClass]; 3] = [
        &[ProcessClass::Storage],
        &[ProcessClass::Storage, ProcessClass::Log],
        &ProcessClass::ALL,
    ];
    let mut best = 0;
    for pool in pools {
        let mut eligible: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| pool.contains(&c.class))
            .collect();
        // Current coordinators first, then by class preference, zone and address.
        eligible.sort_by_key(|c| {
            (
                !current.contains(&c.address),
                pool.iter().position(|p| *p == c.class),
                c.zone.clone(),
                c.address.clone(),
            )
        });
        let mut zones = BTreeSet::new();
        let mut chosen = Vec::new();
        for c in eligible {
            if chosen.len() == want {
                break;
            }
            if zones.insert(c.zone.clone()) {
                chosen.push(c.address.clone());
            }
        }
        if chosen.len() == want {
            chosen.sort();
            return Ok(chosen);
        }
        best = best.max(chosen.len());
    }
    Err(format!(
        "{want} coordinators need processes in {want} zones; only {best} zones have an eligible process"
    ))
}

/// (pure) Why the coordinators must change, or `None`: a coordinator that is not a healthy
/// candidate (gone, excluded, marked for removal), coordinators sharing a zone, or another
/// count than `want`.
pub fn coordinators_need_change(
    current: &[String],
    candidates: &[Candidate],
    want: usize,
) -> Option<String> {
    if current.len() != want {
        return Some(format!("{} coordinators, {want} wanted", current.len()));
    }
    let mut zones = BTreeSet::new();
    for address in current {
        let Some(c) = candidates.iter().find(|c| &c.address == address) else {
            return Some(format!(
                "coordinator {address} is not a healthy process (gone, excluded or being removed)"
            ));
        };
        if !zones.insert(c.zone.clone()) {
            return Some(format!("two coordinators are in zone {}", c.zone));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(n: u32, zone: Option<&str>) -> Group {
        Group {
            id: format!("demo-storage-{n}"),
            class: ProcessClass::Storage,
            n,
            zone: zone.map(str::to_owned),
            removing: false,
            missing_for: None,
            excluded: false,
        }
    }

    #[test]
    fn removals_keep_the_rest_spread_over_zones() {
        let groups = vec![
            group(1, Some("a")),
            group(2, Some("a")),
            group(3, Some("b")),
            group(4, Some("c")),
            group(5, None),
        ];
        // Unplaced first, then the crowded zone's highest number.
        assert_eq!(
            choose_removals(&groups, 3),
            ["demo-storage-5", "demo-storage-2"]
        );
        assert!(choose_removals(&groups, 5).is_empty());
    }

    #[test]
    fn the_budget_follows_the_seeds_formula_and_the_missing_process_rule() {
        let mut groups = vec![
            group(1, Some("a")),
            group(2, Some("b")),
            group(3, Some("c")),
            group(4, Some("a")),
        ];
        assert_eq!(exclusion_budget(&groups, 3, 0), Ok(1));
        assert_eq!(exclusion_budget(&groups, 3, 1), Ok(0));
        // A replacement not up yet: no budget beyond what is running.
        groups[3].missing_for = Some(MISSING_PROCESS_GRACE_SECONDS + 1);
        assert_eq!(exclusion_budget(&groups, 3, 0), Ok(0));
        groups[3].missing_for = Some(10);
        assert!(exclusion_budget(&groups, 3, 0).is_err());
    }

    fn cand(address: &str, class: ProcessClass, zone: &str) -> Candidate {
        Candidate {
            address: address.into(),
            class,
            zone: zone.into(),
        }
    }

    #[test]
    fn coordinators_prefer_storage_distinct_zones_and_keep_current_ones() {
        let c = vec![
            cand("10.0.0.1:4501", ProcessClass::Storage, "a"),
            cand("10.0.0.2:4501", ProcessClass::Storage, "a"),
            cand("10.0.0.3:4501", ProcessClass::Storage, "b"),
            cand("10.0.0.4:4501", ProcessClass::Log, "c"),
            cand("10.0.0.5:4501", ProcessClass::Stateless, "d"),
        ];
        assert_eq!(coordinator_count(2), 3);
        // Storage covers only two zones: the log process in zone c fills the third.
        assert_eq!(
            choose_coordinators(&c, &[], 3).unwrap(),
            ["10.0.0.1:4501", "10.0.0.3:4501", "10.0.0.4:4501"]
        );
        // A current coordinator that qualifies is kept over an equal one.
        assert_eq!(
            choose_coordinators(&c, &["10.0.0.2:4501".into()], 3).unwrap(),
            ["10.0.0.2:4501", "10.0.0.3:4501", "10.0.0.4:4501"]
        );
        assert!(choose_coordinators(&c, &[], 5).is_err());
        assert!(
            choose_coordinators(&c, &[], 4)
                .unwrap()
                .contains(&"10.0.0.5:4501".to_owned())
        );
    }

    #[test]
    fn coordinators_change_when_one_is_gone_doubled_or_the_count_differs() {
        let c = vec![
            cand("10.0.0.1:4501", ProcessClass::Storage, "a"),
            cand("10.0.0.2:4501", ProcessClass::Storage, "a"),
            cand("10.0.0.3:4501", ProcessClass::Storage, "b"),
        ];
        let current = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            coordinators_need_change(&current(&["10.0.0.1:4501", "10.0.0.3:4501"]), &c, 2),
            None
        );
        assert!(coordinators_need_change(&current(&["10.0.0.1:4501"]), &c, 2).is_some());
        assert!(
            coordinators_need_change(&current(&["10.0.0.1:4501", "10.0.0.2:4501"]), &c, 2)
                .unwrap()
                .contains("zone a")
        );
        assert!(
            coordinators_need_change(&current(&["10.0.0.1:4501", "10.0.0.9:4501"]), &c, 2)
                .unwrap()
                .contains("10.0.0.9")
        );
    }
}
