//! The Jobs of a snapshot: one that copies a volume into the snapshot's directory, built
//! from the volume's record (where the volume lives and what runs there), and one that
//! removes that copy, built only from the snapshot's record.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolume;

use super::record::SnapshotRecord;
use super::{VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotContent};
use crate::isolation::{exact_handle, snapshot_directory, source_mount};
use crate::job::{JobInput, build, volume_env};
use crate::names::{
    ANN_CONTENT, ANN_CONTENT_UID, ANN_SNAPSHOT, ANN_SOURCE_VOLUME, Action, LABEL_SNAPSHOT_UID,
    TERMINATION_MESSAGE_PATH, job_name,
};
use crate::recipe::{JobRecipe, VolumeDirectory};

/// On a snapshot Job: the handle its report must name (known when the class has
/// `volume-base`).
pub const ANN_SNAPSHOT_HANDLE: &str = "flex-provisioner.io/snapshot-handle";
/// On a snapshot Job: the recipe its snapshot's delete-snapshot Job will run, recorded
/// with the snapshot (a Job in the config namespace: only the controller and kube admins
/// write it).
pub const ANN_DELETE_SNAPSHOT_SPEC: &str = "flex-provisioner.io/delete-snapshot-spec";

/// What a snapshot Job is made from.
pub struct SnapshotJob<'a> {
    pub snapshot: &'a VolumeSnapshot,
    pub content: &'a VolumeSnapshotContent,
    pub class: &'a VolumeSnapshotClass,
    /// The volume, verified, and its record.
    pub pv: &'a PersistentVolume,
    pub volume: &'a crate::record::Record,
    pub provisioner_name: &'a str,
    pub attempt: u32,
    pub ttl_seconds: i32,
}

/// The recipe a snapshot's Jobs run: the volume's deprovision recipe (its image, placement
/// and pod-template, recorded when the volume was made), pointed at the snapshot's
/// directory in the same base.
pub fn snapshot_recipe(volume: &JobRecipe, namespace: &str, uid: &str) -> JobRecipe {
    let mut recipe = volume.clone();
    recipe.no_api_token = true;
    recipe.volume = volume.volume.as_ref().map(|v| VolumeDirectory {
        base: v.base.clone(),
        directory: snapshot_directory(namespace, uid),
    });
    recipe
}

/// The handle a snapshot Job's report must name, when the class's layout tells it.
pub fn expected_handle(recipe: &JobRecipe) -> Option<String> {
    exact_handle(recipe.pod_template.as_ref()?, recipe.volume.as_ref()?)
}

fn snapshot_env(
    snapshot: &VolumeSnapshot,
    content_name: &str,
    directory: &str,
) -> Vec<(&'static str, String)> {
    let m = &snapshot.metadata;
    vec![
        ("SNAPSHOT_NAME", m.name.clone().unwrap_or_default()),
        (
            "SNAPSHOT_NAMESPACE",
            m.namespace.clone().unwrap_or_default(),
        ),
        ("SNAPSHOT_UID", m.uid.clone().unwrap_or_default()),
        ("SNAPSHOT_CONTENT_NAME", content_name.to_owned()),
        ("SNAPSHOT_DIRECTORY", directory.to_owned()),
        ("VOLUME_DIRECTORY", directory.to_owned()),
        ("TERMINATION_LOG", TERMINATION_MESSAGE_PATH.to_owned()),
    ]
}

