//! The next step for a claim: from the claim, its class configuration, its provisioning Jobs
//! (and their pods) and its PV, decide whether to start an attempt, wait, verify, retry or
//! give up, and what to tell the user.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::Value;

use super::retry::{delay_after, wait_remaining};
use super::{Ask, Decision, Notice, NoticeKind, reasons};
use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::ClassConfig;
use crate::config::PvCreator;
use crate::config::allowed::check_report;
use crate::inputs::ANN_INPUTS;
use crate::job::{
    Failure, JobOutcome, ProvisionContext, attempt_of, outcome, pod_failure, pods_of,
    provision_job, report_of,
};
use crate::names::{
    ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER_BETA, annotation, fnv1a32,
    pv_name,
};
use crate::recipe::JobRecipe;
use crate::rendered::{RenderFailure, Rendered};
use crate::volume::{Expected, PvCheck, pv_template, pv_with_source, verify};

/// Annotations on the claim: the number of the last failed attempt, written only when its
/// Job would expire (ttlSecondsAfterFinished) before the next attempt starts or when the
/// controller gives up, and the inputs a permanent failure gave up on. While the Jobs exist
/// they are the record; the user's claim is not written per attempt.
pub const ANN_ATTEMPT: &str = "flex-provisioner.io/attempt";

/// A failed Job is recorded on its claim when it expires less than this before the next
/// attempt is due (the controller may be busy, or restarting, at that moment).
const EXPIRY_MARGIN: Duration = Duration::from_secs(120);
/// How soon a claim whose due attempt is held back is looked at after recording.
const HELD_RECHECK: Duration = Duration::from_secs(5);
pub const ANN_GAVE_UP: &str = "flex-provisioner.io/gave-up";

/// The class configuration as the controller has it.
#[derive(Debug, Clone, Copy)]
pub enum ConfigState<'a> {
    Ready(&'a ClassConfig),
    /// No usable configuration: no ConfigMap, or an invalid one (which blocks the class
    /// until it is fixed, before and after a restart alike).
    Unusable(&'a str),
}

pub struct ClaimInputs<'a> {
    pub claim: &'a PersistentVolumeClaim,
    pub provisioner_name: &'a str,
    /// The provisioner the claim's StorageClass names, as the class cache has it (`None`:
    /// no such class). What makes a claim ours: a cluster admin's class, never the claim.
    pub class_provisioner: Option<&'a str>,
    pub config: ConfigState<'a>,
    /// The provisioning Jobs labelled with this claim's uid, and their pods.
    pub jobs: Vec<&'a Job>,
    pub pods: Vec<&'a Pod>,
    /// `pods` were read from the API server for this decision ([`Ask::Pods`]),
    /// not taken from a cache that may lag behind the Job's completion.
    pub pods_confirmed: bool,
    /// The PV named `pvc-<claim uid>`, if it exists.
    pub pv: Option<&'a PersistentVolume>,
    /// The API server itself (not a cache that may lag behind the Job's completion) said
    /// that PV does not exist.
    pub pv_absence_confirmed: bool,
    /// The node the claim's selected-node annotation names, from the node cache or, once
    /// the planner asked ([`Ask::Node`]), from the API server.
    pub node: Option<&'a NodeInfo>,
    /// The API server itself said the selected node does not exist.
    pub node_absence_confirmed: bool,
    /// Provisioning Jobs of this class that are still running (for `max-concurrent`).
    pub active_jobs_of_class: usize,
    /// What an attempt would be made from now, once the planner asked for it
    /// ([`Ask::Prepare`]); `None` until then.
    pub prepared: Option<&'a Prepared>,
    pub retry_base: Duration,
    /// `ttlSecondsAfterFinished` of the Jobs the planner builds.
    pub job_ttl_seconds: i32,
    pub now: jiff::Timestamp,
    /// The latest attempt whose Job this controller created but the Job cache does not show
    /// yet: it counts as running, so no second create (and no second request) is made.
    pub created_attempt: Option<u32>,
    /// The claim's running Jobs that have no pod, each with the message of the Job
    /// controller's latest FailedCreate event about it.
    pub not_starting: Vec<(&'a Job, &'a str)>,
}

/// What an attempt is made from, and costs work to know: the rendered templates (CPU under
/// a budget, so the caller runs it off the reconcile thread), the digest of the inputs, and
/// what the claim's data source resolved to (it may take a read). The planner asks for it
/// ([`Ask::Prepare`]) only when it starts, retries or gives up on an attempt, so a bound
/// claim or a running attempt costs none of it.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub rendered: Result<Rendered, RenderFailure>,
    /// See [`crate::inputs::inputs_hash`].
    pub inputs_hash: String,
    /// What the claim's data source resolved to, when it has one the class lists.
    pub source: Option<crate::source::SourceData>,
}

