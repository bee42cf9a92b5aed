use super::*;
use crate::snapshot::VolumeSnapshotContentStatus;
use crate::snapshot::fixtures::{self, ME, class, recipe, snapshot};
use serde_json::json;

fn claim() -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "team", "uid": "c1"},
        "spec": {"volumeName": "pvc-c1"}, "status": {"phase": "Bound"}
    }))
    .unwrap()
}

/// The claim's volume, made and verified by this provisioner.
fn pv() -> PersistentVolume {
    let mut pv = fixtures::pv();
    pv.metadata.annotations = Some(BTreeMap::from([(
        "pv.kubernetes.io/provisioned-by".into(),
        ME.into(),
    )]));
    pv.metadata.finalizers = Some(vec![crate::names::FINALIZER_DEPROVISION.into()]);
    pv
}

fn content() -> VolumeSnapshotContent {
    let mut c = content_for(&snapshot(), &class(ME), &pv(), BTreeMap::new()).unwrap();
    c.metadata.uid = Some("content-u".into());
    c.metadata.resource_version = Some("7".into());
    c
}

struct World {
    snapshot: VolumeSnapshot,
    class: VolumeSnapshotClass,
    claim: Option<PersistentVolumeClaim>,
    pv: PersistentVolume,
    enabled: Result<bool, String>,
    content: Option<VolumeSnapshotContent>,
    volume_record: Option<Result<Record, RecordError>>,
    record: Option<ConfigMap>,
    /// The attempts' record was written (the first attempt is then started).
    attempt_recorded: bool,
    jobs: Vec<Job>,
    pods: Vec<Pod>,
}

fn world() -> World {
    World {
        snapshot: snapshot(),
        class: class(ME),
        claim: Some(claim()),
        pv: pv(),
        enabled: Ok(true),
        content: None,
        volume_record: None,
        record: None,
        attempt_recorded: true,
        jobs: vec![],
        pods: vec![],
    }
}

fn decide(w: &World) -> Decision<SnapshotPlan> {
    let attempt_record = ConfigMap::default();
    plan_snapshot(&SnapshotInputs {
        snapshot: &w.snapshot,
        provisioner_name: ME,
        class: Some(&w.class),
        claim: w.claim.as_ref(),
        pv: Some(&w.pv),
        enabled: w.enabled.clone(),
        content: w.content.as_ref(),
        content_unseen: false,
        volume_record: w.volume_record.clone(),
        record: w.record.as_ref(),
        record_read: w.volume_record.is_some(),
        attempt_record: w.attempt_recorded.then_some(&attempt_record),
        jobs: w.jobs.iter().collect(),
        pods: w.pods.iter().collect(),
        retry_base: Duration::from_secs(10),
        job_ttl_seconds: 60,
        now: jiff::Timestamp::from_second(1_795_900_100).unwrap(),
    })
}

fn step(w: &World) -> SnapshotStep {
    decide(w).unwrap().step
}

fn volume_record() -> Record {
    Record {
        recipe: recipe(),
        expand: None,
        parameters: BTreeMap::new(),
    }
}

/// The snapshot Job attempt 1 would be, with a status.
fn job(status: Value) -> Job {
    let w = World {
        content: Some(content()),
        volume_record: Some(Ok(volume_record())),
        ..world()
    };
    let SnapshotStep::CreateJob(job) = step(&w) else {
        panic!("no Job")
    };
    let mut job = *job;
    job.metadata.uid = Some("job-u".into());
    job.status = Some(serde_json::from_value(status).unwrap());
    job
}

fn pod_of(job: &Job, phase: &str, code: i32, message: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "cfg", "creationTimestamp": "2026-11-28T21:00:00Z",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                          "uid": job.metadata.uid}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "provisioner", "image": "i",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "message": message}}}]}
    }))
    .unwrap()
}

#[test]
fn another_drivers_or_no_class_is_not_ours_and_says_nothing() {
    let w = World {
        class: class("ebs.csi.aws.com"),
        ..world()
    };
    assert_eq!(
        decide(&w).unwrap(),
        SnapshotPlan {
            step: SnapshotStep::Ignore,
            notices: vec![]
        }
    );
}

