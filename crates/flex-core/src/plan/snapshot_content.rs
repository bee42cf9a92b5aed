//! The state machine of one VolumeSnapshotContent of ours once its snapshot goes: delete the
//! content when its VolumeSnapshot is confirmed gone (policy `Delete`; the snapshot-controller
//! does the same when it runs), then, the content being deleted, remove the backend copy by
//! a delete-snapshot Job built from the snapshot's record alone (policy `Delete`), and drop
//! the finalizer that held the content. A content without a record of ours has nothing of
//! ours to delete: its finalizer is dropped and nothing runs.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::{Value, json};

use super::retry::{delay_after, wait_remaining};
use super::snapshot::reasons;
use super::snapshot_call::{CallStatus, SnapshotCall};
use super::{Ask, Decision, Notice, NoticeKind};
use crate::job::{JobOutcome, attempt_of, outcome, pods_of, report_of};
use crate::names::{ANN_CONTENT_UID, Action, annotation};
use crate::snapshot::jobs::{ANN_SNAPSHOT_HANDLE, delete_snapshot_job};
use crate::snapshot::record::{
    build_snapshot_record, leftover_of, read_attempt_record, read_snapshot_record, record_from_job,
};
use crate::snapshot::report::check_snapshot_report;
use crate::snapshot::{FINALIZER_CONTENT_BOUND, VolumeSnapshotContent};

/// How often a running delete-snapshot Job, or a snapshot Job a deleted content waits for,
/// is looked at besides its watch events.
pub const RUNNING_RECHECK: Duration = Duration::from_secs(30);

