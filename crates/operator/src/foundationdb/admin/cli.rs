//! (pure) fdbcli's text: its key escaping, the answer of `get`, and the global lock's keys and
//! tuple value (seed 002, "Locking Operations").

use super::FdbError;

/// The global lock's key.
pub const LOCK_KEY: &[u8] = b"\xff\x02/org.foundationdb.kubernetes-operator/global";

/// The deny list entry of `id`.
pub fn deny_key(id: &str) -> Vec<u8> {
    let mut key = b"\xff\x02/org.foundationdb.kubernetes-operator/denyList/".to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

/// The first key of the list of process groups prepared for the upgrade to `version` (seed
/// 002, "BounceProcesses": shared through the lock system between operator instances):
/// `…/upgrades/<version>/<processGroupID>` holds the ID.
pub fn upgrades_prefix(version: &str) -> Vec<u8> {
    let mut key = b"\xff\x02/org.foundationdb.kubernetes-operator/upgrades/".to_vec();
    key.extend_from_slice(version.as_bytes());
    key.push(b'/');
    key
}

/// The key recording that process group `id` is prepared for the upgrade to `version`.
pub fn upgrade_key(version: &str, id: &str) -> Vec<u8> {
    let mut key = upgrades_prefix(version);
    key.extend_from_slice(id.as_bytes());
    key
}

/// The first key after every key that starts with `prefix` (FoundationDB's `strinc`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            break;
        }
    }
    end
}

/// Key-value pairs, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The key-value pairs fdbcli's `getrange` printed (`` `key' is `value' `` lines).
pub fn parse_range(output: &str) -> Result<Pairs, FdbError> {
    let mut pairs = Vec::new();
    for line in output.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix('`') else {
            continue;
        };
        let Some((key, value)) = rest.split_once("' is `") else {
            continue;
        };
        let value = value.strip_suffix('\'').ok_or_else(|| {
            FdbError::Unreadable(format!("getrange printed an unterminated value: {line:?}"))
        })?;
        pairs.push((unescape(key)?, unescape(value)?));
    }
    Ok(pairs)
}

/// fdbcli's escaping for a command's argument: letters, digits and punctuation fdbcli gives no
/// meaning as themselves, `\` as `\\`, anything else `\xNN` — among them the space (it separates
/// tokens), `"` (it quotes), `;` (it separates the commands of `--exec`) and the quotes fdbcli
/// prints around keys and values. (A lock value whose timestamp held a `;` byte was once cut
/// in two by `--exec`: the database kept a truncated tuple.)
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b' ' | b'"' | b';' | b'\'' | b'`' => out.push_str(&format!("\\x{b:02x}")),
            b'!'..=b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

/// The bytes of fdbcli's escaped text.
pub fn unescape(text: &str) -> Result<Vec<u8>, FdbError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if bytes.get(i + 1) == Some(&b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            b'\\' if bytes.get(i + 1) == Some(&b'x') => {
                let hex = text.get(i + 2..i + 4).ok_or_else(|| {
                    FdbError::Unreadable(format!("a short \\x escape in {text:?}"))
                })?;
                let b = u8::from_str_radix(hex, 16)
                    .map_err(|_| FdbError::Unreadable(format!("bad \\x escape in {text:?}")))?;
                out.push(b);
                i += 4;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// The value `get` printed: `` `key' is `value' `` → `Some(value)`, `` `key': not found `` →
/// `None`.
pub fn parse_get(output: &str) -> Result<Option<Vec<u8>>, FdbError> {
    for line in output.lines() {
        let line = line.trim();
        if line.ends_with("': not found") {
            return Ok(None);
        }
        if let Some(pos) = line.find("' is `") {
            let value = &line[pos + "' is `".len()..];
            let value = value.strip_suffix('\'').ok_or_else(|| {
                FdbError::Unreadable(format!("get printed an unterminated value: {line:?}"))
            })?;
            return unescape(value).map(Some);
        }
    }
    Err(FdbError::Unreadable(format!(
        "get printed neither a value nor `not found`: {:?}",
        output.trim()
    )))
}

/// The global lock's value: `(lockID, start, end)`, seconds since the epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockValue {
    /// The holder's lock ID.
    pub id: String,
    /// When it took the lock.
    pub start: i64,
    /// When the lock expires.
    pub end: i64,
}

impl LockValue {
    /// The tuple-layer encoding.
    pub fn pack(&self) -> Vec<u8> {
        foundationdb_tuple::pack(&(self.id.as_str(), self.start, self.end))
    }

    /// From the tuple-layer encoding.
    pub fn unpack(bytes: &[u8]) -> Result<Self, FdbError> {
        let (id, start, end): (String, i64, i64) = foundationdb_tuple::unpack(bytes)
            .map_err(|e| FdbError::Unreadable(format!("the global lock's value: {e:?}")))?;
        Ok(Self { id, start, end })
    }
}

/// What the operator may do about the lock (seed 002).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockDecision {
    /// Write `value`: a new lock, the extension of ours, or over an expired or denied holder's.
    Write(LockValue),
    /// Another instance holds it until `until`.
    Held {
        /// The holder.
        holder: String,
        /// Its expiry.
        until: i64,
    },
    /// This instance is on the deny list.
    Denied,
}

