//! Helpers shared by the sandbox's integration tests.

pub mod kubectl;
pub mod sandbox;