pub struct ContentInputs<'a> {
    pub content: &'a VolumeSnapshotContent,
    pub provisioner_name: &'a str,
    /// Whether its VolumeSnapshot (by the uid it is bound to) exists: from the cache, or
    /// once read from the API server ([`Ask::Snapshot`]); and whether it is being deleted.
    pub snapshot_exists: bool,
    pub snapshot_confirmed: bool,
    pub snapshot_deleting: bool,
    /// A restore's Job is copying from the content's snapshot.
    pub restoring: bool,
    /// The snapshot's record (from the API server when `record_read`).
    pub record: Option<&'a ConfigMap>,
    pub record_read: bool,
    /// The record of its attempts, read with `record`.
    pub attempt_record: Option<&'a ConfigMap>,
    /// The snapshot's Jobs (snapshot and delete-snapshot), and their pods.
    pub jobs: Vec<&'a Job>,
    pub pods: Vec<&'a Pod>,
    pub retry_base: Duration,
    pub job_ttl_seconds: i32,
    pub now: jiff::Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ContentStep {
    Ignore,
    Wait(Duration),
    /// Delete the content, provided it still has this uid.
    DeleteContent {
        uid: String,
    },
    /// The record of what a succeeded snapshot Job took, then plan again.
    WriteRecord(Box<ConfigMap>),
    CreateJob(Box<Job>),
    /// Drop the finalizer (a merge patch carrying `metadata.resourceVersion`).
    Finish(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContentPlan {
    pub step: ContentStep,
    pub notices: Vec<Notice>,
}

fn plan(step: ContentStep, notices: Vec<Notice>) -> Decision<ContentPlan> {
    Ok(ContentPlan { step, notices })
}

/// The content without our finalizer (the others kept), under its resourceVersion.
fn finish(content: &VolumeSnapshotContent) -> Value {
    let kept: Vec<&String> = (content.metadata.finalizers.iter().flatten())
        .filter(|f| f.as_str() != FINALIZER_CONTENT_BOUND)
        .collect();
    json!({"metadata": {
        "resourceVersion": content.metadata.resource_version,
        "finalizers": kept,
    }})
}

pub fn plan_content(i: &ContentInputs<'_>) -> Decision<ContentPlan> {
    let c = i.content;
    if c.spec.driver != i.provisioner_name {
        return plan(ContentStep::Ignore, vec![]);
    }
    let uid = c.metadata.uid.clone().unwrap_or_default();
    let name = c.metadata.name.clone().unwrap_or_default();
    let delete = c.spec.deletion_policy == "Delete";
    if c.metadata.deletion_timestamp.is_none() {
        // Its snapshot deleted without the snapshot-controller (which would delete the
        // content itself): the content goes the same way.
        if i.snapshot_exists || !delete || c.spec.volume_snapshot_ref.uid.is_none() {
            return plan(ContentStep::Ignore, vec![]);
        }
        if !i.snapshot_confirmed {
            return Err(Ask::Snapshot);
        }
        return plan(ContentStep::DeleteContent { uid }, vec![]);
    }
    let held = c
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_CONTENT_BOUND);
    if !held {
        return plan(ContentStep::Ignore, vec![]);
    }
    let mine = |j: &&&Job| annotation(&j.metadata, ANN_CONTENT_UID) == Some(uid.as_str());
    let of = |action| {
        let jobs = i.jobs.iter().filter(mine).copied();
        jobs.filter(move |j| {
            Action::of(j.metadata.labels.as_ref().unwrap_or(&Default::default())) == Some(action)
        })
    };
    // Deleted while its VolumeSnapshot lives, and not by the snapshot-controller on the
    // snapshot's deletion: the copy stays (as a CSI snapshotter keeps it) until the
    // snapshot goes.
    let released = !i.snapshot_exists
        || i.snapshot_deleting
        || annotation(&c.metadata, crate::snapshot::ANN_BEING_DELETED).is_some();
    if !released {
        let r = &c.spec.volume_snapshot_ref;
        let at = format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default()
        );
        let notice = Notice::warning(
            format!("still-used/{uid}"),
            reasons::DELETE_ERROR,
            format!(
                "{name} is deleted while its VolumeSnapshot {at} exists: its copy is kept until the VolumeSnapshot is deleted (delete that instead)"
            ),
        )
        .action("DeleteSnapshot");
        return plan(ContentStep::Ignore, vec![notice]);
    }
    // A copy still being made, or restored from, is let finish.
    let copying =
        of(Action::Snapshot).any(|j| outcome(j, &pods_of(j, &i.pods)) == JobOutcome::Running);
    if copying || i.restoring {
        return plan(ContentStep::Wait(RUNNING_RECHECK), vec![]);
    }
    if !delete {
        let notice = Notice::normal(
            format!("retained/{uid}"),
            reasons::DELETED,
            format!("{name} is deleted with deletionPolicy Retain: its snapshot's copy is kept"),
        )
        .action("DeleteSnapshot");
        return plan(ContentStep::Finish(finish(c)), vec![notice]);
    }
    // The record decides what is deleted: read from the API server for this decision.
    if !i.record_read {
        return Err(Ask::Record);
    }
    let Some(cm) = i.record else {
        // A snapshot Job that succeeded before its record was written: record it first.
        let taken = of(Action::Snapshot).find_map(|j| {
            let pods = pods_of(j, &i.pods);
            let report = report_of(j, &pods)?;
            let expected = annotation(&j.metadata, ANN_SNAPSHOT_HANDLE);
            let checked = check_snapshot_report(&report, expected).ok()?;
            build_snapshot_record(c, &record_from_job(j, &checked)?)
        });
        if let Some(record) = taken {
            return plan(ContentStep::WriteRecord(Box::new(record)), vec![]);
        }
        // Its status says a copy was taken from a volume (written here only from the
        // record), yet the record is gone: removed by hand, or by the garbage collector
        // when the content was deleted in the foreground. Neither the status (anyone
        // allowed to write it could name any path) nor the attempts' record (its handle may
        // not be where the image put the copy) says for sure what to delete: the content
        // is kept and this said, never a copy left behind unseen.
        let taken = c
            .status
            .as_ref()
            .is_some_and(|s| s.snapshot_handle.is_some());
        if taken && c.spec.source.volume_handle.is_some() {
            let record = crate::snapshot::record::snapshot_record_name(
                c.spec
                    .volume_snapshot_ref
                    .uid
                    .as_deref()
                    .unwrap_or_default(),
            );
            let notice = Notice::warning(
                format!("record-gone/{uid}"),
                reasons::DELETE_ERROR,
                format!(
                    "cannot delete the snapshot of {name}: its record {record} is gone, so nothing is run and the content is kept; an admin removes its copy (in the snapshot's directory below the class's base), then the finalizer {FINALIZER_CONTENT_BOUND}"
                ),
            )
            .action("DeleteSnapshot");
            return plan(ContentStep::Ignore, vec![notice]);
        }
        // What an attempt that recorded nothing may have left is removed from the
        // directory the controller gave it; with no attempt, nothing was taken.
        if let Some(left) = of(Action::Snapshot).find_map(leftover_of) {
            return delete_copy(i, c, &left, of(Action::DeleteSnapshot).collect());
        }
        // Its attempts' Jobs expired: the record written before the first says where
        // they wrote.
        if let Some(cm) = i.attempt_record {
            return match read_attempt_record(cm, c) {
                Ok(left) => delete_copy(i, c, &left, of(Action::DeleteSnapshot).collect()),
                Err(why) => {
                    let notice = Notice::warning(
                        format!("attempt-record/{uid}"),
                        reasons::DELETE_ERROR,
                        format!(
                            "cannot remove what the snapshot attempts of {name} left: {why}; nothing is run and the content is kept (remove its copy by hand, then the finalizer {FINALIZER_CONTENT_BOUND})"
                        ),
                    )
                    .action("DeleteSnapshot");
                    plan(ContentStep::Ignore, vec![notice])
                }
            };
        }
        return plan(ContentStep::Finish(finish(c)), vec![]);
    };
    let record = match read_snapshot_record(cm, c) {
        Ok(r) => r,
        Err(why) => {
            let notice = Notice::warning(
                format!("record/{uid}"),
                reasons::DELETE_ERROR,
                format!(
                    "cannot delete the snapshot of {name}: {why}; nothing is run and the content is kept (if its copy is real, remove it by hand, then the finalizer {FINALIZER_CONTENT_BOUND})"
                ),
            )
            .action("DeleteSnapshot");
            return plan(ContentStep::Ignore, vec![notice]);
        }
    };
    delete_copy(i, c, &record, of(Action::DeleteSnapshot).collect())
}

