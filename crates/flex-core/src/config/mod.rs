//! ConfigMap + StorageClass -> validated class configuration (pure; DESIGN §3).
//!
//! Bad configuration never produces a Job: parsing returns every problem it finds, each
//! naming the key and the fix, and yields a configuration only when none blocks.

mod class;
mod discovery;
pub mod keys;
mod parse;
pub mod pod_template;
mod problem;
pub mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplateSpec;

pub use class::{ClassConfig, StorageClassInfo};
pub use discovery::{is_config_map_for_class, select_for_class};
pub use parse::{Verdict, parse_config_map};
pub use problem::{ConfigErrors, Problem, Severity};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_RETRIES: u32 = 2;
pub const MAX_RETRIES: u32 = 20;
pub const DEFAULT_PERMANENT_EXIT_CODE: i32 = 2;

/// One admin parameter: its template and the env var it is handed in.
#[derive(Debug, Clone, PartialEq)]
pub struct Parameter {
    pub template: String,
    pub env: String,
}

/// What one ConfigMap configures, validated, before it is joined with its StorageClass.
#[derive(Debug, Clone, PartialEq)]
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
    pub timeout: Duration,
    pub retries: u32,
    pub max_attempts: Option<u32>,
    pub permanent_exit_codes: BTreeSet<i32>,
    pub node_local: bool,
    pub pod_template: Option<PodTemplateSpec>,
    pub max_concurrent: Option<u32>,
    pub parameters: BTreeMap<String, Parameter>,
    /// Keys whose templates read `node.*`, which only WaitForFirstConsumer classes have.
    pub node_users: Vec<String>,
}

impl ProvisionerConfig {
    /// `namespace/name` of the ConfigMap, as recorded on PVs and shown in messages.
    pub fn source(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
