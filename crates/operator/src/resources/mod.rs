//! Children of Steward's resources: recommended labels, owner references, server-side apply
//! with one field manager per scope, and the orphan sweep.

pub mod apply;
pub mod exec;
pub mod jobs;
pub mod labels;
pub mod nodes;
pub mod packed;
pub mod passwords;
pub mod pods;
pub mod secrets;
pub mod sweep;

pub use apply::{AppliedSet, Applier};
pub use labels::{Labels, child_meta};
