//! The watches the controllers run on: one reflector store per kind (and per config
//! namespace), trimmed and indexed as `caches` says, each with the stream of what changed.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};

use super::Options;
use super::caches::{self, Caches};
use super::compact::{Compact, Shared};
use super::index;
use super::slim::Slim;
use flex_core::names::{
    CONFIG_TYPE_VALUE, LABEL_CONFIG_TYPE, LABEL_MANAGED_BY, LABEL_RECORD, MANAGED_BY_VALUE,
};

/// Claims are listed in pages of this many: any user may write 256 KiB of annotations into
/// each of their claims, and a page is held whole (as the response and as parsed objects)
/// before each claim is cut to its cached record. kube's default of 500 made a restart
/// among 2,000 such claims peak at 541 MiB.
const CLAIM_PAGE_SIZE: u32 = 50;

type Changes<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// Every store, and what changed in each (streams that must be polled: the controllers do,
/// as triggers; nodes' is only drained).
pub(super) struct Watches {
    pub caches: Caches,
    pub claims: Changes<Compact<PersistentVolumeClaim>>,
    pub classes: Changes<StorageClass>,
    pub volumes: Changes<Compact<PersistentVolume>>,
    pub nodes: Changes<Node>,
    pub records: Changes<Compact<ConfigMap>>,
    pub config_maps: Changes<ConfigMap>,
    pub jobs: Changes<Shared<Job>>,
    pub pods: Changes<Shared<Pod>>,
    pub failed_creates: Changes<CoreEvent>,
}

/// The watches: claims, classes, PVs and nodes cluster-wide; provisioner ConfigMaps, our
/// deprovision records, our Jobs, their pods and the Job controller's `FailedCreate` events
/// in each config namespace.
pub(super) fn watch_everything(client: &Client, opts: &Options) -> Watches {
    let provisioner = opts.provisioner_name.as_str();
    let (claims, claims_changes) = reflect(
        (
            Api::<Slim<PersistentVolumeClaim>>::all(client.clone()),
            |s| s.0,
        ),
        watcher::Config::default().page_size(CLAIM_PAGE_SIZE),
        caches::trim_claim(provisioner),
        caches::claim_keys,
        Compact::new,
    );
    let (classes, classes_changes) = reflect(
        (
            Api::<StorageClass>::all(client.clone()),
            std::convert::identity,
        ),
        watcher::Config::default(),
        caches::trim_meta,
        caches::no_keys,
        std::convert::identity,
    );
    let (volumes, volumes_changes) = reflect(
        (Api::<Slim<PersistentVolume>>::all(client.clone()), |s| s.0),
        watcher::Config::default(),
        caches::trim_volume(provisioner),
        caches::no_keys,
        Compact::new,
    );
    // Nodes are read for their names and labels: a cache, not a GET per reconcile.
    let (nodes, nodes_changes) = reflect(
        (Api::<Node>::all(client.clone()), std::convert::identity),
        watcher::Config::default(),
        caches::trim_node,
        caches::no_keys,
        std::convert::identity,
    );
    let ns = namespaced(client, opts);
    Watches {
        caches: Caches {
            claims,
            classes: classes.store,
            volumes: volumes.store,
            nodes: nodes.store,
            config_maps: ns.config_maps,
            records: ns.records,
            jobs: ns.jobs,
            pods: ns.pods,
            failed_creates: ns.failed_creates,
        },
        claims: claims_changes.boxed(),
        classes: classes_changes.boxed(),
        volumes: volumes_changes.boxed(),
        nodes: nodes_changes.boxed(),
        records: futures::stream::select_all(ns.record_changes).boxed(),
        config_maps: futures::stream::select_all(ns.config_map_changes).boxed(),
        jobs: futures::stream::select_all(ns.job_changes).boxed(),
        pods: futures::stream::select_all(ns.pod_changes).boxed(),
        failed_creates: futures::stream::select_all(ns.event_changes).boxed(),
    }
}

