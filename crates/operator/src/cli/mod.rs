//! The `steward` client commands (seed 004, "Command Line Interface"; issue 15): the pgo-style
//! CLI an end user runs against the REST API — `create`, `show`, `update`, `delete`, `scale`,
//! `restart`, `failover`, `backup`, `restore`, `login`, `version`. `docs/api.md`, "The CLI",
//! describes the commands and the configuration file.
//!
//! - `config`: where the connection settings come from (file, environment, flags).
//! - `client`: HTTPS to the API, trusting only the configured CA.
//! - `output`: `-o table|json|yaml`.
//! - `wait`: `--wait`, following `status.operation` until the action is finished.
//! - `args`: the clap arguments.
//! - `commands`: what each command calls.

pub mod args;
pub mod client;
pub mod commands;
pub mod config;
pub mod output;
pub mod wait;

pub use args::ClientCommand;
pub use commands::run;

/// Why a client command failed. `Display` is what the user reads after `error: `.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The settings could not be resolved.
    #[error(transparent)]
    Settings(#[from] config::ConfigError),
    /// The settings or arguments are unusable.
    #[error("{0}")]
    Config(String),
    /// The API answered with an error.
    #[error("{message} (HTTP {code})")]
    Api {
        /// HTTP status code.
        code: u16,
        /// The API's message.
        message: String,
    },
    /// The server could not be reached (or its certificate was refused).
    #[error("cannot reach {server}: {message}")]
    Connect {
        /// The server's URL.
        server: String,
        /// What failed.
        message: String,
    },
    /// An answer of an unexpected shape.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// A waited-for action failed or timed out.
    #[error("{0}")]
    Failed(String),
    /// Reading standard input or writing the config file.
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        error: std::io::Error,
    },
}

#[cfg(test)]
mod https_tests;