impl Prepared {
    /// Renders and digests on the calling thread (tests, the `render` command); the
    /// controller renders on its blocking pool instead.
    pub fn here(
        config: &ClassConfig,
        request: &ClaimRequest,
        node: Option<&NodeInfo>,
        provisioner_name: &str,
        source: Option<crate::source::SourceData>,
    ) -> Self {
        Prepared {
            rendered: crate::rendered::render_for_claim(config, request, node, provisioner_name),
            inputs_hash: crate::inputs::inputs_hash(config, request),
            source,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Nothing to write: look again when the claim, its Jobs, pods, PV, class or ConfigMap
    /// change (`None`), or after this long at the latest. Why, where users must know, is in
    /// the notices.
    Wait(Option<Duration>),
    /// A merge patch of the claim's annotations, under the resourceVersion the plan was
    /// made from (a conflict plans again from the fresh claim), then a look after
    /// `recheck`: the selected node removed (the claim goes back to the scheduler, as with
    /// Kubernetes' own provisioners), a failed attempt's number recorded (its Job expires
    /// before the next attempt is due), or the inputs given up on recorded with it.
    PatchClaim {
        patch: Value,
        recheck: Option<Duration>,
    },
    /// Create the Job for this attempt (one that exists already is adopted), then tell
    /// `started` on the claim.
    CreateJob {
        attempt: u32,
        job: Box<Job>,
        started: Box<Notice>,
    },
    /// The attempt's Job is running.
    Running { attempt: u32 },
    /// The PV is right: add the bookkeeping it lacks, if any.
    Provisioned {
        patch: Option<Value>,
        /// The volume's deprovision record, written while the attempt is fresh (an existing
        /// one is kept: it was made from the configuration the volume was provisioned with).
        record: Option<Box<k8s_openapi::api::core::v1::ConfigMap>>,
    },
    /// The claim is bound to its PV, but the PV does not verify (an image-mode PV the PV
    /// controller bound before the controller could judge it): nothing is run from it, and
    /// the notices are told on the PV as well as on the claim.
    BoundToUnverified {
        pv: Box<k8s_openapi::api::core::v1::ObjectReference>,
        on_pv: Vec<Notice>,
    },
    /// The PV our image made is wrong for this claim: delete it (provided it still has this
    /// uid), then the next attempt starts.
    RemoveWrongPv { uid: String },
    /// Wait before attempt `next_attempt`.
    Backoff { next_attempt: u32, wait: Duration },
    /// `pv-creator: controller`: the Job succeeded and reported a valid volume source;
    /// create this PV (a conflict means it exists already: plan again once it is seen).
    CreatePv { pv: Box<PersistentVolume> },
}

/// How long a running attempt waits for a look without a change: every change of its Job,
/// its pods and the Job controller's events about it brings the claim back; this is only the
/// safety net. Short, it made a long burst cost each waiting claim a reconcile every few
/// seconds.
pub const RUNNING_RECHECK: Duration = Duration::from_secs(120);
/// How often a claim that waits for a change of its own, its class or its ConfigMap (all
/// watched) is looked at anyway.
const BLOCKED_RECHECK: Duration = Duration::from_secs(60);
/// How often a claim waits for what no watch brings back: room under `max-concurrent`.
const THROTTLED_RECHECK: Duration = Duration::from_secs(5);
/// How often a claim is first looked at again while its data source is not usable (a source
/// claim not bound yet, an admin's object missing or not readable), and at most.
const SOURCE_RECHECK: Duration = Duration::from_secs(5);
const SOURCE_RECHECK_MAX: Duration = Duration::from_secs(300);

/// When a claim that has waited `waited` for its data source looks again: soon at first, then
/// after half the time it has waited so far, up to five minutes. An admin's object is read
/// from the API server at every look, so a user's thousand claims naming objects that never
/// come cost a few requests a second after a while, not hundreds, while a source that comes
/// a moment later is seen within seconds.
fn source_recheck(waited: Duration) -> Duration {
    (waited / 2).clamp(SOURCE_RECHECK, SOURCE_RECHECK_MAX)
}
/// A read or removal in flight: its answer comes within moments.
const SOON: Duration = Duration::from_secs(1);

/// Nothing to do until something about the claim changes.
const ON_CHANGE: Step = Step::Wait(None);
/// Nothing can happen until the claim or the configuration changes (or, for a claim whose
/// attempt's node is gone, until the node is back: no watch of nodes brings the claim back).
const BLOCKED: Step = Step::Wait(Some(BLOCKED_RECHECK));

impl Step {
    /// When the claim is looked at again after this step is carried out (`None`: when
    /// something about it changes).
    pub fn recheck(&self) -> Option<Duration> {
        match self {
            Step::Wait(wait) => *wait,
            // The patch changes the claim, which brings it back.
            Step::PatchClaim { recheck, .. } => *recheck,
            Step::BoundToUnverified { .. } | Step::Provisioned { .. } | Step::CreatePv { .. } => {
                None
            }
            Step::RemoveWrongPv { .. } => Some(SOON),
            Step::Backoff { wait, .. } => Some(*wait),
            Step::Running { .. } | Step::CreateJob { .. } => Some(RUNNING_RECHECK),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub step: Step,
    pub notices: Vec<Notice>,
}

fn short_hash(s: &str) -> String {
    format!("{:08x}", fnv1a32(s.as_bytes()))
}

/// Whether a PV could have been made by one of this claim's provisioning Jobs: it was
/// created no earlier than the first of them. One created before any Job ran (e.g. planted
/// under the name we would use) is someone else's, and we never delete what we did not make.
fn made_by_attempt(pv: &PersistentVolume, jobs: &[&Job]) -> bool {
    let Some(created) = pv.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    jobs.iter()
        .filter_map(|j| j.metadata.creation_timestamp.as_ref())
        .any(|started| started.0 <= created.0)
}

/// A claim is ours when its StorageClass (annotation first, as Kubernetes reads it) names
/// this provisioner. The claim's own `storage-provisioner` annotation, which the PV
/// controller writes once no existing volume matched (and, for WaitForFirstConsumer, once
/// a node is selected), is the hand-over: required, but never enough, since the claim's
/// author can write it too.
pub fn is_ours(
    claim: &PersistentVolumeClaim,
    class_provisioner: Option<&str>,
    provisioner: &str,
) -> bool {
    class_provisioner == Some(provisioner)
        && annotation(&claim.metadata, ANN_STORAGE_PROVISIONER)
            .or_else(|| annotation(&claim.metadata, ANN_STORAGE_PROVISIONER_BETA))
            == Some(provisioner)
}

/// How far the claim is: still to provision, already bound to the volume we make for it
/// (bookkeeping and the success notice may be due), or not ours to touch.
#[derive(PartialEq)]
enum Stage {
    Pending,
    BoundToOurs,
    Other,
}

fn stage(claim: &PersistentVolumeClaim) -> Stage {
    if claim.metadata.deletion_timestamp.is_some() {
        return Stage::Other;
    }
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default();
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    match (phase, volume) {
        ("Pending", "") => Stage::Pending,
        (_, v) if !uid.is_empty() && v == pv_name(uid) => Stage::BoundToOurs,
        _ => Stage::Other,
    }
}

/// A success is announced when the claim is still pending, or when the attempt finished
/// recently (so a restarted controller does not announce every old volume again).
const ANNOUNCE_WITHIN: Duration = Duration::from_secs(600);

/// How long after a Job succeeded its pod (and so its report) may still be on its way to
/// the cache; after that a missing report counts as lost and the attempt as failed.
const REPORT_WAIT: Duration = Duration::from_secs(60);

fn plan(step: Step, notices: Vec<Notice>) -> Decision<Plan> {
    Ok(Plan { step, notices })
}

/// Notices about the pods of attempt `attempt`: each failure as it happens (also while the
/// Job has retries left) and pods that cannot start.
fn pod_notices(attempt: u32, pods: &[&Pod]) -> Vec<Notice> {
    let mut out = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut say = |key: String, reason, what: String| {
            let message = format!("attempt {attempt}: provisioner pod {name} {what}");
            out.push(
                Notice::warning(key, reason, message)
                    .about(*pod)
                    .action("Observe"),
            );
        };
        if let Some(text) = pod_failure(pod) {
            say(
                format!("pod-failed/{uid}"),
                reasons::FAILED,
                format!("failed with {text}"),
            );
            continue;
        }
        let status = pod.status.clone().unwrap_or_default();
        let states = status.container_statuses.iter().flatten();
        for w in states.filter_map(|cs| cs.state.as_ref()?.waiting.clone()) {
            let reason = w.reason.unwrap_or_default();
            // ImagePullBackOff follows ErrImagePull: the same problem, said once.
            let key_reason = match reason.as_str() {
                "ErrImagePull" | "ImagePullBackOff" => "ErrImagePull",
                "InvalidImageName" | "CreateContainerConfigError" | "CreateContainerError" => {
                    reason.as_str()
                }
                _ => continue,
            };
            let what = format!("cannot start: {reason}: {}", w.message.unwrap_or_default());
            say(
                format!("pod-start/{uid}/{key_reason}"),
                reasons::POD_NOT_STARTING,
                what,
            );
        }
        let unschedulable = (status.conditions.iter().flatten()).find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
        if let Some(c) = unschedulable {
            let what = format!(
                "cannot be scheduled: {}",
                c.message.clone().unwrap_or_default()
            );
            say(
                format!("pod-start/{uid}/Unschedulable"),
                reasons::POD_NOT_STARTING,
                what,
            );
        }
    }
    out
}

fn completion_of(job: &Job) -> Option<jiff::Timestamp> {
    job.status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .map(|t| t.0)
}

/// The most attempts a claim's annotation may record: years of retries at the backoff's
/// cap. Anything larger was not written by the provisioner.
const MOST_RECORDED_ATTEMPTS: u32 = 1_000_000;

/// The attempt number recorded on the claim (0: none), and the annotation's text when it is
/// not one the provisioner could have written and is ignored. The claim's author can write
/// the annotation too: the provisioner writes it only for a Job of its own that is about to
/// expire (so never above the claim's latest Job while one exists), as digits.
fn recorded_attempt(
    claim: &PersistentVolumeClaim,
    latest_job: Option<u32>,
) -> (u32, Option<String>) {
    let Some(text) = annotation(&claim.metadata, ANN_ATTEMPT) else {
        return (0, None);
    };
    let valid = text
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= MOST_RECORDED_ATTEMPTS && latest_job.is_none_or(|l| *n <= l))
        .filter(|_| text.bytes().all(|b| b.is_ascii_digit()));
    match valid {
        Some(n) => (n, None),
        None => (0, Some(text.chars().take(64).collect())),
    }
}

/// The next step for a claim, in stages: [`gate`] (is the claim ours and servable),
/// [`Judging::judge_pv`] (a PV exists under the claim's name), [`Judging::judge_job`] (the
/// latest attempt's Job) and [`Judging::after_failure`] (retry, wait or give up). A stage
/// that needs what an attempt is made from and was not given it returns [`Ask::Prepare`].
pub fn plan_claim(i: &ClaimInputs<'_>) -> Decision<Plan> {
    let judging = match gate(i) {
        Ok(g) => Judging::new(i, g),
        Err(done) => return done,
    };
    let mut decided = match i.pv {
        Some(pv) => judging.judge_pv(pv)?,
        None if judging.stage != Stage::Pending => return plan(ON_CHANGE, vec![]),
        None => judging.judge_job()?,
    };
    if let Step::Running { attempt } = decided.step {
        let not_starting = i.not_starting.iter();
        (decided.notices)
            .extend(not_starting.map(|(job, why)| not_starting_notice(job, attempt, why)));
    }
    Ok(decided)
}

/// Said on the claim once its attempt's Job is created.
fn started_notice(request: &ClaimRequest, attempt: u32, job: &Job) -> Notice {
    let (ns, name) = (&request.namespace, &request.name);
    let job_ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let job_name = job.metadata.name.as_deref().unwrap_or_default();
    Notice::normal(
        format!("provisioning/{}/{attempt}", request.uid),
        reasons::PROVISIONING,
        format!("External provisioner is provisioning volume for claim \"{ns}/{name}\" (attempt {attempt}, Job {job_ns}/{job_name})"),
    )
    .about(job)
}

/// A running Job whose pod could not even be created (a missing ServiceAccount, a quota)
/// leaves no pod to look at; the Job controller's FailedCreate event says why.
fn not_starting_notice(job: &Job, attempt: u32, why: &str) -> Notice {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    Notice::warning(
        format!(
            "job-create/{}",
            job.metadata.uid.as_deref().unwrap_or_default()
        ),
        reasons::POD_NOT_STARTING,
        format!("attempt {attempt}: the Job {name} cannot create its pod: {why}"),
    )
    .about(job)
    .action("Observe")
}

/// What the gate lets through: a claim of ours, servable.
type Gated<'a> = (Stage, ClaimRequest, &'a ClassConfig);

/// A problem the user or an admin must fix before anything happens; said only while the
/// claim is pending (past provisioning, problems are no longer the user's to fix).
fn blocked(
    stage: &Stage,
    key: &str,
    reason: &'static str,
    message: String,
    action: &'static str,
    mut notices: Vec<Notice>,
) -> Decision<Plan> {
    if *stage != Stage::Pending {
        return plan(ON_CHANGE, vec![]);
    }
    notices.push(
        Notice::warning(format!("{key}/{}", short_hash(&message)), reason, message).action(action),
    );
    plan(BLOCKED, notices)
}

/// Stage 1: whether the claim is ours and can be served at all (its fields, its class's
/// configuration, a selected node when the class waits for one).
fn gate<'a>(i: &ClaimInputs<'a>) -> Result<Gated<'a>, Decision<Plan>> {
    let stage = stage(i.claim);
    if stage == Stage::Other || !is_ours(i.claim, i.class_provisioner, i.provisioner_name) {
        return Err(plan(ON_CHANGE, vec![]));
    }
    let request = ClaimRequest::from_claim(i.claim).map_err(|e| {
        let message = format!("cannot provision this claim: {e}");
        blocked(
            &stage,
            "claim",
            reasons::FAILED,
            message,
            "Validate",
            vec![],
        )
    })?;
    let config = match i.config {
        ConfigState::Ready(c) => c,
        ConfigState::Unusable(problem) => {
            let (reason, message) = (reasons::CONFIG_INVALID, problem.to_owned());
            return Err(blocked(
                &stage,
                "config",
                reason,
                message,
                "Configure",
                vec![],
            ));
        }
    };
    if config.class.waits_for_consumer() && request.selected_node.is_none() {
        return Err(plan(ON_CHANGE, vec![]));
    }
    if stage == Stage::Pending
        && i.node.is_none()
        && let Some(node) = &request.selected_node
    {
        return Err(node_missing(i, node));
    }
    if stage == Stage::Pending
        && config.provisioner.node_local
        && let Some(node) = i.node.filter(|n| n.unschedulable)
        && i.jobs.is_empty()
        && i.created_attempt.is_none()
        && !tolerates_cordon(config)
    {
        // Its Job, pinned there, would wait unscheduled for its whole timeout, holding one
        // of the class's `max-concurrent` slots (a claim's author can write the
        // selection): handed back to the scheduler, which chooses among schedulable nodes.
        let why = format!(
            "the node \"{}\" selected for this claim is cordoned, so its provisioning Job could not run there",
            node.name
        );
        return Err(reschedule(i, &node.name, why));
    }
    Ok((stage, request, config))
}