/// What a delete-snapshot Job's end counts as in the metrics.
fn deleted(job: &Job, status: CallStatus) -> NoticeKind {
    NoticeKind::SnapshotCall(SnapshotCall::of(job, true, status))
}

/// Whether a snapshot Job of `c` was created after `delete` was (or in the same second:
/// creation times are whole seconds, and one more delete costs nothing).
fn copied_since(i: &ContentInputs<'_>, c: &VolumeSnapshotContent, delete: &Job) -> bool {
    let uid = c.metadata.uid.as_deref();
    let created = |j: &Job| j.metadata.creation_timestamp.as_ref().map(|t| t.0);
    i.jobs.iter().any(|j| {
        let labels = j.metadata.labels.as_ref();
        annotation(&j.metadata, ANN_CONTENT_UID) == uid
            && labels.and_then(Action::of) == Some(Action::Snapshot)
            && matches!((created(j), created(delete)), (Some(s), Some(d)) if s >= d)
    })
}

/// Runs delete-snapshot Jobs for `record`'s copy until one succeeds, then drops the
/// finalizer.
fn delete_copy(
    i: &ContentInputs<'_>,
    c: &VolumeSnapshotContent,
    record: &crate::snapshot::record::SnapshotRecord,
    deletes: Vec<&Job>,
) -> Decision<ContentPlan> {
    let uid = c.metadata.uid.clone().unwrap_or_default();
    let Some(job) = deletes.iter().copied().max_by_key(|j| attempt_of(j)) else {
        let job = delete_snapshot_job(record, c, i.provisioner_name, 1, i.job_ttl_seconds);
        return plan(ContentStep::CreateJob(Box::new(job)), vec![]);
    };
    let attempt = attempt_of(job);
    match outcome(job, &pods_of(job, &i.pods)) {
        JobOutcome::Running => plan(ContentStep::Wait(RUNNING_RECHECK), vec![]),
        // A snapshot Job made after this delete began (its creation crossed the content's
        // deletion) may have copied since: deleted again.
        JobOutcome::Succeeded if copied_since(i, c, job) => {
            let job = delete_snapshot_job(
                record,
                c,
                i.provisioner_name,
                attempt + 1,
                i.job_ttl_seconds,
            );
            plan(ContentStep::CreateJob(Box::new(job)), vec![])
        }
        JobOutcome::Succeeded => {
            let notice = Notice::normal(
                format!("deleted/{uid}"),
                reasons::DELETED,
                format!("the snapshot's copy {} is deleted", record.handle),
            )
            .about(job)
            .counted_as(deleted(job, CallStatus::Ok))
            .action("DeleteSnapshot");
            plan(ContentStep::Finish(finish(c)), vec![notice])
        }
        JobOutcome::Failed(f) => {
            let wait = delay_after(attempt, i.retry_base);
            let remaining = wait_remaining(attempt, i.retry_base, f.at, i.now);
            let job_uid = job.metadata.uid.clone().unwrap_or_default();
            let notice = Notice::warning(
                format!("delete-failed/{job_uid}"),
                reasons::DELETE_ERROR,
                format!(
                    "deleting the snapshot's copy {} failed (attempt {attempt}): {}; the content is kept and attempt {} starts in {}s",
                    record.handle,
                    f.message,
                    attempt + 1,
                    wait.as_secs()
                ),
            )
            .about(job)
            .counted_as(deleted(job, CallStatus::of_failure(&f)))
            .action("DeleteSnapshot");
            if remaining.is_zero() {
                let job = delete_snapshot_job(
                    record,
                    c,
                    i.provisioner_name,
                    attempt + 1,
                    i.job_ttl_seconds,
                );
                plan(ContentStep::CreateJob(Box::new(job)), vec![notice])
            } else {
                plan(ContentStep::Wait(remaining), vec![notice])
            }
        }
    }
}

#[cfg(test)]
mod tests;
