//! The volume state machine, transition by transition: what runs, and above all what never
//! runs (storage in use, a cleared or changed claimRef, Retain, a cache's word alone).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{Value, json};

use super::*;

const P: &str = "flex-provisioner.io/job";
const DELETED: &str = "2026-01-01T00:00:00Z";

fn recipe() -> crate::recipe::JobRecipe {
    serde_json::from_value(
        json!({"namespace": "cfg", "config": "cfg/c", "image": "img:1",
           "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": []}),
    )
    .unwrap()
}

fn pv(policy: &str, phase: &str, extra: Value) -> PersistentVolume {
    let mut v = json!({
        "metadata": {"name": "pvc-u1", "uid": "pv-uid", "resourceVersion": "7",
                     "annotations": {"pv.kubernetes.io/provisioned-by": P},
                     "finalizers": ["flex-provisioner.io/deprovision", "kubernetes.io/pv-protection"]},
        "spec": {"persistentVolumeReclaimPolicy": policy, "claimRef": {"namespace": "a", "name": "c", "uid": "u1"}},
        "status": {"phase": phase}
    });
    merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut Value, b: &Value) {
    if let (Value::Object(a), Value::Object(b)) = (a, b) {
        for (k, v) in b {
            match a.get_mut(k) {
                Some(x) if x.is_object() && v.is_object() => merge(x, v),
                _ => {
                    a.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

/// The claim `a/c` with this uid, bound to `volume` (empty: not bound).
fn claim(uid: &str, volume: &str) -> PersistentVolumeClaim {
    serde_json::from_value(
        json!({"metadata": {"name": "c", "namespace": "a", "uid": uid},
        "spec": {"volumeName": volume}}),
    )
    .unwrap()
}

fn job(attempt: u32, condition: Option<(&str, &str)>) -> Job {
    let mut status = json!({});
    if let Some((t, reason)) = condition {
        status = json!({"conditions": [{"type": t, "status": "True", "reason": reason, "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    }
    serde_json::from_value(json!({"metadata": {"name": format!("deprovision-pvc-u1-{attempt}"), "uid": format!("j{attempt}"),
        "labels": {"flex-provisioner.io/attempt": attempt.to_string()},
        "annotations": {ANN_VOLUME_UID: "pv-uid"}}, "status": status}))
    .unwrap()
}

/// A Job of an earlier PV that had the same name.
fn old_job(attempt: u32) -> Job {
    let mut j = job(attempt, Some(("Complete", "CompletionsReached")));
    j.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANN_VOLUME_UID.into(), "earlier-pv".into());
    j
}

/// One row: the PV, the claim at its claimRef, whether the API server said so, the Jobs.
struct Case<'a> {
    name: &'a str,
    pv: PersistentVolume,
    claim: Option<PersistentVolumeClaim>,
    confirmed: bool,
    jobs: Vec<Job>,
    state: VolumeState,
    step: Expect,
}

#[derive(Debug)]
enum Expect {
    Ignore,
    Confirm,
    Wait(u64),
    Job(u32),
    DropFinalizer,
    Finish,
    Delete,
    /// Deleted under the version the decision saw.
    DeleteAt,
    ReadRecord,
}

fn run(c: &Case<'_>, now: &str, provisioning: bool) -> Decision<VolumePlan> {
    // The record the controller wrote for this PV when it verified it.
    let record = crate::record::build_record(&c.pv, &recipe(), None, "{}");
    plan_volume(&VolumeInputs {
        pv: &c.pv,
        record: record.as_ref(),
        provision_jobs: vec![],
        provisioner_name: P,
        claim: c.claim.as_ref(),
        named_by_claim: false,
        claim_confirmed: c.confirmed,
        record_read: c.confirmed,
        provisioning,
        jobs: c.jobs.iter().collect(),
        pods: vec![],
        retry_base: Duration::from_secs(10),
        job_ttl_seconds: 60,
        now: now.parse().unwrap(),
        node_exists: &|_| true,
    })
}

/// What the controller hands the planner once it read the claim and the record from the API
/// server: no Jobs, the claim at the claimRef gone.
fn read_inputs<'a>(
    pv: &'a PersistentVolume,
    record: Option<&'a ConfigMap>,
    named_by_claim: bool,
) -> VolumeInputs<'a> {
    VolumeInputs {
        pv,
        record,
        provision_jobs: vec![],
        provisioner_name: P,
        claim: None,
        named_by_claim,
        claim_confirmed: true,
        record_read: true,
        provisioning: false,
        jobs: vec![],
        pods: vec![],
        retry_base: Duration::from_secs(10),
        job_ttl_seconds: 60,
        now: "2026-01-01T00:00:04Z".parse().unwrap(),
        node_exists: &|_| true,
    }
}

fn check(c: &Case<'_>, decided: &Decision<VolumePlan>) {
    let p = match (&c.step, decided) {
        (Expect::Confirm, Err(Ask::Claim)) | (Expect::ReadRecord, Err(Ask::Record)) => return,
        (_, Ok(p)) => p,
        (_, Err(ask)) => panic!("{}: expected {:?}, asked for {ask:?}", c.name, c.step),
    };
    assert_eq!(p.state, c.state, "{}: state", c.name);
    let ok = match (&c.step, &p.step) {
        (Expect::Ignore, VolumeStep::Ignore) => true,
        (Expect::Wait(s), VolumeStep::Wait(d)) => d.as_secs() == *s,
        (Expect::Job(n), VolumeStep::CreateJob(j)) => {
            attempt_of(j) == *n && j.metadata.namespace.as_deref() == Some("cfg")
        }
        (Expect::DropFinalizer, VolumeStep::KeepStorage { patch, .. }) => {
            patch["metadata"]["finalizers"] == json!(["kubernetes.io/pv-protection"])
                && patch["metadata"]["resourceVersion"] == "7"
        }
        (Expect::Finish, VolumeStep::Finish(patch)) => {
            patch["metadata"]["finalizers"] == json!(["kubernetes.io/pv-protection"])
                && patch["metadata"]["resourceVersion"] == "7"
                && patch["metadata"]["annotations"][ANN_DEPROVISIONED] == "true"
        }
        (
            Expect::Delete,
            VolumeStep::Delete {
                uid,
                resource_version: None,
            },
        ) => uid == "pv-uid",
        (
            Expect::DeleteAt,
            VolumeStep::Delete {
                uid,
                resource_version: Some(rv),
            },
        ) => uid == "pv-uid" && rv == "7",
        _ => false,
    };
    assert!(ok, "{}: expected {:?}, got {:?}", c.name, c.step, p.step);
}

fn deleted() -> Value {
    json!({"metadata": {"deletionTimestamp": DELETED}})
}

fn marked(extra: Value) -> Value {
    let mut v = json!({"metadata": {"annotations": {ANN_DEPROVISIONED: "true"}}});
    merge(&mut v, &extra);
    v
}

#[test]
fn every_transition_of_the_volume_state_machine() {
    use Expect::*;
    use VolumeState as S;
    let bound = || claim("u1", "pvc-u1");
    let cases = vec![
        Case {
            name: "another provisioner's PV",
            pv: pv(
                "Delete",
                "Released",
                json!({"metadata": {"annotations": {"pv.kubernetes.io/provisioned-by": "example.com/x"}}}),
            ),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::NotOurs,
            step: Ignore,
        },
        Case {
            name: "bound to its live claim",
            pv: pv("Delete", "Bound", json!({})),
            claim: Some(bound()),
            confirmed: false,
            jobs: vec![],
            state: S::InUse,
            step: Ignore,
        },
        Case {
            name: "deleted while bound (confirmed)",
            pv: pv("Delete", "Bound", deleted()),
            claim: Some(bound()),
            confirmed: true,
            jobs: vec![],
            state: S::InUse,
            step: Ignore,
        },
        Case {
            name: "deleted while bound, cache only: ask first",
            pv: pv("Delete", "Bound", deleted()),
            claim: Some(bound()),
            confirmed: false,
            jobs: vec![],
            state: S::DeletedDelete,
            step: Confirm,
        },
        Case {
            name: "new PV of a pending claim",
            pv: pv("Delete", "Pending", json!({})),
            claim: Some(claim("u1", "")),
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "Available: claim deleted before binding",
            pv: pv("Delete", "Available", json!({})),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "claimRef cleared by an admin",
            pv: pv("Delete", "Available", json!({"spec": {"claimRef": null}})),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "claimRef changed to another live claim",
            pv: pv(
                "Delete",
                "Bound",
                json!({"spec": {"claimRef": {"uid": "u2"}}}),
            ),
            claim: Some(claim("u2", "other")),
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "claimRef without uid (pre-bound by name)",
            pv: pv(
                "Delete",
                "Released",
                json!({"spec": {"claimRef": {"uid": null}}}),
            ),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "Failed phase",
            pv: pv("Delete", "Failed", json!({})),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "Retain, released",
            pv: pv("Retain", "Released", json!({})),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "Retain, deleted",
            pv: pv("Retain", "Released", deleted()),
            claim: None,
            confirmed: false,
            jobs: vec![],
            state: S::DeletedRetain,
            step: DropFinalizer,
        },
        Case {
            name: "Retain, deleted, finalizer gone",
            pv: pv(
                "Retain",
                "Released",
                json!({"metadata": {"deletionTimestamp": DELETED, "finalizers": ["kubernetes.io/pv-protection"]}}),
            ),
            claim: None,
            confirmed: false,
            jobs: vec![],
            state: S::DeletedRetain,
            step: Ignore,
        },
        Case {
            name: "released by Kubernetes, cache says gone: deleted under its version, no read",
            pv: pv("Delete", "Released", json!({})),
            claim: None,
            confirmed: false,
            jobs: vec![],
            state: S::Released,
            step: DeleteAt,
        },
        Case {
            name: "released without our finalizer (an image's PV not verified yet): not deleted first",
            pv: pv(
                "Delete",
                "Released",
                json!({"metadata": {"finalizers": ["kubernetes.io/pv-protection"]}}),
            ),
            claim: None,
            confirmed: false,
            jobs: vec![],
            state: S::Released,
            step: Confirm,
        },
        Case {
            name: "released and being deleted: only the record is read",
            pv: pv("Delete", "Released", deleted()),
            claim: None,
            confirmed: false,
            jobs: vec![],
            state: S::DeletedDelete,
            step: ReadRecord,
        },
        Case {
            name: "deleted but not released (Available), cache only: the claim is asked about",
            pv: pv("Delete", "Available", deleted()),
            claim: None,
            confirmed: false,
            jobs: vec![],
            state: S::DeletedDelete,
            step: Confirm,
        },
        Case {
            name: "released, cache says alive: wait for the cache, destroy nothing",
            pv: pv("Delete", "Released", json!({})),
            claim: Some(claim("u1", "")),
            confirmed: false,
            jobs: vec![],
            state: S::Released,
            step: Wait(2),
        },
        Case {
            name: "released, confirmed gone",
            pv: pv("Delete", "Released", json!({})),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::Released,
            step: DeleteAt,
        },
        Case {
            name: "released, being deleted, confirmed gone",
            pv: pv("Delete", "Released", deleted()),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::DeletedDelete,
            step: Job(1),
        },
        Case {
            name: "released, claim re-created under the same name",
            pv: pv("Delete", "Released", deleted()),
            claim: Some(claim("u9", "")),
            confirmed: true,
            jobs: vec![],
            state: S::DeletedDelete,
            step: Job(1),
        },
        Case {
            name: "released by a stale phase, claim confirmed alive",
            pv: pv("Delete", "Released", json!({})),
            claim: Some(claim("u1", "")),
            confirmed: true,
            jobs: vec![],
            state: S::Idle,
            step: Ignore,
        },
        Case {
            name: "deleted, not bound (a wrong PV), confirmed",
            pv: pv("Delete", "Available", deleted()),
            claim: Some(claim("u1", "")),
            confirmed: true,
            jobs: vec![],
            state: S::DeletedDelete,
            step: Job(1),
        },
        Case {
            name: "deleted, our finalizer removed by someone",
            pv: pv(
                "Delete",
                "Released",
                json!({"metadata": {"deletionTimestamp": DELETED, "finalizers": []}}),
            ),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::DeletedDelete,
            step: Ignore,
        },
        Case {
            name: "deprovision Job running",
            pv: pv("Delete", "Released", json!({})),
            claim: None,
            confirmed: false,
            jobs: vec![job(1, None)],
            state: S::Released,
            step: Wait(30),
        },
        Case {
            name: "deprovision Job succeeded",
            pv: pv("Delete", "Released", json!({})),
            claim: None,
            confirmed: false,
            jobs: vec![job(1, Some(("Complete", "CompletionsReached")))],
            state: S::Deprovisioned,
            step: Finish,
        },
        Case {
            name: "deprovision failed, backoff",
            pv: pv("Delete", "Released", json!({})),
            claim: None,
            confirmed: false,
            jobs: vec![job(1, Some(("Failed", "BackoffLimitExceeded")))],
            state: S::Released,
            step: Wait(6),
        },
        Case {
            name: "an earlier PV's success is not ours",
            pv: pv("Delete", "Released", deleted()),
            claim: None,
            confirmed: true,
            jobs: vec![old_job(1), old_job(2)],
            state: S::DeletedDelete,
            step: Job(3),
        },
        Case {
            name: "deleted after its claimRef was cleared: kept",
            pv: pv(
                "Delete",
                "Available",
                json!({"metadata": {"deletionTimestamp": DELETED}, "spec": {"claimRef": null}}),
            ),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::DeletedRetain,
            step: DropFinalizer,
        },
        Case {
            name: "an earlier PV's Job still runs: wait",
            pv: pv("Delete", "Released", deleted()),
            claim: None,
            confirmed: true,
            jobs: vec![{
                let mut j = job(1, None);
                j.metadata.annotations = None;
                j
            }],
            state: S::DeletedDelete,
            step: Wait(30),
        },
        Case {
            name: "storage gone: mark it and drop the finalizer",
            pv: pv("Delete", "Released", deleted()),
            claim: None,
            confirmed: false,
            jobs: vec![job(1, Some(("Complete", "CompletionsReached")))],
            state: S::Deprovisioned,
            step: Finish,
        },
        Case {
            name: "storage gone, finalizer dropped: delete the PV",
            pv: pv(
                "Delete",
                "Released",
                json!({"metadata": {"finalizers": ["kubernetes.io/pv-protection"]}}),
            ),
            claim: None,
            confirmed: false,
            jobs: vec![job(1, Some(("Complete", "CompletionsReached")))],
            state: S::Deprovisioned,
            step: Delete,
        },
        Case {
            name: "storage gone, PV being deleted",
            pv: pv(
                "Delete",
                "Released",
                json!({"metadata": {"deletionTimestamp": DELETED, "finalizers": []}}),
            ),
            claim: None,
            confirmed: false,
            jobs: vec![job(1, Some(("Complete", "CompletionsReached")))],
            state: S::Deprovisioned,
            step: Ignore,
        },
        Case {
            name: "a forged deprovisioned mark, no Job: deprovisioned as any released volume",
            pv: pv("Delete", "Released", marked(deleted())),
            claim: None,
            confirmed: true,
            jobs: vec![],
            state: S::DeletedDelete,
            step: Job(1),
        },
        Case {
            name: "a forged deprovisioned mark on a volume in use: nothing",
            pv: pv("Delete", "Bound", marked(json!({}))),
            claim: Some(claim("u1", "pvc-u1")),
            confirmed: false,
            jobs: vec![],
            state: S::InUse,
            step: Ignore,
        },
        Case {
            name: "a forged mark on a deleted Retain volume: the storage is kept",
            pv: pv("Retain", "Released", marked(deleted())),
            claim: None,
            confirmed: false,
            jobs: vec![],
            state: S::DeletedRetain,
            step: DropFinalizer,
        },
    ];
    for c in &cases {
        check(c, &run(c, "2026-01-01T00:00:04Z", false));
    }
}

#[test]
fn a_provisioning_pod_still_at_work_is_waited_for() {
    let c = Case {
        name: "provisioning",
        pv: pv("Delete", "Released", deleted()),
        claim: None,
        confirmed: true,
        jobs: vec![],
        state: VolumeState::DeletedDelete,
        step: Expect::Wait(30),
    };
    check(&c, &run(&c, "2026-01-01T00:00:04Z", true));
}

#[test]
fn failures_are_reported_and_retried_after_a_growing_delay() {
    let failed = job(1, Some(("Failed", "BackoffLimitExceeded")));
    let second = job(2, Some(("Failed", "PodFailurePolicy")));
    let mut c = Case {
        name: "first failure",
        pv: pv("Delete", "Released", json!({})),
        claim: None,
        confirmed: false,
        jobs: vec![failed],
        state: VolumeState::Released,
        step: Expect::Wait(6),
    };
    let p = run(&c, "2026-01-01T00:00:04Z", false);
    check(&c, &p);
    let p = p.unwrap();
    assert_eq!(p.notices[0].reason, "VolumeFailedDelete");
    assert_eq!(p.notices[0].kind, crate::plan::NoticeKind::DeleteFailed);
    assert!(p.notices[0].message.contains("the volume is kept"));
    c.jobs.push(second);
    c.name = "due retry, cache only";
    c.step = Expect::Confirm;
    check(&c, &run(&c, "2026-01-01T00:00:30Z", false));
    c.name = "due retry, confirmed: retried even after a permanent code";
    c.confirmed = true;
    c.step = Expect::Job(3);
    check(&c, &run(&c, "2026-01-01T00:00:30Z", false));
}

/// The plan, where the planner has what it needs.
fn decided(i: &VolumeInputs<'_>) -> VolumePlan {
    plan_volume(i).expect("decided without asking")
}

#[test]
fn a_volume_without_its_record_is_kept_and_reported() {
    let released = pv("Delete", "Released", deleted());
    // A decoy: every annotation of a real volume copied, but another uid.
    let real = pv("Delete", "Bound", json!({"metadata": {"uid": "real-uid"}}));
    let theirs = crate::record::build_record(&real, &recipe(), None, "{}").unwrap();
    for record in [None, Some(&theirs)] {
        let p = decided(&read_inputs(&released, record, false));
        assert_eq!(p.step, VolumeStep::Ignore, "{record:?}");
        assert_eq!(p.notices.len(), 1);
        assert!(
            p.notices[0].message.contains("nothing is run"),
            "{}",
            p.notices[0].message
        );
    }
}

/// A succeeded `pv-creator: controller` provisioning Job of claim u1 (a Delete class).
fn provision_job(marked: bool) -> Job {
    let template = json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}).to_string();
    let mut annotations = json!({});
    if marked {
        annotations = json!({crate::names::ANN_PV_CREATED: "true"});
    }
    serde_json::from_value(json!({
        "metadata": {"name": "provision-u1", "namespace": "cfg", "uid": "pj",
                     "labels": {"flex-provisioner.io/action": "provision"}, "annotations": annotations},
        "spec": {"template": {"spec": {"containers": [{"name": "p", "env": [
            {"name": "PV_CREATOR", "value": "controller"}, {"name": "PV_TEMPLATE", "value": template}]}]}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]}
    }))
    .unwrap()
}

#[test]
fn a_kept_volume_marks_its_provisioning_job_so_it_is_never_taken_for_an_orphan() {
    // A Delete class's volume an admin switched to Retain and deleted, while the Job that
    // made it still exists: were the Job not marked, it would look like storage made for a
    // claim deleted mid-provision, and be re-created and deprovisioned.
    let kept = pv("Retain", "Released", deleted());
    for (job, want) in [
        (
            provision_job(false),
            vec![("cfg".to_string(), "provision-u1".to_string())],
        ),
        (provision_job(true), vec![]),
    ] {
        let p = decided(&VolumeInputs {
            pv: &kept,
            record: None,
            provision_jobs: vec![&job],
            provisioner_name: P,
            claim: None,
            named_by_claim: false,
            claim_confirmed: false,
            record_read: false,
            provisioning: false,
            jobs: vec![],
            pods: vec![],
            retry_base: Duration::from_secs(10),
            job_ttl_seconds: 60,
            now: "2026-01-01T00:00:04Z".parse().unwrap(),
            node_exists: &|_| true,
        });
        match p.step {
            VolumeStep::KeepStorage { mark_jobs, patch } => {
                assert_eq!(mark_jobs, want);
                assert_eq!(
                    patch["metadata"]["finalizers"],
                    json!(["kubernetes.io/pv-protection"])
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

/// A claimRef re-pointed to another claim (keeping the old uid, or with a uid of zeros), or
/// a volume a claim still names in spec.volumeName: whether Kubernetes released it or
/// someone deleted it, it is an admin's hand-over. Nothing runs, nothing is deleted, our
/// finalizer stays, and the PV gets a warning.
#[test]
fn a_re_pointed_claim_ref_or_a_claim_naming_the_volume_destroys_nothing() {
    let repointed = json!({"spec": {"claimRef": {"namespace": "b", "name": "other", "uid": "u1"}}});
    let zeroed = json!({"spec": {"claimRef": {"uid": "00000000-0000-0000-0000-000000000000"}}});
    let other_uid = json!({"spec": {"claimRef": {"namespace": "b", "name": "other", "uid": "u2"}}});
    let mut deleted_zeroed = zeroed.clone();
    merge(&mut deleted_zeroed, &deleted());
    let cases: Vec<(&str, PersistentVolume, bool)> = vec![
        (
            "re-pointed, old uid, the old claim still names it",
            pv("Delete", "Released", repointed.clone()),
            true,
        ),
        ("zeroed uid", pv("Delete", "Released", zeroed), false),
        (
            "handed to another claim's uid",
            pv("Delete", "Released", other_uid),
            false,
        ),
        (
            "zeroed uid, then deleted",
            pv("Delete", "Released", deleted_zeroed),
            false,
        ),
        (
            "deleted while a claim names it",
            pv("Delete", "Bound", deleted()),
            true,
        ),
    ];
    for (name, volume, named) in cases {
        let record = crate::record::build_record(&volume, &recipe(), None, "{}");
        for confirmed in [false, true] {
            let p = decided(&VolumeInputs {
                claim_confirmed: confirmed,
                record_read: confirmed,
                ..read_inputs(&volume, record.as_ref(), named)
            });
            assert_eq!(p.state, VolumeState::HandedOver, "{name}");
            assert_eq!(p.step, VolumeStep::Ignore, "{name}");
            assert_eq!(p.notices.len(), 1, "{name}");
            assert!(p.notices[0].warning, "{name}");
            assert!(
                p.notices[0].message.contains("hand-over"),
                "{name}: {}",
                p.notices[0].message
            );
        }
    }
    // The claim it was made for, released and gone, nobody naming it: deprovisioned.
    let released = pv("Delete", "Released", json!({}));
    let record = crate::record::build_record(&released, &recipe(), None, "{}");
    let p = decided(&read_inputs(&released, record.as_ref(), false));
    assert_eq!(p.state, VolumeState::Released);
}

#[test]
fn a_claim_holds_a_volume_only_where_kubernetes_could_bind_it_or_it_re_took_the_name() {
    let pv_with = |claim_ref: serde_json::Value| -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pvc-u1"},
            "spec": {"claimRef": claim_ref}}))
        .unwrap()
    };
    let claim = |ns: &str, name: &str, uid: &str, volume: &str| -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"namespace": ns, "name": name, "uid": uid},
            "spec": {"volumeName": volume}}),
        )
        .unwrap()
    };
    let made_for = json!({"namespace": "a", "name": "data", "uid": "u1"});
    let cases = [
        (
            "the claim itself",
            made_for.clone(),
            claim("a", "data", "u1", "pvc-u1"),
            false,
        ),
        (
            "re-created under its name",
            made_for.clone(),
            claim("a", "data", "u2", "pvc-u1"),
            true,
        ),
        (
            "another user's pending claim",
            made_for.clone(),
            claim("b", "x", "u3", "pvc-u1"),
            false,
        ),
        (
            "same name, other namespace",
            made_for.clone(),
            claim("b", "data", "u2", "pvc-u1"),
            false,
        ),
        (
            "naming another volume",
            made_for.clone(),
            claim("a", "data", "u2", "pvc-u9"),
            false,
        ),
        (
            "claimRef cleared",
            serde_json::Value::Null,
            claim("b", "x", "u3", "pvc-u1"),
            true,
        ),
        (
            "uid-less claimRef, its claim",
            json!({"namespace": "b", "name": "x"}),
            claim("b", "x", "u3", "pvc-u1"),
            true,
        ),
        (
            "uid-less claimRef, another claim",
            json!({"namespace": "b", "name": "x"}),
            claim("c", "y", "u4", "pvc-u1"),
            false,
        ),
    ];
    for (what, claim_ref, c, holds) in cases {
        assert_eq!(claim_holds(&pv_with(claim_ref), &c), holds, "{what}");
    }
}

/// A node-local volume whose node is gone: no deprovision Job (its pod could never be
/// scheduled, and each attempt would wait out its deadline, for ever), a warning naming
/// the node, and another look later in case the node comes back.
#[test]
fn a_volume_on_a_node_that_is_gone_runs_nothing_and_says_so() {
    let volume = pv("Delete", "Released", deleted());
    let mut on_node = recipe();
    on_node.node = Some("worker-9".into());
    let record = crate::record::build_record(&volume, &on_node, None, "{}");
    let gone = decided(&VolumeInputs {
        node_exists: &|n| n != "worker-9",
        ..read_inputs(&volume, record.as_ref(), false)
    });
    assert_eq!(gone.step, VolumeStep::Wait(NODE_GONE_RECHECK));
    assert_eq!(gone.notices.len(), 1);
    assert!(gone.notices[0].warning);
    assert!(
        gone.notices[0]
            .message
            .contains("node worker-9, which no longer exists"),
        "{}",
        gone.notices[0].message
    );
    let back = decided(&read_inputs(&volume, record.as_ref(), false));
    assert!(
        matches!(back.step, VolumeStep::CreateJob(_)),
        "{:?}",
        back.step
    );
}
