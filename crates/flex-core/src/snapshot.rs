//! The snapshot API (`snapshot.storage.k8s.io/v1`) as far as this provisioner reads and writes
//! it: VolumeSnapshots users make, VolumeSnapshotClasses admins make, and the
//! VolumeSnapshotContents made here for snapshots of our volumes. Only the fields used are
//! kept. Also what a content made here holds, and the VolumeSnapshot status that the
//! standard snapshot-controller derives from a content (`snapshot_status_patch`), so both
//! writers of that status agree.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[cfg(test)]
pub(crate) mod fixtures;
pub mod jobs;
pub mod record;
pub mod report;

pub const GROUP: &str = "snapshot.storage.k8s.io";
pub const API_VERSION: &str = "snapshot.storage.k8s.io/v1";
/// Held on a content while its backend snapshot may exist; whoever deletes the backend
/// snapshot removes it (the CSI snapshotter's role, ours for our volumes).
pub const FINALIZER_CONTENT_BOUND: &str =
    "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection";
/// Put on a content by the snapshot-controller when its VolumeSnapshot is being deleted.
pub const ANN_BEING_DELETED: &str = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted";

/// `k8s_openapi::Resource` and `Metadata` for a kind of this group, so kube's `Api` and the
/// plans' object references take it as they take built-in kinds.
macro_rules! snapshot_kind {
    ($t:ident, $kind:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $t {
            const API_VERSION: &'static str = API_VERSION;
            const GROUP: &'static str = GROUP;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = "v1";
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }
        impl k8s_openapi::Metadata for $t {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A user's request for a snapshot of a claim (dynamic: it names a claim) or to use an
/// existing content (static: it names the content).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshot {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: VolumeSnapshotSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VolumeSnapshotStatus>,
}
snapshot_kind!(
    VolumeSnapshot,
    "VolumeSnapshot",
    "volumesnapshots",
    k8s_openapi::NamespaceResourceScope
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSpec {
    pub source: VolumeSnapshotSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_class_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_content_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_volume_snapshot_content_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SnapshotError>,
}

/// Why a snapshot is not (yet) ready, as both the VolumeSnapshot's and the content's status
/// carry it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
}

/// The cluster-scoped object that stands for one backend snapshot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContent {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: VolumeSnapshotContentSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VolumeSnapshotContentStatus>,
}
snapshot_kind!(
    VolumeSnapshotContent,
    "VolumeSnapshotContent",
    "volumesnapshotcontents",
    k8s_openapi::ClusterResourceScope
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentSpec {
    /// `Delete` or `Retain`.
    pub deletion_policy: String,
    pub driver: String,
    pub source: VolumeSnapshotContentSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_volume_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_class_name: Option<String>,
    pub volume_snapshot_ref: ObjectReference,
}

/// Exactly one: the volume to snapshot (a content made for a dynamic snapshot) or the
/// backend snapshot that exists (a static one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_handle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_handle: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentStatus {
    /// Nanoseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_handle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SnapshotError>,
}

/// An admin's class of snapshots: which driver takes them, and what becomes of the backend
/// snapshot when its VolumeSnapshot is deleted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotClass {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub driver: String,
    pub deletion_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<BTreeMap<String, String>>,
}
snapshot_kind!(
    VolumeSnapshotClass,
    "VolumeSnapshotClass",
    "volumesnapshotclasses",
    k8s_openapi::ClusterResourceScope
);

/// The name the snapshot-controller looks a dynamic snapshot's content up by.
pub fn content_name(snapshot_uid: &str) -> String {
    format!("snapcontent-{snapshot_uid}")
}

