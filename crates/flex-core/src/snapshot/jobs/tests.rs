use super::*;
use crate::snapshot::fixtures::{self, pv, snapshot};
use serde_json::{Value, json};

fn recipe() -> JobRecipe {
    let mut r = fixtures::recipe();
    r.node = Some("node-a".into());
    r.no_api_token = true;
    r
}

fn class() -> VolumeSnapshotClass {
    fixtures::class(fixtures::ME)
}

fn content() -> VolumeSnapshotContent {
    let mut c = super::super::content_for(&snapshot(), &class(), &pv(), BTreeMap::new()).unwrap();
    c.metadata.uid = Some("content-u".into());
    c
}

/// The Job's one container.
fn container(job: &Job) -> &k8s_openapi::api::core::v1::Container {
    &job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}

fn env(job: &Job) -> BTreeMap<String, String> {
    let c = container(job);
    (c.env.iter().flatten())
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

/// (mountPath, subPath, readOnly) of the container's mounts.
fn mounts(job: &Job) -> Vec<(String, Option<String>, bool)> {
    let c = container(job);
    (c.volume_mounts.iter().flatten())
        .map(|m| {
            (
                m.mount_path.clone(),
                m.sub_path.clone(),
                m.read_only == Some(true),
            )
        })
        .collect()
}

#[test]
fn a_snapshot_job_reads_the_volume_and_writes_only_its_snapshot() {
    let volume = crate::record::Record {
        recipe: recipe(),
        expand: None,
        parameters: BTreeMap::from([("base-path".into(), "/var/flex".into())]),
    };
    let job = snapshot_job(SnapshotJob {
        snapshot: &snapshot(),
        content: &content(),
        class: &class(),
        pv: &pv(),
        volume: &volume,
        provisioner_name: "flex-provisioner.io/job",
        attempt: 1,
        ttl_seconds: 60,
    });
    assert_eq!(job.metadata.name.as_deref(), Some("snapshot-9f1c"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("cfg"));
    let labels = job.metadata.labels.clone().unwrap();
    assert_eq!(labels["flex-provisioner.io/action"], "snapshot");
    assert_eq!(labels[LABEL_SNAPSHOT_UID], "9f1c");
    assert!(
        !labels.contains_key("flex-provisioner.io/claim-uid")
            && !labels.contains_key("flex-provisioner.io/volume"),
        "no claim's or volume's plan counts it among its own Jobs: {labels:?}"
    );
    let ann = job.metadata.annotations.clone().unwrap();
    assert_eq!(ann[ANN_SNAPSHOT], "team/before");
    assert_eq!(ann[ANN_CONTENT_UID], "content-u");
    assert_eq!(ann[ANN_SOURCE_VOLUME], "pvc-c1");
    assert_eq!(ann[ANN_SNAPSHOT_HANDLE], "/var/flex/.snapshots/team/9f1c");
    let e = env(&job);
    assert_eq!(e["ACTION"], "snapshot");
    assert_eq!(e["VOLUME_DIRECTORY"], ".snapshots/team/9f1c");
    assert_eq!(e["SNAPSHOT_DIRECTORY"], ".snapshots/team/9f1c");
    assert_eq!(e["SNAPSHOT_UID"], "9f1c");
    assert_eq!(e["SELECTED_NODE"], "node-a");
    assert_eq!(e["REQUESTED_BYTES"], "1073741824");
    assert_eq!(e["BASE_PATH"], "/var/flex");
    let source: Value = serde_json::from_str(&e["SOURCE_PV_JSON"]).unwrap();
    assert_eq!(source["spec"]["local"]["path"], "/var/flex/team/data-c1");
    assert_eq!(
        mounts(&job),
        vec![
            (
                "/var/flex/.snapshots/team/9f1c".into(),
                Some(".snapshots/team/9f1c".into()),
                false
            ),
            (
                "/var/flex/team/data-c1".into(),
                Some("team/data-c1".into()),
                true
            ),
        ]
    );
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
}

#[test]
fn a_delete_snapshot_job_is_built_from_the_record_alone() {
    let record = SnapshotRecord {
        snapshot: ("team".into(), "before".into()),
        snapshot_uid: "9f1c".into(),
        source_pv: pv(),
        handle: "/var/flex/.snapshots/team/9f1c".into(),
        restore_size: 1 << 30,
        taken_at: jiff::Timestamp::UNIX_EPOCH,
        recipe: snapshot_recipe(&recipe(), "team", "9f1c"),
        parameters: BTreeMap::new(),
    };
    let mut forged = content();
    forged.spec.source.snapshot_handle = Some("/var/flex/team/other-tenant".into());
    let job = delete_snapshot_job(&record, &forged, "flex-provisioner.io/job", 2, 60);
    assert_eq!(job.metadata.name.as_deref(), Some("delete-snapshot-9f1c-2"));
    let e = env(&job);
    assert_eq!(e["ACTION"], "delete-snapshot");
    assert_eq!(e["SNAPSHOT_HANDLE"], "/var/flex/.snapshots/team/9f1c");
    assert_eq!(e["VOLUME_DIRECTORY"], ".snapshots/team/9f1c");
    assert!(
        !e.values().any(|v| v.contains("other-tenant")),
        "nothing comes from the content"
    );
    assert_eq!(
        mounts(&job),
        vec![(
            "/var/flex/.snapshots/team".into(),
            Some(".snapshots/team".into()),
            false
        )]
    );
}

#[test]
fn a_restore_copies_from_the_snapshot_as_a_clone_from_its_source() {
    let mut record = SnapshotRecord {
        snapshot: ("team".into(), "before".into()),
        snapshot_uid: "9f1c".into(),
        source_pv: pv(),
        handle: "/var/flex/.snapshots/team/9f1c".into(),
        restore_size: 1,
        taken_at: jiff::Timestamp::UNIX_EPOCH,
        recipe: snapshot_recipe(&recipe(), "team", "9f1c"),
        parameters: BTreeMap::new(),
    };
    let source = restored_volume(&record).unwrap();
    let local = source.spec.unwrap().local.unwrap();
    assert_eq!(local.path, "/var/flex/.snapshots/team/9f1c");
    record.source_pv = serde_json::from_value(json!({"metadata": {"name": "pvc-n"},
        "spec": {"nfs": {"server": "nfs.example", "path": "/exports/team/data"}}}))
    .unwrap();
    record.handle = "nfs.example:/exports/.snapshots/team/9f1c".into();
    let nfs = restored_volume(&record).unwrap().spec.unwrap().nfs.unwrap();
    assert_eq!(nfs.path, "/exports/.snapshots/team/9f1c");
    record.handle = "elsewhere:/exports/.snapshots/team/9f1c".into();
    assert!(restored_volume(&record).is_none(), "another server");
}
