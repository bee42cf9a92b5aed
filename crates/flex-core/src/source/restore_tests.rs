//! `restore_source`: what a claim restored from a VolumeSnapshot copies, or why it cannot.

use super::*;
use crate::snapshot::fixtures::{ME, class};
use crate::snapshot::record::{SnapshotRecord, build_snapshot_record};
use crate::snapshot::{VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotContent, content_for};
use serde_json::json;

fn request(size: &str) -> crate::claim::ClaimRequest {
    let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "restored", "namespace": "team", "uid": "r-1"},
        "spec": {"storageClassName": "hostpath", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": size}},
                 "dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                                "name": "before"}}
    }))
    .unwrap();
    crate::claim::ClaimRequest::from_claim(&pvc).unwrap()
}

fn snapshot(ready: bool) -> VolumeSnapshot {
    serde_json::from_value(json!({
        "metadata": {"name": "before", "namespace": "team", "uid": "9f1c"},
        "spec": {"volumeSnapshotClassName": "flex",
                 "source": {"persistentVolumeClaimName": "data"}},
        "status": {"readyToUse": ready, "boundVolumeSnapshotContentName": "snapcontent-9f1c"}
    }))
    .unwrap()
}

fn pv() -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pvc-c1", "uid": "pv-u"},
        "spec": {"capacity": {"storage": "1Gi"}, "local": {"path": "/var/flex/team/data-c1"},
                 "claimRef": {"namespace": "team", "name": "data", "uid": "c1"}}
    }))
    .unwrap()
}

fn content() -> VolumeSnapshotContent {
    let mut c = content_for(&snapshot(true), &class(ME), &pv(), BTreeMap::new()).unwrap();
    c.metadata.uid = Some("content-u".into());
    c
}

fn record(for_snapshot: (&str, &str), bytes: i64) -> k8s_openapi::api::core::v1::ConfigMap {
    let recipe = serde_json::from_value(json!({
        "namespace": "cfg", "config": "cfg/hostpath", "image": "hostpath:1",
        "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": [2]}))
    .unwrap();
    let r = SnapshotRecord {
        snapshot: (for_snapshot.0.into(), for_snapshot.1.into()),
        snapshot_uid: "9f1c".into(),
        source_pv: pv(),
        handle: "/var/flex/.snapshots/team/9f1c".into(),
        restore_size: bytes,
        taken_at: jiff::Timestamp::UNIX_EPOCH,
        recipe,
        parameters: BTreeMap::from([("base-path".into(), "/var/flex".into())]),
    };
    build_snapshot_record(&content(), &r).unwrap()
}

struct Given {
    claim: crate::claim::ClaimRequest,
    snapshot: Option<VolumeSnapshot>,
    class: Option<VolumeSnapshotClass>,
    content: Option<VolumeSnapshotContent>,
    record: Option<k8s_openapi::api::core::v1::ConfigMap>,
}

fn given() -> Given {
    Given {
        claim: request("1Gi"),
        snapshot: Some(snapshot(true)),
        class: Some(class(ME)),
        content: Some(content()),
        record: Some(record(("team", "before"), 1 << 30)),
    }
}

fn source(g: &Given) -> SourceData {
    restore_source(&RestoreFrom {
        claim: &g.claim,
        name: "before",
        snapshot: g.snapshot.as_ref(),
        class: g.class.as_ref(),
        content: g.content.as_ref(),
        record: g.record.as_ref(),
        provisioner_name: ME,
    })
}

fn refused(g: Given, says: &str) {
    match source(&g) {
        SourceData::Unusable(why) => assert!(why.contains(says), "{why}"),
        other => panic!("{says}: {other:?}"),
    }
}

#[test]
fn a_ready_snapshot_of_ours_is_restored_from_its_copy() {
    let SourceData::Snapshot {
        pv,
        handle,
        parameters,
        ..
    } = source(&given())
    else {
        panic!("not restored")
    };
    assert_eq!(handle, "/var/flex/.snapshots/team/9f1c");
    assert_eq!(
        pv.spec.unwrap().local.unwrap().path,
        "/var/flex/.snapshots/team/9f1c",
        "the volume as recorded, its path moved to the copy"
    );
    assert_eq!(parameters["base-path"], "/var/flex");
    let env: BTreeMap<_, _> = source(&given()).env().into_iter().collect();
    assert_eq!(env["SNAPSHOT_HANDLE"], "/var/flex/.snapshots/team/9f1c");
    assert!(env["DATA_SOURCE_JSON"].contains("\"before\""));
    assert_eq!(
        source(&given()).annotation().unwrap().0,
        crate::names::ANN_SOURCE_SNAPSHOT
    );
}

#[test]
fn a_snapshot_that_is_not_ours_or_not_ready_is_refused_in_words() {
    refused(
        Given {
            snapshot: None,
            ..given()
        },
        "team/before does not exist",
    );
    refused(
        Given {
            class: Some(class("ebs.csi.aws.com")),
            ..given()
        },
        "driver is ebs.csi.aws.com",
    );
    refused(
        Given {
            class: None,
            ..given()
        },
        "names no VolumeSnapshotClass",
    );
    refused(
        Given {
            snapshot: Some(snapshot(false)),
            ..given()
        },
        "not ready to use yet",
    );
    refused(
        Given {
            content: None,
            ..given()
        },
        "not ready to use yet",
    );
    let mut other = content();
    other.spec.volume_snapshot_ref.uid = Some("another".into());
    refused(
        Given {
            content: Some(other),
            ..given()
        },
        "content is not bound to it",
    );
    refused(
        Given {
            record: None,
            ..given()
        },
        "not taken by this provisioner",
    );
    // A record of ours, copied for a snapshot of another namespace of the same uid: refused.
    refused(
        Given {
            record: Some(record(("other-team", "before"), 1)),
            ..given()
        },
        "another snapshot",
    );
    refused(
        Given {
            claim: request("512Mi"),
            ..given()
        },
        "less than the snapshot's restore size",
    );
}
