//! The volume planner: what runs, and above all what never runs (storage in use, Retain).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::{Value, json};

use super::*;

const P: &str = "flex-provisioner.io/job";

fn pv(policy: &str, phase: &str, extra: Value) -> PersistentVolume {
    let mut v = json!({
        "metadata": {"name": "pvc-u1", "annotations": {"pv.kubernetes.io/provisioned-by": P},
                     "finalizers": ["flex-provisioner.io/deprovision", "kubernetes.io/pv-protection"]},
        "spec": {"persistentVolumeReclaimPolicy": policy, "claimRef": {"namespace": "a", "name": "c", "uid": "u1"}},
        "status": {"phase": phase}
    });
    json_merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

fn json_merge(a: &mut Value, b: &Value) {
    if let (Value::Object(a), Value::Object(b)) = (a, b) {
        for (k, v) in b {
            match a.get_mut(k) {
                Some(x) if x.is_object() && v.is_object() => json_merge(x, v),
                _ => {
                    a.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

fn job(attempt: u32, condition: Option<(&str, &str)>) -> Job {
    let mut status = json!({});
    if let Some((t, reason)) = condition {
        status = json!({"conditions": [{"type": t, "status": "True", "reason": reason, "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    }
    serde_json::from_value(json!({"metadata": {"name": format!("deprovision-pvc-u1-{attempt}"), "uid": format!("j{attempt}"),
        "labels": {"flex-provisioner.io/attempt": attempt.to_string()}}, "status": status}))
    .unwrap()
}

fn step(pv: &PersistentVolume, claim_alive: bool, jobs: Vec<&Job>) -> VolumeStep {
    plan_volume(&VolumeInputs {
        pv,
        provisioner_name: P,
        claim_alive,
        provisioning: false,
        jobs,
        pods: vec![],
        retry_base: Duration::from_secs(10),
        now: "2026-01-01T00:00:05Z".parse().unwrap(),
    })
    .step
}

#[test]
fn storage_in_use_is_never_touched() {
    assert_eq!(
        step(&pv("Delete", "Bound", json!({})), true, vec![]),
        VolumeStep::Ignore
    );
    let deleted_while_bound = pv(
        "Delete",
        "Bound",
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    );
    assert_eq!(step(&deleted_while_bound, true, vec![]), VolumeStep::Ignore);
    assert_eq!(
        step(&pv("Delete", "Pending", json!({})), true, vec![]),
        VolumeStep::Ignore,
        "a new PV of a live claim"
    );
}

#[test]
fn other_provisioners_volumes_are_ignored() {
    let theirs = pv(
        "Delete",
        "Released",
        json!({"metadata": {"annotations": {"pv.kubernetes.io/provisioned-by": "example.com/x"}}}),
    );
    assert_eq!(step(&theirs, false, vec![]), VolumeStep::Ignore);
}

#[test]
fn retain_runs_nothing_and_lets_a_deletion_complete() {
    assert_eq!(
        step(&pv("Retain", "Released", json!({})), false, vec![]),
        VolumeStep::Ignore
    );
    let deleted = pv(
        "Retain",
        "Released",
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    );
    assert_eq!(step(&deleted, false, vec![]), VolumeStep::ReleaseFinalizer);
}

#[test]
fn released_delete_volumes_are_deprovisioned_then_removed() {
    let released = pv("Delete", "Released", json!({}));
    assert_eq!(
        step(&released, false, vec![]),
        VolumeStep::Start { attempt: 1 }
    );
    assert_eq!(
        step(&pv("Delete", "Available", json!({})), false, vec![]),
        VolumeStep::Start { attempt: 1 },
        "claim deleted before binding"
    );
    let running = job(1, None);
    assert_eq!(step(&released, false, vec![&running]), VolumeStep::Running);
    let done = job(1, Some(("Complete", "CompletionsReached")));
    assert_eq!(step(&released, false, vec![&done]), VolumeStep::Finish);
    let waiting = plan_volume(&VolumeInputs {
        pv: &released,
        provisioner_name: P,
        claim_alive: false,
        provisioning: true,
        jobs: vec![],
        pods: vec![],
        retry_base: Duration::from_secs(10),
        now: jiff::Timestamp::now(),
    });
    assert_eq!(
        waiting.step,
        VolumeStep::Running,
        "a provisioning Job still running is waited for"
    );
}

#[test]
fn failures_are_reported_and_retried_after_a_growing_delay() {
    let released = pv("Delete", "Released", json!({}));
    let failed = job(1, Some(("Failed", "BackoffLimitExceeded")));
    let p = plan_volume(&VolumeInputs {
        pv: &released,
        provisioner_name: P,
        claim_alive: false,
        provisioning: false,
        jobs: vec![&failed],
        pods: vec![],
        retry_base: Duration::from_secs(10),
        now: "2026-01-01T00:00:04Z".parse().unwrap(),
    });
    assert_eq!(
        p.step,
        VolumeStep::Backoff {
            wait: Duration::from_secs(6)
        }
    );
    assert_eq!(p.notices[0].reason, "VolumeFailedDelete");
    assert!(
        p.notices[0].message.contains("the volume is kept"),
        "{}",
        p.notices[0].message
    );
    let second = job(2, Some(("Failed", "PodFailurePolicy")));
    let p = plan_volume(&VolumeInputs {
        pv: &released,
        provisioner_name: P,
        claim_alive: false,
        provisioning: false,
        jobs: vec![&failed, &second],
        pods: vec![],
        retry_base: Duration::from_secs(10),
        now: "2026-01-01T00:00:30Z".parse().unwrap(),
    });
    assert_eq!(
        p.step,
        VolumeStep::Start { attempt: 3 },
        "deprovisioning is retried even after a permanent code: the PV stays until its storage is gone"
    );
}

#[test]
fn a_recorded_success_is_never_run_again() {
    let marked = pv(
        "Delete",
        "Released",
        json!({"metadata": {"annotations": {ANN_DEPROVISIONED: "true"}}}),
    );
    assert_eq!(step(&marked, false, vec![]), VolumeStep::ReleaseFinalizer);
    let mut released = marked.clone();
    released.metadata.finalizers = Some(vec!["kubernetes.io/pv-protection".into()]);
    assert_eq!(step(&released, false, vec![]), VolumeStep::DeletePv);
}
