//! The end-to-end suite: the controller, the command line and the shipped images against a
//! cluster (the sandbox by default; a real control plane with `FLEX_E2E_K8S`, see
//! `scripts/e2e-real`), and the offline commands. One binary, a module a subject; the
//! support code is `common`.

mod common;

mod admission_policy;
mod burst;
mod cli;
mod cloning;
mod config_validation;
mod controller_creates_pv;
mod data_safety;
mod deprovisioning;
mod expansion;
mod forged_records;
mod golden;
mod hostile_claims;
mod hostile_classes;
mod hostile_config;
mod image_hardening;
mod images;
mod images_on_node;
mod job_shape;
mod leader_fencing;
mod manifests;
mod metrics;
mod provisioning;
mod quick_start;
mod rbac;
mod report_limits;
mod restart;
