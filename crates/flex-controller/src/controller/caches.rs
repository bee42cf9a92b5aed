//! The caches decisions read, what each is indexed by, and what is dropped from objects
//! before they are stored (the caches hold every claim and PV of the cluster, so every
//! byte kept per object counts tens of thousands of times).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::compact::{Compact, Shared};
use super::index::Indexed;
use flex_core::names::{
    ANN_PROVISIONED_BY, ANN_SOURCE_VOLUME, ANN_STORAGE_CLASS, ANN_STORAGE_PROVISIONER,
    ANN_STORAGE_PROVISIONER_BETA, LABEL_CLAIM_UID, LABEL_VOLUME,
};

/// The reflector stores decisions read; ConfigMaps, records, Jobs, pods and the Job controller's
/// `FailedCreate` events per config namespace.
pub struct Caches {
    /// Claims and PVs are the kinds a cluster has tens of thousands of: held compact.
    pub claims: Indexed<PersistentVolumeClaim, Compact<PersistentVolumeClaim>>,
    pub classes: Store<StorageClass>,
    pub volumes: Store<Compact<PersistentVolume>>,
    pub nodes: Store<Node>,
    pub config_maps: Vec<Store<ConfigMap>>,
    /// Deprovision records (`flex_core::record`), per config namespace: one per volume, read
    /// only when it is deprovisioned or grown, so held compact.
    pub records: Vec<Store<Compact<ConfigMap>>>,
    pub jobs: Vec<Indexed<Job, Shared<Job>>>,
    pub pods: Vec<Indexed<Pod, Shared<Pod>>>,
    pub failed_creates: Vec<Store<Event>>,
}

/// Index keys.
pub fn by_claim(uid: &str) -> String {
    format!("claim/{uid}")
}
pub fn by_volume(name: &str) -> String {
    format!("volume/{name}")
}
pub fn by_class(name: &str) -> String {
    format!("class/{name}")
}
/// Provisioning Jobs that copy from this volume (clones).
pub fn by_source(volume: &str) -> String {
    format!("source/{volume}")
}
/// Restores copying from a snapshot's content, by the content's name.
pub fn by_source_snapshot(content: &str) -> String {
    format!("source-snapshot/{content}")
}
/// The Jobs (and pods) of one VolumeSnapshot, by its uid.
pub fn by_snapshot(uid: &str) -> String {
    format!("snapshot/{uid}")
}

impl Caches {
    /// Our cached Jobs under an index key, in every config namespace.
    pub fn jobs_by(&self, key: &str) -> Vec<Arc<Job>> {
        let jobs = self.jobs.iter().flat_map(|s| s.by(key));
        jobs.map(|j| j.0.clone()).collect()
    }

    /// Our Jobs' cached pods under an index key, in every config namespace.
    pub fn pods_by(&self, key: &str) -> Vec<Arc<Pod>> {
        let pods = self.pods.iter().flat_map(|s| s.by(key));
        pods.map(|p| p.0.clone()).collect()
    }

    /// Every cached Job of ours (for the periodic gauge only).
    pub fn all_jobs(&self) -> Vec<Arc<Job>> {
        let jobs = self.jobs.iter().flat_map(|s| s.store.state());
        jobs.map(|j| j.0.clone()).collect()
    }

    /// The cached claim `namespace/name`.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let c = self
            .claims
            .store
            .get(&ObjectRef::new(name).within(namespace))?;
        c.full().map(Arc::new)
    }

    /// The cached claims whose `spec.volumeName` names this PV, as (namespace, name).
    pub fn claims_naming(&self, volume: &str) -> Vec<(String, String)> {
        self.claims
            .refs(&by_volume(volume))
            .into_iter()
            .filter_map(|r| Some((r.namespace?, r.name)))
            .collect()
    }

    /// The cached PV of this name.
    pub fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes
            .get(&ObjectRef::new(name))?
            .full()
            .map(Arc::new)
    }

    /// The Job controller's latest `FailedCreate` event about this Job.
    pub fn failed_create(&self, job: &Job) -> Option<Arc<Event>> {
        let (ns, name) = (job.namespace(), job.name_any());
        self.failed_creates
            .iter()
            .flat_map(|s| s.state())
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(name.as_str())
                    && e.involved_object.namespace == ns
                    && e.involved_object.uid == job.metadata.uid
            })
            .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0))
    }
}

fn label<'a>(labels: &'a BTreeMap<String, String>, key: &str) -> Option<&'a String> {
    labels.get(key).filter(|v| !v.is_empty())
}