/// The Job that copies `pv` into the snapshot's directory (attempt `attempt`). Its image
/// sees the volume read-only, as a clone's sees its source (`SOURCE_PV_JSON`), and writes
/// only the snapshot's directory.
pub fn snapshot_job(j: SnapshotJob<'_>) -> Job {
    let uid = j.snapshot.metadata.uid.clone().unwrap_or_default();
    let namespace = j.snapshot.metadata.namespace.clone().unwrap_or_default();
    let recipe = snapshot_recipe(&j.volume.recipe, &namespace, &uid);
    let directory = snapshot_directory(&namespace, &uid);
    let content_name = j.content.metadata.name.clone().unwrap_or_default();
    let capacity = crate::volume::storage_capacity(&j.pv.spec.clone().unwrap_or_default());
    let mut pv_json = j.pv.clone();
    pv_json.metadata.managed_fields = None;
    let pv_json = serde_json::to_string(&pv_json).unwrap_or_default();
    let mut env = volume_env(
        Action::Snapshot,
        j.provisioner_name,
        j.pv,
        &capacity,
        recipe.node.clone(),
    );
    env.extend(snapshot_env(j.snapshot, &content_name, &directory));
    env.extend([
        (
            "SNAPSHOT_CLASS",
            j.class.metadata.name.clone().unwrap_or_default(),
        ),
        (
            "SNAPSHOT_PARAMETERS",
            serde_json::to_string(&j.class.parameters.clone().unwrap_or_default())
                .unwrap_or_default(),
        ),
        (
            "PARAMETERS",
            serde_json::to_string(&j.volume.parameters).unwrap_or_default(),
        ),
        ("PV_JSON", pv_json.clone()),
        ("SOURCE_PV_JSON", pv_json),
        (
            "SOURCE_PARAMETERS",
            serde_json::to_string(&j.volume.parameters).unwrap_or_default(),
        ),
    ]);
    let handle = expected_handle(&recipe);
    let spec = serde_json::to_string(&recipe).unwrap_or_default();
    let mut job = build(JobInput {
        action: Action::Snapshot,
        name: job_name(Action::Snapshot, &uid, j.attempt),
        attempt: j.attempt,
        claim_uid: String::new(),
        volume: String::new(),
        claim_ref: String::new(),
        storage_class: (j.pv.spec.as_ref())
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default(),
        source: source_mount(&j.volume.recipe),
        recipe,
        env,
        parameters: &j.volume.parameters,
        ttl_seconds: j.ttl_seconds,
        labels: vec![(LABEL_SNAPSHOT_UID.to_owned(), uid)],
    });
    let annotations = job.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        ANN_SNAPSHOT.to_owned(),
        format!(
            "{namespace}/{}",
            j.snapshot.metadata.name.clone().unwrap_or_default()
        ),
    );
    annotations.insert(ANN_CONTENT.to_owned(), content_name);
    annotations.insert(
        ANN_CONTENT_UID.to_owned(),
        j.content.metadata.uid.clone().unwrap_or_default(),
    );
    // The volume is kept while it is copied from, as a clone's source is.
    annotations.insert(
        ANN_SOURCE_VOLUME.to_owned(),
        j.pv.metadata.name.clone().unwrap_or_default(),
    );
    annotations.extend(handle.map(|h| (ANN_SNAPSHOT_HANDLE.to_owned(), h)));
    annotations.insert(ANN_DELETE_SNAPSHOT_SPEC.to_owned(), spec);
    annotations.insert(
        crate::names::ANN_VOLUME_UID.to_owned(),
        j.pv.metadata.uid.clone().unwrap_or_default(),
    );
    job
}

/// The Job that removes a snapshot's copy (attempt `attempt`), from its record alone.
pub fn delete_snapshot_job(
    record: &SnapshotRecord,
    content: &VolumeSnapshotContent,
    provisioner_name: &str,
    attempt: u32,
    ttl_seconds: i32,
) -> Job {
    let uid = record.snapshot_uid.clone();
    let (namespace, name) = record.snapshot.clone();
    let directory = snapshot_directory(&namespace, &uid);
    let content_name = content.metadata.name.clone().unwrap_or_default();
    let snapshot = VolumeSnapshot {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: Some(uid.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut env = vec![
        ("ACTION", Action::DeleteSnapshot.as_str().to_owned()),
        ("PROVISIONER_NAME", provisioner_name.to_owned()),
        (
            "PV_NAME",
            record.source_pv.metadata.name.clone().unwrap_or_default(),
        ),
        ("SNAPSHOT_HANDLE", record.handle.clone()),
        (
            "SELECTED_NODE",
            record.recipe.node.clone().unwrap_or_default(),
        ),
        (
            "PARAMETERS",
            serde_json::to_string(&record.parameters).unwrap_or_default(),
        ),
    ];
    env.extend(snapshot_env(&snapshot, &content_name, &directory));
    let mut job = build(JobInput {
        action: Action::DeleteSnapshot,
        name: job_name(Action::DeleteSnapshot, &uid, attempt),
        attempt,
        claim_uid: String::new(),
        volume: String::new(),
        claim_ref: String::new(),
        storage_class: String::new(),
        source: None,
        recipe: record.recipe.clone(),
        env,
        parameters: &record.parameters,
        ttl_seconds,
        labels: vec![(LABEL_SNAPSHOT_UID.to_owned(), uid)],
    });
    let annotations = job.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANN_CONTENT.to_owned(), content_name);
    annotations.insert(
        ANN_CONTENT_UID.to_owned(),
        content.metadata.uid.clone().unwrap_or_default(),
    );
    job
}

/// The volume a restore copies from: the snapshotted volume as recorded, its path moved
/// to the snapshot's copy (the handle). A restore's image then copies from it as a clone
/// copies from its source (`SOURCE_PV_JSON`). `None` for a volume of another type than
/// `local`, `hostPath` or `nfs`, or an `nfs` handle of another server.
pub fn restored_volume(record: &SnapshotRecord) -> Option<PersistentVolume> {
    let mut pv = record.source_pv.clone();
    let spec = pv.spec.as_mut()?;
    if let Some(local) = spec.local.as_mut() {
        local.path = record.handle.clone();
    } else if let Some(host) = spec.host_path.as_mut() {
        host.path = record.handle.clone();
    } else if let Some(nfs) = spec.nfs.as_mut() {
        let (server, path) = record.handle.split_once(':')?;
        if server != nfs.server {
            return None;
        }
        nfs.path = path.to_owned();
    } else {
        return None;
    }
    Some(pv)
}

#[cfg(test)]
mod tests;