/// The claim names a node the node cache does not show: the API server is asked first (the
/// cache may not show a node that just joined). A node it does not know either (deleted
/// after the scheduler chose it, or written by the claim's author) is handed back to the
/// scheduler before any attempt; once one has started, its Job was made for that node, and
/// the claim waits for it and says why.
fn node_missing(i: &ClaimInputs<'_>, node: &str) -> Decision<Plan> {
    // A name no node can have is never asked about: it would become the path of the read.
    if !i.node_absence_confirmed && crate::names::is_dns_subdomain(node) {
        let name = node.to_owned();
        return Err(Ask::Node { name });
    }
    let shown: String = node.chars().take(253).collect();
    let key = short_hash(node);
    if !i.jobs.is_empty() || i.created_attempt.is_some() {
        let message = format!(
            "the node \"{shown}\" this claim's attempt was started for does not exist; provisioning waits for it: if it is gone for good, delete the claim and create it again"
        );
        let notice =
            Notice::warning(format!("node-gone/{key}"), reasons::FAILED, message).action("Observe");
        return plan(BLOCKED, vec![notice]);
    }
    reschedule(
        i,
        node,
        format!("the node \"{shown}\" selected for this claim does not exist"),
    )
}

/// Hands the claim back to the scheduler: its selected-node annotation removed, under the
/// claim's resourceVersion, as Kubernetes' own provisioners do.
fn reschedule(i: &ClaimInputs<'_>, node: &str, why: String) -> Decision<Plan> {
    // The patch changes the claim, which brings it back.
    let patch = annotated(i.claim, serde_json::json!({ANN_SELECTED_NODE: null}), None);
    let message =
        format!("{why}; the controller removes the selection so that the scheduler chooses again");
    let key = format!("reschedule/{}", short_hash(node));
    let notice = Notice::warning(key, reasons::FAILED, message).action("Reschedule");
    plan(patch, vec![notice])
}

