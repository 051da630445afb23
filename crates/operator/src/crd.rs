//! `steward crd`: every CRD as one multi-document YAML stream, the content of
//! `deploy/crds/steward.dev.yaml` (a test fails when that file is stale).

/// Renders all CRDs as YAML documents separated by `---`.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in steward_api::crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}
