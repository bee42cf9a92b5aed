//! What should happen next: pure functions over API objects, returning a step and the
//! notices users should see. The controller only gathers the inputs and carries out steps.

pub mod claim;
pub mod retry;

/// Something to tell users about, once: `key` identifies it so it is not repeated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub key: String,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Notice {
    pub fn warning(
        key: impl Into<String>,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Notice {
            key: key.into(),
            warning: true,
            reason,
            message: message.into(),
        }
    }

    pub fn normal(
        key: impl Into<String>,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Notice {
            key: key.into(),
            warning: false,
            ..Notice::warning("", reason, message)
        }
    }
}

/// Event reasons on claims; the sig-storage library's where it has one.
pub mod reasons {
    pub const PROVISIONING: &str = "Provisioning";
    pub const SUCCEEDED: &str = "ProvisioningSucceeded";
    pub const FAILED: &str = "ProvisioningFailed";
    /// The Job's pod cannot start (image, scheduling, missing Secret or ServiceAccount).
    pub const POD_NOT_STARTING: &str = "ProvisionerPodNotStarting";
    /// The class's configuration is invalid or missing.
    pub const CONFIG_INVALID: &str = "ProvisioningConfigInvalid";
}
