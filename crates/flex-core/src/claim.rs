//! The validated view of a PersistentVolumeClaim that everything downstream works from.
//!
//! A claim we cannot serve is refused here, once, with a message for `kubectl describe pvc`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::names::ANN_SELECTED_NODE;
use crate::quantity::{Bytes, parse_bytes};

pub const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// A claim's StorageClass as Kubernetes reads it (`GetPersistentVolumeClaimClass`): the
/// beta annotation when it is set, else `spec.storageClassName`. Quota and the PV controller
/// read it this way; reading the field alone would count a claim against one class and
/// provision it from another.
pub fn class_of(pvc: &PersistentVolumeClaim) -> Option<&str> {
    crate::names::annotation(&pvc.metadata, BETA_CLASS_ANNOTATION)
        .or_else(|| pvc.spec.as_ref()?.storage_class_name.as_deref())
}
pub const ACCESS_MODES: &[&str] = &[
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// Why a claim cannot be provisioned as it stands; shown to the user verbatim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("the claim has no {0} (it was not read from the API server)")]
    MissingMetadata(&'static str),
    #[error("the claim names no storage class")]
    NoClass,
    #[error("the claim requests no storage: set spec.resources.requests.storage")]
    NoStorageRequest,
    #[error("spec.resources.requests.storage: {0}")]
    BadQuantity(String),
    #[error("the claim requests 0 bytes of storage; request a positive size")]
    ZeroSize,
    #[error(
        "spec.selector is set, but dynamically provisioned volumes cannot match a selector; remove it, or bind a pre-created PV instead"
    )]
    Selector,
    #[error(
        "the claim asks for data from {0}, which this provisioner cannot populate; remove spec.dataSource/dataSourceRef or use a provisioner that supports it"
    )]
    DataSource(String),
    #[error("the claim lists no access modes; set spec.accessModes (e.g. [ReadWriteOnce])")]
    NoAccessModes,
    #[error(
        "access mode `{0}` is unknown; use ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod"
    )]
    BadAccessMode(String),
    #[error("volume mode `{0}` is unknown; use Filesystem or Block")]
    BadVolumeMode(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub storage_class: String,
    /// The request exactly as written in the claim (`1536Mi`).
    pub requested: String,
    pub bytes: Bytes,
    pub access_modes: Vec<String>,
    pub volume_mode: String,
    pub selected_node: Option<String>,
    pub data_source: Option<DataSource>,
}

impl ClaimRequest {
    pub fn from_claim(pvc: &PersistentVolumeClaim) -> Result<Self, ClaimError> {
        let meta = &pvc.metadata;
        let name = meta
            .name
            .clone()
            .ok_or(ClaimError::MissingMetadata("name"))?;
        let namespace = meta
            .namespace
            .clone()
            .ok_or(ClaimError::MissingMetadata("namespace"))?;
        let uid = meta.uid.clone().ok_or(ClaimError::MissingMetadata("uid"))?;
        let annotations = meta.annotations.clone().unwrap_or_default();
        let spec = pvc.spec.clone().unwrap_or_default();
        let storage_class = class_of(pvc)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .ok_or(ClaimError::NoClass)?;
        if spec.selector.is_some() {
            return Err(ClaimError::Selector);
        }
        // The API server fills each from the other; dataSourceRef is the fuller one.
        let data_source = spec
            .data_source_ref
            .as_ref()
            .map(|r| DataSource::new(&r.api_group, &r.kind, &r.name, &r.namespace))
            .or_else(|| {
                spec.data_source
                    .as_ref()
                    .map(|r| DataSource::new(&r.api_group, &r.kind, &r.name, &None))
            });
        let requested = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
            .ok_or(ClaimError::NoStorageRequest)?;
        let bytes = parse_bytes(&requested).map_err(|e| ClaimError::BadQuantity(e.to_string()))?;
        if bytes.0 == 0 {
            return Err(ClaimError::ZeroSize);
        }
        let access_modes = spec.access_modes.clone().unwrap_or_default();
        if access_modes.is_empty() {
            return Err(ClaimError::NoAccessModes);
        }
        if let Some(bad) = access_modes
            .iter()
            .find(|m| !ACCESS_MODES.contains(&m.as_str()))
        {
            return Err(ClaimError::BadAccessMode(bad.clone()));
        }
        let volume_mode = spec
            .volume_mode
            .clone()
            .unwrap_or_else(|| "Filesystem".into());
        if volume_mode != "Filesystem" && volume_mode != "Block" {
            return Err(ClaimError::BadVolumeMode(volume_mode));
        }
        Ok(ClaimRequest {
            name,
            namespace,
            uid,
            labels: meta.labels.clone().unwrap_or_default(),
            selected_node: annotations.get(ANN_SELECTED_NODE).cloned(),
            annotations,
            storage_class,
            requested,
            bytes,
            access_modes,
            volume_mode,
            data_source,
        })
    }
}

/// What a claim asks its volume to be filled from (`dataSourceRef`, else `dataSource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSource {
    /// `None` for the core group.
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
    /// `dataSourceRef.namespace` (CrossNamespaceVolumeDataSource), which is refused.
    pub namespace: Option<String>,
}

