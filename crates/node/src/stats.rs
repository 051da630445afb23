//! CPU and memory figures of the node and of each running container, for the kubelet's
//! `/metrics/resource` (`crate::kubelet::resource_metrics`), from what this machine offers:
//!
//! - a container with a cgroup (`crate::cgroup`): CPU time from its `cpu.stat` (`usage_usec`,
//!   there in every cgroup v2 directory); working set from `memory.current` minus `memory.stat`'s
//!   `inactive_file` when the memory controller is enabled for it (cAdvisor's definition), else
//!   the resident set of the processes listed in its `cgroup.procs`;
//! - a container without one (no writable cgroup v2 hierarchy): the processes of its process
//!   group, from `/proc/<pid>/stat` (`utime + stime + cutime + cstime`, and RSS). That counter
//!   drops when a process of the container exits without being waited for by another of it
//!   (its time leaves the group); metrics-server then skips that container for one window.
//! - the node: `/proc/stat` (every CPU state but idle and iowait) and `/proc/meminfo`
//!   (`MemTotal - MemFree - Inactive(file)`), where a kubelet reads its root cgroup.
//!
//! Every figure is stamped with the time it was read, as a kubelet stamps them.

use std::collections::HashMap;
use std::path::Path;

use jiff::Timestamp;
use procfs::{Current, CurrentSI};

use crate::pods::runtime::{Registry, RunningContainer};

/// Cumulative CPU time and current working set, read at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub cpu_ns: u64,
    pub working_set: u64,
    pub at: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerStats {
    pub name: String,
    pub started_at: Timestamp,
    pub usage: Usage,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodStats {
    pub namespace: String,
    pub name: String,
    pub containers: Vec<ContainerStats>,
}

/// Everything one scrape reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub node: Usage,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("reading the node's CPU time from /proc/stat: {0}")]
    NodeCpu(procfs::ProcError),
    #[error("reading the node's memory from /proc/meminfo: {0}")]
    NodeMemory(procfs::ProcError),
}

impl StatsError {
    /// Stable label for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::NodeCpu(_) => "node_cpu",
            Self::NodeMemory(_) => "node_memory",
        }
    }
}

/// The node's and every running container's figures. Containers whose figures cannot be read
/// (their processes are gone since they were listed) are left out.
pub fn summary(registry: &Registry) -> Result<Summary, StatsError> {
    let node = node_usage()?;
    let mut groups: Option<HashMap<i32, Vec<ProcFigures>>> = None;
    let mut pods = Vec::new();
    for rt in registry.all() {
        let containers: Vec<ContainerStats> = rt
            .running_containers()
            .into_iter()
            .filter_map(|c| {
                let usage = container_usage(&c, &mut groups)?;
                Some(ContainerStats {
                    name: c.name,
                    started_at: c.started_at,
                    usage,
                })
            })
            .collect();
        if !containers.is_empty() {
            pods.push(PodStats {
                namespace: rt.namespace.clone(),
                name: rt.name.clone(),
                containers,
            });
        }
    }
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(Summary { node, pods })
}

/// The node's CPU time (all states but idle and iowait) and working set.
pub fn node_usage() -> Result<Usage, StatsError> {
    let cpu = procfs::KernelStats::current().map_err(StatsError::NodeCpu)?;
    // The CPU figure's time is the one a rate is computed over.
    let at = Timestamp::now();
    let t = &cpu.total;
    let busy_ticks = t.user
        + t.nice
        + t.system
        + t.irq.unwrap_or(0)
        + t.softirq.unwrap_or(0)
        + t.steal.unwrap_or(0);
    let mem = procfs::Meminfo::current().map_err(StatsError::NodeMemory)?;
    let working_set = mem
        .mem_total
        .saturating_sub(mem.mem_free)
        .saturating_sub(mem.inactive_file.unwrap_or(0));
    Ok(Usage {
        cpu_ns: ticks_to_ns(busy_ticks),
        working_set,
        at,
    })
}

