use super::*;

fn snapshot(status: Value) -> VolumeSnapshot {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": "VolumeSnapshot",
        "metadata": {"name": "before-upgrade", "namespace": "team", "uid": "9f1c"},
        "spec": {"volumeSnapshotClassName": "flex-snapshots",
                 "source": {"persistentVolumeClaimName": "data"}},
        "status": status
    }))
    .unwrap()
}

fn class(policy: &str) -> VolumeSnapshotClass {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": "VolumeSnapshotClass",
        "metadata": {"name": "flex-snapshots"},
        "driver": "flex-provisioner.io/job", "deletionPolicy": policy,
        "parameters": {"compress": "true"}
    }))
    .unwrap()
}

fn pv() -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pvc-1234", "uid": "pv-uid"},
        "spec": {"volumeMode": "Filesystem", "capacity": {"storage": "1Gi"},
                 "claimRef": {"namespace": "team", "name": "data", "uid": "c-uid"}}
    }))
    .unwrap()
}

/// RFC 7386, enough for status patches.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[test]
fn a_content_is_made_pre_bound_as_the_snapshot_controller_expects() {
    let labels = BTreeMap::from([("app.kubernetes.io/managed-by".into(), "flex".into())]);
    let c = content_for(&snapshot(Value::Null), &class("Delete"), &pv(), labels).unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["apiVersion"], API_VERSION);
    assert_eq!(v["kind"], "VolumeSnapshotContent");
    assert_eq!(v["metadata"]["name"], "snapcontent-9f1c");
    assert_eq!(
        v["metadata"]["finalizers"],
        json!([FINALIZER_CONTENT_BOUND])
    );
    assert_eq!(
        v["spec"],
        json!({
            "deletionPolicy": "Delete",
            "driver": "flex-provisioner.io/job",
            "source": {"volumeHandle": "pvc-1234"},
            "sourceVolumeMode": "Filesystem",
            "volumeSnapshotClassName": "flex-snapshots",
            "volumeSnapshotRef": {"apiVersion": API_VERSION, "kind": "VolumeSnapshot",
                                  "name": "before-upgrade", "namespace": "team", "uid": "9f1c"}
        }),
        "a volumeHandle and never a snapshotHandle: a dynamic content"
    );
    assert!(v.get("status").is_none());
    let mut no_uid = snapshot(Value::Null);
    no_uid.metadata.uid = None;
    assert!(content_for(&no_uid, &class("Delete"), &pv(), BTreeMap::new()).is_none());
}

#[test]
fn the_kinds_are_addressed_where_the_api_server_serves_them() {
    use k8s_openapi::Resource;
    assert_eq!(VolumeSnapshot::URL_PATH_SEGMENT, "volumesnapshots");
    assert_eq!(VolumeSnapshotContent::API_VERSION, API_VERSION);
    assert_eq!(VolumeSnapshotClass::KIND, "VolumeSnapshotClass");
}

#[test]
fn the_mirror_is_what_the_snapshot_controller_writes_and_is_written_once() {
    let taken = jiff::Timestamp::from_second(1_795_900_000).unwrap();
    let mut content = content_for(
        &snapshot(Value::Null),
        &class("Delete"),
        &pv(),
        BTreeMap::new(),
    )
    .unwrap();
    let mut content_json = serde_json::to_value(&content).unwrap();
    merge(
        &mut content_json,
        &content_ready_status("/var/flex/.snapshots/team/9f1c", 1 << 30, taken),
    );
    content = serde_json::from_value(content_json).unwrap();
    assert_eq!(
        content.status.as_ref().unwrap().creation_time,
        Some(1_795_900_000_000_000_000)
    );

    let mut vs = serde_json::to_value(snapshot(Value::Null)).unwrap();
    let patch = snapshot_status_patch(&serde_json::from_value(vs.clone()).unwrap(), &content)
        .expect("a fresh snapshot has everything to learn");
    assert_eq!(
        patch,
        json!({"status": {
            "boundVolumeSnapshotContentName": "snapcontent-9f1c",
            "creationTime": "2026-11-28T21:06:40Z",
            "readyToUse": true,
            "restoreSize": "1Gi",
        }})
    );
    merge(&mut vs, &patch);
    let vs: VolumeSnapshot = serde_json::from_value(vs).unwrap();
    assert_eq!(
        snapshot_status_patch(&vs, &content),
        None,
        "what it would write is there: the other writer finds nothing to change"
    );
}

#[test]
fn an_error_is_copied_and_cleared_and_readiness_follows_the_content() {
    let failed = SnapshotError {
        message: Some("attempt 1 failed: exit code 2: no space left".into()),
        time: None,
    };
    let mut content = content_for(
        &snapshot(Value::Null),
        &class("Retain"),
        &pv(),
        BTreeMap::new(),
    )
    .unwrap();
    content.status = Some(VolumeSnapshotContentStatus {
        error: Some(failed.clone()),
        ..Default::default()
    });
    let bound = json!({"boundVolumeSnapshotContentName": "snapcontent-9f1c", "readyToUse": false});
    let patch = snapshot_status_patch(&snapshot(bound.clone()), &content).unwrap();
    assert_eq!(
        patch,
        json!({"status": {"error": {"message": failed.message}}})
    );

    content.status = Some(VolumeSnapshotContentStatus::default());
    let mut erring = bound.clone();
    erring["error"] = json!({"message": "old"});
    let patch = snapshot_status_patch(&snapshot(erring), &content).unwrap();
    assert_eq!(patch, json!({"status": {"error": null}}));

    let mut ready = bound;
    ready["readyToUse"] = json!(true);
    let patch = snapshot_status_patch(&snapshot(ready), &content).unwrap();
    assert_eq!(
        patch,
        json!({"status": {"readyToUse": false}}),
        "both ways, as the snapshot-controller copies it"
    );
}
