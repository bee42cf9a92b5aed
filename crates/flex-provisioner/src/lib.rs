//! flex-provisioner: a Kubernetes dynamic volume provisioner that runs each provisioning
//! step as a Job built from an admin's ConfigMap.
#![forbid(unsafe_code)]

pub mod claim;
pub mod cli;
pub mod config;
pub mod controller;
pub mod http;
pub mod job;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod offline;
pub mod plan;
pub mod quantity;
pub mod rendered;
pub mod sandbox;
pub mod template;
pub mod volume;
pub mod volume_create;

/// Errors of the library. `category()` gives a bounded label for metrics and logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::ConfigErrors),
    #[error("the ConfigMap is not used: {0}")]
    ConfigIgnored(String),
    #[error("{0}")]
    ConfigMismatch(String),
    #[error("the claim cannot be provisioned: {0}")]
    Claim(claim::ClaimError),
    #[error(transparent)]
    Render(#[from] rendered::RenderFailure),
    #[error("{path}: {message}")]
    Input { path: String, message: String },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("leadership was lost; stopping so that only the new leader acts")]
    LeadershipLost,
}

impl Error {
    /// A label from a fixed set, safe to use in metrics (never an object name or message).
    pub fn category(&self) -> &'static str {
        match self {
            Error::Config(_) | Error::ConfigIgnored(_) | Error::ConfigMismatch(_) => "config",
            Error::Claim(_) => "claim",
            Error::Render(_) => "template",
            Error::Input { .. } => "input",
            Error::Kube(_) => "api",
            Error::LeadershipLost => "leader",
        }
    }
}

// Written out rather than `#[from]`, which would also make the claim error the `source`
// and print its message twice in an error chain.
impl From<claim::ClaimError> for Error {
    fn from(e: claim::ClaimError) -> Self {
        Error::Claim(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
