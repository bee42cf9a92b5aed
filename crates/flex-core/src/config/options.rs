//! What judging a ConfigMap needs beyond the ConfigMap: which provisioner we are, and which
//! ServiceAccount the controller itself runs as (a Job must never run as it).

/// Where and as whom deploy/ runs the controller.
pub const DEFAULT_CONTROLLER_NAMESPACE: &str = "flex-provisioner";
/// deploy/'s config namespace: provisioner ConfigMaps, their Jobs and the volume records.
pub const DEFAULT_CONFIG_NAMESPACE: &str = "flex-provisioner-config";
pub const DEFAULT_CONTROLLER_SERVICE_ACCOUNT: &str = "flex-provisioner";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseOptions {
    pub provisioner_name: String,
    /// The controller's own ServiceAccount: namespace and name.
    pub controller_namespace: String,
    pub controller_service_account: String,
}

impl ParseOptions {
    /// The options for `provisioner_name`, with the controller's account as deploy/ has it.
    pub fn new(provisioner_name: &str) -> Self {
        ParseOptions {
            provisioner_name: provisioner_name.to_owned(),
            controller_namespace: DEFAULT_CONTROLLER_NAMESPACE.to_owned(),
            controller_service_account: DEFAULT_CONTROLLER_SERVICE_ACCOUNT.to_owned(),
        }
    }
}
