//! What a claim's data source resolves to, as its provisioning Job receives it: a clone's
//! source volume and the parameters it was provisioned with, or an admin's own object.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::names::ANN_SOURCE_VOLUME;

#[derive(Debug, Clone, PartialEq)]
pub enum SourceData {
    /// A bound claim of ours: its volume (`SOURCE_PV_JSON`) and the parameters from its
    /// record (`SOURCE_PARAMETERS`).
    Volume {
        pv: Box<PersistentVolume>,
        parameters: BTreeMap<String, String>,
        /// Its directory, mounted read-only in the clone's pod, when its class has
        /// `volume-base` (isolation.rs).
        mount: Option<Box<crate::isolation::SourceMount>>,
    },
    /// A snapshot this provisioner took, restored as a clone of the volume it was taken
    /// of, the volume's path moved to the snapshot's copy (`SOURCE_PV_JSON`), with the
    /// VolumeSnapshot (`DATA_SOURCE_JSON`), its content and handle.
    Snapshot {
        pv: Box<PersistentVolume>,
        parameters: BTreeMap<String, String>,
        mount: Option<Box<crate::isolation::SourceMount>>,
        snapshot: serde_json::Value,
        content: serde_json::Value,
        /// The content's name, kept from deletion while the restore's Job runs.
        content_name: String,
        handle: String,
    },
    /// An object of a kind the class lists (`DATA_SOURCE_JSON`).
    Object(serde_json::Value),
    /// Why the source cannot be used now (it is told on the claim and looked at again).
    Unusable(String),
}

impl SourceData {
    /// The environment a provisioning Job gets for this source.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            SourceData::Volume { pv, parameters, .. } => {
                let mut pv = pv.as_ref().clone();
                pv.metadata.managed_fields = None;
                vec![
                    (
                        "SOURCE_PV_JSON",
                        serde_json::to_string(&pv).unwrap_or_default(),
                    ),
                    (
                        "SOURCE_PARAMETERS",
                        serde_json::to_string(parameters).unwrap_or_default(),
                    ),
                ]
            }
            SourceData::Snapshot {
                pv,
                parameters,
                snapshot,
                content,
                handle,
                ..
            } => vec![
                (
                    "SOURCE_PV_JSON",
                    serde_json::to_string(pv.as_ref()).unwrap_or_default(),
                ),
                (
                    "SOURCE_PARAMETERS",
                    serde_json::to_string(parameters).unwrap_or_default(),
                ),
                ("DATA_SOURCE_JSON", snapshot.to_string()),
                ("SNAPSHOT_CONTENT_JSON", content.to_string()),
                ("SNAPSHOT_HANDLE", handle.clone()),
            ],
            SourceData::Object(object) => {
                let mut object = object.clone();
                if let Some(meta) = object
                    .get_mut("metadata")
                    .and_then(serde_json::Value::as_object_mut)
                {
                    meta.remove("managedFields");
                }
                vec![("DATA_SOURCE_JSON", object.to_string())]
            }
            SourceData::Unusable(_) => vec![],
        }
    }

    /// A clone source's directory, as the clone's pod mounts it.
    pub fn mount(&self) -> Option<crate::isolation::SourceMount> {
        match self {
            SourceData::Volume { mount, .. } | SourceData::Snapshot { mount, .. } => {
                mount.as_deref().cloned()
            }
            _ => None,
        }
    }

    /// The annotation that keeps a clone's source volume from being deprovisioned while the
    /// clone's Job runs.
    pub fn annotation(&self) -> Option<(&'static str, String)> {
        match self {
            SourceData::Volume { pv, .. } => Some((
                ANN_SOURCE_VOLUME,
                pv.metadata.name.clone().unwrap_or_default(),
            )),
            SourceData::Snapshot { content_name, .. } => {
                Some((crate::names::ANN_SOURCE_SNAPSHOT, content_name.clone()))
            }
            _ => None,
        }
    }
}
/// Why a clone's source claim cannot be copied from now: it does not exist, is not bound
/// (both ways) to a volume the cache shows, the volume is not this provisioner's, or the
/// clone asks for less than the source holds. `None`: its record is read next, and the
/// source is [`from_record`]. The source's volume is found by the name `source` gives
/// (`volume`: what the cache holds under it).
pub fn clone_problem(
    claim: &crate::claim::ClaimRequest,
    name: &str,
    source: Option<&k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    volume: Option<&PersistentVolume>,
    provisioner_name: &str,
) -> Option<String> {
    let at = format!("{}/{name}", claim.namespace);
    let Some(source) = source else {
        return Some(format!("the source claim {at} does not exist"));
    };
    let bound = source.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let Some(volume_name) = source
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|_| bound)
    else {
        return Some(format!("the source claim {at} is not bound yet"));
    };
    let Some(pv) = volume else {
        return Some(format!(
            "the source claim's volume {volume_name} is not seen yet"
        ));
    };
    let bound_back = crate::volume::claim_uid(pv) == source.metadata.uid.as_deref();
    if !bound_back {
        return Some(format!(
            "the source claim's volume {volume_name} is not bound back to it"
        ));
    }
    if !crate::volume::provisioned_by(pv, provisioner_name) {
        return Some(format!(
            "the source claim {at} is bound to {volume_name}, which this provisioner did not make; only its own volumes can be cloned"
        ));
    }
    if !crate::volume::verified(pv) {
        return Some(format!(
            "the source claim's volume {volume_name} is not verified by this provisioner (it has no finalizer {}); only verified volumes are cloned",
            crate::names::FINALIZER_DEPROVISION
        ));
    }
    let capacity = crate::volume::storage_capacity(&pv.spec.clone().unwrap_or_default());
    if crate::quantity::parse_bytes(&capacity).is_ok_and(|c| c > claim.bytes) {
        return Some(format!(
            "the clone requests {}, less than its source's {capacity}; request at least that",
            claim.requested
        ));
    }
    None
}

