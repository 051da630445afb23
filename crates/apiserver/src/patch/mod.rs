//! Patch algorithms over `serde_json::Value`: JSON merge patch (RFC 7386), JSON patch (RFC 6902),
//! strategic merge patch for built-in kinds, and server-side apply. Each is a pure function; the
//! request handling (preconditions, storage) lives in `handlers::write`.

pub mod apply;
pub mod json;
pub mod merge;
pub mod strategic;

/// The patch flavours, by request content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}
