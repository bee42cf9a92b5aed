//! What a Job is made from, as it is recorded for the volume's later actions (a deprovision
//! or expansion after its ConfigMap changed or went), and how a Job's environment is read
//! back.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::{Deserialize, Serialize};

/// How to run one kind of Job. The deprovision recipe is recorded on the PV when the volume
/// is provisioned, so deprovisioning works after the ConfigMap changed or was deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecipe {
    /// Namespace the Jobs run in: the ConfigMap's, admin-owned, never the user's.
    pub namespace: String,
    /// `namespace/name` of the ConfigMap the recipe came from.
    pub config: String,
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Already rendered: the claim may be gone when a deprovision recipe is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// The node the pod must run on (`node-local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    pub timeout_seconds: u64,
    pub retries: u32,
    pub permanent_exit_codes: BTreeSet<i32>,
    /// The pod gets no service account token (`pv-creator: controller`): its image has no
    /// business with the API, so a compromised one cannot reach it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_api_token: bool,
    /// The volume's directory in the class's `volume-base`: the pod mounts only what the
    /// action needs of it (isolation.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeDirectory>,
}

/// Where one volume lives, recorded with its Jobs' recipes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeDirectory {
    /// The pod-template volume holding the class's volumes (`volume-base`).
    pub base: String,
    /// The volume's directory inside it (`volume-directory`, rendered for its claim).
    pub directory: String,
}

/// A recipe the controller put on a provisioning Job (`ANN_DEPROVISION_SPEC`,
/// `ANN_EXPAND_SPEC`).
pub fn recipe_of(job: &Job, key: &str) -> Option<JobRecipe> {
    serde_json::from_str(crate::names::annotation(&job.metadata, key)?).ok()
}

/// The PV a provisioning Job was to make (its `PV_TEMPLATE`).
pub fn pv_template_of(job: &Job) -> Option<k8s_openapi::api::core::v1::PersistentVolume> {
    serde_json::from_str(&env_of(job, "PV_TEMPLATE")?).ok()
}

/// The value of an environment variable the controller set on a Job's container.
pub fn env_of(job: &Job, name: &str) -> Option<String> {
    job.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}