/// Whether the class's pods tolerate a cordoned node (`node.kubernetes.io/unschedulable`, or
/// every taint).
fn tolerates_cordon(config: &ClassConfig) -> bool {
    let tolerations = config
        .provisioner
        .pod_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.tolerations.as_ref());
    tolerations.into_iter().flatten().any(|t| {
        let key = t.key.as_deref().unwrap_or_default();
        let any_effect = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == "NoSchedule");
        let matches = key == "node.kubernetes.io/unschedulable"
            || (key.is_empty() && t.operator.as_deref() == Some("Exists"));
        matches && any_effect
    })
}

/// A claim past the gate, with what its Jobs, pods and annotations say.
struct Judging<'i, 'a> {
    i: &'i ClaimInputs<'a>,
    stage: Stage,
    request: ClaimRequest,
    config: &'a ClassConfig,
    /// The PV an attempt makes, but for its volume source.
    template: PersistentVolume,
    notices: Vec<Notice>,
    /// The claim's latest provisioning Job, and how it stands.
    latest: Option<&'a Job>,
    latest_outcome: Option<JobOutcome>,
    /// The attempt number the claim records (0: none).
    on_claim: u32,
    /// The latest attempt made: recorded on the claim, or created here a moment ago.
    recorded: u32,
    /// The latest attempt's number: its Job's, or the recorded one.
    attempt: u32,
    /// `pv-creator: controller`: the controller creates the PV from the report.
    by_controller: bool,
    /// What the latest attempt's pod reported (controller mode).
    report: Option<String>,
    /// What the latest attempt's volume may be (with a Job).
    allowed: Option<crate::config::AllowedVolumes>,
    /// `max-concurrent` Jobs of the class are running.
    throttled: bool,
}