#[test]
fn the_content_is_made_only_for_a_bound_verified_volume_of_a_class_that_takes_snapshots() {
    let SnapshotStep::CreateContent(c) = step(&world()) else {
        panic!("no content")
    };
    assert_eq!(c.metadata.name.as_deref(), Some("snapcontent-9f1c"));
    assert_eq!(c.spec.volume_snapshot_ref.uid.as_deref(), Some("9f1c"));
    let blocked = |w: World, says: &str| {
        let p = decide(&w).unwrap();
        assert_eq!(p.step, SnapshotStep::Wait(BLOCKED_RECHECK), "{says}");
        assert!(
            p.notices[0].message.contains(says),
            "{}",
            p.notices[0].message
        );
        assert_eq!(p.notices[0].reason, reasons::CONTENT_CREATION_FAILED);
    };
    blocked(
        World {
            claim: None,
            ..world()
        },
        "does not exist",
    );
    let mut pending = claim();
    pending.status = None;
    blocked(
        World {
            claim: Some(pending),
            ..world()
        },
        "not bound yet",
    );
    // A claim pre-bound to another tenant's volume: the volume is not bound back to it.
    let mut other = pv();
    other.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = Some("victim".into());
    blocked(
        World {
            pv: other,
            ..world()
        },
        "not bound back",
    );
    let mut foreign = pv();
    foreign.metadata.finalizers = None;
    blocked(
        World {
            pv: foreign,
            ..world()
        },
        "not made by this provisioner",
    );
    blocked(
        World {
            enabled: Ok(false),
            ..world()
        },
        "snapshots: \"true\"",
    );
    blocked(
        World {
            enabled: Err("image is missing".into()),
            ..world()
        },
        "image is missing",
    );
}

#[test]
fn a_content_made_by_someone_else_runs_nothing() {
    let mut forged = content();
    forged.spec.source.volume_handle = Some("pvc-of-another-tenant".into());
    let p = decide(&World {
        content: Some(forged),
        ..world()
    })
    .unwrap();
    assert_eq!(p.step, SnapshotStep::Ignore);
    assert_eq!(p.notices[0].reason, reasons::CONTENT_MISMATCH);
    let mut unbound = content();
    unbound.spec.volume_snapshot_ref.uid = Some("another-snapshot".into());
    assert_eq!(
        step(&World {
            content: Some(unbound),
            ..world()
        }),
        SnapshotStep::Ignore
    );
}

#[test]
fn the_job_is_built_from_the_volumes_record_read_first() {
    let w = World {
        content: Some(content()),
        ..world()
    };
    assert_eq!(decide(&w), Err(Ask::Record));
    // Before the first attempt: the record of where the attempts write.
    let w = World {
        volume_record: Some(Ok(volume_record())),
        attempt_recorded: false,
        ..w
    };
    let SnapshotStep::WriteRecord(attempts) = step(&w) else {
        panic!()
    };
    assert_eq!(
        attempts.metadata.name.as_deref(),
        Some("flex-snapshot-attempt-9f1c")
    );
    let attempts = crate::snapshot::record::read_attempt_record(&attempts, &content()).unwrap();
    assert_eq!(
        attempts.recipe.volume.unwrap().directory,
        ".snapshots/team/9f1c"
    );
    let w = World {
        attempt_recorded: true,
        ..w
    };
    let SnapshotStep::CreateJob(job) = step(&w) else {
        panic!()
    };
    assert_eq!(job.metadata.name.as_deref(), Some("snapshot-9f1c"));
    let w = World {
        volume_record: Some(Err(RecordError::Missing("flex-record-pv-u".into()))),
        ..w
    };
    let p = decide(&w).unwrap();
    assert_eq!(p.step, SnapshotStep::Wait(BLOCKED_RECHECK));
    assert!(
        p.notices[0].message.contains("flex-record-pv-u"),
        "{}",
        p.notices[0].message
    );
}

