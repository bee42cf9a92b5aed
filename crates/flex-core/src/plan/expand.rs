//! Growing a bound volume of ours when its claim's request grows (classes with
//! `allowVolumeExpansion`): an expansion Job built from the volume's record, then the PV's
//! capacity and the claim's status written as Kubernetes' external resizer leaves them for a
//! volume that needs no node-side step.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::{Ask, Decision, Notice, reasons};
use crate::job::{JobOutcome, attempt_of, expand_job, outcome, pod_failure, pods_of};
use crate::names::LABEL_SIZE;
use crate::quantity::parse_bytes;
use crate::record::Record;

/// `status.allocatedResourceStatuses[storage]` values, as the resizer writes them.
pub const RESIZE_IN_PROGRESS: &str = "ControllerResizeInProgress";
pub const RESIZE_INFEASIBLE: &str = "ControllerResizeInfeasible";
/// Claim condition types the resizer manages.
const CONDITION_RESIZING: &str = "Resizing";
const CONDITION_ERROR: &str = "ControllerResizeError";
const RESIZE_CONDITIONS: [&str; 3] = [
    CONDITION_RESIZING,
    CONDITION_ERROR,
    "FileSystemResizePending",
];
/// How often a running expansion is looked at without a change.
const RUNNING_RECHECK: Duration = Duration::from_secs(30);