impl<'i, 'a> Judging<'i, 'a> {
    fn new(i: &'i ClaimInputs<'a>, (stage, request, config): Gated<'a>) -> Self {
        let mut notices = Vec::new();
        let template = pv_template(config, &request, i.node, i.provisioner_name);
        let latest = i.jobs.iter().copied().max_by_key(|j| attempt_of(j));
        let (on_claim, forged) = recorded_attempt(i.claim, latest.map(attempt_of));
        if let Some(text) = forged {
            notices.push(
                Notice::warning(
                    format!("attempt-ignored/{}", short_hash(&text)),
                    reasons::FAILED,
                    format!("the claim's annotation {ANN_ATTEMPT}: {text:?} is not an attempt number the provisioner recorded; it is ignored"),
                )
                .action("Validate"),
            );
        }
        let recorded = on_claim.max(i.created_attempt.unwrap_or(0));
        let by_controller = config.provisioner.pv_creator == PvCreator::Controller;
        let report = latest
            .filter(|_| by_controller)
            .and_then(|j| report_of(j, &i.pods));
        // What the latest attempt's report may name: exactly the directory its Job was made
        // for, with `volume-base`; the class's declarations otherwise.
        let allowed = latest.map(|j| {
            let volume_directory = crate::recipe::env_of(j, "VOLUME_DIRECTORY");
            let made_for = Rendered {
                volume_directory,
                ..Rendered::default()
            };
            made_for.allowed_volumes(config)
        });
        let latest_outcome = latest.map(|j| {
            let pods = pods_of(j, &i.pods);
            notices.extend(pod_notices(attempt_of(j), &pods));
            outcome(j, &pods)
        });
        let throttled = config
            .provisioner
            .max_concurrent
            .is_some_and(|max| i.active_jobs_of_class >= max as usize);
        Judging {
            i,
            stage,
            template,
            latest,
            latest_outcome,
            on_claim,
            recorded,
            attempt: latest.map(attempt_of).unwrap_or(recorded),
            by_controller,
            report,
            allowed,
            throttled,
            request,
            config,
            notices,
        }
    }

    /// Whether the claim gave up on the inputs it has now; the digest is asked for only
    /// when the claim gave up on some.
    fn gave_up(&self) -> Result<bool, Ask> {
        match annotation(&self.i.claim.metadata, ANN_GAVE_UP) {
            None => Ok(false),
            Some(on) => Ok(on == self.prepared()?.inputs_hash),
        }
    }

