//! The SQL text the client sends, built by pure functions.
//!
//! PostgreSQL's utility statements (`CREATE ROLE`, `ALTER ROLE ... PASSWORD`, `CREATE
//! DATABASE`, `GRANT`) take no bind parameters, so names and passwords go into the text:
//! - identifiers are double-quoted with `"` doubled (`quote_ident` semantics, always quoted so
//!   case and keywords survive); empty names, NUL bytes and names over 63 bytes (PostgreSQL
//!   would silently truncate them) are refused;
//! - literals follow `quote_literal`: `'` doubled, and if there is a backslash, backslashes
//!   doubled and an `E` prefix, which reads the same whatever `standard_conforming_strings` is;
//! - passwords never go in as clear text: [`password_verifier`] turns them into a salted
//!   SCRAM-SHA-256 verifier first, which PostgreSQL stores as is, so the clear text reaches
//!   neither the server's statement log nor `pg_stat_activity`.
//!
//! Errors name identifiers (not secret) but never a literal's or password's content.

use std::time::Duration;

use super::{PgAdminError, RoleOptions};

/// PostgreSQL's `NAMEDATALEN - 1`: the longest identifier, in bytes.
pub const MAX_IDENTIFIER_BYTES: usize = 63;

/// Quotes an identifier: `my "x"` becomes `"my ""x"""`.
pub fn quote_ident(name: &str) -> Result<String, PgAdminError> {
    if name.is_empty() {
        return Err(PgAdminError::Invalid("empty identifier".to_owned()));
    }
    if name.contains('\0') {
        return Err(PgAdminError::Invalid(format!(
            "identifier {:?} contains a NUL byte",
            name.replace('\0', "")
        )));
    }
    if name.len() > MAX_IDENTIFIER_BYTES {
        return Err(PgAdminError::Invalid(format!(
            "identifier {name:?} is longer than {MAX_IDENTIFIER_BYTES} bytes"
        )));
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// Quotes a string literal the way PostgreSQL's `quote_literal` does. The error does not show
/// the value.
pub fn quote_literal(value: &str) -> Result<String, PgAdminError> {
    if value.contains('\0') {
        return Err(PgAdminError::Invalid(
            "string literal contains a NUL byte".to_owned(),
        ));
    }
    let quoted = value.replace('\'', "''");
    Ok(if quoted.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    })
}

/// A salted SCRAM-SHA-256 verifier (`SCRAM-SHA-256$4096:<salt>$<stored key>:<server key>`) for
/// the password, normalised with SASLprep as PostgreSQL does. Empty passwords and NUL bytes are
/// refused (PostgreSQL could not check them at login).
pub fn password_verifier(password: &str) -> Result<String, PgAdminError> {
    check_password(password)?;
    Ok(postgres_protocol::password::scram_sha_256(
        password.as_bytes(),
    ))
}

/// Refuses passwords PostgreSQL could not check at login: empty ones and NUL bytes.
pub fn check_password(password: &str) -> Result<(), PgAdminError> {
    if password.is_empty() {
        return Err(PgAdminError::Invalid("empty password".to_owned()));
    }
    if password.contains('\0') {
        return Err(PgAdminError::Invalid(
            "password contains a NUL byte".to_owned(),
        ));
    }
    Ok(())
}

/// `CREATE ROLE` with every attribute spelled out and a password verifier.
pub fn create_role(
    name: &str,
    verifier: &str,
    options: &RoleOptions,
) -> Result<String, PgAdminError> {
    let flag = |on: bool, word: &str| {
        if on {
            format!(" {word}")
        } else {
            format!(" NO{word}")
        }
    };
    let limit = match options.connection_limit {
        None => -1,
        Some(n) => i32::try_from(n).map_err(|_| {
            PgAdminError::Invalid(format!(
                "connection limit {n} for role {name:?} is too large"
            ))
        })?,
    };
    Ok(format!(
        "CREATE ROLE {} WITH{}{}{}{} CONNECTION LIMIT {limit} PASSWORD {}",
        quote_ident(name)?,
        flag(options.login, "LOGIN"),
        flag(options.superuser, "SUPERUSER"),
        flag(options.replication, "REPLICATION"),
        flag(options.createdb, "CREATEDB"),
        quote_literal(verifier)?,
    ))
}

/// `ALTER ROLE ... PASSWORD` with a password verifier.
pub fn alter_password(name: &str, verifier: &str) -> Result<String, PgAdminError> {
    Ok(format!(
        "ALTER ROLE {} WITH PASSWORD {}",
        quote_ident(name)?,
        quote_literal(verifier)?
    ))
}

/// `DROP ROLE IF EXISTS`.
pub fn drop_role(name: &str) -> Result<String, PgAdminError> {
    Ok(format!("DROP ROLE IF EXISTS {}", quote_ident(name)?))
}

/// `CREATE DATABASE ... OWNER`.
pub fn create_database(name: &str, owner: &str) -> Result<String, PgAdminError> {
    Ok(format!(
        "CREATE DATABASE {} OWNER {}",
        quote_ident(name)?,
        quote_ident(owner)?
    ))
}

/// `GRANT ALL PRIVILEGES ON DATABASE`.
pub fn grant_database(role: &str, database: &str) -> Result<String, PgAdminError> {
    Ok(format!(
        "GRANT ALL PRIVILEGES ON DATABASE {} TO {}",
        quote_ident(database)?,
        quote_ident(role)?
    ))
}

/// `pg_promote`'s `wait_seconds`: whole seconds rounded up, at least 1 (it refuses 0).
pub fn promote_wait_seconds(wait: Duration) -> i32 {
    let secs = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// Replaces every occurrence of `secret` in a server message (which may quote the statement)
/// with `<redacted>`.
pub fn redact(message: &str, secret: &str) -> String {
    if secret.is_empty() {
        message.to_owned()
    } else {
        message.replace(secret, "<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_always_quoted_with_quotes_doubled() {
        assert_eq!(quote_ident("app").unwrap(), r#""app""#);
        assert_eq!(quote_ident("App User").unwrap(), r#""App User""#);
        assert_eq!(quote_ident(r#"a"b""#).unwrap(), r#""a""b""""#);
        assert_eq!(quote_ident(r#"""#).unwrap(), r#""""""#);
        assert_eq!(quote_ident("select").unwrap(), r#""select""#);
        assert_eq!(quote_ident("a'b\\c").unwrap(), r#""a'b\c""#);
        assert_eq!(quote_ident("größe").unwrap(), "\"größe\"");
        // 63 bytes is the limit, counted in bytes: 21 three-byte characters fit, 22 do not.
        assert!(quote_ident(&"x".repeat(63)).is_ok());
        assert!(quote_ident(&"€".repeat(21)).is_ok());
        for bad in [
            String::new(),
            "a\0b".to_owned(),
            "x".repeat(64),
            "€".repeat(22),
        ] {
            assert!(
                matches!(quote_ident(&bad), Err(PgAdminError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn literals_follow_quote_literal() {
        // Expected values are what PostgreSQL 15's quote_literal() returns.
        assert_eq!(quote_literal("abc").unwrap(), "'abc'");
        assert_eq!(quote_literal("").unwrap(), "''");
        assert_eq!(quote_literal("it's").unwrap(), "'it''s'");
        assert_eq!(quote_literal("''").unwrap(), "''''''");
        assert_eq!(quote_literal(r"a\b").unwrap(), r"E'a\\b'");
        assert_eq!(quote_literal(r"\'").unwrap(), r"E'\\'''");
        assert_eq!(quote_literal(r"x\").unwrap(), r"E'x\\'");
        assert_eq!(quote_literal("pässwörd ✓").unwrap(), "'pässwörd ✓'");
        assert_eq!(quote_literal("$$; DROP").unwrap(), "'$$; DROP'");
        assert_eq!(quote_literal("a\nb").unwrap(), "'a\nb'");
        let e = quote_literal("secret\0").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn verifiers_are_salted_scram_and_never_the_password() {
        let a = password_verifier("hunter2").unwrap();
        let b = password_verifier("hunter2").unwrap();
        assert!(a.starts_with("SCRAM-SHA-256$4096:"), "{a}");
        assert_ne!(a, b, "salted");
        assert!(!a.contains("hunter2"));
        // Nothing in a verifier needs quoting.
        assert_eq!(quote_literal(&a).unwrap(), format!("'{a}'"));
        assert!(matches!(
            password_verifier(""),
            Err(PgAdminError::Invalid(_))
        ));
        let e = password_verifier("top\0secret").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn statements() {
        let v = "SCRAM-SHA-256$4096:c2FsdA==$a:b";
        assert_eq!(
            create_role("app", v, &RoleOptions::default()).unwrap(),
            format!(
                "CREATE ROLE \"app\" WITH LOGIN NOSUPERUSER NOREPLICATION NOCREATEDB \
                 CONNECTION LIMIT -1 PASSWORD '{v}'"
            )
        );
        let opts = RoleOptions {
            login: false,
            superuser: true,
            replication: true,
            createdb: true,
            connection_limit: Some(5),
        };
        assert_eq!(
            create_role(r#"we"ird"#, v, &opts).unwrap(),
            format!(
                "CREATE ROLE \"we\"\"ird\" WITH NOLOGIN SUPERUSER REPLICATION CREATEDB \
                 CONNECTION LIMIT 5 PASSWORD '{v}'"
            )
        );
        let too_many = RoleOptions {
            connection_limit: Some(u32::MAX),
            ..RoleOptions::default()
        };
        assert!(matches!(
            create_role("app", v, &too_many),
            Err(PgAdminError::Invalid(_))
        ));
        assert_eq!(
            alter_password("app", v).unwrap(),
            format!("ALTER ROLE \"app\" WITH PASSWORD '{v}'")
        );
        assert_eq!(drop_role("app").unwrap(), "DROP ROLE IF EXISTS \"app\"");
        assert_eq!(
            create_database("app db", "app").unwrap(),
            "CREATE DATABASE \"app db\" OWNER \"app\""
        );
        assert_eq!(
            grant_database("app", "appdb").unwrap(),
            "GRANT ALL PRIVILEGES ON DATABASE \"appdb\" TO \"app\""
        );
        assert!(matches!(drop_role(""), Err(PgAdminError::Invalid(_))));
    }

    #[test]
    fn promote_waits_whole_seconds() {
        assert_eq!(promote_wait_seconds(Duration::ZERO), 1);
        assert_eq!(promote_wait_seconds(Duration::from_millis(1)), 1);
        assert_eq!(promote_wait_seconds(Duration::from_secs(60)), 60);
        assert_eq!(promote_wait_seconds(Duration::from_millis(60_001)), 61);
        assert_eq!(promote_wait_seconds(Duration::MAX), i32::MAX);
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact("syntax error at or near \"abc\" in abc", "abc"),
            "syntax error at or near \"<redacted>\" in <redacted>"
        );
        assert_eq!(redact("nothing here", ""), "nothing here");
    }
}
