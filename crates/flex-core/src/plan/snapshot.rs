//! The state machine of one VolumeSnapshot of a claim of ours: make its content (pre-bound
//! as the snapshot-controller expects), run a snapshot Job, record what it took, and keep the
//! content's status (and the VolumeSnapshot's, which the snapshot-controller derives from
//! it) saying so. Deleting a snapshot is its content's plan (`snapshot_content`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::retry::{delay_after, wait_remaining};
use super::snapshot_call::{CallStatus, SnapshotCall};
use super::{Ask, Decision, Notice, NoticeKind};
use crate::job::{JobOutcome, attempt_of, outcome, pods_of, report_of};
use crate::names::{ANN_CONTENT_UID, LABEL_MANAGED_BY, MANAGED_BY_VALUE, annotation};
use crate::record::{Record, RecordError};
use crate::snapshot::jobs::{ANN_SNAPSHOT_HANDLE, SnapshotJob, snapshot_job};
use crate::snapshot::record::{
    build_attempt_record, build_snapshot_record, leftover_of, read_snapshot_record, record_from_job,
};
use crate::snapshot::report::check_snapshot_report;
use crate::snapshot::{
    SnapshotError, VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotContent, content_for,
    content_ready_status, snapshot_status_patch,
};

/// Set on a content whose snapshot gave up (a permanent failure, or the attempts used up),
/// so that it stays given up after its Jobs expire. The VolumeSnapshot cannot change to ask
/// again; an admin who removes the annotation asks for new attempts.
pub const ANN_GAVE_UP: &str = "flex-provisioner.io/gave-up";
/// Attempts at one snapshot before giving up.
pub const MAX_ATTEMPTS: u32 = 5;
/// How often a running snapshot Job is looked at besides its watch events.
pub const RUNNING_RECHECK: Duration = Duration::from_secs(30);
/// How soon a snapshot that cannot be taken yet (its claim not bound, its class's
/// configuration not usable) is looked at again.
pub const BLOCKED_RECHECK: Duration = Duration::from_secs(30);

/// Event reasons on VolumeSnapshots and their contents: the snapshot-controller's and the
/// CSI snapshotter's, which users of snapshots know.
pub mod reasons {
    pub const CREATING: &str = "CreatingSnapshot";
    pub const CREATED: &str = "SnapshotCreated";
    pub const CREATION_FAILED: &str = "SnapshotCreationFailed";
    pub const CONTENT_CREATION_FAILED: &str = "SnapshotContentCreationFailed";
    pub const CONTENT_MISMATCH: &str = "SnapshotContentMismatch";
    pub const READY: &str = "SnapshotReady";
    pub const DELETE_ERROR: &str = "SnapshotDeleteError";
    pub const DELETED: &str = "SnapshotDeleted";
    pub const CONTENT_MISSING: &str = "SnapshotContentMissing";
}

