//! Errors of the decisions (no Kubernetes client involved). `category()` gives a bounded
//! label for metrics and logs.
use crate::{claim, config, rendered};

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
}

impl Error {
    /// A label from a fixed set, safe to use in metrics (never an object name or message).
    pub fn category(&self) -> &'static str {
        match self {
            Error::Config(_) | Error::ConfigIgnored(_) | Error::ConfigMismatch(_) => "config",
            Error::Claim(_) => "claim",
            Error::Render(_) => "template",
            Error::Input { .. } => "input",
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