pub struct ExpandInputs<'a> {
    pub claim: &'a PersistentVolumeClaim,
    pub pv: Option<&'a PersistentVolume>,
    pub provisioner_name: &'a str,
    /// The claim's StorageClass has `allowVolumeExpansion: true`.
    pub class_allows: bool,
    /// The claim's expansion Jobs.
    pub jobs: Vec<&'a Job>,
    pub pods: Vec<&'a Pod>,
    /// The volume's record, once read from the API server (`None`: not read yet).
    pub record: Option<Result<Record, crate::record::RecordError>>,
    pub retry_base: Duration,
    pub ttl_seconds: i32,
    pub now: jiff::Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExpandStep {
    /// Nothing to grow.
    Ignore,
    /// Mark the claim (a merge patch of its status) and start the Job.
    Start { job: Box<Job>, status: Value },
    /// A Job runs, or the next attempt is due after this long.
    Wait(Duration),
    /// The storage has grown: patch the PV (when it still shows less), then the claim status.
    Finish {
        pv_patch: Option<Value>,
        status: Value,
    },
    /// A permanent failure: mark the claim; nothing is retried until its request changes.
    Fail { status: Value },
    /// Cannot be expanded as it stands (no usable record); told in the notices.
    Blocked,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExpandPlan {
    pub step: ExpandStep,
    pub notices: Vec<Notice>,
}

fn plan(step: ExpandStep, notices: Vec<Notice>) -> ExpandPlan {
    ExpandPlan { step, notices }
}

fn bytes_of(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Option<u128> {
    q.and_then(|q| parse_bytes(&q.0).ok())
        .map(|b| u128::from(b.0))
}

/// The `storage` entry of a map of resources.
fn storage_of<T>(resources: Option<&std::collections::BTreeMap<String, T>>) -> Option<&T> {
    resources?.get("storage")
}

/// The claim's status conditions without the resizer's, plus `extra`.
fn conditions_with(claim: &PersistentVolumeClaim, extra: Option<Value>) -> Value {
    let mut out: Vec<Value> = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    out.extend(extra);
    Value::Array(out)
}

fn condition(type_: &str, message: Option<&str>, now: jiff::Timestamp) -> Value {
    let mut c = json!({"type": type_, "status": "True",
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()});
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// A merge patch of the claim's status carrying its resourceVersion, so that it applies to
/// the claim as it was judged or fails with 409.
fn status_patch(claim: &PersistentVolumeClaim, status: Value) -> Value {
    json!({"metadata": {"resourceVersion": claim.metadata.resource_version}, "status": status})
}

/// `allocatedResourceStatuses` with the storage entry set to `value` (or removed).
fn resource_statuses(claim: &PersistentVolumeClaim, value: Option<&str>) -> Value {
    let others = claim
        .status
        .as_ref()
        .and_then(|s| s.allocated_resource_statuses.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k != "storage")
        .count();
    match value {
        Some(v) => json!({"storage": v}),
        None if others == 0 => Value::Null,
        None => json!({"storage": null}),
    }
}

/// The next step for a claim that may grow; a Job is built from the volume's record, asked
/// for ([`Ask::Record`]) only once one is due.
pub fn plan_expand(i: ExpandInputs<'_>) -> Decision<ExpandPlan> {
    let Some(g) = growth(&i) else {
        return Ok(plan(ExpandStep::Ignore, vec![]));
    };
    // Already as big (an earlier Job grew it; the claim's status was not written yet).
    if g.pv_capacity >= g.requested {
        return Ok(g.finish(None, vec![g.success()]));
    }
    let latest = i.jobs.iter().copied().max_by_key(|j| attempt_of(j));
    let mut notices = Vec::new();
    if let Some(job) = latest {
        notices.extend(pod_failures(&i, &g, job));
        if let Some(done) = judge_latest(&i, &g, job, &mut notices) {
            return Ok(done);
        }
    }
    let next_attempt = latest.map_or(1, |j| attempt_of(j) + 1);
    start(&i, &g, next_attempt, notices)
}

/// A bound claim of ours asking for more than it has.
struct Growth<'a> {
    claim: &'a PersistentVolumeClaim,
    pv: &'a k8s_openapi::api::core::v1::PersistentVolume,
    pv_name: String,
    /// The request, in bytes and as written.
    requested: u128,
    size: String,
    pv_capacity: u128,
}

/// Whether the claim is to grow: bound to a volume of ours in a class that allows it,
/// asking for more than its capacity, and not given up on for this very size.
fn growth<'a>(i: &ExpandInputs<'a>) -> Option<Growth<'a>> {
    let claim = i.claim;
    let (spec, status) = (claim.spec.as_ref()?, claim.status.as_ref()?);
    let pv = i.pv?;
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let ours = crate::volume::provisioned_by(pv, i.provisioner_name);
    let bound_to_it = status.phase.as_deref() == Some("Bound")
        && spec.volume_name.as_deref() == Some(pv_name.as_str())
        && crate::volume::claim_uid(pv) == claim.metadata.uid.as_deref();
    if !ours || !bound_to_it || claim.metadata.deletion_timestamp.is_some() || !i.class_allows {
        return None;
    }
    let requested_q = storage_of(spec.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let requested = bytes_of(requested_q)?;
    let current = bytes_of(storage_of(status.capacity.as_ref()))?;
    if requested <= current {
        return None;
    }
    // Marked infeasible for this very size: given up until the request changes (also once
    // the failed Job is gone, and without rewriting the status it already shows).
    let infeasible = storage_of(status.allocated_resource_statuses.as_ref())
        .is_some_and(|s| s == RESIZE_INFEASIBLE);
    let allocated = bytes_of(storage_of(status.allocated_resources.as_ref()));
    if infeasible && allocated == Some(requested) {
        return None;
    }
    let pv_capacity = bytes_of(storage_of(
        pv.spec.as_ref().and_then(|s| s.capacity.as_ref()),
    ));
    let pv_capacity = pv_capacity.unwrap_or(0);
    Some(Growth {
        claim,
        pv,
        pv_name,
        requested,
        size: requested_q.map(|q| q.0.clone()).unwrap_or_default(),
        pv_capacity,
    })
}

impl Growth<'_> {
    fn success(&self) -> Notice {
        Notice::normal(
            format!("expanded/{}", self.requested),
            reasons::RESIZE_SUCCESSFUL,
            "Resize volume succeeded",
        )
        .action("Expand")
    }

    /// The claim shows its new size (and the PV too, with `pv_patch`).
    fn finish(&self, pv_patch: Option<Value>, notices: Vec<Notice>) -> ExpandPlan {
        let claim = self.claim;
        let status = status_patch(
            claim,
            json!({"capacity": {"storage": self.size},
                   "allocatedResourceStatuses": resource_statuses(claim, None),
                   "conditions": conditions_with(claim, None)}),
        );
        plan(ExpandStep::Finish { pv_patch, status }, notices)
    }
}

/// Each failed pod of the latest Job, told at once with its own message (the Job's failure
/// may be seen before its pod's message is).
fn pod_failures(i: &ExpandInputs<'_>, g: &Growth<'_>, job: &Job) -> Vec<Notice> {
    let pv_name = &g.pv_name;
    pods_of(job, &i.pods)
        .into_iter()
        .filter_map(|pod| {
            let text = pod_failure(pod)?;
            let name = pod.metadata.name.clone().unwrap_or_default();
            Some(
                Notice::warning(
                    format!(
                        "expand-pod-failed/{}",
                        pod.metadata.uid.clone().unwrap_or_default()
                    ),
                    reasons::RESIZE_FAILED,
                    format!("resize volume \"{pv_name}\": expansion pod {name} failed with {text}"),
                )
                .action("Expand")
                .about(pod),
            )
        })
        .collect()
}

