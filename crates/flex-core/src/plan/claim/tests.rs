//! The claim planner, case by case: every branch from objects alone.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::*;
use crate::config::{ClassConfig, StorageClassInfo, Verdict, parse_config_map};
use crate::inputs::inputs_hash;

const P: &str = "flex-provisioner.io/job";
const UID: &str = "u-1";

fn config(extra: Value, binding: &str) -> ClassConfig {
    let mut data = json!({"image": "img:1", "dir": "/v/{{claim.name}}"});
    if let (Value::Object(d), Value::Object(e)) = (&mut data, extra) {
        d.extend(e);
    }
    let cm = serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ns",
        "labels": {"type": "provisioner-config", "storage-class": "silver"}}, "data": data}))
    .unwrap();
    let Verdict::Checked {
        config: Some(p), ..
    } = parse_config_map(&cm, P)
    else {
        panic!("valid config")
    };
    let sc = StorageClassInfo {
        name: "silver".into(),
        provisioner: P.into(),
        parameters: BTreeMap::new(),
        reclaim_policy: "Delete".into(),
        mount_options: vec![],
        volume_binding_mode: binding.into(),
    };
    ClassConfig::new(*p, sc, P).unwrap()
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": "data", "namespace": "a", "uid": UID,
                     "annotations": {"volume.kubernetes.io/storage-provisioner": P}},
        "spec": {"storageClassName": "silver", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}
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