/// Claims are found by name (the store's key), by class (for a change of the class or its
/// ConfigMap) and by the volume they name.
pub fn claim_keys(c: &PersistentVolumeClaim) -> Vec<String> {
    let spec = c.spec.as_ref();
    let class = flex_core::claim::class_of(c).map(by_class);
    // Which claims name a volume: before its storage is destroyed, none may.
    let volume = spec.and_then(|s| s.volume_name.as_deref()).map(by_volume);
    class.into_iter().chain(volume).collect()
}

pub fn job_keys(j: &Job) -> Vec<String> {
    let mut keys = object_keys(j);
    use flex_core::names::Action;
    let action = Action::of(j.labels());
    let annotations = j.annotations();
    // Only provisioning Jobs count against a class's `max-concurrent`.
    if action == Some(Action::Provision) {
        keys.extend(annotations.get(ANN_STORAGE_CLASS).map(|c| by_class(c)));
    }
    // A clone's and a snapshot's Jobs keep the volume they copy from.
    if matches!(action, Some(Action::Provision | Action::Snapshot)) {
        keys.extend(annotations.get(ANN_SOURCE_VOLUME).map(|v| by_source(v)));
    }
    if action == Some(Action::Provision) {
        let restore = annotations.get(flex_core::names::ANN_SOURCE_SNAPSHOT);
        keys.extend(restore.map(|c| by_source_snapshot(c)));
    }
    keys
}

/// A Job or pod by the claim and the volume its labels name.
pub fn object_keys(o: &impl ResourceExt) -> Vec<String> {
    let labels = o.labels();
    let claim = label(labels, LABEL_CLAIM_UID).map(|uid| by_claim(uid));
    let snapshot = label(labels, flex_core::names::LABEL_SNAPSHOT_UID).map(|u| by_snapshot(u));
    claim
        .into_iter()
        .chain(label(labels, LABEL_VOLUME).map(|v| by_volume(v)))
        .chain(snapshot)
        .collect()
}

pub fn no_keys<K>(_: &K) -> Vec<String> {
    Vec::new()
}

/// Field ownership is never read and is often the largest part of an object.
pub fn trim_meta<K: kube::Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
    if let Some(a) = o.meta_mut().annotations.as_mut() {
        // kubectl's copy of the whole object as last applied.
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// At most this many bytes of a claim's labels and annotations (keys and values) are
/// cached; a claim's author may write 256 KiB of annotations, and its labels without limit.
pub const CLAIM_METADATA_BUDGET: usize = 16 * 1024;
/// A list or selector a claim's author writes is cached whole up to this size.
const CLAIM_LIST_BUDGET: usize = 2 * 1024;
/// The longest value of an annotation the controller reads (names, digits, digests are
/// all shorter); a longer one is cached as its beginning and an ellipsis, which no valid
/// value contains.
const VALUE_BUDGET: usize = 256;
/// Set on a cached claim whose record was cut short: a decision that needs what was cut
/// reads the claim whole from the API server (see `reconcile`).
pub const ANN_CUT_SHORT: &str = "flex-provisioner.io/cached-record-cut-short";

/// Whether a cached claim or PV lacks what was cut from it (see `trim_claim`,
/// `trim_volume`).
pub fn is_cut_short(o: &impl ResourceExt) -> bool {
    o.annotations().contains_key(ANN_CUT_SHORT)
}

/// The annotations decisions read from a claim whatever its size: Kubernetes' hand-over
/// and class, the selected node, and this provisioner's own bookkeeping.
fn read_by_decisions(key: &str) -> bool {
    key == ANN_STORAGE_PROVISIONER
        || key == ANN_STORAGE_PROVISIONER_BETA
        || key == flex_core::claim::BETA_CLASS_ANNOTATION
        || key == flex_core::names::ANN_SELECTED_NODE
        || key.starts_with(flex_core::names::PREFIX)
}

fn bounded_value(v: &mut String) {
    if v.len() > VALUE_BUDGET {
        let mut end = 64;
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        v.truncate(end);
        v.push('\u{2026}');
    }
}

fn json_len(v: &impl serde::Serialize) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

/// Drops a claim's list longer than `CLAIM_LIST_BUDGET` as JSON; whether it did.
fn dropped_if_over<T: serde::Serialize>(field: &mut Option<T>) -> bool {
    let over = json_len(field) > CLAIM_LIST_BUDGET;
    if over {
        *field = None;
    }
    over
}

/// Every claim is cached as a bounded record, whatever its author wrote into it, because
/// the cache holds every claim of the cluster and any user may create claims:
/// - a claim Kubernetes handed to another provisioner (or to none yet) keeps little more
///   than its name, uid, class and provisioner annotations: it is looked at only to see
///   that it is not ours, and the hand-over's write brings the whole claim back;
/// - a claim handed to us keeps its labels and annotations up to
///   [`CLAIM_METADATA_BUDGET`] and its lists up to [`CLAIM_LIST_BUDGET`]; past that, the
///   record keeps what decisions read and says it was cut ([`ANN_CUT_SHORT`]).
///
/// Whether a claim is ours is decided by its class (`plan::claim::is_ours`), never here:
/// the hand-over annotation only says which record to keep.
pub fn trim_claim(provisioner: &str) -> impl Fn(&mut PersistentVolumeClaim) + Send + 'static {
    let provisioner = provisioner.to_owned();
    move |c| {
        trim_meta(c);
        let handed_to_us = [ANN_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER_BETA]
            .iter()
            .any(|k| c.annotations().get(*k) == Some(&provisioner));
        if handed_to_us {
            cut_to_budget(c);
        } else {
            keep_identity(c);
        }
    }
}

