use super::*;
use crate::snapshot::record::SnapshotRecord;
use crate::snapshot::{VolumeSnapshot, VolumeSnapshotClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;

const ME: &str = "flex-provisioner.io/job";

fn content(policy: &str, deleted: bool) -> VolumeSnapshotContent {
    let snapshot: VolumeSnapshot = serde_json::from_value(json!({
        "metadata": {"name": "before", "namespace": "team", "uid": "9f1c"},
        "spec": {"source": {"persistentVolumeClaimName": "data"}}
    }))
    .unwrap();
    let class: VolumeSnapshotClass = serde_json::from_value(
        json!({"metadata": {"name": "flex"}, "driver": ME, "deletionPolicy": policy}),
    )
    .unwrap();
    let pv = serde_json::from_value(json!({"metadata": {"name": "pvc-c1"}})).unwrap();
    let mut c = crate::snapshot::content_for(&snapshot, &class, &pv, BTreeMap::new()).unwrap();
    c.metadata.uid = Some("content-u".into());
    c.metadata.resource_version = Some("9".into());
    c.metadata.finalizers = Some(vec![FINALIZER_CONTENT_BOUND.into(), "other/keep".into()]);
    if deleted {
        c.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    }
    c
}

fn record_of(c: &VolumeSnapshotContent) -> ConfigMap {
    let recipe = serde_json::from_value(json!({
        "namespace": "cfg", "config": "cfg/hostpath", "image": "hostpath:1",
        "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": [2]}))
    .unwrap();
    let record = SnapshotRecord {
        snapshot: ("team".into(), "before".into()),
        snapshot_uid: "9f1c".into(),
        source_pv: serde_json::from_value(json!({"metadata": {"name": "pvc-c1"}})).unwrap(),
        handle: "/var/flex/.snapshots/team/9f1c".into(),
        restore_size: 1,
        taken_at: jiff::Timestamp::UNIX_EPOCH,
        recipe,
        parameters: BTreeMap::new(),
    };
    build_snapshot_record(c, &record).unwrap()
}

struct World {
    content: VolumeSnapshotContent,
    snapshot_exists: bool,
    snapshot_confirmed: bool,
    snapshot_deleting: bool,
    restoring: bool,
    record: Option<ConfigMap>,
    record_read: bool,
    attempt_record: Option<ConfigMap>,
    jobs: Vec<Job>,
}

fn world(c: VolumeSnapshotContent) -> World {
    World {
        content: c,
        snapshot_exists: false,
        snapshot_confirmed: false,
        snapshot_deleting: false,
        restoring: false,
        record: None,
        record_read: false,
        attempt_record: None,
        jobs: vec![],
    }
}

fn decide(w: &World) -> Decision<ContentPlan> {
    plan_content(&ContentInputs {
        content: &w.content,
        provisioner_name: ME,
        snapshot_exists: w.snapshot_exists,
        snapshot_confirmed: w.snapshot_confirmed,
        snapshot_deleting: w.snapshot_deleting,
        restoring: w.restoring,
        record: w.record.as_ref(),
        record_read: w.record_read,
        attempt_record: w.attempt_record.as_ref(),
        jobs: w.jobs.iter().collect(),
        pods: vec![],
        retry_base: Duration::from_secs(10),
        job_ttl_seconds: 60,
        now: jiff::Timestamp::from_second(100).unwrap(),
    })
}

fn step(w: &World) -> ContentStep {
    decide(w).unwrap().step
}

fn with_status(mut job: Job, status: Value) -> Job {
    job.metadata.uid = Some(format!("job-{}", attempt_of(&job)));
    job.status = Some(serde_json::from_value(status).unwrap());
    job
}

#[test]
fn a_live_content_is_deleted_only_once_its_snapshot_is_confirmed_gone() {
    let mut w = world(content("Delete", false));
    w.snapshot_exists = true;
    assert_eq!(step(&w), ContentStep::Ignore);
    w.snapshot_exists = false;
    assert_eq!(decide(&w), Err(Ask::Snapshot));
    w.snapshot_confirmed = true;
    assert_eq!(
        step(&w),
        ContentStep::DeleteContent {
            uid: "content-u".into()
        }
    );
    let mut retain = world(content("Retain", false));
    retain.snapshot_confirmed = true;
    assert_eq!(
        step(&retain),
        ContentStep::Ignore,
        "a retained content stays"
    );
}

#[test]
fn delete_runs_the_recorded_recipe_only_after_reading_the_record_afresh() {
    let c = content("Delete", true);
    let mut w = world(c.clone());
    assert_eq!(decide(&w), Err(Ask::Record));
    w.record_read = true;
    w.record = Some(record_of(&c));
    let ContentStep::CreateJob(job) = step(&w) else {
        panic!()
    };
    assert_eq!(job.metadata.name.as_deref(), Some("delete-snapshot-9f1c"));
    let running = with_status(*job.clone(), json!({"active": 1}));
    w.jobs = vec![running];
    assert_eq!(step(&w), ContentStep::Wait(RUNNING_RECHECK));
    w.jobs = vec![with_status(
        *job,
        json!({"conditions": [{"type": "Complete", "status": "True"}]}),
    )];
    let p = decide(&w).unwrap();
    let ContentStep::Finish(patch) = p.step else {
        panic!()
    };
    let NoticeKind::SnapshotCall(call) = p.notices[0].kind else {
        panic!("not counted")
    };
    assert_eq!((call.delete, call.status), (true, CallStatus::Ok));
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": "9", "finalizers": ["other/keep"]}}),
        "only our finalizer goes, under the version decided on"
    );
}

