//! The record of a taken snapshot: a ConfigMap the controller writes in the config namespace
//! once it has checked the snapshot Job's report, bound to the content's name and uid and
//! owned by the content (garbage-collected with it). What a delete-snapshot Job runs, and
//! what a restore copies from, come only from here: a content's handle and annotations can
//! be written by anyone who may write contents, and a record of another content never
//! matches its uid.
//!
//! Before the first attempt the controller writes the attempt's record (an intent, under
//! its own name): where the attempts write and how to delete that. A content deleted
//! without a taken snapshot then has what its attempts may have left removed, however long
//! after their Jobs expired. Records are only ever created (the controller may not change
//! ConfigMaps of the config namespace), hence two names rather than one record updated.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::VolumeSnapshotContent;
use crate::names::{LABEL_MANAGED_BY, LABEL_RECORD, LABEL_SNAPSHOT_UID, MANAGED_BY_VALUE};
use crate::recipe::JobRecipe;

const KEY_CONTENT_NAME: &str = "content-name";
const KEY_CONTENT_UID: &str = "content-uid";
const KEY_SNAPSHOT: &str = "snapshot";
const KEY_SNAPSHOT_UID: &str = "snapshot-uid";
const KEY_SOURCE_VOLUME: &str = "source-volume";
const KEY_HANDLE: &str = "snapshot-handle";
const KEY_RESTORE_SIZE: &str = "restore-size";
const KEY_TAKEN_AT: &str = "taken-at";
const KEY_RECIPE: &str = "delete-spec";
const KEY_PARAMETERS: &str = "parameters";
/// Set on an attempt's record only: what was attempted, not what was taken.
const KEY_ATTEMPTED: &str = "attempted";

/// What was recorded when a snapshot was taken.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRecord {
    /// `namespace/name` of the VolumeSnapshot it was taken for, and its uid.
    pub snapshot: (String, String),
    pub snapshot_uid: String,
    /// The PV it was taken of, as verified then (a restore copies from its snapshot as the
    /// clone of a volume copies from the volume).
    pub source_pv: PersistentVolume,
    pub handle: String,
    pub restore_size: i64,
    pub taken_at: jiff::Timestamp,
    /// How to delete it (and where it lives: namespace, node, pod-template, directory).
    pub recipe: JobRecipe,
    /// The source volume's parameters, as its own record holds them.
    pub parameters: BTreeMap<String, String>,
}

/// The record's name: one per VolumeSnapshot uid.
pub fn snapshot_record_name(snapshot_uid: &str) -> String {
    format!("flex-snapshot-{snapshot_uid}")
}

/// The name of the record of a snapshot's attempts: one per VolumeSnapshot uid.
pub fn attempt_record_name(snapshot_uid: &str) -> String {
    format!("flex-snapshot-attempt-{snapshot_uid}")
}

/// The record of what `content`'s snapshot attempts write (`leftover_of` the first
/// attempt's Job), written before that Job.
pub fn build_attempt_record(
    content: &VolumeSnapshotContent,
    attempt: &SnapshotRecord,
) -> Option<ConfigMap> {
    let mut cm = build_snapshot_record(content, attempt)?;
    cm.metadata.name = Some(attempt_record_name(&attempt.snapshot_uid));
    let data = cm.data.get_or_insert_default();
    data.insert(KEY_ATTEMPTED.to_owned(), "true".to_owned());
    Some(cm)
}

/// Reads an attempt's record back, on the terms of [`read_snapshot_record`]: its handle is
/// the directory the attempts were given, never a report.
pub fn read_attempt_record(
    cm: &ConfigMap,
    content: &VolumeSnapshotContent,
) -> Result<SnapshotRecord, SnapshotRecordError> {
    read_as(cm, content, true)
}