    /// What an attempt is made from, or the plan that asks for it.
    fn prepared(&self) -> Result<&'a Prepared, Ask> {
        self.i.prepared.ok_or(Ask::Prepare)
    }

    /// The claim's rendered templates, or the plan that asks for them or says why they
    /// cannot be rendered (with the notices so far).
    fn rendered(&mut self) -> Result<&'a Rendered, Decision<Plan>> {
        match &self.prepared().map_err(Err)?.rendered {
            Ok(r) => Ok(r),
            Err(e) => {
                let message = format!("cannot provision this claim: {e}");
                let notices = std::mem::take(&mut self.notices);
                let stage = &self.stage;
                Err(blocked(
                    stage,
                    "render",
                    reasons::FAILED,
                    message,
                    "Validate",
                    notices,
                ))
            }
        }
    }

    /// Attempt `attempt`'s Job, unless its templates do not render, or its data source or
    /// `max-concurrent` holds it back.
    fn start(mut self, attempt: u32) -> Decision<Plan> {
        let rendered = match self.rendered() {
            Ok(r) => r,
            Err(held) => return held,
        };
        let prepared = self.prepared()?;
        let source = prepared.source.as_ref();
        let waited = self
            .i
            .claim
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| self.i.now.duration_since(t.0))
            .and_then(|d| Duration::try_from(d).ok())
            .unwrap_or_default();
        let problem = source_problem(source, &self.request, self.config, waited);
        if let Some((step, problem)) = problem {
            self.notices.push(
                Notice::warning(
                    format!("source/{}", short_hash(&problem)),
                    reasons::FAILED,
                    problem,
                )
                .action("Validate"),
            );
            return plan(step, self.notices);
        }
        if self.throttled {
            return plan(Step::Wait(Some(THROTTLED_RECHECK)), self.notices);
        }
        let job = provision_job(
            ProvisionContext {
                config: self.config,
                claim: &self.request,
                node: self.i.node,
                rendered,
                pv_template: &self.template,
                provisioner_name: self.i.provisioner_name,
                source,
                inputs_hash: &prepared.inputs_hash,
            },
            attempt,
            self.i.job_ttl_seconds,
        );
        let started = Box::new(started_notice(&self.request, attempt, &job));
        let job = Box::new(job);
        plan(
            Step::CreateJob {
                attempt,
                job,
                started,
            },
            self.notices,
        )
    }

    /// The volume's deprovision record: what the Job that made the volume was given;
    /// rendered afresh only for a Job made before Jobs carried it.
    fn record_for(
        &mut self,
        pv: &PersistentVolume,
    ) -> Result<Option<Box<k8s_openapi::api::core::v1::ConfigMap>>, Decision<Plan>> {
        let latest = self.latest;
        if let Some(r) = latest.and_then(|j| crate::record::record_from_attempt(pv, j)) {
            return Ok(Some(Box::new(r)));
        }
        let rendered = self.rendered()?;
        let deprovision = JobRecipe::deprovision(self.config, rendered, self.i.node);
        let expand = JobRecipe::expand(self.config, rendered, self.i.node);
        let parameters = rendered.parameters_json();
        let record = crate::record::build_record(pv, &deprovision, Some(&expand), &parameters);
        Ok(record
            .map(|r| match latest {
                Some(j) => crate::record::with_job_owner(r, j),
                None => r,
            })
            .map(Box::new))
    }

    /// Stage 2: a PV exists under the claim's name. Right: bookkeeping (and the success
    /// notice); wrong: removed when our attempt made it, reported and left alone otherwise.
    fn judge_pv(mut self, pv: &PersistentVolume) -> Decision<Plan> {
        let reported =
            self.report
                .as_deref()
                .zip(self.allowed.as_ref())
                .and_then(|(r, allowed)| {
                    check_report(r, &self.config.provisioner.volume_sources, allowed).ok()
                });
        let expected = Expected {
            sources: &self.config.provisioner.volume_sources,
            reported: reported.as_ref(),
            exact: self.allowed.as_ref().and_then(|a| a.exact.as_ref()),
        };
        // A bound claim may have grown since: its capacity is expansion's business, not a
        // sign of a wrong volume.
        let mut request = self.request.clone();
        if self.stage != Stage::Pending {
            request.bytes = kube_rules::quantity::Bytes(0);
        }
        let judged = verify(pv, &request, &self.template, expected);
        let pv_uid = pv.metadata.uid.clone().unwrap_or_default();
        let volume = pv_name(&self.request.uid);
        let attempt = self.attempt;
        let made_here = made_by_attempt(pv, &self.i.jobs);
        match judged {
            PvCheck::Good { patch } => self.provisioned(pv, patch),
            // Kubernetes binds a PV pre-bound to its claim within moments of its creation,
            // before the Job's success reaches the controller: a wrong one made by an image
            // stays bound. It gets no finalizer and no record, so nothing is ever run on its
            // word; it is reported loudly, on the claim and on the PV.
            PvCheck::Wrong(why) if self.stage != Stage::Pending => {
                let name = pv.metadata.name.clone().unwrap_or_default();
                self.notices.push(Notice::warning(
                    format!("failed/unverified/{pv_uid}"),
                    reasons::FAILED,
                    format!("the claim is bound to PersistentVolume {name}, which the provisioner did not verify: {why}. It gets no finalizer and no record of the provisioner, so nothing will deprovision or expand it: an admin should inspect it (see the README's troubleshooting)"),
                ).about(pv).counted_as(NoticeKind::ProvisionFailed).action("Verify"));
                let pv = Box::new(crate::plan::object_ref(pv));
                // The same words on the PV, where an admin looks; counted once (on the claim).
                let on_pv = (self.notices.iter())
                    .map(|n| Notice {
                        key: format!("on-pv/{}", n.key),
                        kind: NoticeKind::Other,
                        ..n.clone()
                    })
                    .collect();
                plan(Step::BoundToUnverified { pv, on_pv }, self.notices)
            }
            PvCheck::Wrong(_) if matches!(self.latest_outcome, Some(JobOutcome::Running)) => {
                plan(Step::Running { attempt }, self.notices)
            }
            // Removal requested: the volume controller cleans its storage and drops our
            // finalizer; its disappearance brings this claim back.
            PvCheck::Wrong(_) if pv.metadata.deletion_timestamp.is_some() => {
                plan(Step::Wait(Some(SOON)), self.notices)
            }
            // The controller makes PVs only from a verified report, so a wrong one in
            // controller mode is someone else's, whenever it was made.
            PvCheck::Wrong(why) if !self.by_controller && made_here => {
                self.notices.push(Notice::warning(
                    format!("wrong-pv/{pv_uid}"),
                    reasons::FAILED,
                    format!("attempt {attempt}: PersistentVolume {volume} was created, but {why}; it is removed and provisioning retried. Storage it points at is not cleaned by a deprovision Job, which runs only for volumes the controller verified: an admin checks it if the image does not reuse it on the next attempt"),
                ).about(pv).action("Verify"));
                // No record and no finalizer: nothing is ever run on the word of a PV that
                // did not verify.
                plan(Step::RemoveWrongPv { uid: pv_uid }, self.notices)
            }
            PvCheck::Wrong(why) => {
                self.notices.push(Notice::warning(
                    format!("foreign-pv/{pv_uid}"),
                    reasons::FAILED,
                    format!("PersistentVolume {volume} exists but was not made by a provisioning Job of this claim, and {why}; it is left alone and this claim cannot be provisioned until an admin inspects and deletes it"),
                ).about(pv).action("Verify"));
                plan(BLOCKED, self.notices)
            }
        }
    }

    /// The PV is right: its bookkeeping, and the success notice while it is news.
    fn provisioned(mut self, pv: &PersistentVolume, patch: Option<Value>) -> Decision<Plan> {
        let recent = self.latest.and_then(completion_of).is_some_and(|t| {
            let d = self.i.now.duration_since(t);
            !d.is_negative() && d.unsigned_abs() < ANNOUNCE_WITHIN
        });
        let announce = self.stage == Stage::Pending || recent;
        let volume = pv_name(&self.request.uid);
        // A volume no Job of ours could have made gets neither our records (which would
        // later tell a deprovision Job what to destroy) nor a success notice.
        if (announce || patch.is_some()) && !made_by_attempt(pv, &self.i.jobs) {
            let pv_uid = pv.metadata.uid.clone().unwrap_or_default();
            self.notices.push(Notice::warning(
                format!("foreign-pv/{pv_uid}"),
                reasons::FAILED,
                format!("PersistentVolume {volume} exists but was not made by a provisioning Job of this claim; it is left alone, gets no records of ours and is never deprovisioned by us: an admin should inspect it"),
            ).about(pv).action("Verify"));
            return plan(BLOCKED, self.notices);
        }
        if !announce {
            let record = None;
            return plan(Step::Provisioned { patch, record }, self.notices);
        }
        // The record first: a success is announced only with the bookkeeping it needs.
        let record = match self.record_for(pv) {
            Ok(r) => r,
            Err(asked) => return asked,
        };
        self.notices.push(
            Notice::normal(
                format!("succeeded/{}", self.request.uid),
                reasons::SUCCEEDED,
                format!("Successfully provisioned volume {volume}"),
            )
            .about(pv)
            .counted_as(NoticeKind::Provisioned)
            .action("Verify"),
        );
        plan(Step::Provisioned { patch, record }, self.notices)
    }

    /// Stage 3: no PV yet, the claim pending: the latest attempt's Job decides.
    fn judge_job(self) -> Decision<Plan> {
        let Some(job) = self.latest else {
            // Created here a moment ago: the watch has not delivered it yet.
            if let Some(attempt) = self.i.created_attempt {
                return plan(Step::Running { attempt }, self.notices);
            }
            if self.gave_up()? {
                return plan(BLOCKED, self.notices);
            }
            // No Job at all: either none was made yet, or the last recorded failure's Job
            // was cleaned up by its TTL (the next attempt follows it), or it is not in the
            // cache yet after a restart. Creating an attempt's Job again is safe: an
            // existing one is adopted.
            let next = self.on_claim.saturating_add(1);
            return self.start(next);
        };
        // An attempt created here that is newer than any Job we see: not in our cache yet.
        if attempt_of(job) < self.recorded {
            let attempt = self.recorded;
            return plan(Step::Running { attempt }, self.notices);
        }
        let failure = match self.latest_outcome.clone() {
            None | Some(JobOutcome::Running) => {
                let attempt = self.attempt;
                return plan(Step::Running { attempt }, self.notices);
            }
            Some(JobOutcome::Succeeded) => match self.succeeded(job) {
                Ok(failure) => failure,
                Err(step) => return plan(step?, self.notices),
            },
            Some(JobOutcome::Failed(failure)) => failure,
        };
        self.after_failure(job, failure)
    }

    /// A succeeded Job: the PV to create from its report (controller mode), a read to make
    /// before judging, or why the attempt failed after all.
    fn succeeded(&self, job: &Job) -> Result<Failure, Decision<Step>> {
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let at = completion_of(job);
        if !self.by_controller {
            // The PV watch may not have delivered the PV yet: never fail an attempt (and
            // start another Job) on a cache's word alone.
            if !self.i.pv_absence_confirmed {
                return Err(Err(Ask::Volume));
            }
            let message = format!(
                "the provisioner Job {job_name} succeeded but created no PersistentVolume {}",
                pv_name(&self.request.uid)
            );
            return Ok(transient(message, at));
        }
        let Some(raw) = self.report.as_deref() else {
            let fresh = at.is_none_or(|t| {
                let d = self.i.now.duration_since(t);
                d.is_negative() || d.unsigned_abs() < REPORT_WAIT
            });
            if fresh {
                return Err(Ok(Step::Wait(Some(SOON))));
            }
            if !self.i.pods_confirmed {
                return Err(Err(Ask::Pods {
                    namespace: job.metadata.namespace.clone().unwrap_or_default(),
                }));
            }
            let message = format!(
                "the provisioner Job {job_name} succeeded, but its pod, whose termination message holds the volume source, is gone"
            );
            return Ok(transient(message, at));
        };
        let p = &self.config.provisioner;
        let allowed = self
            .allowed
            .clone()
            .unwrap_or_else(|| p.allowed_volumes.clone());
        match check_report(raw, &p.volume_sources, &allowed)
            .and_then(|source| pv_with_source(&self.template, &source))
        {
            Ok(pv) => Err(Ok(Step::CreatePv { pv: Box::new(pv) })),
            // The image's own doing, the same every time: retried only once the claim or
            // the configuration changed.
            Err(why) => Ok(Failure {
                permanent: true,
                message: format!(
                    "the provisioner Job {job_name} succeeded, but {why}; no PersistentVolume is created (storage the image made may need cleaning up by an admin)"
                ),
                at,
                timed_out: false,
            }),
        }
    }

    /// The latest attempt failed for good on these inputs: said, and their digest recorded
    /// on the claim (`record`; `None`: it is already).
    fn give_up(mut self, job: &Job, failure: Failure, record: Option<String>) -> Decision<Plan> {
        let Failure {
            permanent, message, ..
        } = failure;
        let (attempt, job_uid) = (self.attempt, job.metadata.uid.clone().unwrap_or_default());
        let succeeded = matches!(self.latest_outcome, Some(JobOutcome::Succeeded));
        let why = if permanent && succeeded {
            "a bad report is not retried until the claim or the configuration changes"
        } else if permanent {
            "the exit code is permanent, so it is not retried until the claim or the configuration changes"
        } else {
            "max-attempts is reached, so it is not retried until the claim or the configuration changes"
        };
        self.notices.push(
            Notice::warning(
                format!("failed/{job_uid}"),
                reasons::FAILED,
                format!("attempt {attempt} failed: {message}; {why}"),
            )
            .about(job)
            .counted_as(NoticeKind::ProvisionFailed)
            .action("GiveUp"),
        );
        let step = match record {
            None => BLOCKED,
            Some(inputs_hash) => {
                let gave_up =
                    serde_json::json!({ANN_GAVE_UP: inputs_hash, ANN_ATTEMPT: attempt.to_string()});
                annotated(self.i.claim, gave_up, None)
            }
        };
        plan(step, self.notices)
    }

    /// Stage 4: the latest attempt failed: give up (for these inputs), start afresh (the
    /// inputs changed), or retry after the backoff, recording the attempt on the claim
    /// when its Job expires first.
    fn after_failure(mut self, job: &Job, failure: Failure) -> Decision<Plan> {
        let (permanent, at) = (failure.permanent, failure.at);
        let attempt = self.attempt;
        let job_uid = job.metadata.uid.clone().unwrap_or_default();
        let prepared = self.prepared()?;
        let gave_up =
            annotation(&self.i.claim.metadata, ANN_GAVE_UP) == Some(prepared.inputs_hash.as_str());
        let same_inputs =
            annotation(&job.metadata, ANN_INPUTS).is_none_or(|h| h == prepared.inputs_hash);
        let out_of_attempts = self
            .config
            .provisioner
            .max_attempts
            .is_some_and(|max| attempt >= max);
        if (permanent || out_of_attempts) && same_inputs {
            let hash = (!gave_up).then(|| prepared.inputs_hash.clone());
            return self.give_up(job, failure, hash);
        }
        if permanent || out_of_attempts {
            // The claim or configuration changed since: a fresh try.
            return self.start(attempt.saturating_add(1));
        }
        let i = self.i;
        let wait = delay_after(attempt, i.retry_base);
        let remaining = wait_remaining(attempt, i.retry_base, at, i.now);
        self.notices.push(
            Notice::warning(
                format!("failed/{job_uid}"),
                reasons::FAILED,
                format!(
                    "attempt {attempt} failed: {}; attempt {} starts in {}s",
                    failure.message,
                    attempt.saturating_add(1),
                    wait.as_secs()
                ),
            )
            .about(job)
            .counted_as(NoticeKind::ProvisionFailed)
            .action("Retry"),
        );
        let unrecorded = self.on_claim < attempt;
        if remaining.is_zero() {
            let next = self.start(attempt.saturating_add(1))?;
            // Held back (max-concurrent, a data source not usable yet, templates that do
            // not render): if the failed Job expires meanwhile, its number must not be lost
            // with it.
            let held = !matches!(next.step, Step::CreateJob { .. });
            if held && unrecorded && expires_before(job, at, EXPIRY_MARGIN, i.now) {
                return plan(record_attempt(i.claim, attempt, HELD_RECHECK), next.notices);
            }
            return Ok(next);
        }
        if unrecorded && expires_before(job, at, remaining + EXPIRY_MARGIN, i.now) {
            return plan(record_attempt(i.claim, attempt, remaining), self.notices);
        }
        let step = Step::Backoff {
            next_attempt: attempt.saturating_add(1),
            wait: remaining,
        };
        plan(step, self.notices)
    }
}

