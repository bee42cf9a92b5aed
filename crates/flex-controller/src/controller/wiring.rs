//! The wiring of one leading instance: lead (or act alone), watch, then run the claim
//! controller, the volume controller and the orphan check on the same watches until
//! leadership is lost. Decisions are made in flex-core's `plan`; the reconcilers fetch and
//! apply.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};

use super::compact::{Compact, Shared};
use super::context::Context;
use super::watches::watch_everything;
use super::{Options, caches, expansion, fan_out, orphans, reconcile, triggers, volumes};
use flex_core::names::{ANN_SOURCE_VOLUME, LABEL_CONFIG_CLASS, LABEL_VOLUME, annotation, label};

/// Reconciles in flight per controller. Unbounded, a restart in a cluster of 50,000 claims
/// started 50,000 reconciles at once, each holding its state in memory; the rest wait in
/// kube-runtime's scheduler as a key each.
const RECONCILES_AT_ONCE: u16 = 64;

/// Waits for the Lease (if any), then runs the controllers until leadership is lost.
pub(super) async fn act(
    client: Client,
    opts: Options,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<crate::http::Health>,
) -> crate::Result<()> {
    super::preflight_patiently(&client, &opts).await?;
    let fence = lead(&client, &opts, &health).await;
    let leader = opts.leader.clone();
    let lease_client = client.clone();
    // Every request of the controllers passes the rate limit, and every write the fence;
    // the lease's own requests do neither.
    let limiter = opts.api_limits.map(crate::throttle::Limiter::new);
    let client = crate::fence::fenced(client, fence.clone(), limiter);
    let controllers = controllers(client, opts, metrics, health);
    let Some(l) = leader else {
        controllers.await;
        return Ok(());
    };
    let mut holder = crate::leader::Holder::start(&lease_client, &l, fence)
        .map_err(crate::Error::LeaseThread)?;
    tokio::select! {
        _ = controllers => Ok(()),
        _ = holder.lost() => Err(crate::Error::LeadershipLost),
    }
}

/// Takes the Lease (standing by, and ready as a standby, until then) and returns the fence
/// the controllers' writes pass; without leader election a fence that never closes.
async fn lead(
    client: &Client,
    opts: &Options,
    health: &crate::http::Health,
) -> Arc<crate::fence::Fence> {
    let Some(l) = &opts.leader else {
        return crate::fence::Fence::until(None);
    };
    health.standby.store(true, Ordering::Relaxed);
    let won = crate::leader::acquire(client, l).await;
    health.standby.store(false, Ordering::Relaxed);
    crate::fence::Fence::until(Some(won + l.renew_deadline))
}

/// The controllers, started again, watching VolumeSnapshots too, once the snapshot API is
/// served after all. Stopping them is what losing leadership does (every task aborted,
/// every reconcile where it stood); each reconcile starts from the API's state, so the
/// new ones carry on.
async fn controllers(
    client: Client,
    opts: Options,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<crate::http::Health>,
) {
    let recheck = opts.snapshot_api_recheck;
    // What was told (and counted) stays told when the controllers start again.
    let said = Arc::new(super::seen::Seen::default());
    loop {
        let served = super::snapshots::served(&client).await;
        let run = watched(
            client.clone(),
            opts.clone(),
            (metrics.clone(), said.clone()),
            health.clone(),
            served,
        );
        if served {
            return run.await;
        }
        tokio::select! {
            () = run => return,
            () = super::snapshots::until_served(&client, recheck) => {
                tracing::info!("the snapshot API is served now: the controllers start again, watching VolumeSnapshots too");
            }
        }
    }
}