/// The record of `content`'s snapshot, in the namespace its recipe runs Jobs in. `None` for
/// a content without a name or uid (never one the API server returns).
pub fn build_snapshot_record(
    content: &VolumeSnapshotContent,
    record: &SnapshotRecord,
) -> Option<ConfigMap> {
    let name = content.metadata.name.clone()?;
    let uid = content.metadata.uid.clone().filter(|u| !u.is_empty())?;
    let (ns, snapshot) = &record.snapshot;
    let data = BTreeMap::from([
        (KEY_CONTENT_NAME, name.clone()),
        (KEY_CONTENT_UID, uid.clone()),
        (KEY_SNAPSHOT, format!("{ns}/{snapshot}")),
        (KEY_SNAPSHOT_UID, record.snapshot_uid.clone()),
        (
            KEY_SOURCE_VOLUME,
            serde_json::to_string(&record.source_pv).unwrap_or_default(),
        ),
        (KEY_HANDLE, record.handle.clone()),
        (KEY_RESTORE_SIZE, record.restore_size.to_string()),
        (KEY_TAKEN_AT, record.taken_at.to_string()),
        (
            KEY_RECIPE,
            serde_json::to_string(&record.recipe).unwrap_or_default(),
        ),
        (
            KEY_PARAMETERS,
            serde_json::to_string(&record.parameters).unwrap_or_default(),
        ),
    ]);
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(snapshot_record_name(&record.snapshot_uid)),
            namespace: Some(record.recipe.namespace.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (LABEL_RECORD.to_owned(), "true".to_owned()),
                (LABEL_SNAPSHOT_UID.to_owned(), record.snapshot_uid.clone()),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: super::API_VERSION.to_owned(),
                kind: "VolumeSnapshotContent".to_owned(),
                name,
                uid,
                ..Default::default()
            }]),
            ..Default::default()
        },
        data: Some(data.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
        ..Default::default()
    })
}

/// The record of a snapshot Job's snapshot, from what the controller put in the Job (the
/// delete recipe, the volume and its parameters, the snapshot it is for) and the image's
/// checked report. Its time is the Job's completion.
pub fn record_from_job(
    job: &k8s_openapi::api::batch::v1::Job,
    report: &super::report::SnapshotReport,
) -> Option<SnapshotRecord> {
    use crate::names::{ANN_SNAPSHOT, annotation, label};
    use crate::recipe::{env_of, recipe_of};
    let snapshot = annotation(&job.metadata, ANN_SNAPSHOT)?.split_once('/')?;
    let taken_at = job
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .map(|t| t.0)?;
    Some(SnapshotRecord {
        snapshot: (snapshot.0.to_owned(), snapshot.1.to_owned()),
        snapshot_uid: label(&job.metadata, LABEL_SNAPSHOT_UID)?.to_owned(),
        source_pv: serde_json::from_str(&env_of(job, "PV_JSON")?).ok()?,
        handle: report.handle.clone(),
        restore_size: report.restore_size,
        taken_at,
        recipe: recipe_of(job, super::jobs::ANN_DELETE_SNAPSHOT_SPEC)?,
        parameters: serde_json::from_str(&env_of(job, "PARAMETERS")?).ok()?,
    })
}

/// What a snapshot Job that recorded nothing (a refused report, a failed or given-up
/// attempt) may have left in its snapshot's directory, to be removed as a taken snapshot is:
/// the directory and recipe the controller put in the Job, never what its image reported.
pub fn leftover_of(job: &k8s_openapi::api::batch::v1::Job) -> Option<SnapshotRecord> {
    use crate::names::{ANN_SNAPSHOT, annotation, label};
    use crate::recipe::{env_of, recipe_of};
    let snapshot = annotation(&job.metadata, ANN_SNAPSHOT)?.split_once('/')?;
    let uid = label(&job.metadata, LABEL_SNAPSHOT_UID)?;
    let recipe = recipe_of(job, super::jobs::ANN_DELETE_SNAPSHOT_SPEC)?;
    let directory = crate::isolation::snapshot_directory(snapshot.0, uid);
    let handle = annotation(&job.metadata, super::jobs::ANN_SNAPSHOT_HANDLE)
        .map_or_else(|| directory.clone(), str::to_owned);
    Some(SnapshotRecord {
        snapshot: (snapshot.0.to_owned(), snapshot.1.to_owned()),
        snapshot_uid: uid.to_owned(),
        source_pv: serde_json::from_str(&env_of(job, "PV_JSON")?).ok()?,
        handle,
        restore_size: 0,
        taken_at: jiff::Timestamp::default(),
        recipe,
        parameters: serde_json::from_str(&env_of(job, "PARAMETERS")?).ok()?,
    })
}

