//! The state machine of one PV we provisioned. Storage is destroyed only when (a) the PV is
//! `Released` and the claim its claimRef names (by uid) is confirmed gone by the API server,
//! or (b) someone deleted the PV, its policy is `Delete`, and no live claim is bound to it.
//! Every other state (Available, Pending, Bound, Failed, a cleared or changed claimRef)
//! runs nothing. The plan carries complete effects: the Job to create, or the one write to
//! make with its precondition.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::retry::{delay_after, wait_remaining};
use super::{Ask, Decision, Notice, NoticeKind, reasons};
use crate::job::{Failure, JobOutcome, attempt_of, deprovision_job, outcome, pods_of};
use crate::names::{ANN_VOLUME_UID, FINALIZER_DEPROVISION};
use crate::record::read_record;
use crate::volume::verified;

/// Set on a PV once its storage is gone (with our finalizer removed in the same write), for
/// people to read. The controller never reads it (anyone who may update PVs can write it):
/// what says the storage is gone is the succeeded deprovision Job of the PV's uid.
pub const ANN_DEPROVISIONED: &str = "flex-provisioner.io/deprovisioned";

/// How soon a released volume whose claim the cache still shows is looked at again.
pub const CLAIM_CACHE_LAG: Duration = Duration::from_secs(2);

/// How often a running deprovision Job is looked at besides its watch events.
pub const RUNNING_RECHECK: Duration = Duration::from_secs(30);

/// How soon a volume whose node is gone is looked at again (the node may come back).
pub const NODE_GONE_RECHECK: Duration = Duration::from_secs(300);

pub struct VolumeInputs<'a> {
    pub pv: &'a PersistentVolume,
    pub provisioner_name: &'a str,
    /// The claim at the PV's claimRef namespace/name, if one exists (whatever its uid).
    pub claim: Option<&'a PersistentVolumeClaim>,
    /// A claim names this PV in `spec.volumeName` (the one it was made for, after its
    /// claimRef was re-pointed, or the one an admin hands it to): from the cache, and read
    /// from the API server whenever the record is (`record_read`).
    pub named_by_claim: bool,
    /// `claim` was read from the API server for this decision. A cache may lag behind, so
    /// only the API server's answer may lead to storage being destroyed, unless Kubernetes
    /// itself released the volume (see `released_by_kubernetes`).
    pub claim_confirmed: bool,
    /// `record` was read from the API server for this decision (`None` there: it does not
    /// exist); with `claim_confirmed`, it always was.
    pub record_read: bool,
    /// A provisioning Job of the claim is still running (its pod may still be working).
    pub provisioning: bool,
    /// The PV's deprovision record (read from the API server with the claim), if any.
    pub record: Option<&'a ConfigMap>,
    /// The provisioning Jobs of the claim in the PV's claimRef: a PV made after its claim
    /// was deleted gets its record from the one that made it.
    pub provision_jobs: Vec<&'a Job>,
    /// Deprovision Jobs of this PV, and their pods.
    pub jobs: Vec<&'a Job>,
    pub pods: Vec<&'a Pod>,
    pub retry_base: Duration,
    pub job_ttl_seconds: i32,
    pub now: jiff::Timestamp,
    /// Whether a node of this name exists (the node cache): a deprovision Job pinned to a
    /// node that is gone could never run.
    pub node_exists: &'a dyn Fn(&str) -> bool,
}

/// Where a PV is in its life, as far as we are concerned (the table in docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeState {
    /// Not provisioned by this provisioner.
    NotOurs,
    /// Its storage is gone (recorded on it); only the object is left to remove.
    Deprovisioned,
    /// A live claim (by uid) is bound to it.
    InUse,
    /// Deleted while its policy is `Retain`, or with no claim uid in its claimRef: the
    /// storage stays, the deletion may complete.
    DeletedRetain,
    /// Deleted, policy `Delete`, no live claim bound: the storage is to be destroyed.
    DeletedDelete,
    /// `Released` by the PV controller, policy `Delete`: destroyed once the claim is
    /// confirmed gone.
    Released,
    /// Released or deleted, but its claimRef no longer names the claim it was provisioned
    /// for (the uid in its name), or a claim still names it: an admin's hand-over (or a
    /// re-pointed claimRef). Storage and finalizer are kept, with a warning.
    HandedOver,
    /// Anything else: Available, Pending, Failed, Retain-released, claimRef cleared or
    /// changed, a claim not yet bound. Nothing runs.
    Idle,
}