fn keep_identity(c: &mut PersistentVolumeClaim) {
    let m = &mut c.metadata;
    m.labels = None;
    m.finalizers = None;
    m.owner_references = None;
    if let Some(a) = m.annotations.as_mut() {
        a.retain(|k, _| {
            k == ANN_STORAGE_PROVISIONER
                || k == ANN_STORAGE_PROVISIONER_BETA
                || k == flex_core::claim::BETA_CLASS_ANNOTATION
        });
        a.values_mut().for_each(bounded_value);
    }
    if let Some(s) = c.spec.as_mut() {
        s.selector = None;
        s.data_source = None;
        s.data_source_ref = None;
        s.resources = None;
        s.access_modes = None;
    }
    c.status = c.status.take().map(|s| PersistentVolumeClaimStatus {
        phase: s.phase,
        ..Default::default()
    });
}

fn cut_to_budget(c: &mut PersistentVolumeClaim) {
    let mut cut = false;
    let m = &mut c.metadata;
    let metadata_bytes: usize = [m.labels.as_ref(), m.annotations.as_ref()]
        .into_iter()
        .flatten()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    if metadata_bytes > CLAIM_METADATA_BUDGET {
        cut = true;
        m.labels = None;
        if let Some(a) = m.annotations.as_mut() {
            a.retain(|k, _| read_by_decisions(k));
            a.values_mut().for_each(bounded_value);
        }
    }
    cut |= dropped_if_over(&mut m.finalizers);
    cut |= dropped_if_over(&mut m.owner_references);
    if let Some(s) = c.spec.as_mut() {
        // Only whether a selector is set is read (a dynamically provisioned claim may not
        // have one).
        if json_len(&s.selector) > CLAIM_LIST_BUDGET {
            cut = true;
            s.selector = Some(Default::default());
        }
        cut |= dropped_if_over(&mut s.access_modes);
        cut |= dropped_if_over(&mut s.resources);
    }
    if cut {
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_CUT_SHORT.to_owned(), "true".to_owned());
    }
}

/// A PV is kept whole only once it is a verified volume of ours (our name in
/// `provisioned-by` and our finalizer, which the controller alone sets: deploy/'s admission
/// policy keeps it from the image accounts). Any other PV is kept as its name, uid,
/// claimRef, class, phase and deletion: enough to route its events and see it is not ours
/// yet, whatever its creator wrote into it (anyone with PV create, the image accounts
/// included, may write hundreds of kilobytes). One that names this provisioner or is named
/// as an image names its claim's volume (`pvc-<claimRef uid>`) is marked cut short: a
/// claim's plan that verifies it, or a volume's plan for one a Job of ours made, reads it
/// whole from the API server first.
pub fn trim_volume(provisioner: &str) -> impl Fn(&mut PersistentVolume) + Send + 'static {
    let provisioner = provisioner.to_owned();
    move |pv| {
        trim_meta(pv);
        let named_ours = pv.annotations().get(ANN_PROVISIONED_BY) == Some(&provisioner);
        if named_ours && flex_core::volume::verified(pv) {
            return;
        }
        let maybe_ours = named_ours
            || (!pv.annotations().contains_key(ANN_PROVISIONED_BY) && is_claims_volume(pv));
        let m = &mut pv.metadata;
        m.labels = None;
        m.finalizers = None;
        if let Some(a) = m.annotations.as_mut() {
            a.retain(|k, _| k == ANN_PROVISIONED_BY);
            a.values_mut().for_each(bounded_value);
        }
        if maybe_ours {
            m.annotations
                .get_or_insert_with(Default::default)
                .insert(ANN_CUT_SHORT.to_owned(), "true".to_owned());
        }
        pv.spec = pv
            .spec
            .take()
            .map(|s| k8s_openapi::api::core::v1::PersistentVolumeSpec {
                claim_ref: s
                    .claim_ref
                    .map(|r| k8s_openapi::api::core::v1::ObjectReference {
                        name: r.name,
                        namespace: r.namespace,
                        uid: r.uid,
                        ..Default::default()
                    }),
                storage_class_name: s.storage_class_name,
                persistent_volume_reclaim_policy: s.persistent_volume_reclaim_policy,
                ..Default::default()
            });
        pv.status = pv
            .status
            .take()
            .map(|s| k8s_openapi::api::core::v1::PersistentVolumeStatus {
                phase: s.phase,
                ..Default::default()
            });
    }
}