/// Why a snapshot's record cannot be used; `Display` is the text told on the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotRecordError {
    #[error("its record {record} was not written for this content (name {name}, uid {uid})")]
    NotThisContent {
        record: String,
        name: String,
        uid: String,
    },
    #[error("its record {0} is not valid: {1}")]
    Invalid(String, String),
}

/// Reads a record back, provided it is ours (our label) and was written for this very
/// content (its name and uid).
pub fn read_snapshot_record(
    cm: &ConfigMap,
    content: &VolumeSnapshotContent,
) -> Result<SnapshotRecord, SnapshotRecordError> {
    read_as(cm, content, false)
}

fn read_as(
    cm: &ConfigMap,
    content: &VolumeSnapshotContent,
    attempted: bool,
) -> Result<SnapshotRecord, SnapshotRecordError> {
    let record = cm.metadata.name.clone().unwrap_or_default();
    let labelled = (cm.metadata.labels.as_ref())
        .and_then(|l| l.get(LABEL_RECORD))
        .is_some_and(|v| v == "true");
    let data = cm.data.clone().unwrap_or_default();
    let get = |k: &str| data.get(k).cloned().unwrap_or_default();
    let name = content.metadata.name.clone().unwrap_or_default();
    let uid = content.metadata.uid.clone().unwrap_or_default();
    if !labelled || uid.is_empty() || get(KEY_CONTENT_UID) != uid || get(KEY_CONTENT_NAME) != name {
        return Err(SnapshotRecordError::NotThisContent { record, name, uid });
    }
    let invalid = |what: &str| SnapshotRecordError::Invalid(record.clone(), what.to_owned());
    // An attempt's record never stands for a taken snapshot (a restore copies from it).
    if data.contains_key(KEY_ATTEMPTED) != attempted {
        let kind = ["a taken snapshot's", "an attempt's"][usize::from(!attempted)];
        return Err(invalid(&format!("it is {kind} record")));
    }
    let snapshot = get(KEY_SNAPSHOT)
        .split_once('/')
        .map(|(ns, n)| (ns.to_owned(), n.to_owned()))
        .ok_or_else(|| invalid("no snapshot namespace/name"))?;
    let recipe: JobRecipe = serde_json::from_str(&get(KEY_RECIPE))
        .map_err(|e| invalid(&format!("its delete recipe: {e}")))?;
    let handle = get(KEY_HANDLE);
    if handle.is_empty() {
        return Err(invalid("no snapshot handle"));
    }
    let snapshot_uid = get(KEY_SNAPSHOT_UID);
    // A delete runs in the snapshot's own directory, never one a record was edited to name.
    let own = crate::isolation::snapshot_directory(&snapshot.0, &snapshot_uid);
    if recipe.volume.as_ref().is_some_and(|v| v.directory != own) {
        return Err(invalid(
            "its delete recipe names another directory than the snapshot's",
        ));
    }
    Ok(SnapshotRecord {
        snapshot,
        snapshot_uid,
        source_pv: serde_json::from_str(&get(KEY_SOURCE_VOLUME))
            .map_err(|e| invalid(&format!("its source volume: {e}")))?,
        handle,
        restore_size: get(KEY_RESTORE_SIZE)
            .parse()
            .map_err(|_| invalid("no restore size"))?,
        taken_at: get(KEY_TAKEN_AT)
            .parse()
            .map_err(|_| invalid("no time it was taken"))?,
        recipe,
        parameters: serde_json::from_str(&get(KEY_PARAMETERS)).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content(uid: &str) -> VolumeSnapshotContent {
        serde_json::from_value(json!({
            "metadata": {"name": "snapcontent-9f1c", "uid": uid},
            "spec": {"deletionPolicy": "Delete", "driver": "flex-provisioner.io/job",
                     "source": {"volumeHandle": "pvc-1"},
                     "volumeSnapshotRef": {"name": "s", "namespace": "team", "uid": "9f1c"}}
        }))
        .unwrap()
    }

    fn record() -> SnapshotRecord {
        SnapshotRecord {
            snapshot: ("team".into(), "s".into()),
            snapshot_uid: "9f1c".into(),
            source_pv: serde_json::from_value(json!({"metadata": {"name": "pvc-1", "uid": "pv-u"},
                       "spec": {"local": {"path": "/var/flex/team/data"}}}))
            .unwrap(),
            handle: "/var/flex/.snapshots/team/9f1c".into(),
            restore_size: 1 << 30,
            taken_at: jiff::Timestamp::from_second(1_795_900_000).unwrap(),
            recipe: serde_json::from_value(json!({"namespace": "cfg", "config": "cfg/c",
                "image": "img:1", "timeoutSeconds": 60, "retries": 0,
                "permanentExitCodes": []}))
            .unwrap(),
            parameters: BTreeMap::from([("base".into(), "/var/flex".into())]),
        }
    }

    #[test]
    fn a_snapshot_record_is_bound_to_its_content_uid() {
        let cm = build_snapshot_record(&content("c-1"), &record()).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("flex-snapshot-9f1c"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("cfg"));
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("VolumeSnapshotContent", "c-1")
        );
        assert_eq!(
            read_snapshot_record(&cm, &content("c-1")).unwrap(),
            record()
        );
        let decoy = read_snapshot_record(&cm, &content("c-2"))
            .unwrap_err()
            .to_string();
        assert!(decoy.contains("not written for this content"), "{decoy}");
        let mut unlabelled = cm.clone();
        unlabelled.metadata.labels = None;
        assert!(read_snapshot_record(&unlabelled, &content("c-1")).is_err());
        let mut no_uid = content("");
        no_uid.metadata.uid = None;
        assert!(build_snapshot_record(&no_uid, &record()).is_none());
    }

    #[test]
    fn an_attempts_record_is_never_read_as_a_taken_snapshots() {
        let attempt = build_attempt_record(&content("c-1"), &record()).unwrap();
        assert_eq!(
            attempt.metadata.name.as_deref(),
            Some("flex-snapshot-attempt-9f1c")
        );
        assert_eq!(
            read_attempt_record(&attempt, &content("c-1")).unwrap(),
            record()
        );
        let taken = read_snapshot_record(&attempt, &content("c-1")).unwrap_err();
        assert!(taken.to_string().contains("an attempt's record"), "{taken}");
        let record_cm = build_snapshot_record(&content("c-1"), &record()).unwrap();
        assert!(read_attempt_record(&record_cm, &content("c-1")).is_err());
        assert!(read_attempt_record(&attempt, &content("c-2")).is_err());
    }

    #[test]
    fn a_volume_record_is_never_read_as_a_snapshot_record() {
        let pv: k8s_openapi::api::core::v1::PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": "snapcontent-9f1c", "uid": "c-1"}}))
                .unwrap();
        let volume_record = crate::record::build_record(&pv, &record().recipe, None, "{}").unwrap();
        assert!(read_snapshot_record(&volume_record, &content("c-1")).is_err());
        let snapshot_record = build_snapshot_record(&content("c-1"), &record()).unwrap();
        assert!(crate::record::read_record(&snapshot_record, &pv).is_err());
    }
}