#[derive(Debug, Clone, PartialEq)]
pub enum VolumeStep {
    /// Nothing to do until the PV, its claim or its Jobs change.
    Ignore,
    /// A Job runs, or a retry is due after this long.
    Wait(Duration),
    /// Write this deprovision record (built from the provisioning Job that made the PV),
    /// then plan again.
    WriteRecord(Box<ConfigMap>),
    /// Start a deprovision Job (an existing one of the same name is adopted).
    CreateJob(Box<Job>),
    /// The storage is gone: record it and drop our finalizer (a merge patch carrying
    /// `metadata.resourceVersion`: it fails with 409 if the PV changed).
    Finish(Value),
    /// Delete the PV object, provided it still has this uid (and, when given, this
    /// resourceVersion: the decision rested on that version).
    Delete {
        uid: String,
        resource_version: Option<String>,
    },
    /// Let a deleted PV go without touching its storage (a patch as above), after marking
    /// these provisioning Jobs (namespace, name) as having had their PV, so that no Job of
    /// a volume kept this way is ever taken for an orphan (see plan::orphan).
    KeepStorage {
        patch: Value,
        mark_jobs: Vec<(String, String)>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolumePlan {
    pub state: VolumeState,
    pub step: VolumeStep,
    pub notices: Vec<Notice>,
}

/// Our finalizer removed (and `annotations` added) under the PV's resourceVersion.
fn finalizer_patch(pv: &PersistentVolume, annotations: Value) -> Value {
    let others: Vec<&String> = pv
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != FINALIZER_DEPROVISION)
        .collect();
    let mut meta = json!({"finalizers": others, "resourceVersion": pv.metadata.resource_version});
    if annotations.as_object().is_some_and(|a| !a.is_empty()) {
        meta["annotations"] = annotations;
    }
    json!({ "metadata": meta })
}

/// Whether `claim`, which may name `pv` in `spec.volumeName`, holds it against
/// deprovisioning (a hand-over): only where Kubernetes could bind the claim to it (a PV
/// without a claimRef, or whose uid-less claimRef names that claim), or where the claim
/// re-took the claimRef's name under a new uid (re-created, e.g. `kubectl replace
/// --force`: the user meant to keep the volume). Any other claim naming the volume, which
/// any user may write, cannot bind it and blocks nothing.
pub fn claim_holds(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let names_it = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| Some(v) == pv.metadata.name.as_deref());
    if !names_it {
        return false;
    }
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return true;
    };
    let at_ref = r.name.is_none()
        || (r.name == claim.metadata.name && r.namespace == claim.metadata.namespace);
    match r.uid.as_deref() {
        None | Some("") => at_ref,
        Some(uid) => at_ref && r.name.is_some() && claim.metadata.uid.as_deref() != Some(uid),
    }
}