fn job(attempt: u32, status: Value, inputs: &str) -> Job {
    serde_json::from_value(json!({"metadata": {"name": format!("provision-{UID}-{attempt}"), "uid": format!("j{attempt}"),
        "namespace": "flex-provisioner-config",
        "labels": {"flex-provisioner.io/attempt": attempt.to_string()}, "annotations": {ANN_INPUTS: inputs},
        "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": status}))
    .unwrap()
}

fn failed(reason: &str, at: &str) -> Value {
    json!({"conditions": [{"type": "Failed", "status": "True", "reason": reason, "message": "m", "lastTransitionTime": at}]})
}

fn complete(at: &str) -> Value {
    json!({"conditions": [{"type": "Complete", "status": "True"}], "completionTime": at})
}

fn pod(job_uid: &str, status: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p", "uid": format!("pod-{job_uid}"),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job_uid}]}, "status": status}))
    .unwrap()
}

fn pv(claim_uid: &str) -> PersistentVolume {
    serde_json::from_value(json!({"metadata": {"name": format!("pvc-{UID}"), "uid": "pv-1",
                                              "creationTimestamp": "2026-01-01T00:00:03Z"},
        "spec": {"claimRef": {"namespace": "a", "name": "data", "uid": claim_uid}, "storageClassName": "silver",
                 "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                 "nfs": {"server": "nfs.example", "path": "/exports/data"}}}))
    .unwrap()
}

struct Case<'a> {
    claim: PersistentVolumeClaim,
    config: ConfigState<'a>,
    jobs: Vec<Job>,
    pods: Vec<Pod>,
    pods_confirmed: bool,
    pv: Option<PersistentVolume>,
    pv_absence_confirmed: bool,
    active: usize,
    hash: &'a str,
    now: &'a str,
    source: Option<crate::source::SourceData>,
    created: Option<u32>,
    class_provisioner: Option<&'a str>,
    node: Option<NodeInfo>,
    node_absence_confirmed: bool,
}

fn case(config: &ClassConfig) -> Case<'_> {
    Case {
        claim: claim(json!({})),
        config: ConfigState::Ready(config),
        jobs: vec![],
        pods: vec![],
        pods_confirmed: false,
        pv: None,
        pv_absence_confirmed: true,
        active: 0,
        hash: "h1",
        now: "2026-01-01T00:00:05Z",
        source: None,
        created: None,
        class_provisioner: Some(P),
        node: None,
        node_absence_confirmed: false,
    }
}

/// The plan as the controller makes it: when the planner asks for what an attempt is made
/// from, it is prepared (with the case's digest) and the claim planned again.
fn run(c: &Case<'_>) -> Plan {
    match decide(c) {
        Ok(p) => p,
        Err(ask) => panic!("asked for {ask:?}"),
    }
}

/// What the planner asks the controller to read, where it asks.
fn asked(c: &Case<'_>) -> Ask {
    match decide(c) {
        Ok(p) => panic!("decided without asking: {:?}", p.step),
        Err(ask) => ask,
    }
}

fn decide(c: &Case<'_>) -> Decision<Plan> {
    let first = plan_unprepared(c, None);
    if first != Err(Ask::Prepare) {
        return first;
    }
    let ConfigState::Ready(config) = c.config else {
        panic!("asked to prepare without a configuration")
    };
    let request = ClaimRequest::from_claim(&c.claim).expect("asked to prepare a bad claim");
    let node = c.node.as_ref();
    let mut prepared = Prepared::here(config, &request, node, P, c.source.clone());
    prepared.inputs_hash = c.hash.to_owned();
    let again = plan_unprepared(c, Some(&prepared));
    assert_ne!(again, Err(Ask::Prepare), "asked twice");
    again
}

fn plan_unprepared(c: &Case<'_>, prepared: Option<&Prepared>) -> Decision<Plan> {
    plan_claim(&ClaimInputs {
        prepared,
        ..inputs_of(c)
    })
}

fn inputs_of<'a>(c: &'a Case<'_>) -> ClaimInputs<'a> {
    ClaimInputs {
        claim: &c.claim,
        provisioner_name: P,
        class_provisioner: c.class_provisioner,
        config: c.config,
        jobs: c.jobs.iter().collect(),
        pods: c.pods.iter().collect(),
        pods_confirmed: c.pods_confirmed,
        pv: c.pv.as_ref(),
        pv_absence_confirmed: c.pv_absence_confirmed,
        node: c.node.as_ref(),
        node_absence_confirmed: c.node_absence_confirmed,
        active_jobs_of_class: c.active,
        prepared: None,
        retry_base: Duration::from_secs(10),
        job_ttl_seconds: 600,
        now: c.now.parse().unwrap(),
        created_attempt: c.created,
        not_starting: vec![],
    }
}

/// The claim's annotations patched under its resourceVersion, with the inputs given up on.
fn gives_up(c: &Case<'_>, attempt: u32, hash: &str) -> Step {
    let rv = &c.claim.metadata.resource_version;
    let annotations = json!({ANN_GAVE_UP: hash, ANN_ATTEMPT: attempt.to_string()});
    let patch = json!({"metadata": {"annotations": annotations, "resourceVersion": rv}});
    Step::PatchClaim {
        patch,
        recheck: None,
    }
}

/// The claim's annotations patched under its resourceVersion with a failed attempt's number,
/// then a look after `wait`.
fn records(c: &Case<'_>, attempt: u32, wait: Duration) -> Step {
    let rv = &c.claim.metadata.resource_version;
    let annotations = json!({ANN_ATTEMPT: attempt.to_string()});
    let patch = json!({"metadata": {"annotations": annotations, "resourceVersion": rv}});
    Step::PatchClaim {
        patch,
        recheck: Some(wait),
    }
}

fn starts(p: &Plan) -> Option<u32> {
    match &p.step {
        Step::CreateJob { attempt, .. } => Some(*attempt),
        _ => None,
    }
}

#[test]
fn claims_that_are_not_ours_or_not_pending_are_ignored() {
    let cfg = config(json!({}), "Immediate");
    for extra in [
        json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-provisioner": "example.com/other"}}}),
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        json!({"spec": {"volumeName": "someone-elses"}, "status": {"phase": "Bound"}}),
        json!({"status": {"phase": "Lost"}}),
    ] {
        let c = Case {
            claim: claim(extra.clone()),
            ..case(&cfg)
        };
        assert_eq!(run(&c).step, ON_CHANGE, "{extra}");
    }
    let mut beta = claim(
        json!({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-provisioner": P}}}),
    );
    beta.metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove("volume.kubernetes.io/storage-provisioner");
    assert_eq!(
        starts(&run(&Case {
            claim: beta,
            ..case(&cfg)
        })),
        Some(1),
        "the beta annotation counts too"
    );
}

/// The claim's author writes its annotations: naming this provisioner on a claim whose class
/// is another provisioner's, or that has no class we know, makes nothing of ours.
#[test]
fn a_claim_is_ours_by_its_class_never_by_its_own_annotation() {
    let cfg = config(json!({}), "Immediate");
    for class in [Some("example.com/other"), None] {
        let c = Case {
            class_provisioner: class,
            ..case(&cfg)
        };
        assert_eq!(run(&c).step, ON_CHANGE, "{class:?}");
    }
    assert!(
        starts(&run(&case(&cfg))).is_some(),
        "our class, handed over"
    );
}

#[test]
fn a_fresh_claim_starts_attempt_one() {
    let cfg = config(json!({}), "Immediate");
    let p = run(&case(&cfg));
    assert_eq!(starts(&p), Some(1));
    let Step::CreateJob { job, started, .. } = p.step else {
        unreachable!()
    };
    assert_eq!(job.metadata.name.as_deref(), Some("provision-u-1"));
    // Said once the Job is created: the sig-storage library's reason, our attempt and Job.
    assert_eq!((started.reason, started.warning), ("Provisioning", false));
    assert!(
        started
            .message
            .contains("(attempt 1, Job ns/provision-u-1)"),
        "{}",
        started.message
    );
    let env = |name| crate::recipe::env_of(&job, name).unwrap();
    assert_eq!(env("PARAMETERS"), r#"{"dir":"/v/data"}"#);
    let template: Value = serde_json::from_str(&env("PV_TEMPLATE")).unwrap();
    assert_eq!(template["metadata"]["name"], "pvc-u-1");
    let annotations = job.metadata.annotations.unwrap();
    assert_eq!(annotations[ANN_INPUTS], "h1", "the prepared digest");
    assert_eq!(job.spec.unwrap().ttl_seconds_after_finished, Some(600));
}

/// A running Job whose pod cannot even be created says why, with the Job controller's own
/// words, on the claim; a Job with no such event says nothing.
#[test]
fn a_job_that_cannot_create_its_pod_says_why() {
    let cfg = config(json!({}), "Immediate");
    let c = Case {
        jobs: vec![job(1, json!({}), "h1")],
        ..case(&cfg)
    };
    let quiet = run(&c);
    assert_eq!(quiet.step, Step::Running { attempt: 1 });
    assert!(quiet.notices.is_empty(), "{:?}", quiet.notices);
    let why = "pods \"x\" is forbidden: exceeded quota";
    let p = plan_claim(&ClaimInputs {
        not_starting: vec![(&c.jobs[0], why)],
        ..inputs_of(&c)
    })
    .unwrap();
    assert_eq!(p.step, Step::Running { attempt: 1 });
    let [n] = p.notices.as_slice() else {
        panic!("{:?}", p.notices)
    };
    assert_eq!((n.reason, n.warning), ("ProvisionerPodNotStarting", true));
    assert!(
        n.message
            .starts_with("attempt 1: the Job provision-u-1-1 cannot create its pod: pods"),
        "{}",
        n.message
    );
}

/// Rendering and the digest are asked for only when an attempt is started, retried or given
/// up on: a bound claim and a running attempt cost neither, however often they are planned.
#[test]
fn only_a_decision_about_an_attempt_asks_for_its_inputs() {
    let cfg = config(json!({}), "Immediate");
    let bound = Case {
        claim: claim(json!({"spec": {"volumeName": "pvc-u-1"}, "status": {"phase": "Bound"}})),
        jobs: vec![succeeded_with_record("/v/data")],
        pv: Some(pv(UID)),
        ..case(&cfg)
    };
    let running = Case {
        jobs: vec![job(1, json!({"active": 1}), "h1")],
        ..case(&cfg)
    };
    let given_up = Case {
        claim: claim(json!({"metadata": {"annotations": {ANN_GAVE_UP: "h1"}}})),
        ..case(&cfg)
    };
    // Gave up on older inputs; the attempt made since from the new ones runs.
    let running_after_giving_up = Case {
        claim: claim(json!({"metadata": {"annotations": {ANN_GAVE_UP: "h0"}}})),
        jobs: vec![job(2, json!({"active": 1}), "h1")],
        ..case(&cfg)
    };
    for (what, c, asks) in [
        ("a bound claim", &bound, false),
        ("a running attempt", &running, false),
        (
            "a running attempt after giving up",
            &running_after_giving_up,
            false,
        ),
        ("a fresh claim", &case(&cfg), true),
        (
            "a failed attempt",
            &Case {
                jobs: vec![job(
                    1,
                    failed("BackoffLimitExceeded", "2026-01-01T00:00:01Z"),
                    "h1",
                )],
                ..case(&cfg)
            },
            true,
        ),
        ("a claim that gave up", &given_up, true),
    ] {
        let decided = plan_unprepared(c, None);
        assert_eq!(decided == Err(Ask::Prepare), asks, "{what}: {decided:?}");
    }
    assert!(matches!(run(&bound).step, Step::Provisioned { .. }));
    assert_eq!(run(&given_up).step, BLOCKED, "the digest matched");
}

#[test]
fn unservable_claims_and_configurations_block_with_a_reason() {
    let cfg = config(json!({}), "Immediate");
    let c = Case {
        claim: claim(json!({"spec": {"selector": {"matchLabels": {"a": "b"}}}})),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices[0].message.contains("spec.selector"),
        "{:?}",
        p.notices
    );
    let c = Case {
        config: ConfigState::Unusable("no ConfigMap for silver"),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert_eq!(p.notices[0].reason, reasons::CONFIG_INVALID);
    // A template that needs a label the claim lacks.
    let strict = config(json!({"team": "{{claim.labels.team}}"}), "Immediate");
    let p = run(&case(&strict));
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices[0].message.contains("claim.labels.team"),
        "{:?}",
        p.notices
    );
}

#[test]
fn an_invalid_configuration_blocks_the_class_with_its_problem() {
    let cfg = config(json!({}), "Immediate");
    let c = Case {
        config: ConfigState::Unusable("ConfigMap ns/c is invalid: bad key"),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert_eq!(p.notices[0].reason, reasons::CONFIG_INVALID);
    assert!(p.notices[0].message.contains("bad key"), "{:?}", p.notices);
}

#[test]
fn wait_for_first_consumer_waits_for_a_node() {
    let cfg = config(json!({}), "WaitForFirstConsumer");
    assert_eq!(run(&case(&cfg)).step, ON_CHANGE);
    assert_eq!(
        ON_CHANGE.recheck(),
        None,
        "the scheduler's choice brings it back"
    );
    let mut c = Case {
        claim: claim(
            json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}),
        ),
        ..case(&cfg)
    };
    // Selected, but the node cache does not show the node yet (it may have just joined):
    // the API server is asked before anything is decided.
    assert_eq!(asked(&c), Ask::Node { name: "n1".into() });
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    c.node = Some(NodeInfo::from_node(&node));
    let p = run(&c);
    assert_eq!(starts(&p), Some(1));
    assert_eq!(p.step.recheck(), Some(RUNNING_RECHECK));
}

/// A selected node that does not exist (deleted after the scheduler chose it, or written
/// by the claim's author) is handed back to the scheduler before any attempt; once one has
/// started, the claim waits for the node its Job was made for, and says so.
#[test]
fn a_selected_node_that_does_not_exist_goes_back_to_the_scheduler() {
    let cfg = config(json!({}), "WaitForFirstConsumer");
    let ghost = |node: &str| {
        claim(json!({"metadata": {"resourceVersion": "41",
                                  "annotations": {"volume.kubernetes.io/selected-node": node}}}))
    };
    let mut c = Case {
        claim: ghost("gone-node"),
        node_absence_confirmed: true,
        ..case(&cfg)
    };
    let p = run(&c);
    let Step::PatchClaim { patch, .. } = &p.step else {
        panic!("{:?}", p.step)
    };
    assert_eq!(
        patch,
        &json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": null},
                             "resourceVersion": "41"}}),
        "only the selection goes, and only from the claim the plan was made from"
    );
    assert_eq!(p.step.recheck(), None, "the patch brings the claim back");
    assert_eq!(p.notices.len(), 1);
    assert_eq!(p.notices[0].reason, reasons::FAILED);
    assert!(
        p.notices[0]
            .message
            .contains("\"gone-node\" selected for this claim does not exist"),
        "{}",
        p.notices[0].message
    );
    // A name no node can have is never asked about: it would be the path of the read.
    c.node_absence_confirmed = false;
    c.claim = ghost("../../namespaces/kube-system/secrets/x");
    assert!(matches!(
        run(&c).step,
        Step::PatchClaim { recheck: None, .. }
    ));
    c.claim = ghost(&"n".repeat(5000));
    let p = run(&c);
    assert!(matches!(p.step, Step::PatchClaim { recheck: None, .. }));
    assert!(p.notices[0].message.len() < 400, "the name is cut short");
    // An attempt has started: its Job was made for that node; no new selection, no Job,
    // and no word before the API server was asked.
    c.claim = ghost("gone-node");
    c.jobs = vec![job(1, json!({}), "h1")];
    let name = "gone-node".to_owned();
    assert_eq!(asked(&c), Ask::Node { name });
    c.node_absence_confirmed = true;
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert_eq!(p.step.recheck(), Some(Duration::from_secs(60)));
    assert!(
        p.notices[0]
            .message
            .contains("\"gone-node\" this claim's attempt was started for"),
        "{:?}",
        p.notices
    );
    c.jobs.clear();
    c.created = Some(1);
    assert_eq!(run(&c).step, BLOCKED, "created, not cached yet");
}

#[test]
fn a_running_job_is_waited_for_and_its_pods_reported() {
    let cfg = config(json!({}), "Immediate");
    let failed_pod = pod(
        "j1",
        json!({"phase": "Failed", "containerStatuses": [{"name": "provisioner", "image": "i", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"terminated": {"exitCode": 1, "message": "disk busy\n"}}}]}),
    );
    let pulling = serde_json::from_value::<Pod>(json!({"metadata": {"name": "q", "uid": "pod-q",
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1"}]},
        "status": {"phase": "Pending", "containerStatuses": [{"name": "provisioner", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}}))
    .unwrap();
    let c = Case {
        jobs: vec![job(1, json!({}), "h1")],
        pods: vec![failed_pod, pulling],
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, Step::Running { attempt: 1 });
    let messages: Vec<&str> = p.notices.iter().map(|n| n.message.as_str()).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("failed with exit code 1: disk busy")),
        "{messages:?}"
    );
    assert!(
        p.notices.iter().any(
            |n| n.reason == reasons::POD_NOT_STARTING && n.message.contains("ImagePullBackOff")
        ),
        "{messages:?}"
    );
}

#[test]
fn a_right_pv_is_provisioned_and_a_wrong_one_removed() {
    let cfg = config(json!({}), "Immediate");
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(pv(UID)),
        ..case(&cfg)
    };
    let p = run(&c);
    let Step::Provisioned { patch, record } = &p.step else {
        panic!("{:?}", p.step)
    };
    let record = record
        .as_ref()
        .expect("a fresh volume gets its deprovision record");
    assert_eq!(record.metadata.name.as_deref(), Some("flex-record-pv-1"));
    // Owned by the PV and by the Job that made it: it outlives the PV while the Job exists,
    // which tells the orphan check that this Job's volume was made.
    let owners: Vec<(&str, &str)> = record
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| (o.kind.as_str(), o.uid.as_str()))
        .collect();
    assert_eq!(owners, [("PersistentVolume", "pv-1"), ("Job", "j1")]);
    let patch = patch.as_ref().expect("bookkeeping is added to a bare PV");
    assert_eq!(
        patch["metadata"]["finalizers"],
        json!(["flex-provisioner.io/deprovision"])
    );
    assert_eq!(
        patch["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
        P
    );
    assert_eq!(p.notices.last().unwrap().reason, reasons::SUCCEEDED);
    assert_eq!(
        p.notices.last().unwrap().kind,
        crate::plan::NoticeKind::Provisioned
    );
    // An image that wrote a wrong PV (pv-creator: image): removed, without ever getting a
    // record or our finalizer, and the attempt is retried.
    let image_mode = config(json!({"pv-creator": "image"}), "Immediate");
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(pv("someone-else")),
        ..case(&image_mode)
    };
    let p = run(&c);
    let Step::RemoveWrongPv { uid } = &p.step else {
        panic!("{:?}", p.step)
    };
    assert_eq!(uid, "pv-1");
    assert!(p.notices[0].message.contains("claimRef"), "{:?}", p.notices);
    assert!(
        p.notices[0].message.contains("not cleaned"),
        "{:?}",
        p.notices
    );
    // With pv-creator controller, the controller made no such PV: someone else did, and it
    // is left alone.
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(pv("someone-else")),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices[0].message.contains("left alone"),
        "{:?}",
        p.notices
    );
    // A right-looking PV planted before any Job of ours ran gets no records and no success.
    let mut planted = pv(UID);
    planted.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2025-12-31T00:00:00Z".parse().unwrap(),
        ));
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(planted.clone()),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices.iter().all(|n| n.reason != reasons::SUCCEEDED),
        "{:?}",
        p.notices
    );
    let c = Case {
        pv: Some(planted),
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, BLOCKED, "nor before any Job ran");
    // Once its removal was asked for, the deletion is waited for, not asked again.
    let mut deleting = pv("someone-else");
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:05Z".parse().unwrap(),
        ));
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(deleting),
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, Step::Wait(Some(SOON)));
    // A wrong PV that existed before any Job of the claim ran was not made by us: it is
    // reported and left alone.
    let mut planted = pv("someone-else");
    planted.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2025-12-31T00:00:00Z".parse().unwrap(),
        ));
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(planted),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices.iter().any(|n| n.message.contains("left alone")),
        "{:?}",
        p.notices
    );
    // While the Job still runs, a wrong PV may yet be fixed by it: wait.
    let c = Case {
        jobs: vec![job(1, json!({}), "h1")],
        pv: Some(pv("someone-else")),
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, Step::Running { attempt: 1 });
}