pub struct SnapshotInputs<'a> {
    pub snapshot: &'a VolumeSnapshot,
    pub provisioner_name: &'a str,
    /// The class it names, as cached.
    pub class: Option<&'a VolumeSnapshotClass>,
    /// The claim it names, in its namespace, as cached.
    pub claim: Option<&'a PersistentVolumeClaim>,
    /// The volume the claim is bound to, as cached (whole).
    pub pv: Option<&'a PersistentVolume>,
    /// Whether the claim's class takes snapshots (`snapshots: "true"`), or why its
    /// configuration cannot say.
    pub enabled: Result<bool, String>,
    /// `snapcontent-<uid>`, as cached.
    pub content: Option<&'a VolumeSnapshotContent>,
    /// A content created here that the cache does not show yet.
    pub content_unseen: bool,
    /// The volume's record, once read ([`Ask::Record`]).
    pub volume_record: Option<Result<Record, RecordError>>,
    /// The snapshot's record: as cached, or as read from the API server with the volume's
    /// ([`Ask::Record`], `record_read`): no Job is started on the cache's word that there is
    /// none (after a restart the records may not be cached yet).
    pub record: Option<&'a ConfigMap>,
    pub record_read: bool,
    /// The record of its attempts, read with `record`: written before the first.
    pub attempt_record: Option<&'a ConfigMap>,
    /// The snapshot's Jobs, and their pods.
    pub jobs: Vec<&'a Job>,
    pub pods: Vec<&'a Pod>,
    pub retry_base: Duration,
    pub job_ttl_seconds: i32,
    pub now: jiff::Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotStep {
    /// Nothing to do until the snapshot, its content or its Jobs change.
    Ignore,
    /// A Job runs, or a retry is due after this long.
    Wait(Duration),
    CreateContent(Box<VolumeSnapshotContent>),
    CreateJob(Box<Job>),
    /// The snapshot's record (the Job succeeded and its report checked), or its attempts'
    /// (before the first), then plan again.
    WriteRecord(Box<ConfigMap>),
    /// A merge patch of the content's status.
    PatchContentStatus(Value),
    /// A merge patch of the content's metadata (`ANN_GAVE_UP`) under its resourceVersion,
    /// then one of its status.
    GiveUp {
        content: Value,
        status: Value,
    },
    /// A merge patch of the VolumeSnapshot's status (what the snapshot-controller derives
    /// from the content).
    PatchSnapshotStatus(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotPlan {
    pub step: SnapshotStep,
    pub notices: Vec<Notice>,
}

fn plan(step: SnapshotStep, notices: Vec<Notice>) -> Decision<SnapshotPlan> {
    Ok(SnapshotPlan { step, notices })
}

/// Why the claim's volume cannot be snapshotted (yet), in words.
fn volume_problem(i: &SnapshotInputs<'_>, claim_name: &str) -> Option<String> {
    let ns = i.snapshot.metadata.namespace.as_deref().unwrap_or_default();
    let Some(claim) = i.claim else {
        return Some(format!("the claim {ns}/{claim_name} does not exist"));
    };
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let volume = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    let Some(volume) = volume.filter(|_| bound) else {
        return Some(format!("the claim {ns}/{claim_name} is not bound yet"));
    };
    let Some(pv) = i.pv else {
        return Some(format!("the claim's volume {volume} is not seen yet"));
    };
    if crate::volume::claim_uid(pv) != claim.metadata.uid.as_deref() {
        return Some(format!(
            "the claim's volume {volume} is not bound back to it"
        ));
    }
    if !crate::volume::provisioned_by(pv, i.provisioner_name) || !crate::volume::verified(pv) {
        return Some(format!(
            "the claim's volume {volume} was not made by this provisioner; only its own volumes can be snapshotted"
        ));
    }
    None
}

pub fn plan_snapshot(i: &SnapshotInputs<'_>) -> Decision<SnapshotPlan> {
    let s = i.snapshot;
    let uid = s.metadata.uid.clone().unwrap_or_default();
    let name = s.metadata.name.clone().unwrap_or_default();
    // A deleted snapshot is its content's to finish; a static one names its content.
    if s.metadata.deletion_timestamp.is_some()
        || s.spec.source.volume_snapshot_content_name.is_some()
    {
        return plan(SnapshotStep::Ignore, vec![]);
    }
    // Another driver's (or no) class: not ours to take, and nothing to say.
    let Some(class) = i.class.filter(|c| c.driver == i.provisioner_name) else {
        return plan(SnapshotStep::Ignore, vec![]);
    };
    let claim_name = s
        .spec
        .source
        .persistent_volume_claim_name
        .clone()
        .unwrap_or_default();
    let blocked = |why: String| {
        let notice = Notice::warning(
            format!("snapshot-blocked/{uid}/{why}"),
            reasons::CONTENT_CREATION_FAILED,
            format!("cannot take snapshot {name} yet: {why}"),
        )
        .action("Snapshot");
        plan(SnapshotStep::Wait(BLOCKED_RECHECK), vec![notice])
    };
    let Some(content) = i.content else {
        if i.content_unseen {
            return plan(SnapshotStep::Wait(Duration::from_secs(2)), vec![]);
        }
        // Bound or ready once: its content was deleted by hand. Making a new one would
        // take the snapshot again, of the volume as it is now.
        let status = s.status.as_ref();
        let bound = status.and_then(|st| st.bound_volume_snapshot_content_name.as_deref());
        if bound.is_some() || status.and_then(|st| st.ready_to_use) == Some(true) {
            let notice = Notice::warning(
                format!("content-gone/{uid}"),
                reasons::CONTENT_MISSING,
                format!(
                    "snapshot {name}'s content {} is gone; the snapshot is not taken again (delete it and take a new one)",
                    bound.unwrap_or_default()
                ),
            )
            .action("Snapshot");
            return plan(SnapshotStep::Ignore, vec![notice]);
        }
        if let Some(why) = volume_problem(i, &claim_name) {
            return blocked(why);
        }
        match &i.enabled {
            Ok(true) => {}
            Ok(false) => {
                let class_name =
                    i.pv.and_then(|p| p.spec.as_ref()?.storage_class_name.clone());
                return blocked(format!(
                    "the StorageClass {} does not take snapshots: its ConfigMap must set snapshots: \"true\"",
                    class_name.unwrap_or_default()
                ));
            }
            Err(why) => {
                return blocked(format!(
                    "its StorageClass's configuration is not usable: {why}"
                ));
            }
        }
        let pv = i.pv.expect("checked by volume_problem");
        let labels = BTreeMap::from([(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())]);
        let Some(content) = content_for(s, class, pv, labels) else {
            return plan(SnapshotStep::Ignore, vec![]);
        };
        let notice = Notice::normal(
            format!("creating/{uid}"),
            reasons::CREATING,
            format!(
                "taking a snapshot of {claim_name} (volume {})",
                pv.metadata.name.clone().unwrap_or_default()
            ),
        )
        .action("Snapshot");
        return plan(SnapshotStep::CreateContent(Box::new(content)), vec![notice]);
    };
    // A content of this name that is not the one made here for this snapshot of this
    // volume (made by someone else first): nothing runs for it.
    let volume_name = i.pv.and_then(|p| p.metadata.name.clone());
    let ref_uid = content.spec.volume_snapshot_ref.uid.as_deref();
    if content.spec.driver != i.provisioner_name
        || ref_uid != Some(uid.as_str())
        || (volume_name.is_some() && content.spec.source.volume_handle != volume_name)
        || content.spec.source.snapshot_handle.is_some()
    {
        let notice = Notice::warning(
            format!("mismatch/{uid}"),
            reasons::CONTENT_MISMATCH,
            format!(
                "the VolumeSnapshotContent {} exists and is not the one this provisioner makes for snapshot {name} of claim {claim_name}: nothing is run for it",
                content.metadata.name.clone().unwrap_or_default()
            ),
        )
        .action("Snapshot");
        return plan(SnapshotStep::Ignore, vec![notice]);
    }
    taken(i, content, &name, &uid)
}

/// The content exists: mirror what is recorded, or run the Jobs that take the snapshot.
fn taken(
    i: &SnapshotInputs<'_>,
    content: &VolumeSnapshotContent,
    name: &str,
    uid: &str,
) -> Decision<SnapshotPlan> {
    let content_uid = content.metadata.uid.as_deref().unwrap_or_default();
    // Being deleted: its content's plan finishes it; nothing new starts.
    if content.metadata.deletion_timestamp.is_some() {
        return plan(SnapshotStep::Ignore, vec![]);
    }
    if let Some(cm) = i.record {
        return match read_snapshot_record(cm, content) {
            Ok(record) => {
                let ready =
                    content_ready_status(&record.handle, record.restore_size, record.taken_at);
                let status = content.status.clone().unwrap_or_default();
                let differs = status.ready_to_use != Some(true)
                    || status.snapshot_handle.as_deref() != Some(record.handle.as_str())
                    || status.restore_size != Some(record.restore_size)
                    || status.error.is_some()
                    || status.creation_time.is_none();
                if differs {
                    let ready = with_uid(ready, content_uid);
                    return plan(SnapshotStep::PatchContentStatus(ready), vec![]);
                }
                mirror(i, content, vec![])
            }
            Err(why) => {
                let notice = Notice::warning(
                    format!("record/{uid}"),
                    reasons::CREATION_FAILED,
                    format!("snapshot {name}: {why}; nothing is run for it"),
                )
                .action("Snapshot");
                plan(SnapshotStep::Ignore, vec![notice])
            }
        };
    }
    if annotation(&content.metadata, ANN_GAVE_UP).is_some() {
        return mirror(i, content, vec![]);
    }
    // A content that says it was taken, without the record of it (removed by hand): taking
    // it again would replace the copy with the volume as it is now.
    let status = content.status.as_ref();
    if status.and_then(|s| s.ready_to_use) == Some(true)
        || status.and_then(|s| s.snapshot_handle.as_ref()).is_some()
    {
        let notice = Notice::warning(
            format!("record-gone/{uid}"),
            reasons::CREATION_FAILED,
            format!(
                "snapshot {name} was taken, but its record {} is gone: nothing is run (restores from it are refused)",
                crate::snapshot::record::snapshot_record_name(uid)
            ),
        )
        .action("Snapshot");
        return plan(SnapshotStep::Ignore, vec![notice]);
    }
    let mine = |j: &&&Job| annotation(&j.metadata, ANN_CONTENT_UID) == Some(content_uid);
    let Some(job) = i
        .jobs
        .iter()
        .filter(mine)
        .copied()
        .max_by_key(|j| attempt_of(j))
    else {
        let taken = i.jobs.iter().map(|j| attempt_of(j)).max().unwrap_or(0);
        return start(i, content, taken + 1, vec![]);
    };
    let attempt = attempt_of(job);
    let pods = pods_of(job, &i.pods);
    match outcome(job, &pods) {
        JobOutcome::Running => plan(SnapshotStep::Wait(RUNNING_RECHECK), vec![]),
        JobOutcome::Succeeded => {
            let Some(report) = report_of(job, &pods) else {
                // The pod that holds the report is not cached yet.
                return plan(SnapshotStep::Wait(Duration::from_secs(5)), vec![]);
            };
            let expected = annotation(&job.metadata, ANN_SNAPSHOT_HANDLE);
            let checked = check_snapshot_report(&report, expected).map_err(|e| e.to_string());
            let record = checked.and_then(|r| {
                record_from_job(job, &r)
                    .and_then(|rec| build_snapshot_record(content, &rec))
                    .ok_or_else(|| "its Job lacks what the controller put in it".to_owned())
            });
            match record {
                Ok(cm) => {
                    let name = i.snapshot.metadata.name.clone().unwrap_or_default();
                    let job_uid = job.metadata.uid.clone().unwrap_or_default();
                    let notice = Notice::normal(
                        format!("taken/{job_uid}"),
                        reasons::CREATED,
                        format!(
                            "snapshot {name} was taken by Job {}",
                            job.metadata.name.clone().unwrap_or_default()
                        ),
                    )
                    .about(job)
                    .counted_as(call(job, CallStatus::Ok))
                    .action("Snapshot");
                    plan(SnapshotStep::WriteRecord(Box::new(cm)), vec![notice])
                }
                Err(why) => give_up(
                    i,
                    content,
                    job,
                    CallStatus::InvalidArgument,
                    format!(
                        "the snapshot Job {} succeeded, but {why}; the snapshot is not used and nothing is deleted on its word (an admin may need to remove what the image made)",
                        job.metadata.name.clone().unwrap_or_default()
                    ),
                ),
            }
        }
        JobOutcome::Failed(f) => {
            let job_name = job.metadata.name.clone().unwrap_or_default();
            if f.permanent || attempt >= MAX_ATTEMPTS {
                let why = if f.permanent {
                    "a permanent failure"
                } else {
                    "the last attempt"
                };
                return give_up(
                    i,
                    content,
                    job,
                    CallStatus::of_failure(&f),
                    format!(
                        "snapshot attempt {attempt} ({job_name}) failed: {}; this was {why}, so no new attempt is made",
                        f.message
                    ),
                );
            }
            let wait = delay_after(attempt, i.retry_base);
            let remaining = wait_remaining(attempt, i.retry_base, f.at, i.now);
            let message = format!(
                "snapshot attempt {attempt} ({job_name}) failed: {}; attempt {} starts in {}s",
                f.message,
                attempt + 1,
                wait.as_secs()
            );
            let notice = failed_notice(job, &message, CallStatus::of_failure(&f));
            if let Some(patch) = error_patch(content, &message, f.at.unwrap_or(i.now)) {
                return plan(SnapshotStep::PatchContentStatus(patch), vec![notice]);
            }
            if let Some(p) = snapshot_status_patch(i.snapshot, content) {
                let p = with_uid(p, i.snapshot.metadata.uid.as_deref().unwrap_or_default());
                return plan(SnapshotStep::PatchSnapshotStatus(p), vec![notice]);
            }
            if remaining.is_zero() {
                start(i, content, attempt + 1, vec![notice])
            } else {
                plan(SnapshotStep::Wait(remaining), vec![notice])
            }
        }
    }
}

/// The VolumeSnapshot's status as the content's says (nothing when it does already).
fn mirror(
    i: &SnapshotInputs<'_>,
    content: &VolumeSnapshotContent,
    mut notices: Vec<Notice>,
) -> Decision<SnapshotPlan> {
    match snapshot_status_patch(i.snapshot, content) {
        Some(p) => {
            let p = with_uid(p, i.snapshot.metadata.uid.as_deref().unwrap_or_default());
            let ready = p["status"]["readyToUse"] == json!(true);
            if ready {
                let uid = i.snapshot.metadata.uid.clone().unwrap_or_default();
                let name = i.snapshot.metadata.name.clone().unwrap_or_default();
                notices.push(
                    Notice::normal(
                        format!("ready/{uid}"),
                        reasons::READY,
                        format!("snapshot {name} is ready to use"),
                    )
                    .action("Snapshot"),
                );
            }
            plan(SnapshotStep::PatchSnapshotStatus(p), notices)
        }
        None => plan(SnapshotStep::Ignore, notices),
    }
}

/// What a snapshot Job's end counts as in the metrics.
fn call(job: &Job, status: CallStatus) -> NoticeKind {
    NoticeKind::SnapshotCall(SnapshotCall::of(job, false, status))
}

fn failed_notice(job: &Job, message: &str, status: CallStatus) -> Notice {
    let uid = job.metadata.uid.clone().unwrap_or_default();
    Notice::warning(
        format!("snapshot-failed/{uid}"),
        reasons::CREATION_FAILED,
        message,
    )
    .about(job)
    .counted_as(call(job, status))
    .action("Snapshot")
}

/// A content status patch carrying `message` as its error, unless it carries it already.
fn error_patch(
    content: &VolumeSnapshotContent,
    message: &str,
    at: jiff::Timestamp,
) -> Option<Value> {
    let now = content.status.as_ref().and_then(|s| s.error.as_ref());
    if now.and_then(|e| e.message.as_deref()) == Some(message) {
        return None;
    }
    let error = SnapshotError {
        message: Some(message.to_owned()),
        time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)),
    };
    let uid = content.metadata.uid.as_deref().unwrap_or_default();
    Some(with_uid(
        json!({"status": {"readyToUse": false, "error": error}}),
        uid,
    ))
}

