//! The PV template handed to provisioning pods, and the records on it that let a volume be
//! deprovisioned without the ConfigMap (docs/image-contract.md, "The PV"; docs/operations.md, "How deprovisioning works").

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::sources::sources_in;
use crate::config::{ClassConfig, PvCreator};
use crate::names::{
    ANN_PROVISIONED_BY, FINALIZER_DEPROVISION, LABEL_CLAIM_UID, LABEL_HOSTNAME, LABEL_MANAGED_BY,
    MANAGED_BY_VALUE, pv_name,
};

/// Whether a PV carries our finalizer: the controller verified it and holds its storage
/// until a deprovision Job removed it.
pub fn verified(pv: &PersistentVolume) -> bool {
    let mut finalizers = pv.metadata.finalizers.iter().flatten();
    finalizers.any(|f| f == crate::names::FINALIZER_DEPROVISION)
}

/// The uid of the claim a PV's claimRef names.
pub fn claim_uid(pv: &PersistentVolume) -> Option<&str> {
    pv.spec.as_ref()?.claim_ref.as_ref()?.uid.as_deref()
}

/// The complete PV but for its volume source (docs/image-contract.md, "The PV"). It carries no records: what a
/// deprovision Job runs is kept in a record the controller writes (see `record`), never on
/// the PV, which anyone with PV update could rewrite. Our finalizer is on it only when the
/// controller creates the PV; a PV an image creates gets it once the controller verified it.
pub fn pv_template(
    config: &ClassConfig,
    claim: &ClaimRequest,
    node: Option<&NodeInfo>,
    provisioner_name: &str,
) -> PersistentVolume {
    let p = &config.provisioner;
    let annotations =
        BTreeMap::from([(ANN_PROVISIONED_BY.to_owned(), provisioner_name.to_owned())]);
    let finalizers =
        (p.pv_creator == PvCreator::Controller).then(|| vec![FINALIZER_DEPROVISION.to_owned()]);
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
            finalizers,
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

/// What the controller makes of the PV a provisioning pod created.
#[derive(Debug, Clone, PartialEq)]
pub enum PvCheck {
    /// Right for the claim; `patch` adds bookkeeping a hand-written script left out.
    Good { patch: Option<serde_json::Value> },
    /// Not a volume for this claim; the attempt failed for this reason.
    Wrong(String),
}

/// Whether `pv` says it was provisioned by `provisioner_name`.
pub fn provisioned_by(pv: &PersistentVolume, provisioner_name: &str) -> bool {
    crate::names::annotation(&pv.metadata, ANN_PROVISIONED_BY) == Some(provisioner_name)
}

/// The PV the controller creates: the template with the volume source an image reported
/// (already checked by `allowed::check_report`) as the only addition to its spec.
pub fn pv_with_source(
    template: &PersistentVolume,
    source: &serde_json::Map<String, serde_json::Value>,
) -> Result<PersistentVolume, crate::config::ReportError> {
    let invalid = |e: serde_json::Error| crate::config::ReportError::NotAPv(e.to_string());
    let mut pv = serde_json::to_value(template).map_err(invalid)?;
    if let Some(spec) = pv
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    {
        spec.extend(source.clone());
    }
    serde_json::from_value(pv).map_err(invalid)
}

/// What a PV is checked against besides its claim and template.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The volume source types the class allows.
    pub sources: &'a std::collections::BTreeSet<String>,
    /// The source the image reported, when the controller creates the PV and the report is
    /// still readable: the PV must hold exactly that.
    pub reported: Option<&'a serde_json::Map<String, serde_json::Value>>,
    /// With `volume-base`: the one volume the claim's Job was made for.
    pub exact: Option<&'a crate::config::allowed::ExactVolume>,
}