pub fn state_of(i: &VolumeInputs<'_>) -> VolumeState {
    let pv = i.pv;
    let meta = &pv.metadata;
    if !crate::volume::provisioned_by(pv, i.provisioner_name) {
        return VolumeState::NotOurs;
    }
    // Whoever may update PVs can write our `deprovisioned` mark: it is never read. The
    // storage is gone when a deprovision Job of this very PV (its uid) succeeded.
    if deprovision_succeeded(i) {
        return VolumeState::Deprovisioned;
    }
    let spec = pv.spec.clone().unwrap_or_default();
    let claim_ref = spec.claim_ref.unwrap_or_default();
    let ref_uid = claim_ref.uid.unwrap_or_default();
    let pv_name = meta.name.as_deref().unwrap_or_default();
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let deleting = meta.deletion_timestamp.is_some();
    // A cache is believed only about a PV Kubernetes shows bound and nobody deleted: there a
    // stale "alive" merely postpones, and a later phase change brings the PV back. Anywhere
    // else the claim counts as unknown until the API server is asked.
    let trusted = i.claim_confirmed || (phase == Some("Bound") && !deleting);
    let claim = i.claim.filter(|_| trusted);
    let claim_alive = !ref_uid.is_empty()
        && claim.is_some_and(|c| c.metadata.uid.as_deref() == Some(ref_uid.as_str()));
    let bound_here = claim_alive
        && claim
            .and_then(|c| c.spec.as_ref()?.volume_name.as_deref())
            .is_some_and(|v| v == pv_name);
    if bound_here {
        return VolumeState::InUse;
    }
    let policy = spec
        .persistent_volume_reclaim_policy
        .as_deref()
        .unwrap_or("Delete");
    // Our PVs are named after the claim they were made for (`pvc-<claim uid>`), a name no
    // one can change: a claimRef with another uid (re-pointed, zeroed) is not that claim's
    // release, and a claim that still names the volume still has it.
    let handed_over = pv_name != crate::names::pv_name(&ref_uid) || i.named_by_claim;
    match (deleting, policy, phase) {
        // A deleted volume whose claimRef was cleared or never set a uid: nothing says which
        // claim used it or that none does now, so its storage is kept (as for Retain).
        (true, "Delete", _) if ref_uid.is_empty() => VolumeState::DeletedRetain,
        (true, "Delete", _) if handed_over => VolumeState::HandedOver,
        (true, "Delete", _) => VolumeState::DeletedDelete,
        (true, _, _) => VolumeState::DeletedRetain,
        (false, "Delete", Some("Released")) if !ref_uid.is_empty() && !claim_alive => {
            if handed_over {
                VolumeState::HandedOver
            } else {
                VolumeState::Released
            }
        }
        _ => VolumeState::Idle,
    }
}

/// The next step for a PV; a decision that may destroy storage first asks for the claim
/// ([`Ask::Claim`]) or, when Kubernetes released the volume, for its record ([`Ask::Record`]).
pub fn plan_volume(i: &VolumeInputs<'_>) -> Decision<VolumePlan> {
    let state = state_of(i);
    let done = |step| {
        Ok(VolumePlan {
            state,
            step,
            notices: vec![],
        })
    };
    let pv = i.pv;
    let deleting = pv.metadata.deletion_timestamp.is_some();
    match state {
        VolumeState::NotOurs | VolumeState::InUse | VolumeState::Idle => done(VolumeStep::Ignore),
        VolumeState::HandedOver => Ok(VolumePlan {
            state,
            step: VolumeStep::Ignore,
            notices: vec![handed_over_notice(pv, i.named_by_claim)],
        }),
        VolumeState::Deprovisioned if verified(pv) => done(VolumeStep::Finish(finalizer_patch(
            pv,
            json!({ ANN_DEPROVISIONED: "true" }),
        ))),
        VolumeState::Deprovisioned if !deleting => done(VolumeStep::Delete {
            uid: pv.metadata.uid.clone().unwrap_or_default(),
            resource_version: None,
        }),
        VolumeState::Deprovisioned => done(VolumeStep::Ignore),
        VolumeState::DeletedRetain if verified(pv) => done(VolumeStep::KeepStorage {
            patch: finalizer_patch(pv, json!({})),
            mark_jobs: i
                .provision_jobs
                .iter()
                .filter(|j| crate::plan::orphan::is_candidate(j))
                .map(|j| {
                    (
                        j.metadata.namespace.clone().unwrap_or_default(),
                        j.metadata.name.clone().unwrap_or_default(),
                    )
                })
                .collect(),
        }),
        VolumeState::DeletedRetain => done(VolumeStep::Ignore),
        // Someone removed our finalizer: the object is going; running a Job now would race
        // with nothing left to record its outcome on.
        VolumeState::DeletedDelete if !verified(pv) => done(VolumeStep::Ignore),
        // Released by Kubernetes and no deprovision of it begun: the PV is deleted first,
        // under the version that showed it released (our finalizer keeps it while its
        // storage is destroyed, and Kubernetes never binds a PV being deleted). That write is
        // the confirmation: no read of the claim is needed.
        // The cache still shows the claim: its deletion is on its way through the watch
        // (the PV controller saw it gone). Waited for rather than read: waiting never
        // destroys anything, and a claim that is in fact alive keeps its volume.
        VolumeState::Released if !i.claim_confirmed && cache_shows_claim(i) => {
            done(VolumeStep::Wait(CLAIM_CACHE_LAG))
        }
        // Only with our finalizer: without it (an image-mode PV not verified yet) the delete
        // would remove the PV at once, and with it what says there is storage to clean.
        VolumeState::Released if verified(pv) && !i.jobs.iter().any(|j| of_this_pv(j, pv)) => {
            done(VolumeStep::Delete {
                uid: pv.metadata.uid.clone().unwrap_or_default(),
                resource_version: pv.metadata.resource_version.clone(),
            })
        }
        VolumeState::DeletedDelete | VolumeState::Released => {
            let mut p = deprovision(i)?;
            p.state = state;
            if matches!(p.step, VolumeStep::CreateJob(_)) && !claim_known_gone(i) {
                return Err(Ask::Claim);
            }
            Ok(p)
        }
    }
}