#[test]
fn transient_failures_back_off_then_retry() {
    let cfg = config(json!({}), "Immediate");
    let c = Case {
        jobs: vec![job(
            1,
            failed("BackoffLimitExceeded", "2026-01-01T00:00:00Z"),
            "h1",
        )],
        now: "2026-01-01T00:00:04Z",
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(
        p.step,
        Step::Backoff {
            next_attempt: 2,
            wait: Duration::from_secs(6)
        }
    );
    assert!(
        p.notices
            .iter()
            .any(|n| n.message.contains("attempt 2 starts in 10s")),
        "{:?}",
        p.notices
    );
    let c = Case {
        jobs: vec![job(
            1,
            failed("BackoffLimitExceeded", "2026-01-01T00:00:00Z"),
            "h1",
        )],
        now: "2026-01-01T00:00:11Z",
        ..case(&cfg)
    };
    assert_eq!(starts(&run(&c)), Some(2));
    // With `pv-creator: image`, a Job that succeeded without a PV: first the API server is asked (the cache may not
    // have seen the PV yet), and nothing is judged or started meanwhile.
    let image_mode = config(json!({"pv-creator": "image"}), "Immediate");
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:00Z"), "h1")],
        now: "2026-01-01T00:01:00Z",
        pv_absence_confirmed: false,
        ..case(&image_mode)
    };
    assert_eq!(asked(&c), Ask::Volume);
    // Confirmed absent: a failed attempt too.
    let c = Case {
        pv_absence_confirmed: true,
        ..c
    };
    let p = run(&c);
    assert_eq!(starts(&p), Some(2));
    assert!(
        p.notices
            .iter()
            .any(|n| n.message.contains("created no PersistentVolume"))
    );
}