fn transient(message: String, at: Option<jiff::Timestamp>) -> Failure {
    Failure {
        permanent: false,
        message,
        at,
        timed_out: false,
    }
}

/// Why the claim's data source cannot be used: never as it stands (another namespace, a
/// kind the class does not list), or not yet (not resolved, or unusable for now).
fn source_problem(
    source: Option<&crate::source::SourceData>,
    request: &ClaimRequest,
    config: &ClassConfig,
    waited: Duration,
) -> Option<(Step, String)> {
    // A data source the class does not list is refused as before data sources existed;
    // one it lists must have resolved (a clone's source bound to a volume of ours...).
    let ds = request.data_source.as_ref()?;
    let kind = ds.kind_key();
    if ds
        .namespace
        .as_ref()
        .is_some_and(|n| *n != request.namespace)
    {
        return Some((
            BLOCKED,
            format!(
                "cannot provision this claim: its data source {} {} is in namespace {}; only sources in the claim's own namespace are used",
                ds.kind,
                ds.name,
                ds.namespace.as_deref().unwrap_or_default()
            ),
        ));
    }
    if !config.provisioner.accepts_source(ds) {
        return Some((
            BLOCKED,
            format!(
                "cannot provision this claim: {}; the class's ConfigMap lists no `{kind}` in data-sources",
                crate::claim::ClaimError::DataSource(format!("{} {}", ds.kind, ds.name))
            ),
        ));
    }
    let wait = |why: &str| {
        Some((
            Step::Wait(Some(source_recheck(waited))),
            format!(
                "cannot provision this claim from {} {} yet: {why}",
                ds.kind, ds.name
            ),
        ))
    };
    match source {
        Some(crate::source::SourceData::Unusable(why)) => wait(why),
        Some(_) => None,
        None => wait("it has not been read"),
    }
}

