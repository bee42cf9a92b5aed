//! Storage made for claims deleted while their Job ran (`plan::orphan`): spotted in the Job
//! watch, confirmed with the API server, and handed to the volume state machine as a PV.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::context::Context;
use flex_core::names::{LABEL_ACTION, LABEL_CLAIM_UID, LABEL_VOLUME};
use flex_core::plan::orphan::{Confirmed, OrphanStep, is_candidate, plan_orphan};
use flex_core::plan::reasons;

/// How long a succeeded Job's report is waited for in the pod cache.
const REPORT_WAIT: Duration = Duration::from_secs(60);
/// How many Jobs are looked into at once (each costs three reads).
const AT_ONCE: usize = 8;

/// How soon a Job waiting for its report is looked into again.
const RECHECK: Duration = Duration::from_secs(1);

/// Jobs looked into again later, and when each was first found waiting: a Job never holds
/// one of the `AT_ONCE` slots while it waits.
#[derive(Default)]
struct Waiting {
    since: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
}

impl Waiting {
    /// When the Job was first found waiting (now, the first time).
    fn since(&self, uid: &str) -> tokio::time::Instant {
        let mut m = self.since.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(uid.to_owned())
            .or_insert_with(tokio::time::Instant::now)
    }

    fn done(&self, uid: &str) {
        self.since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }
}

pub(super) async fn run(jobs: impl Stream<Item = Result<Job, watcher::Error>>, ctx: Arc<Context>) {
    ctx.ready().await;
    let waiting = Arc::new(Waiting::default());
    let (again_tx, again_rx) = futures::channel::mpsc::unbounded::<Job>();
    let jobs = jobs.filter_map(|j| async move { j.ok() });
    futures::stream::select(jobs, again_rx)
        .for_each_concurrent(AT_ONCE, |job| {
            let (ctx, waiting, again) = (ctx.clone(), waiting.clone(), again_tx.clone());
            async move {
                let uid = job.uid().unwrap_or_default();
                match look_into(&ctx, &job, waiting.since(&uid)).await {
                    Ok(Some(wait)) => {
                        // Off the slot: the Job comes back through the stream.
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            let _ = again.unbounded_send(job);
                        });
                    }
                    Ok(None) => waiting.done(&uid),
                    Err(e) => {
                        waiting.done(&uid);
                        tracing::debug!(job = %job.name_any(), error = %e, "orphaned Job not handled yet; the next change of it retries");
                    }
                }
            }
        })
        .await;
}

/// Cheap on the cache first: only a candidate whose claim is gone or leaving and whose PV
/// the cache does not show costs reads. `Some(wait)`: look into it again after `wait` (its
/// report is not in the pod cache yet), within `REPORT_WAIT` of `since`.
async fn look_into(
    ctx: &Context,
    job: &Job,
    since: tokio::time::Instant,
) -> crate::Result<Option<Duration>> {
    let label = |k: &str| job.labels().get(k).cloned().unwrap_or_default();
    let (claim_uid, volume) = (label(LABEL_CLAIM_UID), label(LABEL_VOLUME));
    if claim_uid.is_empty() || volume.is_empty() || !is_candidate(job) {
        return Ok(None);
    }
    let in_time = since.elapsed() < REPORT_WAIT;
    // The Job names its claim; the one cached under that name counts only with the uid. A
    // claim being deleted is not waited out: a user's finalizer may hold it past the Job's
    // TTL, and with the Job (and its pod's report) gone nothing would name the storage.
    // Its volume is made now, bound to it, and released when it goes.
    let claim = super::caches::claim_ref_of(job.meta().annotations.as_ref())
        .and_then(|r| ctx.caches.claim(r.namespace.as_deref()?, &r.name))
        .filter(|c| c.uid().as_deref() == Some(claim_uid.as_str()));
    if claim.is_some_and(|c| c.metadata.deletion_timestamp.is_none()) {
        return Ok(None);
    }
    let pv_cached = ctx
        .caches
        .volumes
        .get(&kube::runtime::reflector::ObjectRef::new(&volume))
        .is_some();
    if pv_cached {
        return Ok(None);
    }
    let confirmed = confirm(ctx, job, &claim_uid, &volume)
        .await
        .map_err(crate::Error::read(format!(
            "the claim and volume of Job {}",
            job.name_any()
        )))?;
    let pods = ctx.caches.pods_by(&super::caches::by_claim(&claim_uid));
    // Past the wait, the report is looked for where the API server has it: a pod watch
    // that lags under load must not make storage look lost.
    let read = if in_time {
        Vec::new()
    } else {
        let namespace = job.namespace().unwrap_or_default();
        super::reconcile::claims_pods(ctx, &namespace, &claim_uid).await?
    };
    let pod_refs: Vec<&Pod> = if in_time {
        pods.iter().map(AsRef::as_ref).collect()
    } else {
        read.iter().collect()
    };
    match plan_orphan(job, &pod_refs, confirmed) {
        OrphanStep::Nothing => Ok(None),
        OrphanStep::AwaitReport if in_time => Ok(Some(RECHECK)),
        OrphanStep::AwaitReport => {
            let message = "its claim was deleted while it ran, and its pod's report is gone: what the image made cannot be cleaned up automatically; remove it by hand";
            ctx.apply
                .event(&job.object_ref(&()), true, reasons::FAILED, message)
                .await;
            Ok(None)
        }
        OrphanStep::BadReport(message) => {
            ctx.apply
                .event(&job.object_ref(&()), true, reasons::FAILED, &message)
                .await;
            Ok(None)
        }
        OrphanStep::CreatePv(pv) => {
            let ns = job.namespace().unwrap_or_default();
            // A Job gone meanwhile leaves nothing to create a volume for.
            if !ctx.apply.mark_pv_created(&ns, &job.name_any()).await? {
                return Ok(None);
            }
            tracing::info!(job = %job.name_any(), volume = %volume, "the claim was deleted while its Job ran; its volume is created to be deprovisioned");
            // One that exists already is judged by the volume controller.
            ctx.apply.create_pv(&pv, None).await?;
            // Its record now, from the Job that holds the recipe: a claim held by a user's
            // finalizer may outlive the Job (its TTL), and a volume released without a
            // record is kept, not deprovisioned.
            let made = ctx
                .apply
                .volumes()
                .get_opt(&volume)
                .await
                .map_err(crate::Error::read(format!("volume {volume}")))?;
            if let Some(record) =
                made.and_then(|made| flex_core::record::record_from_job(&made, job))
            {
                ctx.apply.create_or_adopt(&record).await?;
            }
            Ok(None)
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
    let claim = match super::caches::claim_ref_of(job.meta().annotations.as_ref()) {
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
        flex_core::names::LABEL_RECORD
    )))
    .await?;
    Ok(Confirmed {
        claim_leaving: claim.is_none_or(|c| {
            c.uid().as_deref() != Some(claim_uid) || c.metadata.deletion_timestamp.is_some()
        }),
        pv_exists: pv.is_some(),
        deprovisioned: !deprovisions.items.is_empty(),
        recorded: !records.items.is_empty(),
    })
}