/// A clone's source once [`clone_problem`] found none: the volume and the parameters its
/// record holds (`record`: the record as read, `None`: there is none).
pub fn from_record(
    pv: &PersistentVolume,
    record: Option<Result<crate::record::Record, crate::record::RecordError>>,
) -> SourceData {
    let volume = pv.metadata.name.as_deref().unwrap_or_default();
    match record {
        Some(Ok(r)) => SourceData::Volume {
            pv: Box::new(pv.clone()),
            mount: crate::isolation::source_mount(&r.recipe).map(Box::new),
            parameters: r.parameters,
        },
        Some(Err(why)) => SourceData::Unusable(why.to_string()),
        None => SourceData::Unusable(format!("the source volume {volume} has no record")),
    }
}

/// What a restore from a VolumeSnapshot copies from, or why it cannot (yet): the snapshot
/// (in the claim's namespace), its class, its content and the record this provisioner
/// wrote when it took it. Only the record says where the copy is and how it was taken; the
/// content must be bound to this very snapshot and the record written for this content.
pub struct RestoreFrom<'a> {
    pub claim: &'a crate::claim::ClaimRequest,
    pub name: &'a str,
    pub snapshot: Option<&'a crate::snapshot::VolumeSnapshot>,
    pub class: Option<&'a crate::snapshot::VolumeSnapshotClass>,
    pub content: Option<&'a crate::snapshot::VolumeSnapshotContent>,
    pub record: Option<&'a k8s_openapi::api::core::v1::ConfigMap>,
    pub provisioner_name: &'a str,
}