/// A patch of the claim's annotations under its resourceVersion (see [`Step::PatchClaim`]).
fn annotated(claim: &PersistentVolumeClaim, annotations: Value, recheck: Option<Duration>) -> Step {
    let rv = &claim.metadata.resource_version;
    let patch =
        serde_json::json!({"metadata": {"annotations": annotations, "resourceVersion": rv}});
    Step::PatchClaim { patch, recheck }
}

/// The failed attempt's number recorded on the claim, then a look after `wait`: once, and
/// only because its Job expires before the next attempt.
fn record_attempt(claim: &PersistentVolumeClaim, attempt: u32, wait: Duration) -> Step {
    let annotations = serde_json::json!({ANN_ATTEMPT: attempt.to_string()});
    annotated(claim, annotations, Some(wait))
}

/// Whether a finished Job is removed by its TTL within `within` from now.
fn expires_before(
    job: &Job,
    finished: Option<jiff::Timestamp>,
    within: Duration,
    now: jiff::Timestamp,
) -> bool {
    let ttl = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished);
    let (Some(ttl), Some(finished)) = (ttl, finished) else {
        return false;
    };
    let expiry = finished + jiff::SignedDuration::from_secs(i64::from(ttl.max(0)));
    let within = jiff::SignedDuration::try_from(within).unwrap_or(jiff::SignedDuration::MAX);
    now.duration_until(expiry) <= within
}

#[cfg(test)]
mod tests;
