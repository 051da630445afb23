//! Step tests against the admin model.
