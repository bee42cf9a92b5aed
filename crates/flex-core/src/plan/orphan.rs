//! A `pv-creator: controller` provisioning Job that succeeded after its claim was deleted
//! (or while its deletion is held by a finalizer): its image made storage, and no PV says
//! so. The controller creates the PV its report describes (reclaim `Delete` classes only),
//! bound to the leaving claim, so that the volume state machine deprovisions it as any
//! released volume once the claim is gone: storage is never left behind without an object
//! that names it, however long a user holds the claim and whatever the Job's TTL.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};

use crate::config::allowed::check_report;
use crate::config::sources::volume_sources;
use crate::config::{AllowedVolumes, PvCreator};
use crate::job::{JobOutcome, outcome, report_of};
use crate::names::{ANN_ALLOWED_VOLUMES, ANN_PV_CREATED, ANN_VOLUME_SOURCES};
use crate::recipe::{env_of, pv_template_of};
use crate::volume::pv_with_source;

use super::{Ask, Decision};

/// What the API server says about the Job's claim and volume, read just before deciding.
#[derive(Debug, Clone, Copy)]
pub struct Confirmed {
    /// No claim with the Job's claim uid exists (404, or another claim under the name), or
    /// it is being deleted: either way it will never be provisioned again.
    pub claim_leaving: bool,
    /// A PV under the Job's volume name exists.
    pub pv_exists: bool,
    /// A deprovision Job for the volume name exists: the PV was made and deprovisioned
    /// since (deprovision Jobs outlive provision Jobs, being made later with the same TTL).
    pub deprovisioned: bool,
    /// A deprovision record for the volume name exists: a PV was made and verified from
    /// this Job (records are also owned by the Job, so they outlive the PV while it exists).
    pub recorded: bool,
}

/// What has been read for a candidate beyond the caches.
#[derive(Debug, Clone, Copy, Default)]
pub struct OrphanRead {
    /// What still names its storage ([`Ask::Traces`]; `None`: not read yet).
    pub traces: Option<Confirmed>,
    /// The pods were read from the API server ([`Ask::Pods`]), not taken from the cache.
    pub pods_confirmed: bool,
    /// The report has been waited for in the pod cache long enough: the API server is asked.
    pub report_wait_over: bool,
}

#[derive(Debug, PartialEq)]
pub enum OrphanStep {
    /// Not an orphan, or already handled.
    Nothing,
    /// The Job succeeded but its pod's report is not in the cache yet.
    AwaitReport,
    /// Create this PV; the volume state machine deprovisions it.
    CreatePv(Box<PersistentVolume>),
    /// The report cannot make a PV, or is gone: nothing names the storage; tell it on the Job.
    BadReport(String),
}

/// Whether a cached Job may be an orphan: a succeeded provisioning Job of a
/// `pv-creator: controller` class with reclaim `Delete`, whose PV the controller never
/// set out to create. Read from the Job alone, cheapest first: it is asked of every Job
/// change; the rest needs the API server.
pub fn is_candidate(job: &Job) -> bool {
    let pv_created = crate::names::annotation(&job.metadata, ANN_PV_CREATED).is_some();
    let labels = job.metadata.labels.as_ref();
    let provision =
        labels.and_then(crate::names::Action::of) == Some(crate::names::Action::Provision);
    provision
        && !pv_created
        // Success is in the Job's conditions; pods only add failure messages.
        && outcome(job, &[]) == JobOutcome::Succeeded
        && env_of(job, "PV_CREATOR").as_deref() == Some(PvCreator::Controller.as_str())
        && pv_template_of(job).is_some_and(|t| {
            t.spec
                .and_then(|s| s.persistent_volume_reclaim_policy)
                .as_deref()
                == Some("Delete")
        })
}

/// The decision for a Job: a candidate (see `is_candidate`) is decided only from what the
/// API server says still names its storage.
pub fn plan_orphan(job: &Job, pods: &[&Pod], read: &OrphanRead) -> Decision<OrphanStep> {
    if !is_candidate(job) {
        return Ok(OrphanStep::Nothing);
    }
    let Some(traces) = read.traces else {
        return Err(Ask::Traces);
    };
    if !traces.claim_leaving || traces.pv_exists || traces.deprovisioned || traces.recorded {
        return Ok(OrphanStep::Nothing);
    }
    let Some(template) = pv_template_of(job) else {
        return Ok(OrphanStep::Nothing);
    };
    let Some(report) = report_of(job, pods) else {
        // A pod watch that lags under load must not make storage look lost.
        return match (read.pods_confirmed, read.report_wait_over) {
            (true, _) => Ok(OrphanStep::BadReport(REPORT_GONE.to_owned())),
            (false, true) => Err(Ask::Pods {
                namespace: job.metadata.namespace.clone().unwrap_or_default(),
            }),
            (false, false) => Ok(OrphanStep::AwaitReport),
        };
    };
    let annotations = job.metadata.annotations.as_ref();
    let allowed = annotations
        .and_then(|a| a.get(ANN_VOLUME_SOURCES))
        .ok_or(Unusable::NoVolumeSources)
        .and_then(|s| volume_sources(s).map_err(Unusable::VolumeSources));
    // What the class declared when the Job was made; a Job without it (made before
    // declarations existed) declares nothing, so only types that need none are accepted.
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let declared = match annotations.and_then(|a| a.get(ANN_ALLOWED_VOLUMES)) {
        None => Ok(AllowedVolumes::none(namespace)),
        Some(text) => serde_json::from_str::<AllowedVolumes>(text)
            .map(|d| AllowedVolumes {
                // The Job runs in its ConfigMap's namespace: the config namespace.
                secret_namespace: namespace.to_owned(),
                ..d
            })
            .map_err(|e| Unusable::Declarations(e.to_string())),
    };
    let made = allowed.and_then(|allowed| {
        let source = check_report(&report, &allowed, &declared?)?;
        Ok(pv_with_source(&template, &source)?)
    });
    Ok(match made {
        Ok(pv) => OrphanStep::CreatePv(Box::new(pv)),
        Err(why) => OrphanStep::BadReport(format!(
            "its claim was deleted while it ran, and its storage cannot be cleaned up automatically: {why}; remove what the image made by hand"
        )),
    })
}

const REPORT_GONE: &str = "its claim was deleted while it ran, and its pod's report is gone: what the image made cannot be cleaned up automatically; remove it by hand";

/// Why an orphaned Job's report makes no PV.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("the Job names no volume sources")]
    NoVolumeSources,
    #[error("{0}")]
    VolumeSources(String),
    #[error("the Job's annotation {ANN_ALLOWED_VOLUMES} is unreadable ({0})")]
    Declarations(String),
    #[error(transparent)]
    Report(#[from] crate::config::ReportError),
}

#[cfg(test)]
mod tests;