/// The content made for a dynamic snapshot of `pv`: named and pre-bound (with the
/// snapshot's uid) as the snapshot-controller expects, the class's driver and deletion
/// policy, the PV as its source, and the finalizer that keeps it until its backend snapshot
/// is dealt with. `None` for a snapshot without a uid (never one the API server returns).
pub fn content_for(
    snapshot: &VolumeSnapshot,
    class: &VolumeSnapshotClass,
    pv: &PersistentVolume,
    labels: BTreeMap<String, String>,
) -> Option<VolumeSnapshotContent> {
    let uid = snapshot.metadata.uid.clone().filter(|u| !u.is_empty())?;
    let spec = pv.spec.as_ref();
    Some(VolumeSnapshotContent {
        api_version: API_VERSION.into(),
        kind: "VolumeSnapshotContent".into(),
        metadata: ObjectMeta {
            name: Some(content_name(&uid)),
            labels: Some(labels),
            finalizers: Some(vec![FINALIZER_CONTENT_BOUND.into()]),
            ..ObjectMeta::default()
        },
        spec: VolumeSnapshotContentSpec {
            deletion_policy: class.deletion_policy.clone(),
            driver: class.driver.clone(),
            source: VolumeSnapshotContentSource {
                snapshot_handle: None,
                volume_handle: pv.metadata.name.clone(),
            },
            source_volume_mode: spec.and_then(|s| s.volume_mode.clone()),
            volume_snapshot_class_name: class.metadata.name.clone(),
            volume_snapshot_ref: ObjectReference {
                api_version: Some(API_VERSION.into()),
                kind: Some("VolumeSnapshot".into()),
                name: snapshot.metadata.name.clone(),
                namespace: snapshot.metadata.namespace.clone(),
                uid: Some(uid),
                ..ObjectReference::default()
            },
        },
        status: None,
    })
}

/// What a taken snapshot's content status says: ready, its handle and size, taken at
/// `taken` (the content counts time in nanoseconds), and no error.
pub fn content_ready_status(handle: &str, restore_bytes: i64, taken: jiff::Timestamp) -> Value {
    let nanos = i64::try_from(taken.as_nanosecond()).unwrap_or(i64::MAX);
    json!({"status": {
        "readyToUse": true,
        "snapshotHandle": handle,
        "restoreSize": restore_bytes.max(0),
        "creationTime": nanos,
        "error": null,
    }})
}

/// The VolumeSnapshot status the snapshot-controller derives from `content`, as a merge
/// patch of what differs from `snapshot`'s; `None` when nothing does. It binds the content,
/// sets the creation time and a size once, copies readiness both ways and copies the
/// content's error (clearing the snapshot's when the content has none). Written here too
/// (without that controller nobody else would), with the same values, so that whichever
/// writes first leaves the other nothing to change.
pub fn snapshot_status_patch(
    snapshot: &VolumeSnapshot,
    content: &VolumeSnapshotContent,
) -> Option<Value> {
    let now = snapshot.status.clone().unwrap_or_default();
    let cs = content.status.clone().unwrap_or_default();
    let mut patch = serde_json::Map::new();
    if now.bound_volume_snapshot_content_name.is_none() {
        patch.insert(
            "boundVolumeSnapshotContentName".into(),
            json!(content.metadata.name),
        );
    }
    if now.creation_time.is_none()
        && let Some(nanos) = cs.creation_time
        && let Ok(at) = jiff::Timestamp::from_nanosecond(i128::from(nanos))
    {
        patch.insert("creationTime".into(), json!(Time(at)));
    }
    let ready = cs.ready_to_use.unwrap_or(false);
    if now.ready_to_use != Some(ready) {
        patch.insert("readyToUse".into(), json!(ready));
    }
    let no_size = now
        .restore_size
        .as_ref()
        .is_none_or(|q| kube_rules::quantity::parse_bytes(&q.0).is_ok_and(|b| b.0 == 0));
    if no_size && let Some(bytes) = cs.restore_size.filter(|b| *b > 0) {
        let size = kube_rules::quantity::format_binary(bytes.unsigned_abs());
        patch.insert("restoreSize".into(), json!(size));
    }
    match (&now.error, &cs.error) {
        (Some(_), None) => {
            patch.insert("error".into(), Value::Null);
        }
        (a, Some(b)) if a.as_ref() != Some(b) => {
            patch.insert("error".into(), json!(b));
        }
        _ => {}
    }
    (!patch.is_empty()).then(|| json!({ "status": patch }))
}

#[cfg(test)]
mod tests;
