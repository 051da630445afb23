#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn file_text(server: &str) -> String {
    format!(
        "server: {server}\nca: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\nusername: admin\npassword: file-secret\nnamespace: team-a\n"
    )
}

fn now() -> Timestamp {
    "2026-11-26T12:00:00Z".parse().unwrap()
}

#[test]
fn the_file_is_found_flag_then_env_then_dev_dir_then_user_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("work");
    let xdg = tmp.path().join("xdg");
    let home = tmp.path().join("home");
    let flag = tmp.path().join("flag.yaml");
    let from_env = tmp.path().join("env.yaml");
    let env = Env::from_pairs([
        ("STEWARD_CONFIG", from_env.to_str().unwrap()),
        ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
        ("HOME", home.to_str().unwrap()),
    ]);
    // Explicit paths are taken as given, existing or not.
    let l = locate(Some(&flag), &env, &cwd);
    assert_eq!(l.found, Some((flag.clone(), Origin::Flag)));
    let l = locate(None, &env, &cwd);
    assert_eq!(l.found, Some((from_env.clone(), Origin::EnvVar)));

    // Without them: the dev state dir, then the user's config dir, only when they exist.
    let env = Env::from_pairs([
        ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
        ("HOME", home.to_str().unwrap()),
    ]);
    let dev = cwd.join(".steward/dev/cli.yaml");
    let user = xdg.join("steward/cli.yaml");
    let l = locate(None, &env, &cwd);
    assert_eq!(l.found, None);
    assert_eq!(l.looked, vec![dev.clone(), user.clone()]);
    write(&user, &file_text("https://user:1"));
    assert_eq!(
        locate(None, &env, &cwd).found,
        Some((user.clone(), Origin::UserConfigDir))
    );
    write(&dev, &file_text("https://dev:1"));
    assert_eq!(
        locate(None, &env, &cwd).found,
        Some((dev.clone(), Origin::DevStateDir))
    );

    // $HOME/.config when $XDG_CONFIG_HOME is not set.
    let env = Env::from_pairs([("HOME", home.to_str().unwrap())]);
    assert_eq!(
        user_config_path(&env),
        Some(home.join(".config/steward/cli.yaml"))
    );
}

#[test]
fn flags_override_the_environment_which_overrides_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cli.yaml");
    write(&path, &file_text("https://file:8443/"));
    let ca_file = tmp.path().join("other-ca.pem");
    std::fs::write(&ca_file, "OTHER CA").unwrap();
    let flags = Overrides {
        config: Some(path.clone()),
        ..Overrides::default()
    };

    // The file alone.
    let s = resolve(&flags, &Env::default(), tmp.path(), now()).unwrap();
    assert_eq!(s.server, "https://file:8443");
    assert_eq!(s.ca_pem, CA);
    assert_eq!(s.namespace, "team-a");
    assert_eq!(
        s.credentials,
        Credentials::Basic {
            username: "admin".into(),
            password: "file-secret".into()
        }
    );
    assert_eq!(s.file.as_deref(), Some(path.as_path()));

    // The environment over the file.
    let env = Env::from_pairs([
        ("STEWARD_SERVER", "https://env:1"),
        ("STEWARD_CA_FILE", ca_file.to_str().unwrap()),
        ("STEWARD_USERNAME", "ops"),
        ("STEWARD_PASSWORD", "env-secret"),
    ]);
    let s = resolve(&flags, &env, tmp.path(), now()).unwrap();
    assert_eq!(s.server, "https://env:1");
    assert_eq!(s.ca_pem, "OTHER CA");
    assert_eq!(
        s.credentials,
        Credentials::Basic {
            username: "ops".into(),
            password: "env-secret".into()
        }
    );

    // Flags over the environment.
    let flags = Overrides {
        config: Some(path.clone()),
        server: Some("https://flag:2".into()),
        username: Some("alice".into()),
        namespace: Some("team-b".into()),
        ..Overrides::default()
    };
    let s = resolve(&flags, &env, tmp.path(), now()).unwrap();
    assert_eq!(s.server, "https://flag:2");
    assert_eq!(s.namespace, "team-b");
    assert_eq!(
        s.credentials,
        Credentials::Basic {
            username: "alice".into(),
            password: "env-secret".into()
        }
    );

    // Flags and environment alone make up for a missing file.
    let env = Env::from_pairs([
        ("STEWARD_SERVER", "https://env:1"),
        ("STEWARD_CA_FILE", ca_file.to_str().unwrap()),
    ]);
    let s = resolve(&Overrides::default(), &env, tmp.path(), now()).unwrap();
    assert_eq!(
        (s.server.as_str(), s.namespace.as_str()),
        ("https://env:1", "default")
    );
    assert_eq!(s.credentials, Credentials::None);
}

