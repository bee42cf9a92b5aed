//! ConfigMap + StorageClass -> validated class configuration (pure; docs/configuration.md).
//!
//! Bad configuration never produces a Job: parsing returns every problem it finds, each
//! naming the key and the fix, and yields a configuration only when none blocks.

pub mod allowed;
mod class;
mod discovery;
pub mod keys;
mod options;
mod parse;
pub mod pod_template;
pub mod privilege;
mod problem;
mod report_error;
pub mod sources;
mod unsanitised;
pub mod values;
pub mod volume_layout;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplateSpec;

pub use allowed::AllowedVolumes;
pub use class::{ClassConfig, StorageClassInfo};
pub use discovery::{Unusable, is_config_map_for_class, select_for_class};
pub use options::{
    DEFAULT_CONFIG_NAMESPACE, DEFAULT_CONTROLLER_NAMESPACE, DEFAULT_CONTROLLER_SERVICE_ACCOUNT,
    ParseOptions,
};
pub use parse::{Verdict, parse_config_map, parse_config_map_with};
pub use problem::{ConfigErrors, Problem, Severity};
pub use report_error::ReportError;
pub use sources::PvCreator;
pub use volume_layout::VolumeLayout;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_RETRIES: u32 = 2;
pub const MAX_RETRIES: u32 = 20;
pub const DEFAULT_PERMANENT_EXIT_CODE: i32 = 2;
/// Parameters of one ConfigMap: each is an env var of the Job's container; real provisioners
/// need a handful, and this bounds the work of checking a ConfigMap of 1 MiB.
pub const MAX_PARAMETERS: usize = 256;
/// Template source of one ConfigMap, all parameters and arguments together: four templates
/// at the per-template maximum. Parsing templates is the costly part of checking a
/// ConfigMap (about 20 us per expression), so this keeps `check` well under a second.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

/// What one ConfigMap configures, validated, before it is joined with its StorageClass.
/// Its `Default` is no configuration at all; `parse` starts from the documented defaults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProvisionerConfig {
    pub namespace: String,
    pub name: String,
    /// The class named by the `storage-class` label.
    pub storage_class: String,
    pub image: String,
    pub service_account: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    pub command: Option<Vec<String>>,
    /// Each entry is a template rendered to exactly one argument.
    pub args: Option<Vec<String>>,
    pub deprovision_image: Option<String>,
    pub deprovision_command: Option<Vec<String>>,
    pub deprovision_args: Option<Vec<String>>,
    pub expand_image: Option<String>,
    pub expand_command: Option<Vec<String>>,
    pub expand_args: Option<Vec<String>>,
    /// `snapshots: "true"`: VolumeSnapshots of the class's claims are taken by its image.
    pub snapshots: bool,
    pub timeout: Duration,
    pub retries: u32,
    pub max_attempts: Option<u32>,
    pub permanent_exit_codes: BTreeSet<i32>,
    pub node_local: bool,
    pub pod_template: Option<PodTemplateSpec>,
    /// `allow-privileged: "true"`: the pod-template may give the pod power over its node.
    pub allow_privileged: bool,
    pub max_concurrent: Option<u32>,
    /// Who creates the PV: the controller from the image's report (default), or the image.
    pub pv_creator: PvCreator,
    /// The volume source types a PV of this class may have (`volume-sources`).
    pub volume_sources: BTreeSet<String>,
    /// What a report of each type may name (`allowed-paths`, `allowed-nfs-servers`...), and
    /// the namespace its secret references must name: this ConfigMap's.
    pub allowed_volumes: AllowedVolumes,
    /// The data source kinds a claim may name (`data-sources`): `Kind` for the core group
    /// (`PersistentVolumeClaim`), `group/Kind` otherwise.
    pub data_sources: BTreeSet<String>,
    /// `volume-base` and `volume-directory`: each Job mounts only its volume's directory.
    pub volume_layout: Option<VolumeLayout>,
    /// Each admin parameter's template, by key (handed to the pod as `parameter_env_name`).
    pub parameters: BTreeMap<String, String>,
    /// Keys whose templates read `node.*`, which only WaitForFirstConsumer classes have.
    pub node_users: Vec<String>,
}

impl ProvisionerConfig {
    /// Whether a claim may name `ds` as its data source: a kind `data-sources` lists, or a
    /// VolumeSnapshot in a class that takes snapshots (and so restores them).
    pub fn accepts_source(&self, ds: &crate::claim::DataSource) -> bool {
        self.data_sources.contains(&ds.kind_key()) || (ds.is_snapshot() && self.snapshots)
    }

    /// `namespace/name` of the ConfigMap, as recorded on PVs and shown in messages.
    pub fn source(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