/// The watches, the context every reconcile shares, and what runs on them: the claim and
/// volume controllers, the orphan check, readiness and the gauge; the snapshot controllers
/// when `snapshots` (the API server serves them).
async fn watched(
    client: Client,
    opts: Options,
    (metrics, said): (Arc<crate::metrics::Metrics>, Arc<super::seen::Seen>),
    health: Arc<crate::http::Health>,
    snapshots: bool,
) {
    let snapshots = snapshots.then(|| super::snapshots::watch(&client));
    let w = watch_everything(&client, &opts);
    let claims = w.caches.claims.clone();
    let volumes_store = w.caches.volumes.clone();
    let jobs = w.caches.jobs.clone();
    let ctx = Arc::new(Context::new(client, opts, metrics, said, w.caches));
    // Every watch runs in a task of its own and hands its changes on through queues
    // (`fan_out`), apart from the controllers: a change wakes the task that reads it, not
    // every watch and controller. Polled together in one task, each watch event and reply
    // went down every watch to its connection. Dropping the set (leadership lost) aborts
    // them all.
    let mut tasks = tokio::task::JoinSet::new();
    // Node and record changes trigger nothing: their streams are only drained.
    tasks.spawn(
        futures::stream::select(w.nodes.map(drop), w.records.map(drop)).for_each(|()| async {}),
    );
    // One watch of each kind feeds every controller it triggers, and the orphan check.
    let [volumes_for_claims, volumes_for_volumes] = apart(&mut tasks, w.volumes);
    // VolumeSnapshots are watched when the API server serves them (their CRDs are
    // installed), with a fourth reader of the Jobs.
    let (jobs_for_claims, jobs_for_volumes, jobs_for_orphans) = if let Some(s) = snapshots {
        let [a, b, c, d] = apart(&mut tasks, w.jobs);
        super::snapshots::spawn(&mut tasks, s, d, ctx.clone());
        (a, b, c)
    } else {
        let [a, b, c] = apart(&mut tasks, w.jobs);
        (a, b, c)
    };
    let [claim_changes] = apart(&mut tasks, w.claims);
    let [pods] = apart(&mut tasks, w.pods);
    let [failed_creates] = apart(&mut tasks, w.failed_creates);
    let [classes] = apart(&mut tasks, w.classes);
    let [config_maps] = apart(&mut tasks, w.config_maps);
    // Changes that bring a controller nothing are dropped before its scheduler
    // (`triggers.rs`); a deletion passes.
    let unchanged = kube::runtime::PredicateConfig::default;
    let (job_stores, pod_stores) = (ctx.caches.jobs.clone(), ctx.caches.pods.clone());
    let jobs_for_claims = jobs_for_claims.predicate_filter(
        triggers::unless_gone(
            triggers::job_fingerprint,
            triggers::held_in(job_stores.clone()),
        ),
        unchanged(),
    );
    let jobs_for_volumes = jobs_for_volumes.predicate_filter(
        triggers::unless_gone(triggers::job_ending, triggers::held_in(job_stores)),
        unchanged(),
    );
    let pods = pods.predicate_filter(
        triggers::unless_gone(triggers::pod_fingerprint, triggers::held_in(pod_stores)),
        unchanged(),
    );
    let orphans_run = orphans::run(jobs_for_orphans, ctx.clone());
    let config = controller::Config::default().concurrency(RECONCILES_AT_ONCE);
    // The volume controller: a PV's own changes, and those of its Jobs (its deprovision
    // and expansion Jobs, and provisioning Jobs that copy from it).
    let cached = volumes_store.clone();
    let volumes_run = Controller::for_stream(volumes_for_volumes, volumes_store)
        .with_config(config.clone())
        .watches_stream(jobs_for_volumes, move |job: Shared<Job>| {
            // Its own volume, and a clone's source, which waits for the copy to finish. A
            // volume not cached (a provisioning Job's, before its PV exists) comes with its
            // own first change.
            let own = label(&job.metadata, LABEL_VOLUME);
            let source = annotation(&job.metadata, ANN_SOURCE_VOLUME);
            own.into_iter()
                .chain(source)
                .map(ObjectRef::new)
                .filter(|r| cached.get(r).is_some())
                .collect::<Vec<_>>()
        })
        .run(
            volumes::reconcile_volume,
            Context::error_policy,
            ctx.clone(),
        )
        .for_each(settled(&ctx, "volume"));
    // The claim controller: a claim's own changes, its Jobs', their pods' and the Job
    // controller's `FailedCreate` events, its PV's (by claimRef), and any change of its
    // class or the class's ConfigMap.
    let (by_class, by_config) = (claims.clone(), claims.clone());
    let claims_run = Controller::for_stream(claim_changes, claims.store.clone())
        .with_config(config)
        .watches_stream(jobs_for_claims, |job: Shared<Job>| {
            triggers::claim_to_trigger(job.meta())
        })
        .watches_stream(pods, |pod: Shared<Pod>| {
            triggers::claim_to_trigger(pod.meta())
        })
        // A FailedCreate event names its Job; the Job names its claim.
        .watches_stream(failed_creates, move |ev: CoreEvent| {
            let o = &ev.involved_object;
            let at =
                ObjectRef::<Shared<Job>>::new(o.name.as_deref()?).within(o.namespace.as_deref()?);
            let job = jobs.iter().find_map(|j| j.store.get(&at))?;
            triggers::claim_to_trigger(job.meta())
        })
        .watches_stream(volumes_for_claims, |pv: Compact<PersistentVolume>| {
            triggers::claim_of_volume(&pv)
        })
        .watches_stream(classes, move |sc: StorageClass| {
            by_class.refs(&caches::by_class(
                sc.meta().name.as_deref().unwrap_or_default(),
            ))
        })
        .watches_stream(config_maps, move |cm: ConfigMap| {
            let class = label(&cm.metadata, LABEL_CONFIG_CLASS).unwrap_or_default();
            by_config.refs(&caches::by_class(class))
        })
        .run(claim_pipelines, Context::error_policy, ctx.clone())
        .for_each(settled(&ctx, "claim"));
    // The two controllers and readiness share one task: each controller's runner waits on
    // its store's first list as readiness does, and kube-runtime wakes only the last task
    // to wait on a store (`readiness.rs`); in tasks of their own, readiness waited for the
    // gauge's next tick, five seconds.
    tasks.spawn(async move {
        futures::join!(claims_run, volumes_run, upkeep(ctx, health));
    });
    tasks.spawn(orphans_run);
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// `N` streams of what `changes` yields, for `N` consumers, with the task that polls the
/// watch behind it (`fan_out`) in `tasks`.
pub(super) fn apart<K, const N: usize>(
    tasks: &mut tokio::task::JoinSet<()>,
    changes: BoxStream<'static, Result<K, kube::runtime::watcher::Error>>,
) -> [BoxStream<'static, Result<K, kube::runtime::watcher::Error>>; N]
where
    K: Resource + Clone + Send + Sync + 'static,
{
    let (streams, drive) = fan_out::fan_out::<K, N>(changes);
    tasks.spawn(drive);
    streams
}

/// Readiness once the caches are filled, the write gate once they are synced, and the
/// active-Jobs gauge.
async fn upkeep(ctx: Arc<Context>, health: Arc<crate::http::Health>) {
    let mark_ready = async {
        ctx.readiness.wait().await;
        health.ready.store(true, Ordering::Relaxed);
    };
    futures::join!(
        mark_ready,
        ctx.open_when_synced(),
        count_active_jobs(ctx.clone())
    );
}

/// A claim's two pipelines on one set of triggers: provisioning, then expansion (which
/// returns at once for a claim not bound to a volume of ours that may grow). Each runs
/// even when the other failed; the claim is looked at again at the sooner of their two
/// times.
async fn claim_pipelines(
    claim: Arc<Compact<PersistentVolumeClaim>>,
    ctx: Arc<Context>,
) -> crate::Result<Action> {
    ctx.readiness.wait().await;
    // Parsed from its cached text once, for both.
    let Some(claim) = claim.full().map(Arc::new) else {
        return Ok(Action::await_change());
    };
    let provisioning = reconcile::reconcile(claim.clone(), ctx.clone()).await;
    let growth = expansion::reconcile(claim, ctx).await;
    let again = provisioning?.into_iter().chain(growth?).min();
    Ok(again.map_or_else(Action::await_change, Action::requeue))
}

/// Counts a finished reconcile of `object`; a failed one is retried
/// (`Context::error_policy` says why, and when).
pub(super) fn settled<T, E: std::fmt::Display>(
    ctx: &Arc<Context>,
    object: &'static str,
) -> impl FnMut(Result<T, E>) -> std::future::Ready<()> + use<T, E> {
    let metrics = ctx.metrics.clone();
    move |result| {
        metrics.count_reconcile(object);
        if let Err(e) = result {
            tracing::debug!(error = %e, "reconcile failed; it is retried");
        }
        std::future::ready(())
    }
}

/// Keeps the active-Jobs gauge current from the Job cache.
async fn count_active_jobs(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        ctx.metrics.count_active_jobs(&ctx.caches.all_jobs());
    }
}