pub fn restore_source(r: &RestoreFrom<'_>) -> SourceData {
    let at = format!("{}/{}", r.claim.namespace, r.name);
    let unusable = |why: String| SourceData::Unusable(why);
    let Some(snapshot) = r.snapshot else {
        return unusable(format!("the VolumeSnapshot {at} does not exist"));
    };
    if snapshot.metadata.deletion_timestamp.is_some() {
        return unusable(format!("the VolumeSnapshot {at} is being deleted"));
    }
    let class = snapshot
        .spec
        .volume_snapshot_class_name
        .as_deref()
        .unwrap_or_default();
    match r.class {
        Some(c) if c.driver == r.provisioner_name => {}
        Some(c) => {
            return unusable(format!(
                "the VolumeSnapshot {at} is of class {class}, whose driver is {}, not this provisioner",
                c.driver
            ));
        }
        None => {
            return unusable(format!(
                "the VolumeSnapshot {at} names no VolumeSnapshotClass of this provisioner ({class:?})"
            ));
        }
    }
    let ready = snapshot.status.as_ref().and_then(|s| s.ready_to_use) == Some(true);
    let (Some(content), true) = (r.content, ready) else {
        return unusable(format!("the VolumeSnapshot {at} is not ready to use yet"));
    };
    if content.spec.volume_snapshot_ref.uid != snapshot.metadata.uid {
        return unusable(format!(
            "the VolumeSnapshot {at}'s content is not bound to it"
        ));
    }
    let record = match r
        .record
        .map(|cm| crate::snapshot::record::read_snapshot_record(cm, content))
    {
        Some(Ok(record)) => record,
        Some(Err(why)) => return unusable(format!("the VolumeSnapshot {at}: {why}")),
        None => {
            return unusable(format!(
                "the VolumeSnapshot {at} was not taken by this provisioner (it has no record of it)"
            ));
        }
    };
    let names_it = record.snapshot == (r.claim.namespace.clone(), r.name.to_owned())
        && Some(&record.snapshot_uid) == snapshot.metadata.uid.as_ref();
    if !names_it {
        return unusable(format!(
            "the record of the VolumeSnapshot {at} was written for another snapshot"
        ));
    }
    if u64::try_from(record.restore_size).is_ok_and(|size| size > r.claim.bytes.0) {
        return unusable(format!(
            "the claim requests {}, less than the snapshot's restore size of {} bytes; request at least that",
            r.claim.requested, record.restore_size
        ));
    }
    let Some(pv) = crate::snapshot::jobs::restored_volume(&record) else {
        return unusable(format!(
            "the VolumeSnapshot {at}'s copy is of a kind that cannot be restored here"
        ));
    };
    SourceData::Snapshot {
        pv: Box::new(pv),
        mount: crate::isolation::source_mount(&record.recipe).map(Box::new),
        parameters: record.parameters,
        snapshot: serde_json::to_value(snapshot).unwrap_or_default(),
        content: serde_json::to_value(content).unwrap_or_default(),
        content_name: content.metadata.name.clone().unwrap_or_default(),
        handle: record.handle,
    }
}

/// Why an admin's object named as a claim's data source cannot be had (yet).
#[derive(Debug, Clone, PartialEq)]
pub enum Unreadable {
    /// A kind of the core group other than PersistentVolumeClaim.
    CoreGroup,
    /// Discovery of the group failed (its message).
    GroupUnreadable(String),
    /// The group is served without the kind.
    KindNotServed,
    /// No such object in the claim's namespace.
    Missing,
    /// The controller may not read it (the API server's message).
    Forbidden(String),
}

/// The claim's source as unusable for `why`, in the words its event carries.
pub fn unreadable(ds: &crate::claim::DataSource, namespace: &str, why: Unreadable) -> SourceData {
    let group = ds.api_group.as_deref().unwrap_or_default();
    SourceData::Unusable(match why {
        Unreadable::CoreGroup => format!(
            "only PersistentVolumeClaim can be named in the core group, not {}",
            ds.kind
        ),
        Unreadable::GroupUnreadable(e) => format!("the API group {group} cannot be read: {e}"),
        Unreadable::KindNotServed => {
            format!("the API server serves no kind {} in group {group}", ds.kind)
        }
        Unreadable::Missing => format!("{} {namespace}/{} does not exist", ds.kind, ds.name),
        // The admin grants the controller `get` on the kinds a class lists.
        Unreadable::Forbidden(message) => format!(
            "the provisioner may not read it ({message}); an admin grants it get on {}",
            ds.kind_key()
        ),
    })
}

