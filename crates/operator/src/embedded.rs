//! An in-process control plane for the self-check and tests: Steward's embedded API server on a
//! free loopback port, a client for it, and Steward's CRDs installed and established.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use steward_apiserver::{ApiServerHandle, ServerConfig};

/// Why the embedded control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The API server failed to start.
    #[error("starting the embedded API server failed: {0}")]
    Server(String),
    /// The client could not be built.
    #[error("building a client for the embedded API server failed: {0}")]
    Client(String),
    /// Installing CRDs or namespaces failed.
    #[error("installing {what} failed: {source}")]
    Install {
        /// What.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The CRDs were not established in time.
    #[error("{0}")]
    Crds(#[from] crate::runtime::crds::CrdError),
}

/// A running embedded control plane.
pub struct Embedded {
    /// The API server.
    pub server: ApiServerHandle,
    /// An admin client for it (the admin token: group `system:masters`).
    pub client: Client,
}

impl Embedded {
    /// Starts the API server, installs Steward's CRDs and the given namespaces.
    pub async fn start(namespaces: &[&str]) -> Result<Self, EmbeddedError> {
        Self::start_with(ServerConfig::default(), namespaces).await
    }

    /// [`Embedded::start`] with a server configuration (bind address, state file). CRDs are
    /// server-side applied, so a restart from a state file updates them in place.
    pub async fn start_with(
        config: ServerConfig,
        namespaces: &[&str],
    ) -> Result<Self, EmbeddedError> {
        let server = steward_apiserver::start(config)
            .await
            .map_err(|e| EmbeddedError::Server(e.to_string()))?;
        let url = server
            .url()
            .parse()
            .map_err(|e: http::uri::InvalidUri| EmbeddedError::Client(e.to_string()))?;
        let mut config = Config::new(url);
        config.auth_info.token = Some(server.admin_token().into());
        let client = Client::try_from(config).map_err(|e| EmbeddedError::Client(e.to_string()))?;
        install_crds(&client).await?;
        let ns_api: Api<Namespace> = Api::all(client.clone());
        for ns in namespaces {
            let object = Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some((*ns).to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match ns_api.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(source) => {
                    return Err(EmbeddedError::Install {
                        what: format!("namespace {ns}"),
                        source,
                    });
                }
            }
        }
        Ok(Self { server, client })
    }
}

/// Server-side applies Steward's CRDs (field manager `steward-install`) and waits until they
/// are `Established`: a real API server serves a new CRD's resources only then (404 for about a
/// second after the create).
pub async fn install_crds(client: &Client) -> Result<(), EmbeddedError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("steward-install").force();
    for crd in steward_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|source| EmbeddedError::Install {
                what: format!("CRD {name}"),
                source,
            })?;
    }
    crate::runtime::crds::wait_established(client, Duration::from_secs(30)).await?;
    Ok(())
}
