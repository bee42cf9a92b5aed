//! Storage made for claims deleted while their Job ran (`plan::orphan`): spotted in the Job
//! watch, confirmed with the API server, and handed to the volume state machine as a PV.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::context::Context;
use crate::names::{LABEL_ACTION, LABEL_CLAIM_UID, LABEL_VOLUME};
use crate::plan::orphan::{Confirmed, OrphanStep, is_candidate, plan_orphan};
use crate::plan::reasons;

/// How long a succeeded Job's report is waited for in the pod cache.
const REPORT_WAIT: Duration = Duration::from_secs(60);
/// How many Jobs are looked into at once (each costs three reads).
const AT_ONCE: usize = 8;

pub(super) async fn run(jobs: impl Stream<Item = Result<Job, watcher::Error>>, ctx: Arc<Context>) {
    ctx.ready().await;
    jobs.filter_map(|j| async move { j.ok() })
        .for_each_concurrent(AT_ONCE, |job| {
            let ctx = ctx.clone();
            async move {
                if let Err(e) = look_into(&ctx, &job).await {
                    tracing::debug!(job = %job.name_any(), error = %e, "orphaned Job not handled yet; the next change of it retries");
                }
            }
        })
        .await;
}

/// Cheap on the cache first: only a candidate whose claim and PV the cache does not show
/// costs reads.
async fn look_into(ctx: &Context, job: &Job) -> crate::Result<()> {
    let label = |k: &str| job.labels().get(k).cloned().unwrap_or_default();
    let (claim_uid, volume) = (label(LABEL_CLAIM_UID), label(LABEL_VOLUME));
    if claim_uid.is_empty() || volume.is_empty() || !is_candidate(job) {
        return Ok(());
    }
    let started = tokio::time::Instant::now();
    // A claim still shown, but being deleted, is waited out: the Job's next event may be
    // its removal, long after its pod (and report) is gone.
    loop {
        // The Job names its claim; the one cached under that name counts only with the uid.
        let claim = super::claim_ref_of(job.meta().annotations.as_ref())
            .and_then(|r| ctx.caches.claim(r.namespace.as_deref()?, &r.name))
            .filter(|c| c.uid().as_deref() == Some(claim_uid.as_str()));
        match claim {
            None => break,
            Some(c)
                if c.metadata.deletion_timestamp.is_some() && started.elapsed() < REPORT_WAIT =>
            {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Some(_) => return Ok(()),
        }
    }
    let pv_cached = ctx
        .caches
        .volumes
        .get(&kube::runtime::reflector::ObjectRef::new(&volume))
        .is_some();
    if pv_cached {
        return Ok(());
    }
    loop {
        let confirmed = confirm(ctx, job, &claim_uid, &volume).await?;
        let pods = ctx.caches.pods_by(&super::caches::by_claim(&claim_uid));
        let pod_refs: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
        match plan_orphan(job, &pod_refs, confirmed) {
            OrphanStep::Nothing => return Ok(()),
            OrphanStep::AwaitReport if started.elapsed() < REPORT_WAIT => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            OrphanStep::AwaitReport => {
                let message = "its claim was deleted while it ran, and its pod's report is gone: what the image made cannot be cleaned up automatically; remove it by hand";
                ctx.event(&job.object_ref(&()), true, reasons::FAILED, message)
                    .await;
                return Ok(());
            }
            OrphanStep::BadReport(message) => {
                ctx.event(&job.object_ref(&()), true, reasons::FAILED, &message)
                    .await;
                return Ok(());
            }
            OrphanStep::CreatePv(pv) => {
                super::mark_pv_created(ctx, &job.namespace().unwrap_or_default(), &job.name_any())
                    .await?;
                tracing::info!(job = %job.name_any(), volume = %volume, "the claim was deleted while its Job ran; its volume is created to be deprovisioned");
                return match Api::<PersistentVolume>::all(ctx.client.clone())
                    .create(&PostParams::default(), &pv)
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(e.into()),
                };
            }
        }
    }
}

/// The claim, the PV and the volume's deprovision Jobs, read from the API server.
async fn confirm(
    ctx: &Context,
    job: &Job,
    claim_uid: &str,
    volume: &str,
) -> Result<Confirmed, kube::Error> {
    let claim = match super::claim_ref_of(job.meta().annotations.as_ref()) {
        Some(r) => {
            Api::<PersistentVolumeClaim>::namespaced(
                ctx.client.clone(),
                r.namespace.as_deref().unwrap_or_default(),
            )
            .get_opt(&r.name)
            .await?
        }
        None => None,
    };
    let pv = Api::<PersistentVolume>::all(ctx.client.clone())
        .get_opt(volume)
        .await?;
    let deprovisions =
        Api::<Job>::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default())
            .list_metadata(&ListParams::default().labels(&format!(
                "{LABEL_ACTION}=deprovision,{LABEL_VOLUME}={volume}"
            )))
            .await?;
    let records = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        ctx.client.clone(),
        &job.namespace().unwrap_or_default(),
    )
    .list_metadata(&ListParams::default().labels(&format!(
        "{}=true,{LABEL_VOLUME}={volume}",
        crate::names::LABEL_RECORD
    )))
    .await?;
    Ok(Confirmed {
        claim_gone: claim.is_none_or(|c| c.uid().as_deref() != Some(claim_uid)),
        pv_exists: pv.is_some(),
        deprovisioned: !deprovisions.items.is_empty(),
        recorded: !records.items.is_empty(),
    })
}
