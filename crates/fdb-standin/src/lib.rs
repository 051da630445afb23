//! A FoundationDB stand-in (never FoundationDB): one program answering to FoundationDB's
//! tool names (`fdbserver`, `fdbcli`, `fdb-kubernetes-monitor`, `fdbbackup`, `fdbrestore`,
//! `backup_agent`) and modelling the behaviour Steward's operator depends on. The contract and
//! the model: `docs/foundationdb-standin.md`.

pub mod backup;
pub mod backup_tools;
pub mod cli;
pub mod container;
pub mod controller;
pub mod monitor;
pub mod proto;
pub mod server;
pub mod util;
