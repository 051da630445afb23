//! The API's serving certificate and token key, kept in one Secret of the operator's namespace
//! (`steward-api-tls` unless `--api-tls-secret` names another): `tls.crt` (the serving
//! certificate, PEM), `tls.key` (its key), `ca.crt` (the CA clients trust) and `token-key` (32
//! random bytes every replica signs and checks bearer tokens with).
//!
//! When the Secret does not exist, Steward generates a CA and a serving certificate it signs
//! for the given host names and creates the Secret; when another replica wins that race (`409`)
//! the Secret is read again, so every replica serves the same certificate and shares one token
//! key. A Secret someone provides (cert-manager, say) is used as it is: Steward never rewrites
//! it. If it lacks `token-key`, the key is kept in a second Secret, `<name>-token-key`, created
//! the same way. Nothing here logs or returns key material in an error.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The Secret's default name.
pub const DEFAULT_SECRET: &str = "steward-api-tls";
/// The serving certificate's key in the Secret.
pub const CERT_KEY: &str = "tls.crt";
/// The private key's key in the Secret.
pub const PRIVATE_KEY_KEY: &str = "tls.key";
/// The CA's key in the Secret.
pub const CA_KEY: &str = "ca.crt";
/// The token key's key in the Secret.
pub const TOKEN_KEY_KEY: &str = "token-key";
/// Bytes of a generated token key.
const TOKEN_KEY_BYTES: usize = 32;

/// Why the serving certificate could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating a key or a certificate failed.
    #[error("generating the API's serving certificate failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// The Kubernetes API refused or did not answer.
    #[error("{action} Secret {namespace}/{secret} failed: {source}")]
    Kube {
        /// `reading` or `creating`.
        action: &'static str,
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        secret: String,
        /// The error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The Secret exists but does not hold a usable certificate, key or token key.
    #[error("Secret {namespace}/{secret} is not usable: {reason}")]
    Invalid {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        secret: String,
        /// What is wrong (a key's name, never its value).
        reason: String,
    },
}

impl TlsError {
    /// A stable label for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Generate(_) => "generate",
            Self::Kube { .. } => "kubernetes",
            Self::Invalid { .. } => "invalid-secret",
        }
    }

    /// Whether trying again later may help (the API server did not answer, or answered with
    /// a server error or "too many requests"); a refusal (`403`, a missing namespace) or an
    /// unusable Secret will not go away by itself.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(s) => s.code >= 500 || s.code == 429,
                _ => true,
            },
            Self::Generate(_) | Self::Invalid { .. } => false,
        }
    }
}

/// The API's serving certificate: the CA clients trust, the certificate and its key, all PEM.
/// `Debug` shows no key.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingCert {
    /// The CA certificate (PEM) clients trust; empty when the Secret has no `ca.crt` (a
    /// certificate from a CA the clients already trust).
    pub ca_pem: String,
    /// The serving certificate (PEM; may be followed by intermediates).
    pub cert_pem: String,
    /// The serving certificate's private key (PEM).
    pub key_pem: String,
}

impl fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServingCert")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The host names the API's certificate is for by default: `localhost`, `127.0.0.1` and the
/// `steward-api` Service's names in `namespace`, then `extra` (`--api-hostnames`).
pub fn default_hostnames(namespace: &str, extra: &[String]) -> Vec<String> {
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "steward-api".to_owned(),
        format!("steward-api.{namespace}"),
        format!("steward-api.{namespace}.svc"),
        format!("steward-api.{namespace}.svc.cluster.local"),
    ];
    for name in extra.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

