//! What brings a claim or a volume back to its controller: which object a change of a Job,
//! pod or PV names, and which changes bring nothing a plan reads. Each change let through
//! costs a reconcile; a burst of 100 claims brought each claim back 16 times.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;

use super::caches::claim_ref_of;
use super::compact::{Compact, Shared};
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
pub(super) fn pod_fingerprint(pod: &Shared<Pod>) -> Option<u64> {
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
    Some(h.finish())
}

/// What of a Job a plan reads (`flex_core::job::outcome`: its conditions; whether it has
/// pods), hashed: its counts of ready and uncounted pods change without bringing anything.
pub(super) fn job_fingerprint(job: &Shared<Job>) -> Option<u64> {
    let status = job.status.as_ref();
    let mut h = DefaultHasher::new();
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        (&c.type_, &c.status, &c.reason, &c.message).hash(&mut h);
    }
    let counts = status.map(|s| (s.active.unwrap_or(0) > 0, s.failed, s.succeeded));
    (counts, job.metadata.deletion_timestamp.is_some()).hash(&mut h);
    Some(h.finish())
}

/// The claim a PV is bound to. A released volume's claim is gone: its deprovisioning is the
/// volume controller's, and the claim has nothing to look up.
pub(super) fn claim_of_volume(
    pv: &Compact<PersistentVolume>,
) -> Option<ObjectRef<Compact<PersistentVolumeClaim>>> {
    let pv = pv.full()?;
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let r = pv.spec.filter(|_| phase != Some("Released"))?.claim_ref?;
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
        let fp = |status: Value| pod_fingerprint(&pod(status)).unwrap();
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
        assert_ne!(pod_fingerprint(&deleted).unwrap(), created);
    }

    #[test]
    fn a_job_brings_its_claim_back_when_its_conditions_or_pods_change() {
        let fp = |status: Value| job_fingerprint(&job("provision", status)).unwrap();
        let active = fp(json!({"active": 1}));
        assert_eq!(fp(json!({"active": 1, "ready": 1})), active);
        let uncounted = json!({"active": 1, "uncountedTerminatedPods": {"succeeded": ["u"]}});
        assert_eq!(fp(uncounted), active);
        assert_ne!(fp(json!({})), active, "its first pod");
        assert_ne!(
            fp(json!({"active": 1, "failed": 1})),
            active,
            "a pod failed"
        );
        let complete = json!({"succeeded": 1, "conditions": [
            {"type": "Complete", "status": "True"}]});
        assert_ne!(fp(complete), active);
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
