//! What brings a claim or a volume back to its controller: which object a change of a Job,
//! pod or PV names, and which changes bring nothing a plan reads. Each change let through
//! costs a reconcile; a burst of 100 claims brought each claim back 16 times.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;

use kube::Resource;

use super::caches::claim_ref_of;
use super::compact::{Compact, Shared};
use super::index::Indexed;
use flex_core::names::Action;

/// The claim a Job (or its pod, or an event about it) brings back: that of a provisioning
/// or expansion Job. A deprovision Job's claim is gone (its volume was released), so its
/// dozen changes would only make the claim controller look up a claim that is not there.
pub(super) fn claim_to_trigger(
    meta: &ObjectMeta,
) -> Option<ObjectRef<Compact<PersistentVolumeClaim>>> {
    let action = Action::of(meta.labels.as_ref()?);
    (action != Some(Action::Deprovision)).then(|| claim_ref_of(meta.annotations.as_ref()))?
}

/// What of a pod a plan reads (`flex_core::job`: how it failed, its report, why it cannot
/// start), hashed: a pod changes about six times on its way, and only its end (or a reason it
/// cannot start) brings its claim anything.
pub(super) fn pod_fingerprint(pod: &Pod) -> u64 {
    let status = pod.status.as_ref();
    let mut h = DefaultHasher::new();
    let phase = status.and_then(|s| s.phase.as_deref());
    phase
        .filter(|p| matches!(*p, "Succeeded" | "Failed"))
        .hash(&mut h);
    status.and_then(|s| s.message.as_deref()).hash(&mut h);
    // What is there, not how many entries: a pod gains conditions and states as it starts.
    let containers = status.and_then(|s| s.container_statuses.as_ref());
    for state in containers
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref())
    {
        let starting = |r: &str| matches!(r, "ContainerCreating" | "PodInitializing");
        let waiting = state.waiting.as_ref();
        if let Some(w) = waiting.filter(|w| !w.reason.as_deref().is_some_and(starting)) {
            (&w.reason, &w.message).hash(&mut h);
        }
        if let Some(t) = &state.terminated {
            (t.exit_code, &t.message).hash(&mut h);
        }
    }
    let conditions = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten();
    for c in conditions.filter(|c| c.type_ == "PodScheduled" && c.status != "True") {
        (&c.reason, &c.message).hash(&mut h);
    }
    pod.metadata.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// How a Job ended, as `flex_core::job::outcome` reads it: its `Complete` and `Failed`
/// conditions. Those before them (`SuccessCriteriaMet`, `FailureTarget`) and its counts of
/// ready and uncounted pods change without bringing anything.
fn ending(job: &Job, h: &mut DefaultHasher) {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    for c in conditions
        .into_iter()
        .flatten()
        .filter(|c| matches!(c.type_.as_str(), "Complete" | "Failed"))
    {
        (&c.type_, &c.status, &c.reason, &c.message).hash(h);
    }
    job.metadata.deletion_timestamp.is_some().hash(h);
}

/// What of a Job the claim's plans read, hashed: how it ended and whether it ever had a pod
/// (a Job without one is looked into for why, `reconcile.rs`).
pub(super) fn job_fingerprint(job: &Job) -> u64 {
    let mut h = DefaultHasher::new();
    ending(job, &mut h);
    had_pods(job).hash(&mut h);
    h.finish()
}

/// What of a Job the volume's plan reads, hashed: how it ended. Its first pod brings a
/// volume nothing.
pub(super) fn job_ending(job: &Job) -> u64 {
    let mut h = DefaultHasher::new();
    ending(job, &mut h);
    h.finish()
}

/// Whether a Job's counts show a pod: one running, ready, failed, succeeded, or ended and
/// not yet counted. Only a Job whose counts show none is looked into for why it cannot
/// start (a quota, a missing ServiceAccount).
pub(super) fn had_pods(job: &Job) -> bool {
    let Some(s) = job.status.as_ref() else {
        return false;
    };
    let uncounted = s.uncounted_terminated_pods.as_ref();
    let any = |v: Option<&Vec<String>>| v.is_some_and(|v| !v.is_empty());
    [s.active, s.failed, s.succeeded, s.ready]
        .iter()
        .any(|n| n.unwrap_or(0) > 0)
        || uncounted.is_some_and(|u| any(u.succeeded.as_ref()) || any(u.failed.as_ref()))
}

/// Whether one of `stores` still holds the object (by uid).
pub(super) fn held_in<K>(stores: Vec<Indexed<K, Shared<K>>>) -> impl Fn(&Shared<K>) -> bool
where
    K: Resource<DynamicType = ()> + Clone,
{
    move |o| {
        let at = ObjectRef::from_obj(o);
        stores.iter().any(|s| {
            s.store
                .get(&at)
                .is_some_and(|c| c.meta().uid == o.meta().uid)
        })
    }
}