/// One process's CPU time (its own and its waited-for children's) and resident set.
#[derive(Clone, Copy, Debug)]
struct ProcFigures {
    cpu_ns: u64,
    rss: u64,
}

fn proc_figures(stat: &procfs::process::Stat) -> ProcFigures {
    let children = u64::try_from(stat.cutime.max(0) + stat.cstime.max(0)).unwrap_or(0);
    ProcFigures {
        cpu_ns: ticks_to_ns(stat.utime + stat.stime + children),
        rss: stat.rss * procfs::page_size(),
    }
}

fn ticks_to_ns(ticks: u64) -> u64 {
    let tps = procfs::ticks_per_second().max(1);
    u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(tps)).unwrap_or(u64::MAX)
}

/// Every process's figures, by process group (read once per scrape, when a container without
/// a cgroup needs it).
fn process_groups() -> HashMap<i32, Vec<ProcFigures>> {
    let mut out: HashMap<i32, Vec<ProcFigures>> = HashMap::new();
    let Ok(all) = procfs::process::all_processes() else {
        return out;
    };
    for stat in all.filter_map(Result::ok).filter_map(|p| p.stat().ok()) {
        out.entry(stat.pgrp).or_default().push(proc_figures(&stat));
    }
    out
}

fn pid_figures(pid: i32) -> Option<ProcFigures> {
    let stat = procfs::process::Process::new(pid).ok()?.stat().ok()?;
    Some(proc_figures(&stat))
}

fn container_usage(
    c: &RunningContainer,
    groups: &mut Option<HashMap<i32, Vec<ProcFigures>>>,
) -> Option<Usage> {
    match &c.cgroup {
        Some(dir) => cgroup_usage(dir),
        None => {
            let groups = groups.get_or_insert_with(process_groups);
            let members = groups.get(&c.pid)?;
            Some(Usage {
                cpu_ns: members.iter().map(|f| f.cpu_ns).sum(),
                working_set: members.iter().map(|f| f.rss).sum(),
                at: Timestamp::now(),
            })
        }
    }
}

/// A container cgroup's CPU time and working set (`None` once the cgroup is gone).
fn cgroup_usage(dir: &Path) -> Option<Usage> {
    let cpu_ns = usage_usec(&std::fs::read_to_string(dir.join("cpu.stat")).ok()?)? * 1_000;
    let at = Timestamp::now();
    let working_set = match std::fs::read_to_string(dir.join("memory.current")) {
        Ok(current) => {
            let current: u64 = current.trim().parse().ok()?;
            let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
            current.saturating_sub(stat_field(&stat, "inactive_file").unwrap_or(0))
        }
        // No memory controller for this cgroup: the resident set of its processes.
        Err(_) => crate::cgroup::pids(dir)
            .into_iter()
            .filter_map(pid_figures)
            .map(|f| f.rss)
            .sum(),
    };
    Some(Usage {
        cpu_ns,
        working_set,
        at,
    })
}

/// (pure) `usage_usec` of a cgroup v2 `cpu.stat`.
fn usage_usec(cpu_stat: &str) -> Option<u64> {
    stat_field(cpu_stat, "usage_usec")
}

/// (pure) A `key value` line of a cgroup stat file.
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_stat_files_are_read_by_key() {
        let cpu = "usage_usec 46506154862\nuser_usec 39084193642\nsystem_usec 7421961220\n";
        assert_eq!(usage_usec(cpu), Some(46_506_154_862));
        let mem = "anon 4096\nfile 8192\nactive_file 0\ninactive_file 4096\n";
        assert_eq!(stat_field(mem, "inactive_file"), Some(4096));
        assert_eq!(stat_field(mem, "inactive_anon"), None);
        assert_eq!(usage_usec(""), None);
    }

    #[test]
    fn the_node_and_this_process_are_measured() {
        let node = node_usage().unwrap();
        assert!(node.cpu_ns > 0 && node.working_set > 0, "{node:?}");
        let me = pid_figures(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert!(me.rss > 0, "{me:?}");
    }
}
