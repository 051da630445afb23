//! The etcd pipeline's steps, one per file, in pipeline order.

pub mod apply_budget;
pub mod apply_services;
pub mod observe_cluster;
pub mod reconcile_peers;
pub mod recover_members;
pub mod rolling_update;
pub mod scale_members;
pub mod sweep_orphans;
pub mod update_status;
pub mod validate_spec;

#[cfg(test)]
mod tests;
