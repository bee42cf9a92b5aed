//! flex-core: everything flex-provisioner decides, as pure functions over Kubernetes API
//! objects: the ConfigMap and StorageClass model (`config`), templates (`template`), the
//! claim view (`claim`), the plans for claims and volumes (`plan`), and the Job and PV
//! builders (`job`, `volume`).
//!
//! It must not depend on a Kubernetes client, an HTTP stack or an async runtime: it reads
//! objects and returns values, and the controller crate fetches, applies and watches. Cargo
//! enforces this through the dependency list.
#![forbid(unsafe_code)]

pub mod claim;
pub mod config;
mod error;
pub mod inputs;
pub mod isolation;
pub mod job;
pub mod names;
pub mod plan;
pub mod recipe;
pub mod record;
pub mod rendered;
pub mod snapshot;
pub mod source;
pub mod template;
pub mod volume;

pub use error::{Error, Result};
pub use kube_rules::quantity;
