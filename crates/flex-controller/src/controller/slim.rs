//! Pods, Jobs, PVs and claims read from their watches without `metadata.managedFields`,
//! which nothing here reads and which the caches drop anyway (`caches::trim_meta`), and pods
//! without their spec, which no decision reads. A pod's field ownership is
//! a third of its JSON and, parsed, a tree of small maps: decoding a pod of ours with it
//! took twice as long as without (a profile of a 100-claim burst, see
//! docs/architecture.md, "Where the CPU goes"). Skipped fields are passed over by the
//! parser without being built.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeSpec, PersistentVolumeStatus, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// `K` as its watch delivers it, minus the field ownership.
#[derive(Clone, Debug)]
pub struct Slim<K>(pub K);

/// The metadata of an object, every field but `managedFields` (and the deprecated,
/// always-empty `selfLink`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    uid: Option<String>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            uid: m.uid,
            managed_fields: None,
            self_link: None,
        }
    }
}

/// An object of a kind with metadata, spec and status, as JSON has it.
#[derive(Deserialize)]
struct Parts<Spec, Status> {
    metadata: Meta,
    spec: Option<Spec>,
    status: Option<Status>,
}

/// `Slim<$kind>` decodes through `Parts` of its spec and status types.
macro_rules! slim {
    ($($kind:ident: $spec:ty, $status:ty;)*) => {$(
        impl<'de> Deserialize<'de> for Slim<$kind> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let p = Parts::<$spec, $status>::deserialize(d)?;
                Ok(Slim($kind { metadata: p.metadata.into(), spec: p.spec, status: p.status }))
            }
        }
    )*};
}

slim! {
    Job: JobSpec, JobStatus;
    PersistentVolume: PersistentVolumeSpec, PersistentVolumeStatus;
    PersistentVolumeClaim: PersistentVolumeClaimSpec, PersistentVolumeClaimStatus;
}

/// A pod of ours as decisions read it: its metadata and status. Its spec (the Job's
/// template again, with the container's environment) is passed over unbuilt: pods are a
/// third of the watch events a volume brings, and their spec most of each.
impl<'de> Deserialize<'de> for Slim<Pod> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = Parts::<IgnoredAny, PodStatus>::deserialize(d)?;
        let (metadata, status) = (p.metadata.into(), p.status);
        Ok(Slim(Pod {
            metadata,
            spec: None,
            status,
        }))
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Slim<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    super::compact::same_kind_as!(K);
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every field comes through as the full decode has it, but the field ownership and a
    /// pod's spec.
    #[test]
    fn every_slim_kind_decodes_whole_but_its_field_ownership() {
        let meta = json!({"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "7",
            "generateName": "provision-x-1-", "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:00:09Z", "deletionGracePeriodSeconds": 30,
            "labels": {"a": "b"}, "annotations": {"c": "d"}, "finalizers": ["f"],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju", "controller": true}],
            "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:status": {"f:phase": {}}}}]});
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "provisioner", "image": "i", "env": [{"name": "A", "value": "1"}]}],
                     "nodeName": "node-a", "restartPolicy": "Never"},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "provisioner", "ready": false,
                "restartCount": 0, "image": "i", "imageID": "",
                "state": {"terminated": {"exitCode": 3, "message": "no space"}}}]}});
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 60, "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "provisioner", "image": "i", "securityContext": {"privileged": false},
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}],
                    "volumes": [{"name": "base", "hostPath": {"path": "/srv"}}]}}},
            "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}});
        let mut full: Pod = serde_json::from_value(pod.clone()).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        full.metadata.managed_fields = None;
        // A pod's spec is the Job's template again: passed over.
        full.spec = None;
        let slim: Slim<Pod> = serde_json::from_value(pod).unwrap();
        assert_eq!(slim.0, full);
        let mut full: Job = serde_json::from_value(job.clone()).unwrap();
        full.metadata.managed_fields = None;
        let slim: Slim<Job> = serde_json::from_value(job).unwrap();
        assert_eq!(slim.0, full);
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta,
            "spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/v"},
                     "claimRef": {"namespace": "a", "name": "c", "uid": "cu"}},
            "status": {"phase": "Released"}});
        let mut full: PersistentVolume = serde_json::from_value(pv.clone()).unwrap();
        full.metadata.managed_fields = None;
        let slim: Slim<PersistentVolume> = serde_json::from_value(pv).unwrap();
        assert_eq!(slim.0, full);
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": {"storageClassName": "s", "volumeName": "v", "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
        let mut full: PersistentVolumeClaim = serde_json::from_value(claim.clone()).unwrap();
        full.metadata.managed_fields = None;
        let slim: Slim<PersistentVolumeClaim> = serde_json::from_value(claim).unwrap();
        assert_eq!(slim.0, full);
    }
}