/// What an admin is told about a volume kept as handed over, once per claimRef.
fn handed_over_notice(pv: &PersistentVolume, named_by_claim: bool) -> Notice {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let r = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.clone())
        .unwrap_or_default();
    let (ns, claim, uid) = (
        r.namespace.unwrap_or_default(),
        r.name.unwrap_or_default(),
        r.uid.unwrap_or_default(),
    );
    let made_for = name.strip_prefix("pvc-").unwrap_or_default();
    let why = if named_by_claim {
        "a claim still names it in spec.volumeName".to_owned()
    } else {
        format!(
            "its claimRef names {ns}/{claim} (uid {uid}), not the claim it was provisioned for (uid {made_for})"
        )
    };
    Notice::warning(
        format!("handed-over/{}/{uid}", pv.metadata.uid.as_deref().unwrap_or_default()),
        reasons::VOLUME_FAILED_DELETE,
        format!("{name} is released but {why}: taken as an admin's hand-over, its storage is kept and nothing is deprovisioned; when the data is no longer needed, delete it by hand and remove the finalizer {FINALIZER_DEPROVISION}"),
    )
    .action("Deprovision")
}

/// Whether the cache shows the claim the PV's claimRef names, with its uid.
fn cache_shows_claim(i: &VolumeInputs<'_>) -> bool {
    let ref_uid = crate::volume::claim_uid(i.pv);
    ref_uid.is_some() && i.claim.and_then(|c| c.metadata.uid.as_deref()) == ref_uid
}

/// Whether a deprovision Job of this very PV succeeded.
fn deprovision_succeeded(i: &VolumeInputs<'_>) -> bool {
    i.jobs
        .iter()
        .filter(|j| of_this_pv(j, i.pv))
        .any(|j| outcome(j, &pods_of(j, &i.pods)) == JobOutcome::Succeeded)
}

/// Whether a deprovision Job was made for this very PV (not an earlier one of its name).
fn of_this_pv(job: &Job, pv: &PersistentVolume) -> bool {
    let pv_uid = pv.metadata.uid.as_deref().unwrap_or_default();
    crate::names::annotation(&job.metadata, ANN_VOLUME_UID) == Some(pv_uid)
}

/// The claim of a deleted volume is known gone without asking: Kubernetes released the
/// volume (the PV controller confirms with the API server before it does), and a PV being
/// deleted is never bound again. Otherwise only the API server's answer counts.
fn claim_known_gone(i: &VolumeInputs<'_>) -> bool {
    let released = i.pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    i.claim_confirmed || (released && i.pv.metadata.deletion_timestamp.is_some())
}

/// Storage to be destroyed: wait for a provisioning pod still at work, then run the
/// deprovision Job until it succeeds, retrying failures with growing delays.
fn released(step: VolumeStep, notices: Vec<Notice>) -> Decision<VolumePlan> {
    Ok(VolumePlan {
        state: VolumeState::Released,
        step,
        notices,
    })
}

