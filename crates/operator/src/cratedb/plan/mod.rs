//! (pure) The decisions of the CrateDB engine: the scaling order and the rolling restart.

pub mod restart;
pub mod scale;
