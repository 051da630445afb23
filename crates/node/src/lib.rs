//! Steward node agent (under construction).
