//! The provisioning controller's wiring (kube-runtime): reflector stores for classes,
//! provisioner ConfigMaps, our Jobs and their pods, and PVs; a claim controller triggered
//! by changes to any of them and a volume controller triggered by PVs and Jobs, both fed
//! from the same watches. Decisions are made in `plan`; this module fetches and applies.

mod caches;
mod compact;
mod concurrency;
mod configs;
mod context;
mod expansion;
mod fan_out;
mod index;
mod orphans;
mod readiness;
mod reconcile;
mod retry;
mod seen;
mod sources;
mod volumes;

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};

use compact::Compact;
pub use context::{Caches, Context};

/// Reconciles in flight per controller. Unbounded, a restart in a cluster of 50,000 claims
/// started 50,000 reconciles at once, each holding its state in memory; the rest wait in
/// kube-runtime's scheduler as a key each.
const RECONCILES_AT_ONCE: u16 = 64;

/// Claims are listed in pages of this many: any user may write 256 KiB of annotations into
/// each of their claims, and a page is held whole (as the response and as parsed objects)
/// before each claim is cut to its cached record. kube's default of 500 made a restart
/// among 2,000 such claims peak at 541 MiB.
const CLAIM_PAGE_SIZE: u32 = 50;

use flex_core::names::{
    ANN_CLAIM, CONFIG_TYPE_VALUE, LABEL_CONFIG_CLASS, LABEL_CONFIG_TYPE, LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
};

/// How the controller runs (the `run` command's flags).
#[derive(Debug, Clone)]
pub struct Options {
    pub provisioner_name: String,
    /// Namespaces whose provisioner ConfigMaps are read; Jobs run there too.
    pub config_namespaces: Vec<String>,
    /// The controller's own namespace and service account: no Job may run as it.
    pub controller_namespace: String,
    pub controller_service_account: String,
    pub job_ttl_seconds: i32,
    /// Delay before the second attempt; doubles per attempt up to 10 minutes.
    pub retry_base: Duration,
    /// Who reports events (the pod name in a cluster).
    pub instance: String,
    /// Where `/healthz`, `/readyz` and `/metrics` are served (`None`: not served).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Leader election: only the lease holder acts (`None`: act at once, alone).
    pub leader: Option<crate::leader::LeaderOptions>,
    /// Client-side rate limit of the controllers' requests (`--kube-api-qps`,
    /// `--kube-api-burst`; `None`: unlimited).
    pub api_limits: Option<crate::throttle::Limits>,
}

impl Options {
    /// How ConfigMaps are judged: for this provisioner, never as the controller's account.
    pub fn parse_options(&self) -> flex_core::config::ParseOptions {
        flex_core::config::ParseOptions {
            provisioner_name: self.provisioner_name.clone(),
            controller_namespace: self.controller_namespace.clone(),
            controller_service_account: self.controller_service_account.clone(),
        }
    }
}

/// Fails fast, with the permission or object that is missing, before anything starts.
async fn preflight(client: &Client, opts: &Options) -> crate::Result<()> {
    let one = ListParams::default().limit(1);
    Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&one)
        .await?;
    Api::<PersistentVolume>::all(client.clone())
        .list(&one)
        .await?;
    Api::<StorageClass>::all(client.clone()).list(&one).await?;
    for ns in &opts.config_namespaces {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .list(&one)
            .await?;
        Api::<Job>::namespaced(client.clone(), ns)
            .list(&one)
            .await?;
    }
    if let Some(l) = &opts.leader {
        crate::leader::check_namespace(client, l).await?;
    }
    Ok(())
}

/// An object that is already gone needs no further write: 404 is success, not a failure
/// to retry and warn about.
fn gone_is_done<T>(r: Result<T, kube::Error>) -> crate::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A create whose object already exists (made by an earlier run) counts as done: it is
/// adopted, never duplicated.
fn exists_is_done<T>(r: Result<T, kube::Error>) -> crate::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates an object in its own namespace, adopting one that exists.
async fn create_or_adopt<K>(ctx: &context::Context, object: &K) -> crate::Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let ns = object.meta().namespace.clone().unwrap_or_default();
    exists_is_done(
        Api::<K>::namespaced(ctx.client.clone(), &ns)
            .create(&kube::api::PostParams::default(), object)
            .await,
    )
}

