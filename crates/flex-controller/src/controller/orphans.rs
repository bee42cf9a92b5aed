//! Storage made for claims deleted while their Job ran (`plan::orphan`): spotted in the Job
//! watch, confirmed with the API server, and handed to the volume state machine as a PV.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::compact::Shared;
use super::context::Context;
use super::reads;
use flex_core::names::{LABEL_CLAIM_UID, LABEL_VOLUME};
use flex_core::plan::orphan::{OrphanRead, OrphanStep, is_candidate, plan_orphan};
use flex_core::plan::{Ask, Decision, reasons};

/// How long a succeeded Job's report is waited for in the pod cache.
const REPORT_WAIT: Duration = Duration::from_secs(60);
/// How many Jobs are looked into at once (each costs three reads).
const AT_ONCE: usize = 8;

/// How soon a Job waiting for its report is looked into again.
const RECHECK: Duration = Duration::from_secs(1);

/// Jobs looked into again later, by uid, and when each was first found waiting: a Job
/// never holds one of the `AT_ONCE` slots while it waits.
type Waiting = std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>;

pub(super) async fn run(
    jobs: impl Stream<Item = Result<Shared<Job>, watcher::Error>>,
    ctx: Arc<Context>,
) {
    ctx.readiness.wait().await;
    let waiting = Arc::new(Waiting::default());
    let (again_tx, again_rx) = futures::channel::mpsc::unbounded::<Arc<Job>>();
    let jobs = jobs.filter_map(|j| async move { j.ok().map(|j| j.0) });
    futures::stream::select(jobs, again_rx)
        .for_each_concurrent(AT_ONCE, |job| {
            let (ctx, waiting, again) = (ctx.clone(), waiting.clone(), again_tx.clone());
            async move {
                let uid = job.uid().unwrap_or_default();
                let since = *(crate::lock(&waiting).entry(uid.clone()))
                    .or_insert_with(tokio::time::Instant::now);
                match look_into(&ctx, &job, since).await {
                    Ok(Some(wait)) => {
                        // Off the slot: the Job comes back through the stream.
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            let _ = again.unbounded_send(job);
                        });
                    }
                    Ok(None) => drop(crate::lock(&waiting).remove(&uid)),
                    Err(e) => {
                        crate::lock(&waiting).remove(&uid);
                        tracing::debug!(job = %job.name_any(), error = %e, "orphaned Job not handled yet; the next change of it retries");
                    }
                }
            }
        })
        .await;
}

/// A Job that may be an orphan, and its pods as cached.
struct Candidate<'a> {
    ctx: &'a Context,
    job: &'a Job,
    claim_uid: &'a str,
    volume: &'a str,
    cached: Vec<Arc<Pod>>,
}

impl super::drive::Pipeline for Candidate<'_> {
    /// What was read, and the pods as the API server has them once asked.
    type Read = (OrphanRead, Option<Vec<Pod>>);
    type Plan = OrphanStep;

    fn plan(&self, (read, pods): &Self::Read) -> Decision<OrphanStep> {
        let pods: Vec<&Pod> = match pods {
            Some(read) => read.iter().collect(),
            None => self.cached.iter().map(AsRef::as_ref).collect(),
        };
        plan_orphan(self.job, &pods, read)
    }

    async fn answer(&self, ask: &Ask, (read, pods): &mut Self::Read) -> crate::Result<bool> {
        let (ctx, uid) = (self.ctx, self.claim_uid);
        match ask {
            Ask::Traces => {
                let traces = reads::orphan_traces(ctx, self.job, uid, self.volume).await?;
                read.traces = Some(traces);
            }
            Ask::Pods { namespace } => {
                *pods = Some(reads::claims_pods(ctx, namespace, uid).await?);
                read.pods_confirmed = true;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
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
    // The Job names its claim; the one cached under that name counts only with the uid. A
    // claim being deleted is not waited out: a user's finalizer may hold it past the Job's
    // TTL, and with the Job (and its pod's report) gone nothing would name the storage.
    // Its volume is made now, bound to it, and released when it goes.
    let claim = super::caches::claim_ref_of(job.meta().annotations.as_ref())
        .and_then(|r| ctx.caches.claim(r.namespace.as_deref()?, &r.name))
        .filter(|c| c.uid().as_deref() == Some(claim_uid.as_str()));
    let pv_cached = (ctx.caches.volumes)
        .get(&kube::runtime::reflector::ObjectRef::new(&volume))
        .is_some();
    if claim.is_some_and(|c| c.metadata.deletion_timestamp.is_none()) || pv_cached {
        return Ok(None);
    }
    let candidate = Candidate {
        ctx,
        job,
        claim_uid: &claim_uid,
        volume: &volume,
        cached: ctx.caches.pods_by(&super::caches::by_claim(&claim_uid)),
    };
    let in_time = since.elapsed() < REPORT_WAIT;
    let mut read = (
        OrphanRead {
            report_wait_over: !in_time,
            ..OrphanRead::default()
        },
        None,
    );
    let Ok(step) = super::drive::decide(&candidate, &mut read).await? else {
        return Ok(None);
    };
    match step {
        OrphanStep::Nothing => Ok(None),
        OrphanStep::AwaitReport => Ok(Some(RECHECK)),
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
            let made = reads::volume(ctx, &volume).await?;
            if let Some(record) =
                made.and_then(|made| flex_core::record::record_from_job(&made, job))
            {
                ctx.apply.create_or_adopt(&record).await?;
            }
            Ok(None)
        }
    }
}