/// The per-namespace stores and their changes.
#[derive(Default)]
struct Namespaced {
    config_maps: Vec<reflector::Store<ConfigMap>>,
    records: Vec<reflector::Store<Compact<ConfigMap>>>,
    jobs: Vec<index::Indexed<Job, Shared<Job>>>,
    pods: Vec<index::Indexed<Pod, Shared<Pod>>>,
    failed_creates: Vec<reflector::Store<CoreEvent>>,
    config_map_changes: Vec<Changes<ConfigMap>>,
    record_changes: Vec<Changes<Compact<ConfigMap>>>,
    job_changes: Vec<Changes<Shared<Job>>>,
    pod_changes: Vec<Changes<Shared<Pod>>>,
    event_changes: Vec<Changes<CoreEvent>>,
}

fn namespaced(client: &Client, opts: &Options) -> Namespaced {
    let ours = format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}");
    let cfg_selector = format!("{LABEL_CONFIG_TYPE}={CONFIG_TYPE_VALUE}");
    let records = format!("{ours},{LABEL_RECORD}=true");
    let mut n = Namespaced::default();
    for ns in &opts.config_namespaces {
        let config_maps = || {
            let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
            (api, std::convert::identity as fn(ConfigMap) -> ConfigMap)
        };
        let (s, changes) = reflect(
            config_maps(),
            watcher::Config::default().labels(&cfg_selector),
            caches::trim_meta,
            caches::no_keys,
            std::convert::identity,
        );
        n.config_maps.push(s.store);
        n.config_map_changes.push(changes.boxed());
        // Deprovision records, read from the cache rather than once per deleted volume.
        let (s, changes) = reflect(
            config_maps(),
            watcher::Config::default().labels(&records),
            caches::trim_meta,
            caches::no_keys,
            Compact::new,
        );
        n.records.push(s.store);
        n.record_changes.push(changes.boxed());
        let (s, changes) = reflect(
            (Api::<Slim<Job>>::namespaced(client.clone(), ns), |s| s.0),
            watcher::Config::default().labels(&ours),
            caches::trim_meta,
            caches::job_keys,
            Shared::new,
        );
        n.jobs.push(s);
        n.job_changes.push(changes.boxed());
        let (s, changes) = reflect(
            (Api::<Slim<Pod>>::namespaced(client.clone(), ns), |s| s.0),
            watcher::Config::default().labels(&ours),
            caches::trim_meta,
            caches::object_keys,
            Shared::new,
        );
        n.pods.push(s);
        n.pod_changes.push(changes.boxed());
        // Why a Job has no pod (a missing ServiceAccount, a quota): watched, not listed per
        // reconcile.
        let (s, changes) = reflect(
            (
                Api::<CoreEvent>::namespaced(client.clone(), ns),
                std::convert::identity,
            ),
            watcher::Config::default().fields("reason=FailedCreate,involvedObject.kind=Job"),
            caches::trim_meta,
            caches::no_keys,
            std::convert::identity,
        );
        n.failed_creates.push(s.store);
        n.event_changes.push(changes.boxed());
    }
    n
}

/// A store kept current by a watch (of the object, or of its `Slim` form), indexed by
/// `keys`, with `trim` applied to each object before it is stored as `convert` makes it
/// (the object itself, or `Compact`), and the
/// stream of objects it saw change (which must be polled: the controller does, as a
/// trigger).
fn reflect<W, K, S>(
    (api, decoded): (Api<W>, fn(W) -> K),
    cfg: watcher::Config,
    trim: impl Fn(&mut K) + Send + 'static,
    keys: index::KeysOf<K>,
    convert: fn(K) -> S,
) -> (
    index::Indexed<K, S>,
    impl futures::Stream<Item = Result<S, watcher::Error>> + Send + 'static,
)
where
    W: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    S: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    use futures::TryStreamExt;
    let (store, writer) = reflector::store();
    let index = Arc::new(index::Index::new(keys));
    let indexing = index.clone();
    // Lists are paged (kube's default pages of 500) so a large cluster is never held twice
    // in memory: as one list response and as the cache.
    let stream = watcher(api, cfg)
        .map_ok(move |event| convert_event(event, decoded))
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