impl ServingCert {
    /// A fresh CA (`Steward API CA`) and a serving certificate it signs for `hostnames` (DNS
    /// names or IP addresses). The CA's key is not kept: nothing is signed later.
    pub fn generate(hostnames: &[String]) -> Result<Self, TlsError> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Steward API CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(hostnames.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "steward-api");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The certificate chain and key as rustls wants them; the error names what is wrong.
    pub fn parts(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let chain = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| format!("{CERT_KEY} is not PEM"))?;
        if chain.is_empty() {
            return Err(format!("{CERT_KEY} holds no certificate"));
        }
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|_| format!("{PRIVATE_KEY_KEY} is not a PEM private key"))?;
        Ok((chain, key))
    }

    /// A rustls server configuration serving this certificate (ALPN `h2`, `http/1.1`).
    pub fn server_config(&self) -> Result<rustls::ServerConfig, String> {
        let (chain, key) = self.parts()?;
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("the certificate and key do not make a TLS configuration: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }

    /// (pure) The certificate in a Secret's data; checked to make a TLS configuration.
    fn from_data(data: &BTreeMap<String, ByteString>) -> Result<Self, String> {
        let text = |key: &str| -> Result<Option<String>, String> {
            data.get(key)
                .map(|v| String::from_utf8(v.0.clone()).map_err(|_| format!("{key} is not UTF-8")))
                .transpose()
        };
        let cert = Self {
            ca_pem: text(CA_KEY)?.unwrap_or_default(),
            cert_pem: text(CERT_KEY)?.ok_or_else(|| format!("key {CERT_KEY} is missing"))?,
            key_pem: text(PRIVATE_KEY_KEY)?
                .ok_or_else(|| format!("key {PRIVATE_KEY_KEY} is missing"))?,
        };
        cert.server_config()?;
        Ok(cert)
    }
}

/// (pure) The token key in a Secret's data, if it has one; an error when it is too short.
fn token_key_of(data: &BTreeMap<String, ByteString>) -> Result<Option<Vec<u8>>, String> {
    match data.get(TOKEN_KEY_KEY) {
        None => Ok(None),
        Some(k) if k.0.len() < TOKEN_KEY_BYTES => Err(format!(
            "key {TOKEN_KEY_KEY} is shorter than {TOKEN_KEY_BYTES} bytes"
        )),
        Some(k) => Ok(Some(k.0.clone())),
    }
}

fn secret(namespace: &str, name: &str, data: BTreeMap<String, Vec<u8>>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/part-of".to_owned(), "steward".to_owned()),
                ("app.kubernetes.io/component".to_owned(), "api".to_owned()),
            ])),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
        ..Default::default()
    }
}

/// Reads Secret `name`, or creates it from `make()` when absent; when another writer created
/// it first (`409`), reads the winner's. Returns its data.
async fn get_or_create(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
    make: impl FnOnce() -> Result<BTreeMap<String, Vec<u8>>, TlsError>,
) -> Result<BTreeMap<String, ByteString>, TlsError> {
    let kube_error = |action, source: kube::Error| TlsError::Kube {
        action,
        namespace: namespace.to_owned(),
        secret: name.to_owned(),
        source: Box::new(source),
    };
    if let Some(found) = api
        .get_opt(name)
        .await
        .map_err(|e| kube_error("reading", e))?
    {
        return Ok(found.data.unwrap_or_default());
    }
    let object = secret(namespace, name, make()?);
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => {
            tracing::info!(namespace, secret = name, "created the API's Secret");
            Ok(created.data.unwrap_or_default())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Another replica won the race: use what it stored.
            let found = api.get(name).await.map_err(|e| kube_error("reading", e))?;
            Ok(found.data.unwrap_or_default())
        }
        Err(e) => Err(kube_error("creating", e)),
    }
}

/// The serving certificate and the token key from Secret `secret_name` in `namespace`,
/// generated for `hostnames` and stored there when the Secret does not exist yet.
pub async fn load_or_create(
    client: &Client,
    namespace: &str,
    secret_name: &str,
    hostnames: &[String],
) -> Result<(ServingCert, Vec<u8>), TlsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let invalid = |secret: &str, reason: String| TlsError::Invalid {
        namespace: namespace.to_owned(),
        secret: secret.to_owned(),
        reason,
    };
    let data = get_or_create(&api, namespace, secret_name, || {
        let cert = ServingCert::generate(hostnames)?;
        Ok(BTreeMap::from([
            (CA_KEY.to_owned(), cert.ca_pem.into_bytes()),
            (CERT_KEY.to_owned(), cert.cert_pem.into_bytes()),
            (PRIVATE_KEY_KEY.to_owned(), cert.key_pem.into_bytes()),
            (TOKEN_KEY_KEY.to_owned(), new_token_key()),
        ]))
    })
    .await?;
    let cert = ServingCert::from_data(&data).map_err(|r| invalid(secret_name, r))?;
    if let Some(key) = token_key_of(&data).map_err(|r| invalid(secret_name, r))? {
        return Ok((cert, key));
    }
    // A Secret someone else provides (cert-manager): the token key lives beside it.
    let key_secret = format!("{secret_name}-token-key");
    let data = get_or_create(&api, namespace, &key_secret, || {
        Ok(BTreeMap::from([(
            TOKEN_KEY_KEY.to_owned(),
            new_token_key(),
        )]))
    })
    .await?;
    let key = token_key_of(&data)
        .map_err(|r| invalid(&key_secret, r))?
        .ok_or_else(|| invalid(&key_secret, format!("key {TOKEN_KEY_KEY} is missing")))?;
    Ok((cert, key))
}