#[cfg(test)]
mod restore_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::{Value, json};

    const P: &str = "flex-provisioner.io/job";

    fn clone_request(size: &str) -> crate::claim::ClaimRequest {
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "copy", "namespace": "a", "uid": "c-2"},
            "spec": {"storageClassName": "silver", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": size}},
                     "dataSource": {"kind": "PersistentVolumeClaim", "name": "data"}}
        }))
        .unwrap();
        crate::claim::ClaimRequest::from_claim(&pvc).unwrap()
    }

    fn source(status: Value) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "data", "namespace": "a", "uid": "c-1"},
            "spec": {"volumeName": "pvc-c-1"}, "status": status}),
        )
        .unwrap()
    }

    fn volume(claim_uid: &str, by: &str) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pvc-c-1",
                "annotations": {crate::names::ANN_PROVISIONED_BY: by},
                "finalizers": [crate::names::FINALIZER_DEPROVISION]},
            "spec": {"capacity": {"storage": "2Gi"}, "claimRef": {"uid": claim_uid}}}))
        .unwrap()
    }

    /// Only a bound claim of ours whose volume is bound back to it, cloned into at least its
    /// size, is a source; each refusal says which condition failed.
    #[test]
    fn a_clone_copies_only_from_a_bound_volume_of_ours_no_larger_than_it() {
        let bound = source(json!({"phase": "Bound"}));
        let ours = volume("c-1", P);
        let mut unverified = ours.clone();
        unverified.metadata.finalizers = None;
        let problem =
            |req: &str, s: Option<&PersistentVolumeClaim>, v: Option<&PersistentVolume>| {
                clone_problem(&clone_request(req), "data", s, v, P)
            };
        assert_eq!(problem("2Gi", Some(&bound), Some(&ours)), None);
        for (what, found, expected) in [
            (
                "no claim",
                problem("2Gi", None, Some(&ours)),
                "does not exist",
            ),
            (
                "pending",
                problem(
                    "2Gi",
                    Some(&source(json!({"phase": "Pending"}))),
                    Some(&ours),
                ),
                "not bound yet",
            ),
            (
                "not cached",
                problem("2Gi", Some(&bound), None),
                "not seen yet",
            ),
            (
                "another's",
                problem("2Gi", Some(&bound), Some(&volume("c-9", P))),
                "not bound back",
            ),
            (
                "not ours",
                problem(
                    "2Gi",
                    Some(&bound),
                    Some(&volume("c-1", "example.com/other")),
                ),
                "did not make",
            ),
            (
                "smaller",
                problem("1Gi", Some(&bound), Some(&ours)),
                "less than its source's 2Gi",
            ),
            (
                "not verified (an image's PV, or anyone's with our name in it)",
                problem("2Gi", Some(&bound), Some(&unverified)),
                "not verified",
            ),
        ] {
            let found = found.unwrap_or_else(|| panic!("{what}: accepted"));
            assert!(found.contains(expected), "{what}: {found}");
        }
    }

    #[test]
    fn a_source_without_a_usable_record_is_unusable() {
        let ours = volume("c-1", P);
        assert_eq!(
            from_record(&ours, None),
            SourceData::Unusable("the source volume pvc-c-1 has no record".into())
        );
        let refused = from_record(&ours, Some(Err(crate::record::RecordError::NoRecipe)));
        assert_eq!(
            refused,
            SourceData::Unusable("its deprovision record has no recipe".into())
        );
    }

    /// Each reason names what the user or admin can act on: the object, or the grant.
    #[test]
    fn an_unreadable_admin_object_says_what_to_do() {
        let ds = crate::claim::DataSource {
            api_group: Some("backup.example.com".into()),
            kind: "Restore".into(),
            name: "nightly".into(),
            namespace: None,
        };
        let said = |why| match unreadable(&ds, "team-a", why) {
            SourceData::Unusable(m) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            said(Unreadable::Missing),
            "Restore team-a/nightly does not exist"
        );
        assert_eq!(
            said(Unreadable::Forbidden("restores is forbidden".into())),
            "the provisioner may not read it (restores is forbidden); an admin grants it get on backup.example.com/Restore"
        );
        assert_eq!(
            said(Unreadable::KindNotServed),
            "the API server serves no kind Restore in group backup.example.com"
        );
        assert!(
            said(Unreadable::GroupUnreadable("timed out".into()))
                .ends_with("cannot be read: timed out")
        );
    }
}