#[test]
fn permanent_failures_and_max_attempts_give_up_until_inputs_change() {
    let cfg = config(json!({}), "Immediate");
    let c = Case {
        jobs: vec![job(
            1,
            failed("PodFailurePolicy", "2026-01-01T00:00:00Z"),
            "h1",
        )],
        now: "2026-01-02T00:00:00Z",
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, gives_up(&c, 1, "h1"));
    let gave_up = claim(json!({"metadata": {"annotations": {ANN_GAVE_UP: "h1"}}}));
    let c = Case {
        claim: gave_up,
        jobs: vec![job(
            1,
            failed("PodFailurePolicy", "2026-01-01T00:00:00Z"),
            "h1",
        )],
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, BLOCKED, "recorded: nothing more to do");
    let c = Case {
        jobs: vec![job(
            1,
            failed("PodFailurePolicy", "2026-01-01T00:00:00Z"),
            "h1",
        )],
        hash: "h2",
        ..case(&cfg)
    };
    assert_eq!(
        starts(&run(&c)),
        Some(2),
        "the claim or configuration changed: try again"
    );
    let limited = config(json!({"max-attempts": "2"}), "Immediate");
    let c = Case {
        jobs: vec![
            job(
                1,
                failed("BackoffLimitExceeded", "2026-01-01T00:00:00Z"),
                "h1",
            ),
            job(
                2,
                failed("BackoffLimitExceeded", "2026-01-01T00:00:00Z"),
                "h1",
            ),
        ],
        now: "2026-01-02T00:00:00Z",
        ..case(&limited)
    };
    let p = run(&c);
    assert_eq!(p.step, gives_up(&c, 2, "h1"));
    assert!(p.notices.iter().any(|n| n.message.contains("max-attempts")));
}

#[test]
fn the_attempt_number_survives_the_jobs_without_a_write_per_attempt() {
    let cfg = config(json!({}), "Immediate");
    // A failure recorded on the claim, its Job cleaned up by its TTL: the next attempt.
    let c = Case {
        claim: claim(json!({"metadata": {"annotations": {ANN_ATTEMPT: "3"}}})),
        ..case(&cfg)
    };
    assert_eq!(starts(&run(&c)), Some(4));
    // A Job created here that the cache does not show yet: running, never created twice.
    let c = Case {
        created: Some(1),
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, Step::Running { attempt: 1 });
    // The cache shows attempt 1 failed while attempt 2 was already created: wait for it.
    let c = Case {
        created: Some(2),
        jobs: vec![job(
            1,
            failed("BackoffLimitExceeded", "2026-01-01T00:00:00Z"),
            "h1",
        )],
        now: "2026-01-02T00:00:00Z",
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, Step::Running { attempt: 2 });
}