fn new_token_key() -> Vec<u8> {
    rand::random::<[u8; TOKEN_KEY_BYTES]>().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificate_makes_a_tls_configuration_and_debug_hides_the_key() {
        let cert = ServingCert::generate(&default_hostnames(
            "steward-system",
            &["api.example.com".into()],
        ))
        .unwrap();
        assert!(cert.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(cert.server_config().is_ok());
        let debug = format!("{cert:?}");
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
        assert!(debug.contains("<redacted>"));
        // Round trip through a Secret's data.
        let data: BTreeMap<String, ByteString> = [
            (CA_KEY, &cert.ca_pem),
            (CERT_KEY, &cert.cert_pem),
            (PRIVATE_KEY_KEY, &cert.key_pem),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
        .collect();
        assert_eq!(ServingCert::from_data(&data).unwrap(), cert);
        let mut broken = data.clone();
        broken.insert(PRIVATE_KEY_KEY.into(), ByteString(b"garbage".to_vec()));
        let e = ServingCert::from_data(&broken).unwrap_err();
        assert!(e.contains(PRIVATE_KEY_KEY) && !e.contains("garbage"), "{e}");
        assert_eq!(
            token_key_of(&BTreeMap::from([(
                TOKEN_KEY_KEY.to_owned(),
                ByteString(vec![1; 8])
            )]))
            .unwrap_err(),
            "key token-key is shorter than 32 bytes"
        );
    }

    #[test]
    fn default_hostnames_name_the_service_in_the_namespace_and_add_the_extra_ones_once() {
        let names = default_hostnames(
            "ops",
            &["api.example.com".into(), "localhost".into(), " ".into()],
        );
        assert_eq!(
            names,
            [
                "localhost",
                "127.0.0.1",
                "steward-api",
                "steward-api.ops",
                "steward-api.ops.svc",
                "steward-api.ops.svc.cluster.local",
                "api.example.com"
            ]
        );
    }

    async fn plane() -> crate::embedded::Embedded {
        let _ = rustls::crypto::ring::default_provider().install_default();
        crate::embedded::Embedded::start(&["steward-system"])
            .await
            .unwrap()
    }

    async fn secrets(client: &Client) -> Vec<String> {
        let api: Api<Secret> = Api::namespaced(client.clone(), "steward-system");
        let mut names: Vec<String> = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .filter(|n| n.starts_with("steward-api"))
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn the_certificate_is_generated_once_and_reused_and_a_create_race_yields_one() {
        let plane = plane().await;
        let names = default_hostnames("steward-system", &[]);
        // Two replicas starting at once: both end up with the one stored certificate and key.
        let (a, b) = tokio::join!(
            load_or_create(&plane.client, "steward-system", DEFAULT_SECRET, &names),
            load_or_create(&plane.client, "steward-system", DEFAULT_SECRET, &names),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a, b);
        assert_eq!(a.1.len(), TOKEN_KEY_BYTES);
        let again = load_or_create(&plane.client, "steward-system", DEFAULT_SECRET, &names)
            .await
            .unwrap();
        assert_eq!(again, a);
        assert_eq!(secrets(&plane.client).await, [DEFAULT_SECRET]);
    }

    #[tokio::test]
    async fn a_provided_secret_without_a_token_key_gets_one_beside_it() {
        let plane = plane().await;
        let cert = ServingCert::generate(&["localhost".to_owned()]).unwrap();
        let api: Api<Secret> = Api::namespaced(plane.client.clone(), "steward-system");
        let provided = secret(
            "steward-system",
            "my-tls",
            BTreeMap::from([
                (CERT_KEY.to_owned(), cert.cert_pem.clone().into_bytes()),
                (
                    PRIVATE_KEY_KEY.to_owned(),
                    cert.key_pem.clone().into_bytes(),
                ),
            ]),
        );
        api.create(&PostParams::default(), &provided).await.unwrap();
        let (got, key) = load_or_create(&plane.client, "steward-system", "my-tls", &[])
            .await
            .unwrap();
        assert_eq!(got.cert_pem, cert.cert_pem);
        assert_eq!(got.ca_pem, "");
        let (_, again) = load_or_create(&plane.client, "steward-system", "my-tls", &[])
            .await
            .unwrap();
        assert_eq!(key, again);
        assert!(api.get_opt("my-tls-token-key").await.unwrap().is_some());
    }
}
