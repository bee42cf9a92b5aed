//! The data a template sees for one claim (docs/configuration.md, "Templates"); its shape is `lint::SCHEMA`.

use serde_json::{Value, json};

use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::StorageClassInfo;

/// A rendered-ready context. Built once per claim and shared by every parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Context(pub(super) Value);

pub fn build(
    claim: &ClaimRequest,
    class: &StorageClassInfo,
    node: Option<&NodeInfo>,
    provisioner_name: &str,
    volume_name: &str,
) -> Context {
    let mut root = json!({
        "claim": {
            "name": claim.name,
            "namespace": claim.namespace,
            "uid": claim.uid,
            "labels": claim.labels,
            "annotations": claim.annotations,
            "size": {
                "bytes": claim.bytes.0,
                "mib": claim.bytes.mib(),
                "gib": claim.bytes.gib(),
            },
            "accessModes": claim.access_modes,
            "volumeMode": claim.volume_mode,
        },
        "volume": { "name": volume_name },
        "class": {
            "name": class.name,
            "parameters": class.parameters,
            "reclaimPolicy": class.reclaim_policy,
            "mountOptions": class.mount_options,
            "volumeBindingMode": class.volume_binding_mode,
        },
        "provisioner": { "name": provisioner_name },
    });
    if let Some(node) = node {
        root["node"] = json!({ "name": node.name, "labels": node.labels });
    }
    Context(root)
}
