//! Running the local control plane's operator as a ServiceAccount instead of the admin: the
//! end-to-end tests apply `deploy/serviceaccount.yaml` and `deploy/rbac.yaml` (what the Helm
//! chart grants), ask `TokenRequest` for a token of the operator's ServiceAccount and start the
//! operator with it, so a permission missing from the manifests fails a test with a 403 before
//! it fails a user's install.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::{Client, Config};

use crate::dev::{DevError, apply_manifests};

/// Who the operator runs as.
#[derive(Clone, Debug)]
pub struct OperatorIdentity {
    /// Manifests applied (server-side, as the admin) before the operator starts: the
    /// ServiceAccount and its RBAC.
    pub manifests: String,
    /// The ServiceAccount's namespace (objects in `manifests` without one land there too).
    pub namespace: String,
    /// The ServiceAccount's name.
    pub service_account: String,
}

/// How long the operator's token lasts: longer than any test or `steward dev` session.
const TOKEN_SECONDS: i64 = 7 * 24 * 3600;

/// Applies the identity's manifests with `admin` and returns a client for `server_url`
/// authenticating with a fresh token of its ServiceAccount.
pub async fn client_for(
    admin: &Client,
    server_url: &str,
    identity: &OperatorIdentity,
) -> Result<Client, DevError> {
    apply_manifests(admin, &identity.manifests, &identity.namespace).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &identity.namespace);
    let request = TokenRequest {
        spec: Some(k8s_openapi::api::authentication::v1::TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..Default::default()
        }),
        ..Default::default()
    };
    let label = format!(
        "TokenRequest/{}/{}",
        identity.namespace, identity.service_account
    );
    let token = accounts
        .create_token_request(&identity.service_account, &PostParams::default(), &request)
        .await
        .map_err(|source| DevError::Apply {
            object: label.clone(),
            source,
        })?
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| DevError::Manifest(format!("{label} answered without a token")))?;
    let url = server_url
        .parse()
        .map_err(|e: http::uri::InvalidUri| DevError::Operator(e.to_string()))?;
    let mut config = Config::new(url);
    config.auth_info.token = Some(token.into());
    Client::try_from(config).map_err(|e| DevError::Operator(e.to_string()))
}