#[test]
fn a_missing_config_says_where_it_looked_and_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::from_pairs([("HOME", tmp.path().to_str().unwrap())]);
    let err = resolve(&Overrides::default(), &env, tmp.path(), now()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ConfigError::Missing { .. }), "{text}");
    assert!(text.contains(".steward/dev/cli.yaml"), "{text}");
    assert!(text.contains(".config/steward/cli.yaml"), "{text}");
    assert!(text.contains("steward dev up"), "{text}");

    // An explicit file that is not there is named.
    let flags = Overrides {
        config: Some(tmp.path().join("nope.yaml")),
        ..Overrides::default()
    };
    let text = resolve(&flags, &env, tmp.path(), now())
        .unwrap_err()
        .to_string();
    assert!(text.contains("nope.yaml"), "{text}");
}

#[test]
fn no_plain_http_and_no_server_without_a_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cli.yaml");
    write(&path, &file_text("http://plain:80"));
    let flags = Overrides {
        config: Some(path.clone()),
        ..Overrides::default()
    };
    let text = resolve(&flags, &Env::default(), tmp.path(), now())
        .unwrap_err()
        .to_string();
    assert!(text.contains("https://"), "{text}");
    write(&path, "server: https://x:1\nusername: a\n");
    let text = resolve(&flags, &Env::default(), tmp.path(), now())
        .unwrap_err()
        .to_string();
    assert!(text.contains("no CA"), "{text}");
}

#[test]
fn the_stored_token_is_used_until_it_expires_then_basic_auth_again() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cli.yaml");
    write(&path, &format!("# dev plane\n{}", file_text("https://x:1")));
    store_token(&path, "tok-1", "2026-11-26T13:00:00Z").unwrap();
    store_token(&path, "tok-2", "2026-11-26T13:00:00Z").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# dev plane\n"), "{text}");
    assert!(text.contains("  -----BEGIN CERTIFICATE-----\n"), "{text}");
    assert_eq!(text.matches("token:").count(), 1, "{text}");
    assert!(text.ends_with("token: tok-2\ntokenExpires: 2026-11-26T13:00:00Z\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let flags = Overrides {
        config: Some(path.clone()),
        ..Overrides::default()
    };
    let at = |t: &str| resolve(&flags, &Env::default(), tmp.path(), t.parse().unwrap());
    let s = at("2026-11-26T12:30:00Z").unwrap();
    assert_eq!(s.credentials, Credentials::Token("tok-2".into()));
    // The password stays at hand for a refused token.
    assert_eq!(s.basic.as_ref().map(|(u, _)| u.as_str()), Some("admin"));
    // Within the last half minute, and after: basic auth.
    for t in ["2026-11-26T12:59:45Z", "2026-11-26T14:00:00Z"] {
        assert!(matches!(
            at(t).unwrap().credentials,
            Credentials::Basic { .. }
        ));
    }
    // Another user (flag or environment) does not use the file user's token.
    let env = Env::from_pairs([("STEWARD_USERNAME", "ops"), ("STEWARD_PASSWORD", "p")]);
    let s = resolve(
        &flags,
        &env,
        tmp.path(),
        "2026-11-26T12:30:00Z".parse().unwrap(),
    )
    .unwrap();
    assert!(matches!(s.credentials, Credentials::Basic { .. }));

    // A new file (no config in use yet) is created, directories included.
    let fresh = tmp.path().join("new/steward/cli.yaml");
    store_token(&fresh, "t", "2026-11-26T13:00:00Z").unwrap();
    let parsed = read_file(&fresh).unwrap();
    assert_eq!(parsed.token.as_deref(), Some("t"));
}

#[test]
fn debug_output_shows_no_password_or_token() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cli.yaml");
    write(&path, &file_text("https://x:1"));
    store_token(&path, "tok-secret", "2026-11-26T13:00:00Z").unwrap();
    let file = read_file(&path).unwrap();
    let flags = Overrides {
        config: Some(path),
        ..Overrides::default()
    };
    let settings = resolve(&flags, &Env::default(), tmp.path(), now()).unwrap();
    let basic_only = resolve(
        &flags,
        &Env::from_pairs([("STEWARD_PASSWORD", "env-secret")]),
        tmp.path(),
        now(),
    )
    .unwrap();
    for text in [
        format!("{file:?}"),
        format!("{settings:?}"),
        format!("{basic_only:?}"),
    ] {
        for secret in ["file-secret", "tok-secret", "env-secret"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("admin"), "{text}");
    }
}
