//! Objects the snapshot tests share: one VolumeSnapshot `team/before` of claim `data`, its
//! class, the claim's volume and the volume's recorded recipe.

use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::json;

use super::{VolumeSnapshot, VolumeSnapshotClass};
use crate::recipe::JobRecipe;

/// The provisioner's name in these tests.
pub const ME: &str = "flex-provisioner.io/job";

/// `team/before` (uid `9f1c`) of claim `data`, of class `flex`.
pub fn snapshot() -> VolumeSnapshot {
    serde_json::from_value(json!({
        "metadata": {"name": "before", "namespace": "team", "uid": "9f1c"},
        "spec": {"volumeSnapshotClassName": "flex",
                 "source": {"persistentVolumeClaimName": "data"}}
    }))
    .unwrap()
}

/// Class `flex` of `driver`, deleting its snapshots' copies.
pub fn class(driver: &str) -> VolumeSnapshotClass {
    serde_json::from_value(json!({"metadata": {"name": "flex"}, "driver": driver,
        "deletionPolicy": "Delete"}))
    .unwrap()
}

/// The claim's volume `pvc-c1`, a directory of `/var/flex`.
pub fn pv() -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pvc-c1", "uid": "pv-u"},
        "spec": {"capacity": {"storage": "1Gi"}, "storageClassName": "hostpath",
                 "local": {"path": "/var/flex/team/data-c1"},
                 "claimRef": {"namespace": "team", "name": "data", "uid": "c1"}}
    }))
    .unwrap()
}

/// The volume's recorded recipe: the hostpath image with `/var/flex` mounted as `base`.
pub fn recipe() -> JobRecipe {
    serde_json::from_value(json!({
        "namespace": "cfg", "config": "cfg/hostpath", "image": "hostpath:1",
        "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": [2],
        "podTemplate": {"spec": {
            "volumes": [{"name": "base", "hostPath": {"path": "/var/flex"}}],
            "containers": [{"name": "provisioner",
                            "volumeMounts": [{"name": "base", "mountPath": "/var/flex"}]}]}},
        "volume": {"base": "base", "directory": "team/data-c1"}
    }))
    .unwrap()
}