fn deprovision(i: &VolumeInputs<'_>) -> Decision<VolumePlan> {
    let pv = i.pv;
    if i.provisioning {
        return released(VolumeStep::Wait(RUNNING_RECHECK), vec![]);
    }
    // Jobs of an earlier PV of the same name only take up attempt numbers (Job names).
    let mine = |j: &&&Job| of_this_pv(j, pv);
    // Never two deprovisions of one name at once (an earlier PV's Job may still run).
    if i.jobs.iter().filter(|j| !mine(j)).any(|j| {
        let pods = pods_of(j, &i.pods);
        outcome(j, &pods) == JobOutcome::Running
    }) {
        return released(VolumeStep::Wait(RUNNING_RECHECK), vec![]);
    }
    let Some(job) = i
        .jobs
        .iter()
        .filter(mine)
        .copied()
        .max_by_key(|j| attempt_of(j))
    else {
        let taken = i.jobs.iter().map(|j| attempt_of(j)).max().unwrap_or(0);
        return create_deprovision_job(i, taken + 1, vec![]);
    };
    let attempt = attempt_of(job);
    let pods = pods_of(job, &i.pods);
    match outcome(job, &pods) {
        JobOutcome::Running => released(VolumeStep::Wait(RUNNING_RECHECK), vec![]),
        JobOutcome::Succeeded => released(
            VolumeStep::Finish(finalizer_patch(pv, json!({ ANN_DEPROVISIONED: "true" }))),
            vec![],
        ),
        JobOutcome::Failed(Failure { message, at, .. }) => {
            let pv_name = pv.metadata.name.clone().unwrap_or_default();
            let wait = delay_after(attempt, i.retry_base);
            let remaining = wait_remaining(attempt, i.retry_base, at, i.now);
            let uid = job.metadata.uid.clone().unwrap_or_default();
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
            .counted_as(NoticeKind::DeleteFailed).action("Deprovision");
            if remaining.is_zero() {
                create_deprovision_job(i, attempt + 1, vec![notice])
            } else {
                released(VolumeStep::Wait(remaining), vec![notice])
            }
        }
    }
}

/// Deprovision attempt `attempt`, built from the volume's record alone, once the API
/// server confirmed the claim is gone and the record was read from it; a record lost
/// since is written again from the Job that made the volume; without one nothing runs.
fn create_deprovision_job(
    i: &VolumeInputs<'_>,
    attempt: u32,
    mut notices: Vec<Notice>,
) -> Decision<VolumePlan> {
    let pv = i.pv;
    let from_job = || {
        i.provision_jobs
            .iter()
            .find_map(|j| crate::record::record_from_job(pv, j))
    };
    let read = match i.record {
        Some(cm) => read_record(cm, pv),
        None => Err(crate::record::RecordError::missing(pv)),
    };
    match read {
        // The claim and the record are read from the API server right before.
        _ if !claim_known_gone(i) => Err(Ask::Claim),
        _ if !i.claim_confirmed && !i.record_read => Err(Ask::Record),
        Err(_)
            if i.record.is_none()
                && let Some(record) = from_job() =>
        {
            released(VolumeStep::WriteRecord(Box::new(record)), notices)
        }
        Ok(record) => match record.recipe.node.as_deref() {
            Some(node) if !(i.node_exists)(node) => {
                let pv_name = pv.metadata.name.clone().unwrap_or_default();
                notices.push(
                    Notice::warning(
                        format!("node-gone/{pv_name}/{node}"),
                        reasons::VOLUME_FAILED_DELETE,
                        format!(
                            "cannot deprovision {pv_name}: its storage is on node {node}, which no longer exists, so no Job of it could run; nothing is run and the volume is kept, and looked at again every {} minutes (if the node is gone for good, remove what is left of its storage by hand, then the finalizer {FINALIZER_DEPROVISION})",
                            NODE_GONE_RECHECK.as_secs() / 60
                        ),
                    )
                    .action("Deprovision"),
                );
                released(VolumeStep::Wait(NODE_GONE_RECHECK), notices)
            }
            _ => {
                let job =
                    deprovision_job(pv, &record, i.provisioner_name, attempt, i.job_ttl_seconds);
                released(VolumeStep::CreateJob(Box::new(job)), notices)
            }
        },
        Err(why) => {
            let pv_name = pv.metadata.name.clone().unwrap_or_default();
            notices.push(
                Notice::warning(
                    format!("no-recipe/{pv_name}"),
                    reasons::VOLUME_FAILED_DELETE,
                    format!(
                        "cannot deprovision {pv_name}: {why}; nothing is run and the volume is kept (only a record the controller wrote when it verified the volume says what a deprovision runs; if this is a real volume, delete its storage by hand, then remove the finalizer {FINALIZER_DEPROVISION})"
                    ),
                )
                .action("Deprovision"),
            );
            released(VolumeStep::Ignore, notices)
        }
    }
}

#[cfg(test)]
mod tests;
