//! The next step for a PV we provisioned: nothing while it serves a claim; for a released
//! `Delete` volume, a deprovision Job (retried with backoff until the storage is gone), then
//! the PV removed; for `Retain`, nothing run, our finalizer removed when the PV is deleted.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};

use super::retry::{delay_after, wait_remaining};
use super::{Notice, reasons};
use crate::job::{JobOutcome, attempt_of, outcome, pods_of};
use crate::names::{ANN_PROVISIONED_BY, FINALIZER_DEPROVISION};

/// Set on a PV once its storage is gone (with our finalizer removed in the same write), so
/// a restarted controller never deprovisions twice.
pub const ANN_DEPROVISIONED: &str = "flex-provisioner.io/deprovisioned";

pub struct VolumeInputs<'a> {
    pub pv: &'a PersistentVolume,
    pub provisioner_name: &'a str,
    /// The claim named in claimRef exists with that uid (read from the API, not a cache:
    /// a wrong "gone" would destroy data).
    pub claim_alive: bool,
    /// A provisioning Job of the claim is still running (its pod may still be working).
    pub provisioning: bool,
    /// Deprovision Jobs of this PV, and their pods.
    pub jobs: Vec<&'a Job>,
    pub pods: Vec<&'a Pod>,
    pub retry_base: Duration,
    pub now: jiff::Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub enum VolumeStep {
    /// Not ours, or in use, or nothing to do yet.
    Ignore,
    /// Retain (or storage already gone): drop our finalizer so a deletion can complete.
    ReleaseFinalizer,
    /// Delete the PV object (its storage is gone).
    DeletePv,
    Start {
        attempt: u32,
    },
    Running,
    Backoff {
        wait: Duration,
    },
    /// The storage is gone: mark it, drop our finalizer, delete the PV.
    Finish,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolumePlan {
    pub step: VolumeStep,
    pub notices: Vec<Notice>,
}

fn plan(step: VolumeStep, notices: Vec<Notice>) -> VolumePlan {
    VolumePlan { step, notices }
}

pub fn plan_volume(i: &VolumeInputs<'_>) -> VolumePlan {
    let meta = &i.pv.metadata;
    let annotations = meta.annotations.clone().unwrap_or_default();
    if annotations.get(ANN_PROVISIONED_BY).map(String::as_str) != Some(i.provisioner_name) {
        return plan(VolumeStep::Ignore, vec![]);
    }
    let deleting = meta.deletion_timestamp.is_some();
    let has_finalizer = meta
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_DEPROVISION);
    let spec = i.pv.spec.clone().unwrap_or_default();
    let phase =
        i.pv.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
    if annotations.contains_key(ANN_DEPROVISIONED) {
        return plan(
            if has_finalizer {
                VolumeStep::ReleaseFinalizer
            } else if deleting {
                VolumeStep::Ignore
            } else {
                VolumeStep::DeletePv
            },
            vec![],
        );
    }
    let policy = spec
        .persistent_volume_reclaim_policy
        .as_deref()
        .unwrap_or("Delete");
    if policy != "Delete" {
        // Retain: the storage stays for the admin; only a deletion needs our finalizer gone.
        return plan(
            if deleting && has_finalizer {
                VolumeStep::ReleaseFinalizer
            } else {
                VolumeStep::Ignore
            },
            vec![],
        );
    }
    // In use: never touch storage a live claim is bound to, even if the PV was deleted
    // (Kubernetes keeps such a PV until the claim lets go).
    let released = phase == "Released" || phase == "Failed" || !i.claim_alive;
    if !released || (i.claim_alive && phase == "Bound") {
        return plan(VolumeStep::Ignore, vec![]);
    }
    if i.provisioning {
        return plan(VolumeStep::Running, vec![]);
    }
    let pv_name = meta.name.clone().unwrap_or_default();
    let latest = i.jobs.iter().copied().max_by_key(|j| attempt_of(j));
    let Some(job) = latest else {
        return plan(VolumeStep::Start { attempt: 1 }, vec![]);
    };
    let attempt = attempt_of(job);
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let pods = pods_of(job, &i.pods);
    match outcome(job, &pods) {
        JobOutcome::Running => plan(VolumeStep::Running, vec![]),
        JobOutcome::Succeeded => plan(VolumeStep::Finish, vec![]),
        JobOutcome::Failed { message, at, .. } => {
            let wait = delay_after(attempt, i.retry_base);
            let remaining = wait_remaining(attempt, i.retry_base, at, i.now);
            let notice = Notice::warning(
                format!("delete-failed/{uid}"),
                reasons::VOLUME_FAILED_DELETE,
                format!(
                    "deprovisioning {pv_name} failed (attempt {attempt}): {message}; the volume is kept and attempt {} starts in {}s",
                    attempt + 1,
                    wait.as_secs()
                ),
            )
            .about(job)
            .action("Deprovision");
            if remaining.is_zero() {
                plan(
                    VolumeStep::Start {
                        attempt: attempt + 1,
                    },
                    vec![notice],
                )
            } else {
                plan(VolumeStep::Backoff { wait: remaining }, vec![notice])
            }
        }
    }
}

#[cfg(test)]
mod tests;
