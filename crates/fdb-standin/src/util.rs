//! Small shared pieces: the cluster file, fdbcli's key escaping, knobs, durable writes, the
//! protocol version derived from a release version.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A connection string `description:id@ip:port,ip:port,…` (FoundationDB's cluster file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionString {
    pub description: String,
    pub id: String,
    pub coordinators: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid connection string `{0}': {1}")]
pub struct BadConnectionString(pub String, pub &'static str);

impl ConnectionString {
    /// Parses a cluster file's content: the first non-empty line that is not a `#` comment.
    pub fn parse(text: &str) -> Result<Self, BadConnectionString> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap_or("");
        let bad = |why| BadConnectionString(line.to_owned(), why);
        let (head, addrs) = line.split_once('@').ok_or_else(|| bad("no `@'"))?;
        let (description, id) = head
            .split_once(':')
            .ok_or_else(|| bad("no `:' before `@'"))?;
        if description.is_empty()
            || !description
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(bad("the description must be alphanumeric or `_'"));
        }
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad("the id must be alphanumeric"));
        }
        let coordinators: Vec<String> = addrs
            .split(',')
            .map(|a| a.trim().trim_end_matches(":tls").to_owned())
            .collect();
        if coordinators.iter().any(|a| !is_address(a)) {
            return Err(bad("coordinators must be IP:PORT"));
        }
        Ok(Self {
            description: description.to_owned(),
            id: id.to_owned(),
            coordinators,
        })
    }

    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read cluster file {}: {e}", path.display()))?;
        Ok(Self::parse(&text)?)
    }

    /// Rewrites the cluster file durably (as FoundationDB does after a coordinator change).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        write_durably(path, format!("{self}\n").as_bytes())
    }
}

impl std::fmt::Display for ConnectionString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}@{}",
            self.description,
            self.id,
            self.coordinators.join(",")
        )
    }
}

/// `IP:PORT` with a numeric IPv4/IPv6 address.
pub fn is_address(a: &str) -> bool {
    a.parse::<std::net::SocketAddr>().is_ok()
}

/// The ordering key of an address: numeric where it parses, else textual.
pub fn address_key(a: &str) -> (Option<std::net::SocketAddr>, String) {
    (a.parse().ok(), a.to_owned())
}

/// fdbcli's printable form of a key or value: printable ASCII as is, `\` as `\\`, every other
/// byte as `\xNN`.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            32..=126 => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("unterminated quote")]
    UnterminatedQuote,
    #[error("invalid escape sequence `{0}'")]
    BadEscape(String),
}

/// Splits an fdbcli command line into commands (at `;`) of tokens (at spaces), decoding
/// quotes (`"a b"`) and escapes (`\xNN`, `\\`, `\"`, `\ `, `\;`) into raw bytes.
pub fn parse_command_line(line: &str) -> Result<Vec<Vec<Vec<u8>>>, ParseError> {
    let bytes = line.as_bytes();
    let mut commands = Vec::new();
    let mut tokens: Vec<Vec<u8>> = Vec::new();
    let mut token: Option<Vec<u8>> = None;
    let mut quoted = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'\\' => {
                let next = bytes.get(i + 1).copied();
                match next {
                    Some(b'x') | Some(b'X') => {
                        let hex = bytes
                            .get(i + 2..i + 4)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u8::from_str_radix(h, 16).ok());
                        let Some(v) = hex else {
                            let end = (i + 4).min(bytes.len());
                            return Err(ParseError::BadEscape(
                                String::from_utf8_lossy(&bytes[i..end]).into_owned(),
                            ));
                        };
                        token.get_or_insert_with(Vec::new).push(v);
                        i += 4;
                        continue;
                    }
                    Some(c) => {
                        token.get_or_insert_with(Vec::new).push(c);
                        i += 2;
                        continue;
                    }
                    None => return Err(ParseError::BadEscape("\\".into())),
                }
            }
            b'"' => {
                quoted = !quoted;
                token.get_or_insert_with(Vec::new);
            }
            b' ' | b'\t' | b'\n' | b'\r' if !quoted => {
                if let Some(t) = token.take() {
                    tokens.push(t);
                }
            }
            b';' if !quoted => {
                if let Some(t) = token.take() {
                    tokens.push(t);
                }
                if !tokens.is_empty() {
                    commands.push(std::mem::take(&mut tokens));
                }
            }
            _ => token.get_or_insert_with(Vec::new).push(b),
        }
        i += 1;
    }
    if quoted {
        return Err(ParseError::UnterminatedQuote);
    }
    if let Some(t) = token.take() {
        tokens.push(t);
    }
    if !tokens.is_empty() {
        commands.push(tokens);
    }
    Ok(commands)
}