#[test]
fn a_checked_report_is_recorded_then_the_content_and_snapshot_are_ready() {
    let done = job(json!({"completionTime": "2026-11-28T21:06:40Z",
        "conditions": [{"type": "Complete", "status": "True"}]}));
    let report =
        "{\"snapshotHandle\":\"/var/flex/.snapshots/team/9f1c\",\"restoreSize\":1073741824}";
    let w = World {
        content: Some(content()),
        pods: vec![pod_of(&done, "Succeeded", 0, report)],
        jobs: vec![done],
        ..world()
    };
    let p = decide(&w).unwrap();
    let SnapshotStep::WriteRecord(record) = p.step else {
        panic!("no record")
    };
    // Told once, and counted as the CSI snapshotter counts a CreateSnapshot that succeeded.
    assert_eq!(p.notices[0].reason, reasons::CREATED);
    assert_eq!(p.notices[0].key, "taken/job-u");
    assert_eq!(call_of(&p.notices[0]), (false, CallStatus::Ok));
    let content_ready = {
        let mut c = content();
        c.status = Some(VolumeSnapshotContentStatus {
            ready_to_use: Some(true),
            snapshot_handle: Some("/var/flex/.snapshots/team/9f1c".into()),
            restore_size: Some(1 << 30),
            creation_time: Some(1_795_900_000_000_000_000),
            error: None,
        });
        c
    };
    let w = World {
        record: Some(*record),
        ..w
    };
    let SnapshotStep::PatchContentStatus(patch) = step(&w) else {
        panic!()
    };
    assert_eq!(patch["status"]["readyToUse"], true);
    assert_eq!(
        patch["status"]["creationTime"],
        1_795_900_000_000_000_000_i64
    );
    let w = World {
        content: Some(content_ready),
        ..w
    };
    let p = decide(&w).unwrap();
    let SnapshotStep::PatchSnapshotStatus(patch) = p.step else {
        panic!()
    };
    assert_eq!(patch["status"]["readyToUse"], true);
    assert_eq!(patch["status"]["restoreSize"], "1Gi");
    assert_eq!(p.notices[0].reason, reasons::READY);
}

#[test]
fn a_report_naming_another_directory_gives_up_and_records_nothing() {
    let done = job(json!({"completionTime": "2026-11-28T21:06:40Z",
        "conditions": [{"type": "Complete", "status": "True"}]}));
    let report = "{\"snapshotHandle\":\"/var/flex/team/another-tenant\",\"restoreSize\":1}";
    let w = World {
        content: Some(content()),
        pods: vec![pod_of(&done, "Succeeded", 0, report)],
        jobs: vec![done],
        ..world()
    };
    let p = decide(&w).unwrap();
    let SnapshotStep::GiveUp { content, status } = p.step else {
        panic!("{:?}", p.step)
    };
    assert_eq!(content["metadata"]["annotations"][ANN_GAVE_UP], "1");
    assert_eq!(content["metadata"]["resourceVersion"], "7");
    assert_eq!(call_of(&p.notices[0]), (false, CallStatus::InvalidArgument));
    let message = status["status"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("only the snapshot it was given"),
        "{message}"
    );
}