/// `fingerprint` for kube-runtime's predicate filter, and whether the object has left its
/// store (`cached`: whether the store still holds it, by uid). The filter compares a
/// deleted object's last state with the one it saw before, so a Job or pod deleted without
/// a finalizer would bring nothing back until the next timed look.
///
/// An object not held is hashed with its resourceVersion too: during a list the store
/// takes the listed objects only once the list is done, so an object seen then counts as
/// not held, and its deletion (which the API server gives a resourceVersion of its own)
/// must still differ from it.
pub(super) fn unless_gone<K>(
    fingerprint: fn(&K) -> u64,
    cached: impl Fn(&Shared<K>) -> bool,
) -> impl Fn(&Shared<K>) -> Option<u64>
where
    K: Resource<DynamicType = ()> + Clone,
{
    move |o| {
        let mut h = DefaultHasher::new();
        let held = cached(o);
        let version = (!held).then(|| o.meta().resource_version.as_deref());
        (fingerprint(o), held, version).hash(&mut h);
        Some(h.finish())
    }
}

/// The claim a PV is bound to. A released volume's claim is gone: its deprovisioning is the
/// volume controller's, and the claim has nothing to look up.
pub(super) fn claim_of_volume(
    pv: &Compact<PersistentVolume>,
) -> Option<ObjectRef<Compact<PersistentVolumeClaim>>> {
    // Read for every change of every PV: only the two fields, not the whole volume.
    #[derive(serde::Deserialize)]
    struct Volume {
        spec: Option<Spec>,
        status: Option<Status>,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(rename = "claimRef")]
        claim_ref: Option<Ref>,
    }
    #[derive(serde::Deserialize)]
    struct Ref {
        namespace: Option<String>,
        name: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Status {
        phase: Option<String>,
    }
    let pv: Volume = pv.part()?;
    let phase = pv.status.and_then(|s| s.phase);
    let r = pv
        .spec
        .filter(|_| phase.as_deref() != Some("Released"))?
        .claim_ref?;
    Some(ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::{Value, json};

    fn job(action: &str, status: Value) -> Shared<Job> {
        Shared::new(
            serde_json::from_value(json!({
                "metadata": {"name": "j", "namespace": "flex", "uid": "ju",
                             "labels": {"flex-provisioner.io/action": action},
                             "annotations": {"flex-provisioner.io/claim": "team/data"}},
                "status": status
            }))
            .unwrap(),
        )
    }

    fn pod(status: Value) -> Shared<Pod> {
        let labels = json!({"flex-provisioner.io/action": "provision"});
        Shared::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "flex", "uid": "pu", "labels": labels,
                             "annotations": {"flex-provisioner.io/claim": "team/data"}},
                "status": status
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_deprovision_job_brings_no_claim_back() {
        let claim = ObjectRef::new("data").within("team");
        for action in ["provision", "expand"] {
            let j = job(action, json!({}));
            assert_eq!(
                claim_to_trigger(&j.metadata),
                Some(claim.clone()),
                "{action}"
            );
        }
        assert_eq!(
            claim_to_trigger(&job("deprovision", json!({})).metadata),
            None
        );
    }

    #[test]
    fn a_pod_brings_its_claim_back_when_it_ends_or_cannot_start() {
        let fp = |status: Value| pod_fingerprint(&pod(status));
        let created = fp(json!({"phase": "Pending"}));
        let waiting = |reason: &str| {
            json!({"phase": "Pending", "containerStatuses": [{"name": "provisioner", "image": "i",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": "m"}}}]})
        };
        let scheduled = json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"}]});
        let running = json!({"phase": "Running", "containerStatuses": [{"name": "provisioner",
            "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {}}}]});
        for quiet in [scheduled, waiting("ContainerCreating"), running] {
            assert_eq!(fp(quiet.clone()), created, "{quiet}");
        }
        let unschedulable = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}]});
        let ended = |phase: &str, code: i32| {
            json!({"phase": phase, "containerStatuses": [{"name": "provisioner", "image": "i",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "message": "report"}}}]})
        };
        let told = [
            waiting("ErrImagePull"),
            unschedulable,
            ended("Succeeded", 0),
            ended("Failed", 3),
        ];
        for status in told {
            assert_ne!(fp(status.clone()), created, "{status}");
        }
        let mut deleted = pod(json!({"phase": "Pending"}));
        deleted.meta_mut().deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_ne!(pod_fingerprint(&deleted), created);
    }

    #[test]
    fn a_job_brings_its_claim_back_when_it_gets_its_first_pod_or_ends() {
        let fp = |status: Value| job_fingerprint(&job("provision", status));
        let active = fp(json!({"active": 1}));
        assert_ne!(fp(json!({})), active, "its first pod");
        let quiet = [
            json!({"active": 1, "ready": 1}),
            json!({"active": 0, "uncountedTerminatedPods": {"succeeded": ["u"]}}),
            json!({"active": 1, "failed": 1}),
            json!({"succeeded": 1, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"}]}),
            json!({"failed": 1, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        ];
        for status in quiet {
            assert_eq!(fp(status.clone()), active, "{status}");
        }
        let ended = [
            json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "m"}]}),
        ];
        for status in ended {
            assert_ne!(fp(status.clone()), active, "{status}");
        }
    }

    #[test]
    fn a_job_brings_its_volume_back_only_when_it_ends() {
        let fp = |status: Value| job_ending(&job("deprovision", status));
        let created = fp(json!({}));
        assert_eq!(
            fp(json!({"active": 1, "ready": 1})),
            created,
            "its first pod"
        );
        let met = json!({"succeeded": 1, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"}]});
        assert_eq!(fp(met), created);
        let complete = json!({"succeeded": 1, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"}]});
        assert_ne!(fp(complete), created);
    }

    #[test]
    fn a_job_without_pods_is_one_whose_counts_show_none() {
        let had = |status: Value| had_pods(&job("provision", status));
        assert!(!had(json!({})));
        assert!(!had(json!({"active": 0, "failed": 0})));
        for status in [
            json!({"active": 1}),
            json!({"failed": 1}),
            json!({"succeeded": 1}),
            json!({"uncountedTerminatedPods": {"succeeded": ["u"]}}),
            json!({"uncountedTerminatedPods": {"failed": ["u"]}}),
        ] {
            assert!(had(status.clone()), "{status}");
        }
    }

    #[test]
    fn a_deletion_passes_the_filter_though_nothing_else_changed() {
        use futures::StreamExt;
        use kube::runtime::watcher::Event;
        let (store, mut writer) = kube::runtime::reflector::store::<Shared<Job>>();
        let index = std::sync::Arc::new(super::super::index::Index::new(|_: &Job| vec![]));
        let cached = held_in(vec![Indexed { store, index }]);
        let version = |v: &str| {
            let mut j = job("provision", json!({"active": 1}));
            j.meta_mut().resource_version = Some(v.into());
            j
        };
        // (the Job as the watch tells it, whether the store has dropped it by then)
        let told = [("1", false), ("2", false), ("3", true)];
        let changes = futures::stream::iter(told).map(move |(v, deleted)| {
            let j = version(v);
            let event = if deleted {
                Event::Delete(j.clone())
            } else {
                Event::Apply(j.clone())
            };
            writer.apply_watcher_event(&event);
            Ok(j)
        });
        let passed: Vec<_> = futures::executor::block_on(
            kube::runtime::WatchStreamExt::predicate_filter(
                changes,
                unless_gone(job_fingerprint, cached),
                kube::runtime::PredicateConfig::default(),
            )
            .map(|j| j.unwrap().metadata.resource_version.clone().unwrap())
            .collect(),
        );
        assert_eq!(passed, ["1", "3"]);
    }

    #[test]
    fn a_deletion_passes_though_the_job_was_first_seen_during_a_list() {
        use futures::StreamExt;
        use kube::runtime::watcher::Event;
        let (store, mut writer) = kube::runtime::reflector::store::<Shared<Job>>();
        let index = std::sync::Arc::new(super::super::index::Index::new(|_: &Job| vec![]));
        let cached = held_in(vec![Indexed { store, index }]);
        let version = |v: &str| {
            let mut j = job("provision", json!({"active": 1}));
            j.meta_mut().resource_version = Some(v.into());
            j
        };
        // A list (the store takes its objects at InitDone), the Job read from the list
        // before the store has it, then its deletion.
        let (listed, deleted) = (version("1"), version("2"));
        let events = [
            (Event::Init, None),
            (Event::InitApply(listed.clone()), Some(listed)),
            (Event::InitDone, None),
            (Event::Delete(deleted.clone()), Some(deleted)),
        ];
        let changes = futures::stream::iter(events).filter_map(move |(event, told)| {
            writer.apply_watcher_event(&event);
            std::future::ready(told.map(Ok))
        });
        let passed: Vec<_> = futures::executor::block_on(
            kube::runtime::WatchStreamExt::predicate_filter(
                changes,
                unless_gone(job_fingerprint, cached),
                kube::runtime::PredicateConfig::default(),
            )
            .map(|j| j.unwrap().metadata.resource_version.clone().unwrap())
            .collect(),
        );
        assert_eq!(passed, ["1", "2"]);
    }

    #[test]
    fn a_released_volume_brings_no_claim_back() {
        let pv = |phase: &str| {
            Compact::new(
                serde_json::from_value::<PersistentVolume>(json!({
                    "metadata": {"name": "pvc-1"},
                    "spec": {"claimRef": {"namespace": "team", "name": "data", "uid": "u"}},
                    "status": {"phase": phase}
                }))
                .unwrap(),
            )
        };
        let claim = ObjectRef::new("data").within("team");
        assert_eq!(claim_of_volume(&pv("Bound")), Some(claim.clone()));
        assert_eq!(claim_of_volume(&pv("Pending")), Some(claim));
        assert_eq!(claim_of_volume(&pv("Released")), None);
    }
}