/// Marks a provisioning Job as having had its PV, so that plan::orphan never takes it for
/// one whose claim was deleted before a PV was made: before the orphan path creates a PV
/// from it, and before a volume of ours is let go with its storage kept.
async fn mark_pv_created(
    ctx: &context::Context,
    namespace: &str,
    job: &str,
) -> Result<Job, kube::Error> {
    let patch = serde_json::json!({"metadata": {"annotations": {flex_core::names::ANN_PV_CREATED: "true"}}});
    Api::<Job>::namespaced(ctx.client.clone(), namespace)
        .patch(
            job,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
}

fn claim_ref_of(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<ObjectRef<Compact<PersistentVolumeClaim>>> {
    let (ns, name) = annotations?.get(ANN_CLAIM)?.split_once('/')?;
    Some(ObjectRef::new(name).within(ns))
}

fn claims_of_class(
    claims: &index::Indexed<PersistentVolumeClaim, Compact<PersistentVolumeClaim>>,
    class: &str,
) -> Vec<ObjectRef<Compact<PersistentVolumeClaim>>> {
    claims.refs(&caches::by_class(class))
}

/// A store kept current by a watch, indexed by `keys`, with `trim` applied to each object
/// before it is stored as `convert` makes it (the object itself, or `Compact`), and the
/// stream of objects it saw change (which must be polled: the controller does, as a
/// trigger).
fn reflect<K, S>(
    api: Api<K>,
    cfg: watcher::Config,
    trim: impl Fn(&mut K) + Send + 'static,
    keys: index::KeysOf<K>,
    convert: fn(K) -> S,
) -> (
    index::Indexed<K, S>,
    impl futures::Stream<Item = Result<S, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    S: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    use futures::TryStreamExt;
    let (store, writer) = reflector::store();
    let index = Arc::new(index::Index::new(keys));
    let indexing = index.clone();
    // Lists are paged (kube's default pages of 500) so a large cluster is never held twice
    // in memory: as one list response and as the cache.
    let stream = watcher(api, cfg)
        .default_backoff()
        .modify(trim)
        .inspect_ok(move |event| indexing.apply(event))
        .map_ok(move |event| convert_event(event, convert))
        .reflect(writer)
        .touched_objects();
    (index::Indexed { store, index }, stream)
}

fn convert_event<K, S>(event: watcher::Event<K>, f: fn(K) -> S) -> watcher::Event<S> {
    use watcher::Event;
    match event {
        Event::Apply(o) => Event::Apply(f(o)),
        Event::Delete(o) => Event::Delete(f(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(f(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// Keeps the active-Jobs gauge current from the Job cache.
async fn count_active_jobs(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        ctx.metrics.active_jobs.reset();
        for job in ctx.caches.all_jobs() {
            if flex_core::job::outcome(&job, &[]) != flex_core::job::JobOutcome::Running {
                continue;
            }
            let class = job
                .meta()
                .annotations
                .as_ref()
                .and_then(|a| a.get(flex_core::names::ANN_STORAGE_CLASS))
                .cloned()
                .unwrap_or_default();
            let action = job
                .meta()
                .labels
                .as_ref()
                .and_then(|l| l.get(flex_core::names::LABEL_ACTION))
                .cloned()
                .unwrap_or_default();
            ctx.metrics
                .active_jobs
                .with_label_values(&[&class, &action])
                .inc();
        }
    }
}

/// Runs until `shutdown` completes, then stops acting and gives the leader Lease up, so that
/// a standby takes over at once rather than after the lease duration.
pub async fn run_until(
    client: Client,
    opts: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> crate::Result<()> {
    let leader = opts.leader.clone();
    let lease_client = client.clone();
    tokio::select! {
        result = run(client, opts) => result,
        _ = shutdown => {
            // `run` and every reconcile in it were dropped above: nothing acts any more.
            if let Some(l) = &leader {
                crate::leader::release(&lease_client, l).await;
            }
            Ok(())
        }
    }
}

/// Runs until the process is stopped. `/healthz` and `/metrics` are served from the start,
/// also while a standby waits for the Lease (a liveness probe must not restart it);
/// `/readyz` answers 200 once this instance leads and its caches have synced, or while it
/// stands by for the Lease after passing its start checks.
pub async fn run(client: Client, opts: Options) -> crate::Result<()> {
    let opts_addr = opts.metrics_addr;
    let metrics = Arc::new(crate::metrics::Metrics::default());
    let health = Arc::new(crate::http::Health::default());
    let serving = {
        let (health, metrics) = (health.clone(), metrics.clone());
        async move {
            if let Some(addr) = opts_addr
                && let Err(e) = crate::http::serve(addr, health, metrics).await
            {
                tracing::error!(error = %e, %addr, "cannot serve /healthz, /readyz and /metrics");
            }
            std::future::pending::<()>().await
        }
    };
    tokio::select! {
        _ = serving => Ok(()),
        result = act(client, opts, metrics, health) => result,
    }
}

/// Waits for the Lease (if any), then runs both controllers until leadership is lost.
async fn act(
    client: Client,
    opts: Options,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<crate::http::Health>,
) -> crate::Result<()> {
    preflight(&client, &opts).await?;
    let fence = match &opts.leader {
        Some(l) => {
            health
                .standby
                .store(true, std::sync::atomic::Ordering::Relaxed);
            let won = crate::leader::acquire(&client, l).await;
            health
                .standby
                .store(false, std::sync::atomic::Ordering::Relaxed);
            crate::fence::Fence::until(won + l.renew_deadline)
        }
        None => crate::fence::Fence::open(),
    };
    let leader = opts.leader.clone();
    let lease_client = client.clone();
    // Every write of the controllers passes the fence; the lease's own requests do not.
    let limiter = opts.api_limits.map(crate::throttle::Limiter::new);
    let client = crate::fence::fenced(client, fence.clone(), limiter);
    let ours = format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}");
    let cfg_selector = format!("{LABEL_CONFIG_TYPE}={CONFIG_TYPE_VALUE}");
    let provisioner = opts.provisioner_name.clone();
    let (classes, classes_stream) = reflect(
        Api::<StorageClass>::all(client.clone()),
        watcher::Config::default(),
        caches::trim_meta,
        caches::no_keys,
        std::convert::identity,
    );
    let (volumes, volumes_stream) = reflect(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
        caches::trim_volume(&provisioner),
        caches::no_keys,
        Compact::new,
    );
    // Nodes are read for their names and labels: a cache, not a GET per reconcile. Their
    // changes trigger nothing (the stream is only drained).
    let (nodes, nodes_stream) = reflect(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        caches::trim_node,
        caches::no_keys,
        std::convert::identity,
    );

    let mut config_maps = Vec::new();
    let mut jobs = Vec::new();
    let mut pods = Vec::new();
    let mut failed_creates = Vec::new();
    let mut cm_streams = Vec::new();
    let mut job_streams = Vec::new();
    let mut pod_streams = Vec::new();
    let mut event_streams = Vec::new();
    for ns in &opts.config_namespaces {
        let (s, stream) = reflect(
            Api::<ConfigMap>::namespaced(client.clone(), ns),
            watcher::Config::default().labels(&cfg_selector),
            caches::trim_meta,
            caches::no_keys,
            std::convert::identity,
        );
        config_maps.push(s.store);
        cm_streams.push(stream.boxed());
        let (s, stream) = reflect(
            Api::<Job>::namespaced(client.clone(), ns),
            watcher::Config::default().labels(&ours),
            caches::trim_meta,
            caches::job_keys,
            std::convert::identity,
        );
        jobs.push(s);
        job_streams.push(stream.boxed());
        let (s, stream) = reflect(
            Api::<Pod>::namespaced(client.clone(), ns),
            watcher::Config::default().labels(&ours),
            caches::trim_pod,
            caches::pod_keys,
            std::convert::identity,
        );
        pods.push(s);
        pod_streams.push(stream.boxed());
        // Why a Job has no pod (a missing ServiceAccount, a quota): watched, not listed per
        // reconcile.
        let (s, stream) = reflect(
            Api::<CoreEvent>::namespaced(client.clone(), ns),
            watcher::Config::default().fields("reason=FailedCreate,involvedObject.kind=Job"),
            caches::trim_meta,
            caches::no_keys,
            std::convert::identity,
        );
        failed_creates.push(s.store);
        event_streams.push(stream.boxed());
    }

    let (claims, claims_stream) = reflect(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default().page_size(CLAIM_PAGE_SIZE),
        caches::trim_claim(&provisioner),
        caches::claim_keys,
        Compact::new,
    );
    let config = controller::Config::default().concurrency(RECONCILES_AT_ONCE);
    let controller =
        Controller::for_stream(claims_stream, claims.store.clone()).with_config(config.clone());
    let ctx = Arc::new(Context::new(
        client,
        opts,
        metrics,
        Caches {
            claims: claims.clone(),
            classes: classes.store.clone(),
            volumes: volumes.store.clone(),
            nodes: nodes.store,
            config_maps,
            jobs: jobs.clone(),
            pods,
            failed_creates,
        },
    ));

    let ready_ctx = ctx.clone();
    let mark_ready = async move {
        ready_ctx.ready().await;
        health
            .ready
            .store(true, std::sync::atomic::Ordering::Relaxed);
    };
    let synced_ctx = ctx.clone();
    let synced = async move { synced_ctx.open_when_synced().await };
    // Part of the controllers' future, so it stops with them rather than outliving `run`.
    let gauge = count_active_jobs(ctx.clone());
    let drain_nodes = nodes_stream.for_each(|_| async {});

    // PVs and our Jobs trigger both controllers (and Jobs the orphan check) from one watch each.
    let ([volumes_for_claims, volumes_for_volumes], share_volumes) =
        fan_out::fan_out::<Compact<PersistentVolume>, 2>(volumes_stream);
    let ([jobs_for_claims, jobs_for_volumes, jobs_for_orphans], share_jobs) =
        fan_out::fan_out::<Job, 3>(futures::stream::select_all(job_streams));
    let orphans_run = orphans::run(jobs_for_orphans, ctx.clone());

    // Volumes: a second controller, triggered by its PVs and its deprovision Jobs.
    let volumes_controller = Controller::for_stream(volumes_for_volumes, volumes.store.clone())
        .with_config(config)
        .watches_stream(jobs_for_volumes, |job: Job| {
            // Its own volume, and a clone's source, which waits for the copy to finish.
            let own = job
                .meta()
                .labels
                .as_ref()
                .and_then(|l| l.get(flex_core::names::LABEL_VOLUME))
                .map(|v| ObjectRef::new(v));
            let source = job
                .meta()
                .annotations
                .as_ref()
                .and_then(|a| a.get(flex_core::names::ANN_SOURCE_VOLUME))
                .map(|v| ObjectRef::new(v));
            own.into_iter().chain(source)
        });
    let volumes_run = volumes_controller
        .run(
            volumes::reconcile_volume,
            Context::error_policy,
            ctx.clone(),
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "volume reconcile failed; it is retried");
            }
        })
        .boxed();

    let by_class = claims.clone();
    let by_config = claims.clone();
    let claims_run = controller
        .watches_stream(jobs_for_claims, |job: Job| {
            claim_ref_of(job.meta().annotations.as_ref())
        })
        .watches_stream(futures::stream::select_all(pod_streams), |pod: Pod| {
            claim_ref_of(pod.meta().annotations.as_ref())
        })
        // A FailedCreate event names its Job; the Job names its claim.
        .watches_stream(
            futures::stream::select_all(event_streams),
            move |ev: CoreEvent| {
                let o = &ev.involved_object;
                let at = ObjectRef::<Job>::new(o.name.as_deref()?).within(o.namespace.as_deref()?);
                let job = jobs.iter().find_map(|j| j.store.get(&at))?;
                claim_ref_of(job.meta().annotations.as_ref())
            },
        )
        .watches_stream(volumes_for_claims, |pv: Compact<PersistentVolume>| {
            let r = pv.full()?.spec?.claim_ref?;
            Some(ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?))
        })
        .watches_stream(classes_stream, move |sc: StorageClass| {
            claims_of_class(&by_class, sc.meta().name.as_deref().unwrap_or_default())
        })
        .watches_stream(
            futures::stream::select_all(cm_streams),
            move |cm: ConfigMap| {
                let class = cm
                    .meta()
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_CONFIG_CLASS))
                    .cloned()
                    .unwrap_or_default();
                claims_of_class(&by_config, &class)
            },
        )
        .run(reconcile::reconcile, Context::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile failed; it is retried");
            }
        })
        // On the heap: with its many trigger streams this future is large, and tests run
        // the controller on a thread with a small stack.
        .boxed();
    let controllers = async {
        futures::join!(
            claims_run,
            volumes_run,
            orphans_run,
            share_volumes,
            share_jobs,
            drain_nodes,
            gauge,
            synced,
            mark_ready
        );
    };
    match leader {
        Some(l) => {
            let mut holder = crate::leader::Holder::start(&lease_client, &l, fence)
                .map_err(crate::Error::LeaseThread)?;
            tokio::select! {
                _ = controllers => Ok(()),
                _ = holder.lost() => Err(crate::Error::LeadershipLost),
            }
        }
        None => {
            controllers.await;
            Ok(())
        }
    }
}