#[test]
fn a_failed_attempt_tells_the_images_message_and_retries_a_permanent_one_gives_up() {
    let failed = job(
        json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
        "reason": "BackoffLimitExceeded", "lastTransitionTime": "2026-11-28T21:08:00Z"}]}),
    );
    let pod = pod_of(&failed, "Failed", 1, "no space left on /var/flex");
    let w = World {
        content: Some(content()),
        pods: vec![pod],
        jobs: vec![failed.clone()],
        ..world()
    };
    let p = decide(&w).unwrap();
    let SnapshotStep::PatchContentStatus(patch) = &p.step else {
        panic!("{:?}", p.step)
    };
    let message = patch["status"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exit code 1: no space left on /var/flex"),
        "{message}"
    );
    assert!(message.contains("attempt 2 starts in 10s"), "{message}");
    assert_eq!(p.notices[0].reason, reasons::CREATION_FAILED);
    assert_eq!(call_of(&p.notices[0]), (false, CallStatus::Unknown));
    // Once the content says so, the snapshot is told, then attempt 2 starts when due.
    let mut told = content();
    told.status = Some(VolumeSnapshotContentStatus {
        ready_to_use: Some(false),
        error: Some(serde_json::from_value(patch["status"]["error"].clone()).unwrap()),
        ..Default::default()
    });
    let w = World {
        content: Some(told),
        ..w
    };
    let SnapshotStep::PatchSnapshotStatus(mirror) = step(&w) else {
        panic!()
    };
    assert!(
        mirror["status"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no space left")
    );
    let mut snapshot = snapshot();
    snapshot.status = Some(
        serde_json::from_value(json!({
        "boundVolumeSnapshotContentName": "snapcontent-9f1c", "readyToUse": false,
        "error": mirror["status"]["error"]}))
        .unwrap(),
    );
    let w = World { snapshot, ..w };
    assert_eq!(decide(&w), Err(Ask::Record), "the volume's record, afresh");
    let w = World {
        volume_record: Some(Ok(volume_record())),
        ..w
    };
    let SnapshotStep::CreateJob(second) = step(&w) else {
        panic!()
    };
    assert_eq!(second.metadata.name.as_deref(), Some("snapshot-9f1c-2"));

    let mut permanent = failed;
    permanent.status = Some(
        serde_json::from_value(json!({"failed": 1, "conditions": [
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]}))
        .unwrap(),
    );
    let pod = pod_of(&permanent, "Failed", 2, "quota exceeded on /var/flex");
    let w = World {
        content: Some(content()),
        pods: vec![pod],
        jobs: vec![permanent],
        ..world()
    };
    let p = decide(&w).unwrap();
    let SnapshotStep::GiveUp { status, .. } = p.step else {
        panic!()
    };
    let message = status["status"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exit code 2: quota exceeded on /var/flex"),
        "{message}"
    );
    assert_eq!(call_of(&p.notices[0]), (false, CallStatus::InvalidArgument));
    // Past its timeout: DeadlineExceeded, whatever else failed it.
    let mut late = w.jobs[0].clone();
    late.status = Some(
        serde_json::from_value(json!({"failed": 1, "conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}))
        .unwrap(),
    );
    let w = World {
        jobs: vec![late],
        ..w
    };
    let p = decide(&w).unwrap();
    assert_eq!(
        call_of(&p.notices[0]),
        (false, CallStatus::DeadlineExceeded)
    );
    // Given up: after its Jobs expired, nothing new starts.
    let mut gave_up = content();
    gave_up.metadata.annotations = Some(BTreeMap::from([(ANN_GAVE_UP.into(), "1".into())]));
    let w = World {
        content: Some(gave_up),
        ..world()
    };
    assert!(matches!(
        step(&w),
        SnapshotStep::PatchSnapshotStatus(_) | SnapshotStep::Ignore
    ));
}

#[test]
fn a_deleted_or_static_snapshot_is_its_contents_business() {
    let mut deleted = snapshot();
    deleted.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    assert_eq!(
        step(&World {
            snapshot: deleted,
            ..world()
        }),
        SnapshotStep::Ignore
    );
    let mut fixed = snapshot();
    fixed.spec.source = serde_json::from_value(json!({"volumeSnapshotContentName": "x"})).unwrap();
    assert_eq!(
        step(&World {
            snapshot: fixed,
            ..world()
        }),
        SnapshotStep::Ignore
    );
}

#[test]
fn a_snapshot_once_taken_is_never_taken_again() {
    // Its content deleted by hand: no new content.
    let mut bound = snapshot();
    bound.status = Some(
        serde_json::from_value(json!({"boundVolumeSnapshotContentName": "snapcontent-9f1c"}))
            .unwrap(),
    );
    let p = decide(&World {
        snapshot: bound,
        ..world()
    })
    .unwrap();
    assert_eq!(p.step, SnapshotStep::Ignore);
    assert_eq!(p.notices[0].reason, reasons::CONTENT_MISSING);
    // Its content says it was taken, its record is gone: no Job.
    let mut taken = content();
    taken.status = Some(VolumeSnapshotContentStatus {
        ready_to_use: Some(true),
        snapshot_handle: Some("/var/flex/.snapshots/team/9f1c".into()),
        ..Default::default()
    });
    let w = World {
        content: Some(taken),
        volume_record: Some(Ok(volume_record())),
        ..world()
    };
    let p = decide(&w).unwrap();
    assert_eq!(p.step, SnapshotStep::Ignore);
    assert!(
        p.notices[0]
            .message
            .contains("record flex-snapshot-9f1c is gone")
    );
    // A content being deleted starts nothing.
    let mut deleting = content();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    let w = World {
        content: Some(deleting),
        volume_record: Some(Ok(volume_record())),
        ..world()
    };
    assert_eq!(step(&w), SnapshotStep::Ignore);
}

#[test]
fn status_writes_apply_only_to_the_objects_they_were_decided_for() {
    let failed = job(
        json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
        "reason": "BackoffLimitExceeded", "lastTransitionTime": "2026-11-28T21:08:00Z"}]}),
    );
    let w = World {
        content: Some(content()),
        pods: vec![pod_of(&failed, "Failed", 1, "busy")],
        jobs: vec![failed],
        ..world()
    };
    let SnapshotStep::PatchContentStatus(patch) = step(&w) else {
        panic!()
    };
    assert_eq!(patch["metadata"]["uid"], "content-u");
}

/// What a notice counts as in the metrics: which call, and its code.
fn call_of(n: &Notice) -> (bool, CallStatus) {
    match n.kind {
        crate::plan::NoticeKind::SnapshotCall(c) => (c.delete, c.status),
        other => panic!("counted as {other:?}"),
    }
}