/// `patch` made to apply only to the object of this uid (the API server refuses it with a
/// conflict for another object of the same name).
fn with_uid(mut patch: Value, uid: &str) -> Value {
    patch["metadata"] = json!({ "uid": uid });
    patch
}

/// No more attempts: the content says why (and stays given up), as does the snapshot.
fn give_up(
    i: &SnapshotInputs<'_>,
    content: &VolumeSnapshotContent,
    job: &Job,
    status: CallStatus,
    message: String,
) -> Decision<SnapshotPlan> {
    let notice = failed_notice(job, &message, status);
    let uid = content.metadata.uid.as_deref().unwrap_or_default();
    let status = error_patch(content, &message, i.now)
        .unwrap_or_else(|| with_uid(json!({"status": {"readyToUse": false}}), uid));
    let attempt = attempt_of(job).to_string();
    let meta = json!({"metadata": {
        "resourceVersion": content.metadata.resource_version,
        "annotations": {ANN_GAVE_UP: attempt},
    }});
    plan(
        SnapshotStep::GiveUp {
            content: meta,
            status,
        },
        vec![notice],
    )
}

/// Snapshot attempt `attempt`, from the volume's record (read from the API server first).
fn start(
    i: &SnapshotInputs<'_>,
    content: &VolumeSnapshotContent,
    attempt: u32,
    mut notices: Vec<Notice>,
) -> Decision<SnapshotPlan> {
    // The volume's record, and the snapshot's, read afresh: a record the cache does not
    // show yet (after a restart) must not have the snapshot taken again.
    let Some(read) = i.volume_record.as_ref().filter(|_| i.record_read) else {
        return Err(Ask::Record);
    };
    let name = i.snapshot.metadata.name.clone().unwrap_or_default();
    let uid = i.snapshot.metadata.uid.clone().unwrap_or_default();
    let (Some(pv), Some(class)) = (i.pv, i.class) else {
        return plan(SnapshotStep::Wait(BLOCKED_RECHECK), notices);
    };
    match read {
        Ok(record) => {
            let job = snapshot_job(SnapshotJob {
                snapshot: i.snapshot,
                content,
                class,
                pv,
                volume: record,
                provisioner_name: i.provisioner_name,
                attempt,
                ttl_seconds: i.job_ttl_seconds,
            });
            // Where the attempts write is recorded first, so that what they leave is
            // removed when the snapshot is deleted, however long after their Jobs expired.
            if i.attempt_record.is_none() {
                let intent = leftover_of(&job).and_then(|r| build_attempt_record(content, &r));
                if let Some(cm) = intent {
                    return plan(SnapshotStep::WriteRecord(Box::new(cm)), notices);
                }
            }
            notices.push(
                Notice::normal(
                    format!("job/{uid}/{attempt}"),
                    reasons::CREATING,
                    format!(
                        "snapshot {name}: attempt {attempt} started as Job {}",
                        job.metadata.name.clone().unwrap_or_default()
                    ),
                )
                .action("Snapshot"),
            );
            plan(SnapshotStep::CreateJob(Box::new(job)), notices)
        }
        Err(why) => {
            notices.push(
                Notice::warning(
                    format!("no-record/{uid}"),
                    reasons::CREATION_FAILED,
                    format!(
                        "cannot take snapshot {name}: the volume's record cannot be used ({why}); nothing is run"
                    ),
                )
                .action("Snapshot"),
            );
            plan(SnapshotStep::Wait(BLOCKED_RECHECK), notices)
        }
    }
}

#[cfg(test)]
mod tests;