impl DataSource {
    /// An empty group or namespace means none, as the API server writes them.
    fn new(api_group: &Option<String>, kind: &str, name: &str, namespace: &Option<String>) -> Self {
        let set = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        DataSource {
            api_group: set(api_group),
            kind: kind.to_owned(),
            name: name.to_owned(),
            namespace: set(namespace),
        }
    }

    /// How `data-sources` names this kind: `Kind` in the core group, else `group/Kind`.
    pub fn kind_key(&self) -> String {
        match &self.api_group {
            Some(g) => format!("{g}/{}", self.kind),
            None => self.kind.clone(),
        }
    }

    /// Another claim of the same namespace: a clone.
    pub fn is_claim(&self) -> bool {
        self.api_group.is_none() && self.kind == "PersistentVolumeClaim"
    }

    /// A VolumeSnapshot of the same namespace: a restore.
    pub fn is_snapshot(&self) -> bool {
        self.api_group.as_deref() == Some(crate::snapshot::GROUP) && self.kind == "VolumeSnapshot"
    }
}

/// The node the scheduler selected for a WaitForFirstConsumer claim, as templates and node
/// affinity see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Cordoned (`spec.unschedulable`): a pod pinned to it is not scheduled.
    pub unschedulable: bool,
}

impl NodeInfo {
    pub fn from_node(node: &k8s_openapi::api::core::v1::Node) -> Self {
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
        }
    }

    /// The value PV node affinity must match: the node's hostname label, which is what the
    /// scheduler compares, falling back to its name.
    pub fn hostname(&self) -> &str {
        self.labels
            .get(crate::names::LABEL_HOSTNAME)
            .map_or(self.name.as_str(), String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pvc(spec: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "team-a", "uid": "u-1",
                          "annotations": {"volume.kubernetes.io/selected-node": "node-1"}},
            "spec": spec
        }))
        .unwrap()
    }

    fn base() -> serde_json::Value {
        json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"],
               "resources": {"requests": {"storage": "1536Mi"}}})
    }

    #[test]
    fn reads_a_plain_claim() {
        let c = ClaimRequest::from_claim(&pvc(base())).unwrap();
        assert_eq!(c.storage_class, "silver");
        assert_eq!(c.requested, "1536Mi");
        assert_eq!(c.bytes.0, 1536 << 20);
        assert_eq!(c.volume_mode, "Filesystem");
        assert_eq!(c.selected_node.as_deref(), Some("node-1"));
    }

    #[test]
    fn refuses_what_cannot_be_provisioned() {
        let cases: Vec<(serde_json::Value, ClaimError)> = vec![
            (
                json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"]}),
                ClaimError::NoStorageRequest,
            ),
            (
                json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
                ClaimError::NoClass,
            ),
            (
                json!({"storageClassName": "silver", "resources": {"requests": {"storage": "1Gi"}}}),
                ClaimError::NoAccessModes,
            ),
            (
                json!({"storageClassName": "silver", "accessModes": ["ReadWriteAll"], "resources": {"requests": {"storage": "1Gi"}}}),
                ClaimError::BadAccessMode("ReadWriteAll".into()),
            ),
            (
                json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"], "volumeMode": "Raw", "resources": {"requests": {"storage": "1Gi"}}}),
                ClaimError::BadVolumeMode("Raw".into()),
            ),
            (
                json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "0"}}}),
                ClaimError::ZeroSize,
            ),
            (
                json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"], "selector": {"matchLabels": {"a": "b"}}, "resources": {"requests": {"storage": "1Gi"}}}),
                ClaimError::Selector,
            ),
        ];
        for (spec, expected) in cases {
            assert_eq!(ClaimRequest::from_claim(&pvc(spec)).unwrap_err(), expected);
        }
        // A data source is read (whether the class may serve it is the planner's question).
        let snap = ClaimRequest::from_claim(&pvc(json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"], "dataSource": {"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"}, "resources": {"requests": {"storage": "1Gi"}}}))).unwrap();
        let source = snap.data_source.unwrap();
        assert_eq!(source.kind_key(), "snapshot.storage.k8s.io/VolumeSnapshot");
        assert!(!source.is_claim());
        let clone = ClaimRequest::from_claim(&pvc(json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"], "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "src", "apiGroup": ""}, "resources": {"requests": {"storage": "1Gi"}}}))).unwrap();
        assert!(clone.data_source.unwrap().is_claim());
        let bad = ClaimRequest::from_claim(&pvc(json!({"storageClassName": "silver", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1GB"}}}))).unwrap_err();
        assert!(bad.to_string().contains("unknown suffix `GB`"), "{bad}");
    }

    #[test]
    fn beta_class_annotation_is_honoured() {
        let mut p = pvc(
            json!({"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}),
        );
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(BETA_CLASS_ANNOTATION.into(), "gold".into());
        assert_eq!(ClaimRequest::from_claim(&p).unwrap().storage_class, "gold");
        // Annotation first, as Kubernetes reads it.
        p.spec.as_mut().unwrap().storage_class_name = Some("silver".into());
        assert_eq!(ClaimRequest::from_claim(&p).unwrap().storage_class, "gold");
        p.metadata.uid = None;
        assert_eq!(
            ClaimRequest::from_claim(&p).unwrap_err(),
            ClaimError::MissingMetadata("uid")
        );
    }
}