#[test]
fn a_failed_attempt_is_recorded_on_the_claim_only_when_its_job_expires_first() {
    let cfg = config(json!({}), "Immediate");
    let with_ttl = |attempt: u32, ttl: i32| {
        let mut j = job(
            attempt,
            failed("BackoffLimitExceeded", "2026-01-01T00:00:00Z"),
            "h1",
        );
        j.spec = Some(k8s_openapi::api::batch::v1::JobSpec {
            ttl_seconds_after_finished: Some(ttl),
            ..Default::default()
        });
        j
    };
    // Attempt 3 failed at 00:00:00; attempt 4 is due 40 s later. A Job kept an hour
    // outlives the wait: nothing is written to the claim.
    let c = Case {
        jobs: vec![with_ttl(3, 3600)],
        now: "2026-01-01T00:00:01Z",
        ..case(&cfg)
    };
    assert!(matches!(
        run(&c).step,
        Step::Backoff {
            next_attempt: 4,
            ..
        }
    ));
    // Kept 60 s only: it would be gone before the retry, so its number is recorded once.
    let c = Case {
        jobs: vec![with_ttl(3, 60)],
        now: "2026-01-01T00:00:01Z",
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, records(&c, 3, Duration::from_secs(39)));
    // Already recorded: the wait goes on without another write.
    let c = Case {
        claim: claim(json!({"metadata": {"annotations": {ANN_ATTEMPT: "3"}}})),
        jobs: vec![with_ttl(3, 60)],
        now: "2026-01-01T00:00:01Z",
        ..case(&cfg)
    };
    assert!(matches!(
        run(&c).step,
        Step::Backoff {
            next_attempt: 4,
            ..
        }
    ));
}

#[test]
fn a_due_attempt_held_back_records_the_failed_one_before_its_job_expires() {
    let cfg = config(json!({"max-concurrent": "1"}), "Immediate");
    let mut failed = job(
        3,
        failed("BackoffLimitExceeded", "2026-01-01T00:00:00Z"),
        "h1",
    );
    failed.spec = Some(k8s_openapi::api::batch::v1::JobSpec {
        ttl_seconds_after_finished: Some(100),
        ..Default::default()
    });
    // Attempt 4 was due at 00:00:40 but the class is at max-concurrent; the failed Job goes
    // at 00:01:40: its number is written before it is lost (max-attempts and backoff
    // would start over otherwise).
    let c = Case {
        jobs: vec![failed.clone()],
        active: 1,
        now: "2026-01-01T00:01:00Z",
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, records(&c, 3, HELD_RECHECK));
    // Recorded already, or the Job far from expiring: throttled, nothing written.
    let c = Case {
        claim: claim(json!({"metadata": {"annotations": {ANN_ATTEMPT: "3"}}})),
        jobs: vec![failed.clone()],
        active: 1,
        now: "2026-01-01T00:01:00Z",
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, Step::Wait(Some(THROTTLED_RECHECK)));
    failed.spec.as_mut().unwrap().ttl_seconds_after_finished = Some(3600);
    let c = Case {
        jobs: vec![failed],
        active: 1,
        now: "2026-01-01T00:01:00Z",
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, Step::Wait(Some(THROTTLED_RECHECK)));
}

#[test]
fn max_concurrent_throttles_new_jobs() {
    let cfg = config(json!({"max-concurrent": "2"}), "Immediate");
    assert_eq!(
        run(&Case {
            active: 2,
            ..case(&cfg)
        })
        .step,
        Step::Wait(Some(THROTTLED_RECHECK))
    );
    assert_eq!(
        starts(&run(&Case {
            active: 1,
            ..case(&cfg)
        })),
        Some(1)
    );
}

#[test]
fn the_inputs_hash_ignores_bookkeeping_annotations() {
    let cfg = config(json!({}), "Immediate");
    let plain = crate::claim::ClaimRequest::from_claim(&claim(json!({}))).unwrap();
    let annotated = crate::claim::ClaimRequest::from_claim(&claim(
        json!({"metadata": {"annotations": {ANN_ATTEMPT: "4",
        "pv.kubernetes.io/bind-completed": "yes"}}}),
    ))
    .unwrap();
    assert_eq!(inputs_hash(&cfg, &plain), inputs_hash(&cfg, &annotated));
    let changed = crate::claim::ClaimRequest::from_claim(&claim(
        json!({"metadata": {"labels": {"team": "b"}}}),
    ))
    .unwrap();
    assert_ne!(inputs_hash(&cfg, &plain), inputs_hash(&cfg, &changed));
}

/// The digest is of a canonical, versioned form: a fixed value for fixed inputs (a change
/// here means every claim that gave up would be re-opened: bump the form instead), and it
/// moves with each input that shapes an attempt.
#[test]
fn the_inputs_hash_is_a_versioned_sha256_of_a_canonical_form() {
    let cfg = config(json!({"export": "/x/{{claim.name}}"}), "Immediate");
    let req = crate::claim::ClaimRequest::from_claim(&claim(json!({}))).unwrap();
    let h = inputs_hash(&cfg, &req);
    assert!(h.starts_with("v2-"), "{h}");
    assert_eq!(h.len(), 3 + 64, "{h}");
    assert!(h[3..].bytes().all(|b| b.is_ascii_hexdigit()), "{h}");
    assert_eq!(h, inputs_hash(&cfg.clone(), &req.clone()));
    for other in [
        config(json!({"export": "/y/{{claim.name}}"}), "Immediate"),
        config(
            json!({"export": "/x/{{claim.name}}", "retries": "5"}),
            "Immediate",
        ),
        config(
            json!({"export": "/x/{{claim.name}}", "image": "other:2"}),
            "Immediate",
        ),
        config(
            json!({"export": "/x/{{claim.name}}", "pv-creator": "image"}),
            "Immediate",
        ),
        config(
            json!({"export": "/x/{{claim.name}}", "volume-sources": "nfs"}),
            "Immediate",
        ),
        // A declaration re-opens a claim whose report it refused.
        config(
            json!({"export": "/x/{{claim.name}}", "allowed-nfs-servers": "s"}),
            "Immediate",
        ),
    ] {
        assert_ne!(h, inputs_hash(&other, &req));
    }
    let bigger = crate::claim::ClaimRequest::from_claim(&claim(
        json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
    ))
    .unwrap();
    assert_ne!(h, inputs_hash(&cfg, &bigger));
    assert_eq!(
        h,
        "v2-f18c7c09c532af7555dc42b0c0bc534afd7c4c1001009e86cf2ebfd2c1a3abeb"
    );
}

fn succeeded_pod(job_uid: &str, message: &str) -> Pod {
    pod(
        job_uid,
        json!({"phase": "Succeeded", "containerStatuses": [{"name": "provisioner", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "message": message}}}]}),
    )
}

