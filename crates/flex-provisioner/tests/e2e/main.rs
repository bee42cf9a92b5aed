//! The end-to-end suite: the controller, the command line and the shipped images against a
//! cluster (the sandbox by default; a real control plane with `FLEX_E2E_K8S`, see
//! `scripts/e2e-real`). One binary, a module a subject; the support code is the
//! `flex-testing` crate, here `common`. The offline commands' tests are `tests/offline`.

use flex_testing as common;

mod admission_policy;
mod burst;
mod cli;
mod cloning;
mod controller_creates_pv;
mod data_safety;
mod deprovisioning;
mod expansion;
mod forged_records;
mod hostile_claims;
mod hostile_classes;
mod image_hardening;
mod images;
mod images_on_node;
mod leader_fencing;
mod manifests;
mod metrics;
mod provisioning;
mod quick_start;
mod rbac;
mod report_limits;
mod restart;
mod snapshots;
