//! The `steward` binary's client commands without a server: shell completions, `version`
//! without a configuration, and the error when none is found.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

const STEWARD: &str = env!("CARGO_BIN_EXE_steward");

/// The binary in an empty directory, with no configuration anywhere it looks.
fn steward(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(STEWARD);
    cmd.current_dir(dir)
        .env_remove("STEWARD_CONFIG")
        .env_remove("STEWARD_SERVER")
        .env_remove("STEWARD_CA_FILE")
        .env_remove("STEWARD_USERNAME")
        .env_remove("STEWARD_PASSWORD")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("xdg"));
    cmd
}

#[test]
fn completion_prints_a_script_for_each_shell() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef steward"),
        ("fish", "complete -c steward"),
    ] {
        let out = steward(dir.path())
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(marker), "{shell} script lacks {marker:?}");
        for word in ["failover", "create", "operator"] {
            assert!(text.contains(word), "{shell} script lacks {word}");
        }
    }
}

#[test]
fn version_without_a_config_prints_the_client_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = steward(dir.path()).arg("version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("steward {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn a_client_command_without_a_config_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let out = steward(dir.path())
        .args(["show", "cluster"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("error: no Steward CLI configuration"),
        "{err}"
    );
    assert!(err.contains(".steward/dev/cli.yaml"), "{err}");
    assert!(err.contains("steward dev up"), "{err}");
}