#[test]
fn the_controller_creates_the_pv_from_a_valid_report_only() {
    let cfg = config(
        json!({"allowed-nfs-servers": "s", "allowed-nfs-paths": "/e"}),
        "Immediate",
    );
    let done = |pods: Vec<Pod>, now: &'static str| Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pods,
        now,
        ..case(&cfg)
    };
    // A good report: the PV is the template plus exactly that source, with our finalizer.
    let p = run(&done(
        vec![succeeded_pod(
            "j1",
            r#"{"nfs":{"server":"s","path":"/e/a"}}"#,
        )],
        "2026-01-01T00:00:05Z",
    ));
    let Step::CreatePv { pv } = &p.step else {
        panic!("{:?}", p.step)
    };
    let spec = pv.spec.as_ref().unwrap();
    assert_eq!(spec.nfs.as_ref().unwrap().path, "/e/a");
    assert_eq!(spec.claim_ref.as_ref().unwrap().uid.as_deref(), Some(UID));
    assert_eq!(spec.storage_class_name.as_deref(), Some("silver"));
    assert_eq!(
        pv.metadata.finalizers.as_deref(),
        Some(&["flex-provisioner.io/deprovision".to_owned()][..])
    );
    assert!(spec.host_path.is_none() && spec.local.is_none());
    // Bad reports: the attempt fails for good (until the inputs change), with what was wrong.
    for (report, says) in [
        (
            r#"{"nfs":{"server":"s","path":"/e"},"iscsi":{"targetPortal":"t","iqn":"i","lun":0}}"#,
            "exactly one volume source",
        ),
        (r#"{"hostPath":{"path":"/"}}"#, "does not allow"),
        (r#"{"nfs": "#, "not JSON"),
        ("", "reported no volume source"),
        (
            r#"{"claimRef":{"uid":"other"}}"#,
            "its report carries claimRef, which a report may not set",
        ),
        (
            r#"{"nfs":{"server":"s","path":"/e/a"},"nodeAffinity":{}}"#,
            "its report carries nodeAffinity, which a report may not set",
        ),
        // Outside what the class declares: refused for good, naming the key to change.
        (
            r#"{"nfs":{"server":"other","path":"/e/a"}}"#,
            "it reported nfs server other, which is not in allowed-nfs-servers (s)",
        ),
        (
            r#"{"nfs":{"server":"s","path":"/e/../etc"}}"#,
            "it reported nfs path /e/../etc, which is not below allowed-nfs-paths (/e)",
        ),
        (
            r#"{"nfs":{"server":"s","path":"/e/a","readOnly":"yes"}}"#,
            "not make a valid PV",
        ),
    ] {
        let c = done(vec![succeeded_pod("j1", report)], "2026-01-01T00:00:05Z");
        let p = run(&c);
        assert_eq!(p.step, gives_up(&c, 1, "h1"), "{report}");
        let m = &p
            .notices
            .iter()
            .find(|n| n.warning)
            .expect("a warning")
            .message;
        assert!(
            m.contains(says) && m.contains("no PersistentVolume is created"),
            "{report}: {m}"
        );
    }
    // No pod seen yet: wait for it a little; then ask the API server, whose answer alone
    // may call the report lost (a pod watch that lags under load costs no attempt).
    assert_eq!(
        run(&done(vec![], "2026-01-01T00:00:30Z")).step,
        Step::Wait(Some(SOON))
    );
    let late = done(vec![], "2026-01-01T00:10:00Z");
    assert_eq!(
        asked(&late),
        Ask::Pods {
            namespace: "flex-provisioner-config".into()
        }
    );
    let confirmed = Case {
        pods_confirmed: true,
        ..late
    };
    let p = run(&confirmed);
    assert_eq!(starts(&p), Some(2), "{:?}", p.step);
    assert!(p.notices.iter().any(|n| n.message.contains("is gone")));
    // The API server has the pod the cache lacked: its report makes the volume.
    let found = Case {
        pods: vec![succeeded_pod(
            "j1",
            r#"{"nfs":{"server":"s","path":"/e/a"}}"#,
        )],
        ..confirmed
    };
    assert!(
        matches!(run(&found).step, Step::CreatePv { .. }),
        "{:?}",
        run(&found).step
    );
}

#[test]
fn a_pv_is_verified_against_the_allowed_sources_and_the_report() {
    let cfg = config(
        json!({"allowed-nfs-servers": "s", "allowed-nfs-paths": "/e"}),
        "Immediate",
    );
    let with = |pv: PersistentVolume, pods: Vec<Pod>| Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(pv),
        pods,
        ..case(&cfg)
    };
    let mut host = pv(UID);
    host.spec.as_mut().unwrap().nfs = None;
    host.spec.as_mut().unwrap().host_path =
        Some(serde_json::from_value(json!({"path": "/"})).unwrap());
    let p = run(&with(host, vec![]));
    assert_eq!(p.step, BLOCKED);
    assert!(p.notices.iter().any(|n| {
        n.message
            .contains("`hostPath`, which this class does not allow")
    }));
    // The class lists it: fine.
    let local = config(json!({"volume-sources": "hostPath, local"}), "Immediate");
    let mut host = pv(UID);
    host.spec.as_mut().unwrap().nfs = None;
    host.spec.as_mut().unwrap().host_path =
        Some(serde_json::from_value(json!({"path": "/v/a"})).unwrap());
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(host),
        ..case(&local)
    };
    assert!(matches!(run(&c).step, Step::Provisioned { .. }));
    // Someone else's PV, racing ours under our name, with a source other than the report.
    let reported = succeeded_pod("j1", r#"{"nfs":{"server":"s","path":"/e/mine"}}"#);
    let p = run(&with(pv(UID), vec![reported.clone()]));
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices
            .iter()
            .any(|n| n.message.contains("not the one the provisioner reported"))
    );
    let mut ours = pv(UID);
    ours.spec.as_mut().unwrap().nfs =
        Some(serde_json::from_value(json!({"server": "s", "path": "/e/mine"})).unwrap());
    assert!(matches!(
        run(&with(ours.clone(), vec![reported.clone()])).step,
        Step::Provisioned { .. }
    ));
    // What a real API server stores holds its defaults too (`readOnly: false` here, a
    // hostPath's `type: ""`): still the reported source.
    ours.spec.as_mut().unwrap().nfs = Some(
        serde_json::from_value(json!({"server": "s", "path": "/e/mine", "readOnly": false}))
            .unwrap(),
    );
    assert!(matches!(
        run(&with(ours.clone(), vec![reported.clone()])).step,
        Step::Provisioned { .. }
    ));
    // A field the report set to another value is not.
    ours.spec.as_mut().unwrap().nfs = Some(
        serde_json::from_value(json!({"server": "s", "path": "/e/other", "readOnly": false}))
            .unwrap(),
    );
    assert_eq!(run(&with(ours, vec![reported])).step, BLOCKED);
}