/// A snapshot Job created as the content was deleted (its plan decided just before) may
/// copy after the delete ran: the copy is deleted again, not left behind.
#[test]
fn a_copy_made_after_the_delete_began_is_deleted_again() {
    let c = content("Delete", true);
    let mut w = world(c.clone());
    w.record_read = true;
    w.record = Some(record_of(&c));
    let ContentStep::CreateJob(delete) = step(&w) else {
        panic!()
    };
    let at = |second: i64| Some(Time(jiff::Timestamp::from_second(second).unwrap()));
    let mut deleted = with_status(
        *delete,
        json!({"conditions": [{"type": "Complete", "status": "True"}]}),
    );
    deleted.metadata.creation_timestamp = at(50);
    let mut copy: Job = serde_json::from_value(json!({"metadata": {
        "name": "snapshot-9f1c", "uid": "copy-u",
        "labels": {"flex-provisioner.io/action": "snapshot"},
        "annotations": {ANN_CONTENT_UID: "content-u"}},
        "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}}))
    .unwrap();
    copy.metadata.creation_timestamp = at(49);
    w.jobs = vec![deleted.clone(), copy.clone()];
    assert!(
        matches!(step(&w), ContentStep::Finish(_)),
        "made before: deleted"
    );
    copy.metadata.creation_timestamp = at(50);
    w.jobs = vec![deleted, copy];
    let ContentStep::CreateJob(again) = step(&w) else {
        panic!("made as the delete began: deleted again")
    };
    assert_eq!(
        again.metadata.name.as_deref(),
        Some("delete-snapshot-9f1c-2")
    );
}

#[test]
fn a_failed_delete_keeps_the_finalizer_and_backs_off() {
    let c = content("Delete", true);
    let mut w = world(c.clone());
    w.record_read = true;
    w.record = Some(record_of(&c));
    let ContentStep::CreateJob(job) = step(&w) else {
        panic!()
    };
    w.jobs = vec![with_status(
        *job,
        json!({"failed": 1, "conditions": [{"type": "Failed",
        "status": "True", "reason": "BackoffLimitExceeded", "message": "disk gone",
        "lastTransitionTime": "1970-01-01T00:01:35Z"}]}),
    )];
    let p = decide(&w).unwrap();
    assert_eq!(p.step, ContentStep::Wait(Duration::from_secs(5)));
    assert_eq!(p.notices[0].reason, reasons::DELETE_ERROR);
    let NoticeKind::SnapshotCall(call) = p.notices[0].kind else {
        panic!("not counted")
    };
    assert_eq!((call.delete, call.status), (true, CallStatus::Unknown));
    assert_eq!(call.ended, Some(jiff::Timestamp::from_second(95).unwrap()));
    assert!(
        p.notices[0].message.contains("disk gone"),
        "{}",
        p.notices[0].message
    );
}

#[test]
fn without_a_record_of_ours_nothing_runs() {
    let c = content("Delete", true);
    let mut w = world(c.clone());
    w.record_read = true;
    let ContentStep::Finish(_) = step(&w) else {
        panic!("nothing was taken: nothing to delete")
    };
    // Taken (its status says so), but its record is gone: kept, and said, never deleted on
    // the status's word.
    let mut taken = c.clone();
    taken.status = Some(
        serde_json::from_value(json!({"readyToUse": true,
        "snapshotHandle": "/var/flex/.snapshots/team/9f1c"}))
        .unwrap(),
    );
    let mut w = world(taken.clone());
    w.record_read = true;
    let p = decide(&w).unwrap();
    assert_eq!(p.step, ContentStep::Ignore);
    let said = &p.notices[0].message;
    assert!(
        said.contains("its record flex-snapshot-9f1c is gone"),
        "{said}"
    );
    assert!(
        !said.contains("/var/flex"),
        "the status's path is not repeated as an instruction: {said}"
    );
    // Nor is the attempts' record used for it: the copy may not be where it says.
    let attempted = crate::snapshot::record::read_snapshot_record(&record_of(&taken), &taken);
    let attempt =
        crate::snapshot::record::build_attempt_record(&taken, &attempted.unwrap()).unwrap();
    w.attempt_record = Some(attempt);
    assert_eq!(step(&w), ContentStep::Ignore);
    // A pre-provisioned content (an admin's, or forged) names a handle, not a volume:
    // nothing of it was taken here, and its finalizer goes.
    let mut static_content = taken.clone();
    static_content.spec.source =
        serde_json::from_value(json!({"snapshotHandle": "/var/flex/team/another-tenant"})).unwrap();
    let mut w = world(static_content);
    w.record_read = true;
    assert!(matches!(step(&w), ContentStep::Finish(_)));
    let mut w = world(c.clone());
    w.record_read = true;
    // A record written for another content (a copy of another tenant's): refused, kept.
    let mut other = content("Delete", true);
    other.metadata.uid = Some("other-u".into());
    w.record = Some(record_of(&other));
    let p = decide(&w).unwrap();
    assert_eq!(p.step, ContentStep::Ignore);
    assert!(
        p.notices[0]
            .message
            .contains("not written for this content")
    );
    // Another driver's content is none of ours.
    let mut foreign = c;
    foreign.spec.driver = "ebs.csi.aws.com".into();
    assert_eq!(step(&world(foreign)), ContentStep::Ignore);
}

#[test]
fn retain_finishes_without_a_job_and_a_running_copy_is_waited_for() {
    let w = world(content("Retain", true));
    let p = decide(&w).unwrap();
    assert!(matches!(p.step, ContentStep::Finish(_)));
    assert!(p.notices[0].message.contains("kept"));
    let c = content("Delete", true);
    let mut snapshot_job: Job = serde_json::from_value(json!({"metadata": {
        "name": "snapshot-9f1c", "labels": {"flex-provisioner.io/action": "snapshot"},
        "annotations": {"flex-provisioner.io/content-uid": "content-u"}}}))
    .unwrap();
    snapshot_job = with_status(snapshot_job, json!({"active": 1}));
    let mut w = world(c);
    w.jobs = vec![snapshot_job];
    assert_eq!(step(&w), ContentStep::Wait(RUNNING_RECHECK));
}

#[test]
fn a_content_deleted_while_its_snapshot_lives_keeps_its_copy() {
    let c = content("Delete", true);
    let mut w = world(c.clone());
    w.snapshot_exists = true;
    let p = decide(&w).unwrap();
    assert_eq!(p.step, ContentStep::Ignore);
    assert!(
        p.notices[0].message.contains("delete that instead"),
        "{}",
        p.notices[0].message
    );
    // The snapshot-controller's mark, or the snapshot's own deletion, releases it.
    let mut marked = c.clone();
    marked.metadata.annotations = Some(BTreeMap::from([(
        crate::snapshot::ANN_BEING_DELETED.into(),
        "yes".into(),
    )]));
    let mut w2 = world(marked);
    w2.snapshot_exists = true;
    assert_eq!(decide(&w2), Err(Ask::Record));
    w.snapshot_deleting = true;
    assert_eq!(decide(&w), Err(Ask::Record));
}

#[test]
fn a_copy_being_restored_from_is_kept_until_the_restore_ends() {
    let c = content("Delete", true);
    let mut w = world(c.clone());
    w.record_read = true;
    w.record = Some(record_of(&c));
    w.restoring = true;
    assert_eq!(step(&w), ContentStep::Wait(RUNNING_RECHECK));
}

#[test]
fn what_an_attempt_that_recorded_nothing_left_is_removed() {
    let c = content("Delete", true);
    // The snapshot Job the take plan would have run, failed for good.
    let snapshot: crate::snapshot::VolumeSnapshot = serde_json::from_value(json!({
        "metadata": {"name": "before", "namespace": "team", "uid": "9f1c"},
        "spec": {"source": {"persistentVolumeClaimName": "data"}}
    }))
    .unwrap();
    let class: crate::snapshot::VolumeSnapshotClass = serde_json::from_value(
        json!({"metadata": {"name": "flex"}, "driver": ME, "deletionPolicy": "Delete"}),
    )
    .unwrap();
    let pv = serde_json::from_value(json!({"metadata": {"name": "pvc-c1", "uid": "pv-u"},
        "spec": {"capacity": {"storage": "1Gi"}}}))
    .unwrap();
    let volume = crate::record::Record {
        recipe: serde_json::from_value(json!({
            "namespace": "cfg", "config": "cfg/hostpath", "image": "hostpath:1",
            "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": [2],
            "podTemplate": {"spec": {
                "volumes": [{"name": "base", "hostPath": {"path": "/var/flex"}}],
                "containers": [{"name": "provisioner",
                    "volumeMounts": [{"name": "base", "mountPath": "/var/flex"}]}]}},
            "volume": {"base": "base", "directory": "team/data-c1"}}))
        .unwrap(),
        expand: None,
        parameters: BTreeMap::new(),
    };
    let taken = crate::snapshot::jobs::snapshot_job(crate::snapshot::jobs::SnapshotJob {
        snapshot: &snapshot,
        content: &c,
        class: &class,
        pv: &pv,
        volume: &volume,
        provisioner_name: ME,
        attempt: 1,
        ttl_seconds: 60,
    });
    let failed = with_status(
        taken,
        json!({"failed": 1, "conditions": [{"type": "Failed",
        "status": "True", "reason": "PodFailurePolicy"}]}),
    );
    let attempts = crate::snapshot::record::leftover_of(&failed)
        .and_then(|r| crate::snapshot::record::build_attempt_record(&c, &r))
        .unwrap();
    let mut w = world(c.clone());
    w.record_read = true;
    w.jobs = vec![failed];
    let removes_the_directory = |step: ContentStep| {
        let ContentStep::CreateJob(job) = step else {
            panic!("the leftovers stay: {step:?}")
        };
        let env = &job.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        let var = |n: &str| {
            env.iter()
                .find(|e| e.name == n)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(var("ACTION").as_deref(), Some("delete-snapshot"));
        assert_eq!(
            var("VOLUME_DIRECTORY").as_deref(),
            Some(".snapshots/team/9f1c")
        );
        assert_eq!(
            var("SNAPSHOT_HANDLE").as_deref(),
            Some("/var/flex/.snapshots/team/9f1c")
        );
    };
    removes_the_directory(step(&w));
    // The Job expired long ago: the attempts' record says the same.
    w.jobs = vec![];
    assert!(matches!(step(&w), ContentStep::Finish(_)), "without it");
    w.attempt_record = Some(attempts.clone());
    removes_the_directory(step(&w));
    // One written for another content is not used, and said.
    let mut other = c;
    other.metadata.uid = Some("other-u".into());
    let mut w = world(other);
    w.record_read = true;
    w.attempt_record = Some(attempts);
    let p = decide(&w).unwrap();
    assert_eq!(p.step, ContentStep::Ignore);
    assert!(
        p.notices[0]
            .message
            .contains("not written for this content"),
        "{}",
        p.notices[0].message
    );
}