/// (pure) The seed's rule: denied → fail; no lock, ours, expired, or held by a denied instance
/// → take (or extend) it for `duration` seconds from `now`; else wait.
pub fn decide_lock(
    me: &str,
    current: Option<&LockValue>,
    me_denied: bool,
    holder_denied: bool,
    now: i64,
    duration: i64,
) -> LockDecision {
    if me_denied {
        return LockDecision::Denied;
    }
    let take = |start: i64| {
        LockDecision::Write(LockValue {
            id: me.to_owned(),
            start,
            end: now + duration,
        })
    };
    match current {
        None => take(now),
        Some(l) if l.id == me => take(l.start),
        Some(l) if now > l.end || holder_denied => take(now),
        Some(l) => LockDecision::Held {
            holder: l.id.clone(),
            until: l.end,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_fdbcli_gives_a_meaning_are_escaped_and_a_lock_value_survives_exec() {
        assert_eq!(escape(b"a;b\"c'd`e f"), "a\\x3bb\\x22c\\x27d\\x60e\\x20f");
        // A lock whose timestamps hold `;` and `"` bytes: through the model, which splits
        // `--exec` on `;` as fdbcli does, it reads back whole.
        let value = LockValue {
            id: "dc2".into(),
            start: 0x6a3b_3b22,
            end: 0x6a3b_3d7a,
        };
        let packed = value.pack();
        assert!(packed.contains(&b';') && packed.contains(&b'"'));
        let model = crate::foundationdb::admin::model::ModelFdb::default();
        {
            let mut state = model.state();
            state.available = true;
            state.configuration = Some("double ssd-2".into());
        }
        let targets = [crate::foundationdb::admin::Target {
            namespace: "db".into(),
            pod: "demo-storage-1".into(),
        }];
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            crate::foundationdb::admin::ops::set(&model, &targets, LOCK_KEY, &packed)
                .await
                .unwrap();
            let read = crate::foundationdb::admin::ops::read_lock(&model, &targets)
                .await
                .unwrap();
            assert_eq!(read, Some(value));
        });
    }

    #[test]
    fn the_upgrade_list_reads_back_from_getrange() {
        let prefix = upgrades_prefix("7.3.43");
        assert_eq!(
            escape(&upgrade_key("7.3.43", "demo-log-1")),
            "\\xff\\x02/org.foundationdb.kubernetes-operator/upgrades/7.3.43/demo-log-1"
        );
        assert_eq!(prefix_end(&prefix).last(), Some(&b'0'));
        assert_eq!(prefix_end(b"a\xff\xff"), b"b".to_vec());
        let out = "\nRange limited to 25 keys\n`\\xff\\x02/x/a' is `demo-log-1'\n`\\xff\\x02/x/b' is `demo\\x20b'\n";
        assert_eq!(
            parse_range(out).unwrap(),
            vec![
                (b"\xff\x02/x/a".to_vec(), b"demo-log-1".to_vec()),
                (b"\xff\x02/x/b".to_vec(), b"demo b".to_vec())
            ]
        );
        assert!(
            parse_range("\nRange limited to 25 keys\n")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn escaping_round_trips_and_matches_fdbcli() {
        assert_eq!(
            escape(LOCK_KEY),
            "\\xff\\x02/org.foundationdb.kubernetes-operator/global"
        );
        assert_eq!(escape(b"a b\\"), "a\\x20b\\\\");
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(unescape(&escape(&bytes)).unwrap(), bytes);
        assert!(unescape("\\x").is_err());
    }

    #[test]
    fn get_answers_are_read() {
        assert_eq!(
            parse_get("`k' is `v\\x00w'\n").unwrap(),
            Some(b"v\x00w".to_vec())
        );
        assert_eq!(parse_get("`k': not found\n").unwrap(), None);
        assert!(parse_get("ERROR: nonsense").is_err());
    }

    #[test]
    fn the_lock_value_is_a_tuple() {
        let v = LockValue {
            id: "demo".into(),
            start: 100,
            end: 700,
        };
        assert_eq!(LockValue::unpack(&v.pack()).unwrap(), v);
        assert!(LockValue::unpack(b"\xffjunk").is_err());
    }

    #[test]
    fn the_lock_rules_of_the_seed() {
        let held = |id: &str, end| LockValue {
            id: id.into(),
            start: 0,
            end,
        };
        // Free: take it for the duration.
        assert_eq!(
            decide_lock("a", None, false, false, 10, 600),
            LockDecision::Write(LockValue {
                id: "a".into(),
                start: 10,
                end: 610
            })
        );
        // Ours: extended past now, start kept.
        assert_eq!(
            decide_lock("a", Some(&held("a", 50)), false, false, 40, 600),
            LockDecision::Write(LockValue {
                id: "a".into(),
                start: 0,
                end: 640
            })
        );
        // Another's, live: wait; expired: take; holder denied: take.
        assert_eq!(
            decide_lock("a", Some(&held("b", 50)), false, false, 40, 600),
            LockDecision::Held {
                holder: "b".into(),
                until: 50
            }
        );
        assert!(matches!(
            decide_lock("a", Some(&held("b", 50)), false, false, 51, 600),
            LockDecision::Write(_)
        ));
        assert!(matches!(
            decide_lock("a", Some(&held("b", 50)), false, true, 40, 600),
            LockDecision::Write(_)
        ));
        // Denied: never, even holding it.
        assert_eq!(
            decide_lock("a", Some(&held("a", 50)), true, false, 40, 600),
            LockDecision::Denied
        );
    }
}
