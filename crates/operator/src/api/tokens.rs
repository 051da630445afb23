//! (pure, with the key and the clock passed in) Bearer tokens issued by `POST /api/v1/login`:
//! short-lived, signed with HMAC-SHA256 (`ring`) by a key every operator replica shares (a
//! Secret), naming the user and the expiry: `<base64url(user:expiry)>.<base64url(mac)>`. A
//! token is checked by its signature and expiry, then the user is looked up again, so a user
//! removed or re-roled is so at once.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use ring::hmac;

use super::access::Denied;

/// How long a token is valid.
pub const TOKEN_TTL_SECONDS: i64 = 3600;

/// Signs and checks tokens. `Debug` shows no key.
pub struct TokenKey {
    key: hmac::Key,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey { <redacted> }")
    }
}

impl TokenKey {
    /// A key from secret bytes (at least 32).
    pub fn new(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < 32 {
            return Err("a token key needs at least 32 bytes".into());
        }
        Ok(Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        })
    }

    /// A token for `user`, valid until `now` + [`TOKEN_TTL_SECONDS`]; and that expiry.
    pub fn issue(&self, user: &str, now: Timestamp) -> (String, Timestamp) {
        let expiry = Timestamp::from_second(now.as_second() + TOKEN_TTL_SECONDS).unwrap_or(now);
        let claim = format!("{user}:{}", expiry.as_second());
        let mac = hmac::sign(&self.key, claim.as_bytes());
        (
            format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(claim),
                URL_SAFE_NO_PAD.encode(mac.as_ref())
            ),
            expiry,
        )
    }

    /// The user a token names, if its signature holds and it has not expired at `now`.
    pub fn check(&self, token: &str, now: Timestamp) -> Result<String, Denied> {
        let (claim, mac) = token.split_once('.').ok_or(Denied::Unauthenticated)?;
        let claim = URL_SAFE_NO_PAD
            .decode(claim)
            .map_err(|_| Denied::Unauthenticated)?;
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| Denied::Unauthenticated)?;
        hmac::verify(&self.key, &claim, &mac).map_err(|_| Denied::Unauthenticated)?;
        let claim = String::from_utf8(claim).map_err(|_| Denied::Unauthenticated)?;
        let (user, expiry) = claim.rsplit_once(':').ok_or(Denied::Unauthenticated)?;
        let expiry: i64 = expiry.parse().map_err(|_| Denied::Unauthenticated)?;
        if now.as_second() >= expiry {
            return Err(Denied::Unauthenticated);
        }
        Ok(user.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_user_until_it_expires_and_cannot_be_forged() {
        let key = TokenKey::new(&[7; 32]).unwrap();
        let t0: Timestamp = "2026-11-26T10:00:00Z".parse().unwrap();
        let (token, expiry) = key.issue("ann", t0);
        assert_eq!(expiry.as_second() - t0.as_second(), TOKEN_TTL_SECONDS);
        assert_eq!(key.check(&token, t0).unwrap(), "ann");
        assert_eq!(key.check(&token, expiry), Err(Denied::Unauthenticated));
        // Another key's token, an edited claim, garbage: refused.
        let other = TokenKey::new(&[8; 32]).unwrap();
        assert!(other.check(&token, t0).is_err());
        let (claim, mac) = token.split_once('.').unwrap();
        let forged = format!("{}.{mac}", URL_SAFE_NO_PAD.encode("root:9999999999"));
        assert!(key.check(&forged, t0).is_err());
        assert!(key.check(claim, t0).is_err());
        assert!(key.check("x.y", t0).is_err());
        assert!(TokenKey::new(b"short").is_err());
        assert_eq!(format!("{key:?}"), "TokenKey { <redacted> }");
    }
}