/// Whether a PV is named `pvc-<uid of the claim its claimRef names>`.
fn is_claims_volume(pv: &PersistentVolume) -> bool {
    let name = flex_core::volume::claim_uid(pv).map(flex_core::names::pv_name);
    name.is_some_and(|n| pv.metadata.name.as_deref() == Some(n.as_str()))
}

/// A node is read for its name and labels (templates and node affinity) and whether it is
/// cordoned only.
pub fn trim_node(n: &mut Node) {
    trim_meta(n);
    n.metadata.annotations = None;
    n.metadata.owner_references = None;
    n.spec = n
        .spec
        .take()
        .filter(|s| s.unschedulable == Some(true))
        .map(|_| k8s_openapi::api::core::v1::NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
    n.status = None;
}

/// The claim a Job or pod of ours is for, as its claim annotation names it.
pub(super) fn claim_ref_of(
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<ObjectRef<Compact<PersistentVolumeClaim>>> {
    let (ns, name) = annotations?
        .get(flex_core::names::ANN_CLAIM)?
        .split_once('/')?;
    Some(ObjectRef::new(name).within(ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn without_type(o: &impl serde::Serialize) -> serde_json::Value {
        let mut v = serde_json::to_value(o).unwrap();
        let m = v.as_object_mut().unwrap();
        m.remove("apiVersion");
        m.remove("kind");
        v
    }

    #[test]
    fn a_claim_of_another_provisioner_keeps_only_what_says_so() {
        let mut c: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "a", "uid": "u",
                         "labels": {"x": "y"},
                         "annotations": {ANN_STORAGE_PROVISIONER: "other.example.com", "big": "x"}},
            "spec": {"storageClassName": "other", "volumeName": "pv-1",
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}
        }))
        .unwrap();
        let mut ours = c.clone();
        ours.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANN_STORAGE_PROVISIONER.into(), "me".into());
        let untouched = ours.clone();
        trim_claim("me")(&mut ours);
        assert_eq!(ours, untouched, "a claim of ours is kept whole");
        trim_claim("me")(&mut c);
        assert_eq!(
            without_type(&c),
            json!({"metadata": {"name": "c", "namespace": "a", "uid": "u",
                     "annotations": {ANN_STORAGE_PROVISIONER: "other.example.com"}},
                   "spec": {"storageClassName": "other", "volumeName": "pv-1"},
                   "status": {"phase": "Bound"}})
        );
        assert_eq!(claim_keys(&c), ["class/other", "volume/pv-1"]);
    }

    /// A claim's author may write 256 KiB of annotations and labels without end, and name
    /// any provisioner in them: whatever they write, the cached record stays small, keeps
    /// what decisions read, and says when it was cut.
    #[test]
    fn every_claim_is_cached_as_a_bounded_record() {
        let big = "x".repeat(250 * 1024);
        let hostile = |provisioner: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "a", "uid": "u",
                             "labels": {"team": "alpha", "l": big},
                             "finalizers": vec!["example.com/f"; 400],
                             "annotations": {ANN_STORAGE_PROVISIONER: provisioner, "big": big,
                                             "volume.kubernetes.io/selected-node": "node-a",
                                             "flex-provisioner.io/attempt": big}},
                "spec": {"storageClassName": "fast",
                         "selector": {"matchExpressions": [{"key": "k", "operator": "In", "values": vec!["v"; 2000]}]},
                         "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": "Pending"}
            }))
            .unwrap()
        };
        for provisioner in ["me", "other.example.com", big.as_str()] {
            let mut c = hostile(provisioner);
            trim_claim("me")(&mut c);
            let size = serde_json::to_string(&c).unwrap().len();
            assert!(size < 2048, "{provisioner:.20}: {size} bytes cached");
        }
        let mut c = hostile("me");
        trim_claim("me")(&mut c);
        assert!(is_cut_short(&c));
        let a = c.annotations();
        assert_eq!(a[ANN_STORAGE_PROVISIONER], "me");
        assert_eq!(a["volume.kubernetes.io/selected-node"], "node-a");
        assert!(a["flex-provisioner.io/attempt"].ends_with('\u{2026}'));
        assert!(!a.contains_key("big") && c.labels().is_empty());
        assert_eq!(c.metadata.finalizers, None);
        let spec = c.spec.as_ref().unwrap();
        assert_eq!(
            spec.selector,
            Some(Default::default()),
            "a selector stays set"
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        // One of ours within the budget is kept whole, and is not marked.
        let mut small = hostile("me");
        small.metadata.labels = Some([("team".into(), "alpha".into())].into());
        small.metadata.annotations = Some([(ANN_STORAGE_PROVISIONER.into(), "me".into())].into());
        small.metadata.finalizers = None;
        small.spec.as_mut().unwrap().selector = None;
        let whole = small.clone();
        trim_claim("me")(&mut small);
        assert_eq!(small, whole);
        assert!(!is_cut_short(&small));
    }

    #[test]
    fn a_volume_of_another_provisioner_keeps_its_claim_ref_and_phase() {
        let mut pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-1", "uid": "v", "annotations": {ANN_PROVISIONED_BY: "other"}},
            "spec": {"claimRef": {"name": "c", "namespace": "a", "uid": "u", "resourceVersion": "9"},
                     "storageClassName": "other", "nfs": {"server": "s", "path": "/p"},
                     "capacity": {"storage": "1Gi"}},
            "status": {"phase": "Bound", "message": "m"}
        }))
        .unwrap();
        trim_volume("me")(&mut pv);
        assert_eq!(
            without_type(&pv),
            json!({"metadata": {"name": "pv-1", "uid": "v", "annotations": {ANN_PROVISIONED_BY: "other"}},
                   "spec": {"claimRef": {"name": "c", "namespace": "a", "uid": "u"}, "storageClassName": "other"},
                   "status": {"phase": "Bound"}})
        );
    }

    /// A volume of ours is kept whole once verified (our finalizer). Before that, or when
    /// anyone with PV create wrote our name into it, it is a bounded record marked cut
    /// short, as is an image's PV named as the original proposal names it (no
    /// provisioner's name, named after its claim's uid): a claim's plan that verifies it
    /// reads it whole. Another unannotated PV (an admin's static volume) is trimmed and
    /// not marked.
    #[test]
    fn only_a_verified_volume_of_ours_is_kept_whole() {
        let verified: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pvc-u", "uid": "v", "annotations": {ANN_PROVISIONED_BY: "me"},
                         "finalizers": [flex_core::names::FINALIZER_DEPROVISION]},
            "spec": {"claimRef": {"name": "c", "namespace": "a", "uid": "u"},
                     "storageClassName": "ours", "hostPath": {"path": "/p"},
                     "capacity": {"storage": "1Gi"}, "persistentVolumeReclaimPolicy": "Delete"}
        }))
        .unwrap();
        let mut kept = verified.clone();
        trim_volume("me")(&mut kept);
        assert_eq!(kept, verified);
        assert!(!is_cut_short(&kept));

        let mut forged = verified.clone();
        forged.metadata.finalizers = None;
        forged.metadata.labels = Some([("x".into(), "y".repeat(60_000))].into());
        forged
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("big".into(), "z".repeat(250_000));
        trim_volume("me")(&mut forged);
        assert!(is_cut_short(&forged));
        assert_eq!(
            without_type(&forged),
            json!({"metadata": {"name": "pvc-u", "uid": "v",
                                "annotations": {ANN_PROVISIONED_BY: "me", ANN_CUT_SHORT: "true"}},
                   "spec": {"claimRef": {"name": "c", "namespace": "a", "uid": "u"},
                            "storageClassName": "ours", "persistentVolumeReclaimPolicy": "Delete"}})
        );

        let mut seed = verified.clone();
        seed.metadata.annotations = None;
        seed.metadata.finalizers = None;
        trim_volume("me")(&mut seed);
        assert!(is_cut_short(&seed));
        assert!(seed.spec.as_ref().unwrap().host_path.is_none());
        let mut other = verified.clone();
        other.metadata.annotations = None;
        other.metadata.name = Some("static-1".into());
        trim_volume("me")(&mut other);
        assert!(other.spec.as_ref().unwrap().host_path.is_none());
        assert!(!is_cut_short(&other));
    }
}
