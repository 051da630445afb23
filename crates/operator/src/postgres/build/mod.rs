//! (pure) Desired children of a PostgreSQL cluster.

pub mod basebackup;
pub mod config;
pub mod instance;
pub mod pdb;
pub mod pgbackrest;
pub mod script;
pub mod secrets;
pub mod service;
pub mod upgrade;
pub mod verify;