#[test]
fn a_data_source_needs_the_class_to_list_its_kind_and_to_resolve() {
    let with_source = |_: Value| {
        claim(
            json!({"spec": {"dataSourceRef": {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "src"}}}),
        )
    };
    let plain = config(json!({}), "Immediate");
    let mut c = case(&plain);
    c.claim = with_source(json!({}));
    let p = run(&c);
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices[0]
            .message
            .contains("lists no `PersistentVolumeClaim` in data-sources"),
        "{}",
        p.notices[0].message
    );
    let clones = config(
        json!({"data-sources": "PersistentVolumeClaim"}),
        "Immediate",
    );
    let mut c = case(&clones);
    c.claim = with_source(json!({}));
    c.source = Some(crate::source::SourceData::Unusable(
        "the source claim default/src is not bound yet".into(),
    ));
    let p = run(&c);
    // Looked at again soon: the source may be bound in a moment.
    assert_eq!(p.step, Step::Wait(Some(SOURCE_RECHECK)));
    assert!(
        p.notices[0].message.contains("is not bound yet"),
        "{}",
        p.notices[0].message
    );
    let mut elsewhere = case(&clones);
    elsewhere.claim = claim(
        json!({"spec": {"dataSourceRef": {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "src", "namespace": "other"}}}),
    );
    let p = run(&elsewhere);
    assert_eq!(p.step, BLOCKED);
    assert!(
        p.notices[0].message.contains("is in namespace other"),
        "{}",
        p.notices[0].message
    );
    let source_pv: PersistentVolume =
        serde_json::from_value(json!({"metadata": {"name": "pvc-src"}})).unwrap();
    c.source = Some(crate::source::SourceData::Volume {
        pv: Box::new(source_pv),
        parameters: BTreeMap::new(),
        mount: None,
    });
    assert_eq!(starts(&run(&c)), Some(1));
}

/// On a real control plane the PV controller binds an image's pre-bound PV within moments
/// of its creation, before the Job's success is seen: a wrong one is then bound. It is
/// reported (counted as a failure), never adopted, and told on the PV as well.
#[test]
fn a_wrong_image_pv_that_got_bound_is_reported_and_never_adopted() {
    let image_mode = config(
        json!({"pv-creator": "image", "volume-sources": "nfs"}),
        "Immediate",
    );
    let bound =
        claim(json!({"spec": {"volumeName": format!("pvc-{UID}")}, "status": {"phase": "Bound"}}));
    let mut wrong = pv(UID);
    wrong.spec.as_mut().unwrap().nfs = None;
    wrong.spec.as_mut().unwrap().host_path =
        Some(serde_json::from_value(json!({"path": "/"})).unwrap());
    let c = Case {
        claim: bound.clone(),
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(wrong),
        ..case(&image_mode)
    };
    let p = run(&c);
    let Step::BoundToUnverified { pv: on, on_pv } = &p.step else {
        panic!("{:?}", p.step)
    };
    assert_eq!(on.name.as_deref(), Some(format!("pvc-{UID}").as_str()));
    assert_eq!(p.notices.len(), 1);
    let n = &p.notices[0];
    // The same words on the PV, where an admin looks; counted once, on the claim.
    assert_eq!(on_pv.len(), 1);
    assert_eq!(on_pv[0].key, format!("on-pv/{}", n.key));
    assert_eq!(on_pv[0].message, n.message);
    assert_eq!(on_pv[0].kind, crate::plan::NoticeKind::Other);
    assert!(n.warning, "{n:?}");
    assert_eq!(
        n.kind,
        crate::plan::NoticeKind::ProvisionFailed,
        "counted as a failure"
    );
    assert!(
        n.message.contains("hostPath") && n.message.contains("did not verify"),
        "{}",
        n.message
    );
    // A right volume of a claim that grew since is not wrong: expansion's business.
    let grown = claim(json!({"spec": {"volumeName": format!("pvc-{UID}"),
        "resources": {"requests": {"storage": "5Gi"}}}, "status": {"phase": "Bound"}}));
    let c = Case {
        claim: grown,
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(pv(UID)),
        ..case(&image_mode)
    };
    assert!(matches!(run(&c).step, Step::Provisioned { .. }));
}

