//! flex-controller: the in-cluster controller of flex-provisioner. It watches claims,
//! classes, ConfigMaps, Jobs, pods and PVs (kube-runtime), asks flex-core's plans what to
//! do, and carries it out; with leader election, metrics and the HTTP endpoints.
//!
//! Decisions belong in flex-core, not here: this crate only fetches, applies and watches.
//! It must not depend on the sandbox or the command line.
#![forbid(unsafe_code)]

pub mod controller;
pub mod fence;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod throttle;

/// Errors of the controller. `category()` gives a bounded label for metrics and logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Core(#[from] flex_core::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("leadership was lost; stopping so that only the new leader acts")]
    LeadershipLost,
    #[error("cannot start the thread that renews the leader Lease: {0}")]
    LeaseThread(std::io::Error),
    #[error(
        "the namespace {namespace:?} of the leader Lease does not exist: pass --namespace (env POD_NAMESPACE) naming an existing namespace where the controller may hold its Lease, or --no-leader-elect when only one instance can ever run"
    )]
    LeaseNamespaceMissing { namespace: String },
    #[error(
        "the controller may not hold its leader Lease in namespace {namespace:?} ({message}): pass --namespace (env POD_NAMESPACE) naming the namespace its RBAC grants Leases in (deploy/rbac.yaml), or --no-leader-elect when only one instance can ever run"
    )]
    LeaseForbidden { namespace: String, message: String },
}

impl Error {
    /// A label from a fixed set, safe to use in metrics (never an object name or message).
    pub fn category(&self) -> &'static str {
        match self {
            Error::Core(e) => e.category(),
            Error::Kube(_) => "api",
            Error::LeadershipLost
            | Error::LeaseThread(_)
            | Error::LeaseNamespaceMissing { .. }
            | Error::LeaseForbidden { .. } => "leader",
        }
    }
}

impl From<flex_core::claim::ClaimError> for Error {
    fn from(e: flex_core::claim::ClaimError) -> Self {
        Error::Core(e.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
