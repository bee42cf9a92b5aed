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
            SourceData::Volume { pv, parameters } => {
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

    /// The annotation that keeps a clone's source volume from being deprovisioned while the
    /// clone's Job runs.
    pub fn annotation(&self) -> Option<(&'static str, String)> {
        match self {
            SourceData::Volume { pv, .. } => Some((
                ANN_SOURCE_VOLUME,
                pv.metadata.name.clone().unwrap_or_default(),
            )),
            _ => None,
        }
    }
}