/// The attempt annotation is the claim author's to write too: a number the provisioner
/// could not have recorded (above the claim's latest Job, beyond any real count, not plain
/// digits) is ignored with a warning, and no number overflows.
#[test]
fn an_attempt_number_the_provisioner_did_not_record_is_ignored() {
    let cfg = config(json!({}), "Immediate");
    for forged in ["4000000000", "4294967295", "+3", "1e3", "-1"] {
        let c = Case {
            claim: claim(json!({"metadata": {"annotations": {ANN_ATTEMPT: forged}}})),
            ..case(&cfg)
        };
        let p = run(&c);
        assert_eq!(starts(&p), Some(1), "{forged}: {:?}", p.step);
        assert!(
            p.notices
                .iter()
                .any(|n| n.warning && n.message.contains("is ignored")),
            "{forged}: {:?}",
            p.notices
        );
    }
    // While Jobs exist, a number above the latest one is not the provisioner's either.
    let c = Case {
        claim: claim(json!({"metadata": {"annotations": {ANN_ATTEMPT: "9"}}})),
        jobs: vec![job(2, json!({}), "h1")],
        ..case(&cfg)
    };
    assert_eq!(run(&c).step, Step::Running { attempt: 2 });
    // What the provisioner writes is honoured.
    let c = Case {
        claim: claim(json!({"metadata": {"annotations": {ANN_ATTEMPT: "3"}}})),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(starts(&p), Some(4));
    assert!(p.notices.iter().all(|n| !n.message.contains("is ignored")));
}

/// The volume's record holds what its Job was given, rendered once with the Job: a claim
/// label changed while the Job ran (`team: alpha` to `beta`) does not make deletion target
/// other storage than the Job made.
#[test]
fn the_record_holds_what_the_job_was_given() {
    let cfg = config(
        json!({"dir": "/v/{{dnslabel claim.labels.team}}"}),
        "Immediate",
    );
    let c = Case {
        claim: claim(json!({"metadata": {"labels": {"team": "beta"}}})),
        jobs: vec![succeeded_with_record("/v/alpha")],
        pv: Some(pv(UID)),
        ..case(&cfg)
    };
    let p = run(&c);
    let Step::Provisioned { record, .. } = &p.step else {
        panic!("{:?}", p.step)
    };
    let data = record.as_ref().unwrap().data.clone().unwrap();
    assert_eq!(data["parameters"], "{\"dir\":\"/v/alpha\"}");
    assert!(data.contains_key("expand-spec"));
    assert_eq!(data["claim"], "a/data");
}

/// Attempt 1's Job, succeeded, carrying what its volume's record is made from (its
/// recipes and its `dir` parameter).
fn succeeded_with_record(dir: &str) -> Job {
    let recipe = json!({"namespace": "ns", "config": "ns/c", "image": "img:1",
        "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": []});
    let mut made = job(1, complete("2026-01-01T00:00:04Z"), "h1");
    let annotations = made.metadata.annotations.as_mut().unwrap();
    annotations.insert(
        crate::names::ANN_DEPROVISION_SPEC.into(),
        recipe.to_string(),
    );
    annotations.insert(crate::names::ANN_EXPAND_SPEC.into(), recipe.to_string());
    let parameters = json!({"dir": dir}).to_string();
    made.spec = Some(
        serde_json::from_value(
            json!({"template": {"spec": {"containers": [{"name": "provisioner",
            "env": [{"name": "PARAMETERS", "value": parameters}]}]}}}),
        )
        .unwrap(),
    );
    made
}

/// A volume whose record cannot be made (its Job predates the records Jobs carry, and the
/// templates no longer render) is not announced as a success: no bookkeeping, no success.
#[test]
fn no_success_is_told_without_the_record() {
    let cfg = config(
        json!({"dir": "/v/{{dnslabel claim.labels.team}}"}),
        "Immediate",
    );
    let c = Case {
        jobs: vec![job(1, complete("2026-01-01T00:00:04Z"), "h1")],
        pv: Some(pv(UID)),
        ..case(&cfg)
    };
    let p = run(&c);
    assert_eq!(p.step, BLOCKED, "{:?}", p.notices);
    assert!(
        p.notices.iter().all(|n| n.kind != NoticeKind::Provisioned),
        "{:?}",
        p.notices
    );
    assert!(
        p.notices
            .iter()
            .any(|n| n.message.contains("cannot provision this claim"))
    );
}

/// A PV an image made for a class with `volume-base` must be exactly the directory its
/// Job was made for: a link below the base, or another claim's directory, is not verified.
#[test]
fn an_image_made_pv_of_a_class_with_volume_base_is_exactly_its_claims_directory() {
    let cfg = config(
        json!({"pv-creator": "image", "volume-sources": "local", "allow-privileged": "true",
               "volume-base": "base", "volume-directory": "a/{{claim.uid}}",
               "pod-template": "spec:\n  volumes: [{name: base, hostPath: {path: /v, type: Directory}}]\n  containers:\n  - volumeMounts: [{name: base, mountPath: /v}]\n"}),
        "Immediate",
    );
    let mut made = job(1, complete("2026-01-01T00:00:04Z"), "h1");
    made.spec = Some(
        serde_json::from_value(
            json!({"template": {"spec": {"containers": [{"name": "provisioner",
            "env": [{"name": "VOLUME_DIRECTORY", "value": format!("a/{UID}")}]}]}}}),
        )
        .unwrap(),
    );
    let local = |path: &str| {
        let mut p = pv(UID);
        p.spec.as_mut().unwrap().nfs = None;
        p.spec.as_mut().unwrap().local =
            Some(serde_json::from_value(json!({ "path": path })).unwrap());
        p
    };
    let with = |pv: PersistentVolume| Case {
        jobs: vec![made.clone()],
        pv: Some(pv),
        ..case(&cfg)
    };
    assert!(matches!(
        run(&with(local(&format!("/v/a/{UID}")))).step,
        Step::Provisioned { .. }
    ));
    for wrong in ["/v/a/x", "/v/b/other", "/v", "/"] {
        let p = run(&with(local(wrong)));
        assert!(!matches!(p.step, Step::Provisioned { .. }), "{wrong}");
        assert!(
            p.notices
                .iter()
                .any(|n| n.message.contains("volume-directory")),
            "{wrong}: {:?}",
            p.notices
        );
    }
}

/// A node-local claim whose selected node is cordoned gets no Job (it would wait
/// unscheduled for its whole timeout, holding a `max-concurrent` slot): the selection goes
/// back to the scheduler, with a warning naming the node. A class whose pods tolerate the
/// cordon, and a claim whose attempt already started there, are left as they are.
#[test]
fn a_cordoned_selected_node_goes_back_to_the_scheduler() {
    let local = config(
        json!({"node-local": "true", "max-concurrent": "1"}),
        "WaitForFirstConsumer",
    );
    let cordoned: k8s_openapi::api::core::v1::Node = serde_json::from_value(
        json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}}),
    )
    .unwrap();
    let on_n1 = || {
        claim(json!({"metadata": {"resourceVersion": "41",
                                  "annotations": {"volume.kubernetes.io/selected-node": "n1"}}}))
    };
    let c = Case {
        claim: on_n1(),
        node: Some(NodeInfo::from_node(&cordoned)),
        ..case(&local)
    };
    let p = run(&c);
    assert!(
        matches!(p.step, Step::PatchClaim { recheck: None, .. }),
        "{:?}",
        p.step
    );
    assert!(
        p.notices
            .iter()
            .any(|n| n.warning && n.message.contains("\"n1\"") && n.message.contains("cordoned")),
        "{:?}",
        p.notices
    );
    // Tolerated by the class's pods: provisioned there.
    let tolerant = config(
        json!({"node-local": "true",
               "pod-template": "spec:\n  tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}]\n"}),
        "WaitForFirstConsumer",
    );
    let c = Case {
        claim: on_n1(),
        node: Some(NodeInfo::from_node(&cordoned)),
        ..case(&tolerant)
    };
    assert_eq!(starts(&run(&c)), Some(1));
    // Not node-local: the Job runs anywhere.
    let anywhere = config(json!({}), "WaitForFirstConsumer");
    let c = Case {
        claim: on_n1(),
        node: Some(NodeInfo::from_node(&cordoned)),
        ..case(&anywhere)
    };
    assert_eq!(starts(&run(&c)), Some(1));
}

/// A claim whose source stays unusable is looked at soon at first, then less and less often
/// (each look at an admin's object is a read of the API server), never less than every five
/// minutes.
#[test]
fn a_source_that_stays_unusable_is_looked_at_less_and_less_often() {
    let listed = config(json!({"data-sources": "example.com/Widget"}), "Immediate");
    let wait_after = |now: &'static str| {
        let mut c = case(&listed);
        c.claim = claim(json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"dataSourceRef": {"apiGroup": "example.com", "kind": "Widget", "name": "w"}}
        }));
        c.source = Some(crate::source::SourceData::Unusable(
            "Widget default/w does not exist".into(),
        ));
        c.now = now;
        match run(&c).step {
            Step::Wait(Some(wait)) => wait,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(wait_after("2026-01-01T00:00:01Z"), Duration::from_secs(5));
    assert_eq!(wait_after("2026-01-01T00:01:00Z"), Duration::from_secs(30));
    assert_eq!(wait_after("2026-01-01T00:04:00Z"), Duration::from_secs(120));
    assert_eq!(wait_after("2026-01-02T00:00:00Z"), Duration::from_secs(300));
    // A clock behind the claim's creation (another node's) is waited on as a new claim.
    assert_eq!(wait_after("2025-12-31T23:00:00Z"), Duration::from_secs(5));
}
