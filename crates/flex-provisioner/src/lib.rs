//! flex-provisioner: the command line (`run`, `render`, `check`, `sandbox`, `volume`), the
//! offline commands, the `volume create` helper for images, and the sandbox command that
//! runs the controller inside a local Kubernetes.
//!
//! It also re-exports the other crates under one name, so that tests and tools can say
//! `flex_core::config` whichever crate holds it.
#![forbid(unsafe_code)]

pub mod cli;
pub mod offline;
#[cfg(feature = "sandbox")]
pub mod sandbox_cmd;
pub mod volume_create;
pub mod volume_source;