/// Checks a PV against its claim, what the template asked for and the volume sources the
/// class allows (docs/image-contract.md, "The PV").
pub fn verify(
    pv: &PersistentVolume,
    claim: &ClaimRequest,
    template: &PersistentVolume,
    expected: Expected<'_>,
) -> PvCheck {
    let spec = pv.spec.clone().unwrap_or_default();
    let claim_ref = spec.claim_ref.clone().unwrap_or_default();
    if claim_ref.uid.as_deref() != Some(claim.uid.as_str())
        || claim_ref.name.as_deref() != Some(claim.name.as_str())
        || claim_ref.namespace.as_deref() != Some(claim.namespace.as_str())
    {
        return PvCheck::Wrong(format!(
            "its claimRef names {}/{} (uid {}), not this claim",
            claim_ref.namespace.unwrap_or_default(),
            claim_ref.name.unwrap_or_default(),
            claim_ref.uid.unwrap_or_default()
        ));
    }
    let want = template.spec.clone().unwrap_or_default();
    if spec.storage_class_name != want.storage_class_name {
        return PvCheck::Wrong(format!(
            "its storageClassName is {:?}, not {:?}",
            spec.storage_class_name.unwrap_or_default(),
            want.storage_class_name.unwrap_or_default()
        ));
    }
    let capacity = storage_capacity(&spec);
    match crate::quantity::parse_bytes(&capacity) {
        Ok(b) if b >= claim.bytes => {}
        _ => {
            return PvCheck::Wrong(format!(
                "its capacity {capacity:?} is less than the {} requested",
                claim.requested
            ));
        }
    }
    let modes = spec.access_modes.clone().unwrap_or_default();
    if let Some(missing) = claim.access_modes.iter().find(|m| !modes.contains(m)) {
        return PvCheck::Wrong(format!("it lacks the requested access mode {missing}"));
    }
    if spec.volume_mode.as_deref().unwrap_or("Filesystem") != claim.volume_mode {
        return PvCheck::Wrong(format!(
            "its volumeMode is {}, not {}",
            spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
            claim.volume_mode
        ));
    }
    let raw_spec = serde_json::to_value(&spec).unwrap_or_default();
    let types = sources_in(&raw_spec);
    match types.as_slice() {
        [one] if expected.sources.contains(one) => {}
        [one] => {
            return PvCheck::Wrong(format!(
                "its volume source is `{one}`, which this class does not allow (volume-sources: {})",
                expected
                    .sources
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        [] => return PvCheck::Wrong("it has no volume source".into()),
        many => {
            return PvCheck::Wrong(format!(
                "it has {} volume sources ({}), not one",
                many.len(),
                many.join(", ")
            ));
        }
    }
    if let (Some(exact), [kind]) = (expected.exact, types.as_slice()) {
        let body = raw_spec[kind.as_str()]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if exact.check(kind, &body).is_err() {
            return PvCheck::Wrong(format!(
                "its {kind} volume is not exactly the claim's directory that volume-directory names ({exact})"
            ));
        }
    }
    if let Some(reported) = expected.reported
        && reported
            .iter()
            .any(|(k, v)| raw_spec.get(k).is_none_or(|have| !holds(have, v)))
    {
        return PvCheck::Wrong("its volume source is not the one the provisioner reported".into());
    }
    PvCheck::Good {
        patch: bookkeeping_patch(pv, template),
    }
}

/// A merge patch adding our annotations, labels and finalizer where the PV lacks them.
fn bookkeeping_patch(
    pv: &PersistentVolume,
    template: &PersistentVolume,
) -> Option<serde_json::Value> {
    type Map = Option<BTreeMap<String, String>>;
    let missing = |want: &Map, have: &Map| {
        let has = |k: &String| have.as_ref().is_some_and(|h| h.contains_key(k));
        want.iter()
            .flatten()
            .filter(|(k, _)| !has(k))
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect::<serde_json::Map<_, _>>()
    };
    let (want, have) = (&template.metadata, &pv.metadata);
    let annotations = missing(&want.annotations, &have.annotations);
    let labels = missing(&want.labels, &have.labels);
    let mut finalizers = pv.metadata.finalizers.clone().unwrap_or_default();
    let add_finalizer = !verified(pv) && pv.metadata.deletion_timestamp.is_none();
    if annotations.is_empty() && labels.is_empty() && !add_finalizer {
        return None;
    }
    // The resourceVersion makes the patch fail rather than drop a finalizer or annotation
    // someone added since our cache saw the PV.
    let mut meta = serde_json::json!({"resourceVersion": pv.metadata.resource_version});
    for (key, missing) in [("annotations", annotations), ("labels", labels)] {
        if !missing.is_empty() {
            meta[key] = missing.into();
        }
    }
    if add_finalizer {
        finalizers.push(FINALIZER_DEPROVISION.to_owned());
        meta["finalizers"] = serde_json::json!(finalizers);
    }
    Some(serde_json::json!({ "metadata": meta }))
}

/// Whether `stored` says everything `sent` said: the same scalars and lists, and for
/// objects every field `sent` had. The API server adds defaults to what it stores (a
/// hostPath source gets `type: ""`), so a PV made from a report holds more than the report.
fn holds(stored: &serde_json::Value, sent: &serde_json::Value) -> bool {
    match (stored, sent) {
        (serde_json::Value::Object(have), serde_json::Value::Object(want)) => want
            .iter()
            .all(|(k, v)| have.get(k).is_some_and(|h| holds(h, v))),
        _ => stored == sent,
    }
}

/// The PV's `capacity.storage` as written, or empty when it has none.
pub fn storage_capacity(spec: &k8s_openapi::api::core::v1::PersistentVolumeSpec) -> String {
    spec.capacity
        .as_ref()
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default()
}