/// The latest expansion Job decides, unless the next attempt is due: it runs (one
/// expansion at a time, for any size), it grew the volume to this size, it failed for good
/// for this size, or its backoff is still running.
fn judge_latest(
    i: &ExpandInputs<'_>,
    g: &Growth<'_>,
    job: &Job,
    notices: &mut Vec<Notice>,
) -> Option<ExpandPlan> {
    let for_this_size = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SIZE))
        .and_then(|s| s.parse::<u128>().ok())
        == Some(g.requested);
    let (permanent, message, at) = match outcome(job, &i.pods) {
        JobOutcome::Running => {
            return Some(plan(
                ExpandStep::Wait(RUNNING_RECHECK),
                std::mem::take(notices),
            ));
        }
        JobOutcome::Succeeded if for_this_size => {
            let pv_patch = json!({"metadata": {"resourceVersion": g.pv.metadata.resource_version},
                                  "spec": {"capacity": {"storage": g.size}}});
            return Some(g.finish(Some(pv_patch), vec![g.success().about(job)]));
        }
        JobOutcome::Succeeded => return None,
        JobOutcome::Failed(f) => (f.permanent, f.message, f.at),
    };
    let name = job.metadata.name.clone().unwrap_or_default();
    let said = format!("resize volume \"{}\" failed: {message}", g.pv_name);
    notices.push(
        Notice::warning(
            format!("expand-failed/{name}"),
            reasons::RESIZE_FAILED,
            said.clone(),
        )
        .action("Expand")
        .about(job),
    );
    if !for_this_size {
        return None;
    }
    if permanent {
        let status = status_patch(
            g.claim,
            json!({"allocatedResourceStatuses": resource_statuses(g.claim, Some(RESIZE_INFEASIBLE)),
                   "conditions": conditions_with(g.claim, Some(condition(CONDITION_ERROR,
                       Some(&format!("failed to expand pvc with {said}")), i.now)))}),
        );
        return Some(plan(ExpandStep::Fail { status }, std::mem::take(notices)));
    }
    let wait = super::retry::wait_remaining(attempt_of(job), i.retry_base, at, i.now);
    (!wait.is_zero()).then(|| plan(ExpandStep::Wait(wait), std::mem::take(notices)))
}

/// Attempt `next_attempt`, built from the volume's record alone (never from the claim).
fn start(
    i: &ExpandInputs<'_>,
    g: &Growth<'_>,
    next_attempt: u32,
    mut notices: Vec<Notice>,
) -> Decision<ExpandPlan> {
    let record = match &i.record {
        None => return Err(Ask::Record),
        Some(Err(why)) => Err(why.clone()),
        Some(Ok(r)) => match r.expand.clone() {
            Some(recipe) => Ok((r, recipe)),
            None => Err(crate::record::RecordError::NoExpandRecipe),
        },
    };
    let (record, recipe) = match record {
        Ok(r) => r,
        Err(why) => {
            notices.push(
                Notice::warning(
                    format!("expand-blocked/{}", g.requested),
                    reasons::RESIZE_FAILED,
                    format!("cannot expand volume \"{}\": {why}; an admin can grow the storage by hand and set the PV's capacity", g.pv_name),
                )
                .action("Expand"),
            );
            return Ok(plan(ExpandStep::Blocked, notices));
        }
    };
    let job = expand_job(
        g.pv,
        &recipe,
        record,
        &g.size,
        i.provisioner_name,
        next_attempt,
        i.ttl_seconds,
    );
    notices.push(
        Notice::normal(
            format!("resizing/{}/{next_attempt}", g.requested),
            reasons::RESIZING,
            format!("External resizer is resizing volume {}", g.pv_name),
        )
        .action("Expand")
        .about(&job),
    );
    let status = status_patch(
        g.claim,
        json!({"allocatedResources": {"storage": g.size},
               "allocatedResourceStatuses": resource_statuses(g.claim, Some(RESIZE_IN_PROGRESS)),
               "conditions": conditions_with(g.claim, Some(condition(CONDITION_RESIZING, None, i.now)))}),
    );
    let job = Box::new(job);
    Ok(plan(ExpandStep::Start { job, status }, notices))
}

#[cfg(test)]
mod tests;