/// Bytes serialised as a lowercase hex string (keys and values in the persisted state).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let hex: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
        s.serialize_str(&hex)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd hex length"));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| {
                s.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| serde::de::Error::custom("bad hex"))
            })
            .collect::<Result<Vec<u8>, _>>()
            .map(Bytes)
    }
}

/// Writes a file durably: a temporary file, fsync, rename, fsync of the directory.
pub fn write_durably(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A duration knob from the environment (milliseconds, or seconds for `*_SECONDS`, fractions
/// allowed), else the default.
pub fn knob(name: &str, default: Duration) -> Duration {
    let Ok(v) = std::env::var(name) else {
        return default;
    };
    let Ok(n) = v.trim().parse::<f64>() else {
        return default;
    };
    if !n.is_finite() || n < 0.0 {
        return default;
    }
    if name.ends_with("_SECONDS") {
        Duration::from_secs_f64(n)
    } else {
        Duration::from_secs_f64(n / 1000.0)
    }
}

/// The stand-in's timings (FoundationDB's are similar in scale).
#[derive(Clone, Debug)]
pub struct Timings {
    /// How often every process heartbeats to every coordinator.
    pub heartbeat: Duration,
    /// A candidate whose heartbeat is older is not nominated.
    pub liveness: Duration,
    /// A process whose heartbeat is older is unreachable (failed).
    pub failure: Duration,
    /// How long a recovery stays in `recruiting_transaction_servers`.
    pub recovery: Duration,
    /// How long moving an excluded storage server's data takes.
    pub data_move: Duration,
}

impl Timings {
    pub fn from_env() -> Self {
        Self {
            heartbeat: knob("FDB_STANDIN_HEARTBEAT_MS", Duration::from_millis(500)),
            liveness: knob("FDB_STANDIN_LIVENESS_MS", Duration::from_millis(2000)),
            failure: knob("FDB_STANDIN_FAILURE_MS", Duration::from_millis(3000)),
            recovery: knob("FDB_STANDIN_RECOVERY_MS", Duration::from_millis(1000)),
            data_move: knob("FDB_STANDIN_MOVE_SECONDS", Duration::from_secs(3)),
        }
    }
}

pub const DEFAULT_VERSION: &str = "7.1.57";

/// The version this process runs as: `$FDB_STANDIN_VERSION` (a monitor starting a server of
/// its configuration's version sets it), else the tag of the image the node agent runs this
/// stand-in for (`$STEWARD_STANDIN_IMAGE`, e.g. `foundationdb/fdb-kubernetes-monitor:7.3.43`:
/// a real image carries its version), else 7.1.57.
pub fn own_version() -> String {
    std::env::var("FDB_STANDIN_VERSION")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| {
            std::env::var("STEWARD_STANDIN_IMAGE")
                .ok()
                .and_then(|image| image_version(&image))
        })
        .unwrap_or_else(|| DEFAULT_VERSION.to_owned())
}

/// The FoundationDB version an image reference's tag names (`repo:7.3.43`, a registry port
/// and a digest allowed), if the tag is `major.minor.patch`.
pub fn image_version(image: &str) -> Option<String> {
    let image = image.split('@').next().unwrap_or(image);
    let (repo, tag) = image.rsplit_once(':')?;
    if tag.contains('/') || repo.is_empty() {
        return None;
    }
    let parts: Vec<&str> = tag.split('.').collect();
    (parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| tag.to_owned())
}

/// The protocol version of a release: one per major.minor (patch releases are compatible),
/// shaped like FoundationDB's (7.1 → `fdb00b071010000`, 7.3 → `fdb00b073000000`).
pub fn protocol_version(version: &str) -> String {
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or("0");
    let minor = parts.next().unwrap_or("0");
    match (major, minor) {
        ("7", "1") => "fdb00b071010000".to_owned(),
        ("6", "3") => "fdb00b063010000".to_owned(),
        _ => format!("fdb00b0{major}{minor}000000"),
    }
}

/// A stable 32-hex-digit process id from an address (FNV-1a, twice).
pub fn process_id(address: &str) -> String {
    let h = |seed: u64| {
        address.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    format!(
        "{:016x}{:016x}",
        h(0xcbf2_9ce4_8422_2325),
        h(0x8422_2325_cbf2_9ce4)
    )
}

/// A random-looking alphanumeric id for a new connection string.
pub fn random_id() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut x = (nanos as u64) ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..16)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(alphabet[(x % alphabet.len() as u64) as usize])
        })
        .collect()
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings_parse_and_print() {
        let cs = ConnectionString::parse("# comment\n\nmydb:Ab12@127.0.0.1:4500,10.0.0.2:4501\n")
            .unwrap();
        assert_eq!(cs.description, "mydb");
        assert_eq!(cs.id, "Ab12");
        assert_eq!(cs.coordinators, ["127.0.0.1:4500", "10.0.0.2:4501"]);
        assert_eq!(cs.to_string(), "mydb:Ab12@127.0.0.1:4500,10.0.0.2:4501");
        let tls = ConnectionString::parse("a_b:x@127.0.0.1:4500:tls").unwrap();
        assert_eq!(tls.coordinators, ["127.0.0.1:4500"]);
        for bad in [
            "",
            "noat",
            "d@127.0.0.1:1",
            "d-x:id@127.0.0.1:1",
            "d:i-d@127.0.0.1:1",
            "d:id@host:1",
            "d:id@127.0.0.1",
        ] {
            assert!(ConnectionString::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fdbcli_escaping_round_trips() {
        let cmds = parse_command_line(
            r#"writemode on; set \xff\x02/org.foundationdb.kubernetes-operator/global "a b\"c" ; get k\\x"#,
        )
        .unwrap();
        assert_eq!(cmds.len(), 3);
        assert_eq!(cmds[0], vec![b"writemode".to_vec(), b"on".to_vec()]);
        let mut key = vec![0xff, 0x02];
        key.extend_from_slice(b"/org.foundationdb.kubernetes-operator/global");
        assert_eq!(cmds[1][1], key);
        assert_eq!(cmds[1][2], b"a b\"c".to_vec());
        assert_eq!(cmds[2][1], b"k\\x".to_vec());
        assert_eq!(
            printable(&key),
            r"\xff\x02/org.foundationdb.kubernetes-operator/global"
        );
        assert_eq!(printable(b"a\\b\n"), r"a\\b\x0a");
        assert_eq!(
            parse_command_line(r"get \xZZ").unwrap_err(),
            ParseError::BadEscape(r"\xZZ".into())
        );
        assert_eq!(
            parse_command_line("get \"a").unwrap_err(),
            ParseError::UnterminatedQuote
        );
        assert_eq!(
            parse_command_line("set k \"\"").unwrap()[0][2],
            Vec::<u8>::new()
        );
        assert!(parse_command_line(" ; ;").unwrap().is_empty());
    }

    #[test]
    fn hex_bytes_serde() {
        let b = Bytes(vec![0, 0xff, b'a']);
        let j = serde_json::to_string(&b).unwrap();
        assert_eq!(j, "\"00ff61\"");
        assert_eq!(serde_json::from_str::<Bytes>(&j).unwrap(), b);
        assert!(serde_json::from_str::<Bytes>("\"0\"").is_err());
    }

    #[test]
    fn an_image_tag_names_the_version() {
        assert_eq!(
            image_version("foundationdb/fdb-kubernetes-monitor:7.3.43").as_deref(),
            Some("7.3.43")
        );
        assert_eq!(
            image_version("registry:5000/foundationdb/foundationdb:7.1.57@sha256:ab").as_deref(),
            Some("7.1.57")
        );
        assert_eq!(
            image_version("registry:5000/foundationdb/foundationdb"),
            None
        );
        assert_eq!(image_version("foundationdb/foundationdb:latest"), None);
    }

    #[test]
    fn protocol_versions_follow_major_minor() {
        assert_eq!(protocol_version("7.1.57"), "fdb00b071010000");
        assert_eq!(protocol_version("7.1.61"), "fdb00b071010000");
        assert_eq!(protocol_version("7.3.43"), "fdb00b073000000");
        assert_ne!(protocol_version("7.2.0"), protocol_version("7.3.0"));
    }
}
