//! Helpers shared by the sandbox's integration tests.

pub mod kubectl;
pub use kube_sandbox::testing as sandbox;
