//! The StorageClass side of a configuration, and the checks that need both halves.

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::StorageClass;

use super::ProvisionerConfig;
use super::problem::Problem;

/// What we read from a StorageClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageClassInfo {
    pub name: String,
    pub provisioner: String,
    pub parameters: BTreeMap<String, String>,
    /// `Delete` (the Kubernetes default) or `Retain`.
    pub reclaim_policy: String,
    pub mount_options: Vec<String>,
    /// `Immediate` (the Kubernetes default) or `WaitForFirstConsumer`.
    pub volume_binding_mode: String,
}

impl StorageClassInfo {
    pub fn from_class(sc: &StorageClass) -> Self {
        StorageClassInfo {
            name: sc.metadata.name.clone().unwrap_or_default(),
            provisioner: sc.provisioner.clone(),
            parameters: sc.parameters.clone().unwrap_or_default(),
            reclaim_policy: sc.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
            mount_options: sc.mount_options.clone().unwrap_or_default(),
            volume_binding_mode: sc
                .volume_binding_mode
                .clone()
                .unwrap_or_else(|| "Immediate".into()),
        }
    }

    pub fn waits_for_consumer(&self) -> bool {
        self.volume_binding_mode == "WaitForFirstConsumer"
    }
}

/// A ConfigMap joined with the StorageClass it configures: everything needed to build Jobs
/// and PVs for the class's claims.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassConfig {
    pub provisioner: ProvisionerConfig,
    pub class: StorageClassInfo,
}

impl ClassConfig {
    /// Joins the halves, refusing combinations that could never provision a volume.
    pub fn new(
        provisioner: ProvisionerConfig,
        class: StorageClassInfo,
        provisioner_name: &str,
    ) -> Result<Self, Vec<Problem>> {
        let mut problems = Vec::new();
        if class.provisioner != provisioner_name {
            problems.push(Problem::error(
                None,
                format!(
                    "StorageClass `{}` names provisioner `{}`, not `{provisioner_name}`",
                    class.name, class.provisioner
                ),
                format!("set `provisioner: {provisioner_name}` in the StorageClass"),
            ));
        }
        if class.name != provisioner.storage_class {
            problems.push(Problem::error(
                None,
                format!(
                    "the ConfigMap is labelled for class `{}`, not `{}`",
                    provisioner.storage_class, class.name
                ),
                "set the `storage-class` label to the StorageClass name",
            ));
        }
        if !class.waits_for_consumer() {
            if provisioner.node_local {
                problems.push(Problem::error(
                    Some("node-local"),
                    format!(
                        "is `true`, but class `{}` binds Immediately, so no node is ever selected",
                        class.name
                    ),
                    "set `volumeBindingMode: WaitForFirstConsumer` in the StorageClass",
                ));
            }
            for key in &provisioner.node_users {
                problems.push(Problem::error(
                    Some(key),
                    format!(
                        "reads `node.*`, but class `{}` binds Immediately, so there is no node",
                        class.name
                    ),
                    "set `volumeBindingMode: WaitForFirstConsumer` in the StorageClass, or stop using node.*",
                ));
            }
        }
        if problems.is_empty() {
            Ok(ClassConfig { provisioner, class })
        } else {
            Err(problems)
        }
    }
}
