//! The PV template handed to provisioning pods, and the records on it that let a volume be
//! deprovisioned without the ConfigMap (DESIGN §6, §7).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;

use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::ClassConfig;
use crate::job::JobRecipe;
use crate::names::{
    ANN_CONFIG, ANN_DEPROVISION_IMAGE, ANN_DEPROVISION_SPEC, ANN_IMAGE, ANN_PARAMETERS,
    ANN_PROVISIONED_BY, ANN_SERVICE_ACCOUNT, FINALIZER_DEPROVISION, LABEL_CLAIM_UID,
    LABEL_HOSTNAME, LABEL_MANAGED_BY, MANAGED_BY_VALUE, pv_name,
};
use crate::rendered::Rendered;

/// Reads back the deprovision recipe recorded when the volume was provisioned.
pub fn recorded_recipe(pv: &PersistentVolume) -> Result<JobRecipe, String> {
    let raw = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_DEPROVISION_SPEC))
        .ok_or_else(|| format!("the PV has no `{ANN_DEPROVISION_SPEC}` annotation"))?;
    serde_json::from_str(raw)
        .map_err(|e| format!("the `{ANN_DEPROVISION_SPEC}` annotation is not valid: {e}"))
}

/// The rendered parameters recorded on a PV, as the deprovision Job receives them.
pub fn recorded_parameters(pv: &PersistentVolume) -> BTreeMap<String, String> {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_PARAMETERS))
        .and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or_default()
}

/// The complete PV but for its volume source (DESIGN §6): the pod adds only the source.
pub fn pv_template(
    config: &ClassConfig,
    claim: &ClaimRequest,
    node: Option<&NodeInfo>,
    rendered: &Rendered,
    provisioner_name: &str,
) -> PersistentVolume {
    let p = &config.provisioner;
    let deprovision = JobRecipe::deprovision(config, rendered, node);
    let mut annotations = BTreeMap::from([
        (ANN_PROVISIONED_BY.to_owned(), provisioner_name.to_owned()),
        (ANN_CONFIG.to_owned(), p.source()),
        (ANN_IMAGE.to_owned(), p.image.clone()),
        (ANN_PARAMETERS.to_owned(), rendered.parameters_json()),
        (
            ANN_DEPROVISION_SPEC.to_owned(),
            serde_json::to_string(&deprovision).unwrap_or_default(),
        ),
    ]);
    if let Some(image) = &p.deprovision_image {
        annotations.insert(ANN_DEPROVISION_IMAGE.to_owned(), image.clone());
    }
    if let Some(sa) = &p.service_account {
        annotations.insert(ANN_SERVICE_ACCOUNT.to_owned(), sa.clone());
    }
    let node_affinity = node.filter(|_| p.node_local).map(|n| VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: LABEL_HOSTNAME.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec![n.hostname().to_owned()]),
                }]),
                ..Default::default()
            }],
        }),
    });
    let class = &config.class;
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name(&claim.uid)),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (LABEL_CLAIM_UID.to_owned(), claim.uid.clone()),
            ])),
            annotations: Some(annotations),
            finalizers: Some(vec![FINALIZER_DEPROVISION.to_owned()]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([(
                "storage".to_owned(),
                Quantity(claim.requested.clone()),
            )])),
            access_modes: Some(claim.access_modes.clone()),
            volume_mode: Some(claim.volume_mode.clone()),
            persistent_volume_reclaim_policy: Some(class.reclaim_policy.clone()),
            storage_class_name: Some(class.name.clone()),
            mount_options: (!class.mount_options.is_empty()).then(|| class.mount_options.clone()),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(claim.namespace.clone()),
                name: Some(claim.name.clone()),
                uid: Some(claim.uid.clone()),
                ..Default::default()
            }),
            node_affinity,
            ..Default::default()
        }),
        status: None,
    }
}
