//! The deprovision record of a volume: a ConfigMap the controller writes in the config
//! namespace when it has verified the PV a Job made, bound to that PV's uid and owned by it
//! (garbage-collected with it). What a deprovision Job runs comes only from here: the PV's
//! own annotations can be written by anyone who may create or update PVs, and a copy of
//! them onto a decoy PV (or a record of another PV) never matches its uid.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::names::{ANN_DEPROVISION_SPEC, LABEL_MANAGED_BY, LABEL_RECORD, MANAGED_BY_VALUE};
use crate::recipe::{JobRecipe, env_of};

const KEY_PV_NAME: &str = "pv-name";
const KEY_PV_UID: &str = "pv-uid";
const KEY_RECIPE: &str = "deprovision-spec";
const KEY_EXPAND: &str = "expand-spec";
const KEY_PARAMETERS: &str = "parameters";
/// `namespace/name` of the claim the volume was verified for: where to look, before its
/// storage is destroyed, for a claim that still names the volume.
const KEY_CLAIM: &str = "claim";

/// What a deprovision Job of one volume is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub recipe: JobRecipe,
    /// How to grow the volume (`expand-*` keys, else the provisioning ones).
    pub expand: Option<JobRecipe>,
    pub parameters: BTreeMap<String, String>,
}

/// The record's name: one per PV uid, so a PV re-created under the same name never finds
/// the record of the one before.
pub fn record_name(pv_uid: &str) -> String {
    format!("flex-record-{pv_uid}")
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
    let (name, uid) = (name.to_owned(), uid.to_owned());
    OwnerReference {
        api_version,
        kind,
        name,
        uid,
        ..Default::default()
    }
}

/// The record also owned by the provisioning Job that made its volume, so it outlives the
/// PV for as long as that Job exists: a Job with a record was not left without a PV by a
/// claim deleted mid-provision (plan::orphan), whatever became of the PV since.
pub fn with_job_owner(mut record: ConfigMap, job: &k8s_openapi::api::batch::v1::Job) -> ConfigMap {
    if let (Some(name), Some(uid)) = (&job.metadata.name, &job.metadata.uid) {
        let owners = record
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new);
        owners.push(owner("batch/v1", "Job", name, uid));
    }
    record
}

/// The record for `pv`, from what the controller itself computed for its claim (the
/// deprovision recipe and the rendered parameters), never from the PV as written.
pub fn build_record(
    pv: &PersistentVolume,
    recipe: &JobRecipe,
    expand: Option<&JobRecipe>,
    parameters_json: &str,
) -> Option<ConfigMap> {
    let uid = pv.metadata.uid.clone()?;
    let name = pv.metadata.name.clone()?;
    let json = |r: &JobRecipe| serde_json::to_string(r).unwrap_or_default();
    let mut data = BTreeMap::from([
        (KEY_PV_NAME.to_owned(), name.clone()),
        (KEY_PV_UID.to_owned(), uid.clone()),
        (KEY_RECIPE.to_owned(), json(recipe)),
        (KEY_PARAMETERS.to_owned(), parameters_json.to_owned()),
    ]);
    data.extend(expand.map(|e| (KEY_EXPAND.to_owned(), json(e))));
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    data.extend(claim_ref.and_then(|r| {
        let at = format!("{}/{}", r.namespace.as_ref()?, r.name.as_ref()?);
        Some((KEY_CLAIM.to_owned(), at))
    }));
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(record_name(&uid)),
            namespace: Some(recipe.namespace.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (LABEL_RECORD.to_owned(), "true".to_owned()),
                // Found by volume name while the Job that made the volume exists (see
                // `with_job_owner`): the evidence that a PV was made for it.
                (crate::names::LABEL_VOLUME.to_owned(), name.clone()),
            ])),
            owner_references: Some(vec![owner("v1", "PersistentVolume", &name, &uid)]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    })
}

/// The record for a PV made by a provisioning Job whose claim was deleted before the
/// controller could verify the PV: built from the deprovision recipe and parameters the
/// controller put in that Job (a Job in the config namespace, so only the controller and
/// kube admins wrote it), provided the PV has the name and claim uid of the Job's template
/// and was created after the Job.
pub fn record_from_job(
    pv: &PersistentVolume,
    job: &k8s_openapi::api::batch::v1::Job,
) -> Option<ConfigMap> {
    let template = crate::recipe::pv_template_of(job)?;
    let recipe = crate::recipe::recipe_of(job, ANN_DEPROVISION_SPEC)?;
    let parameters = env_of(job, "PARAMETERS").unwrap_or_else(|| "{}".into());
    let claim_uid = crate::volume::claim_uid;
    let (started, created) = (
        &job.metadata.creation_timestamp,
        &pv.metadata.creation_timestamp,
    );
    let after = started
        .as_ref()
        .zip(created.as_ref())
        .is_some_and(|(s, c)| s.0 <= c.0);
    (after
        && template.metadata.name == pv.metadata.name
        && claim_uid(&template).is_some()
        && claim_uid(&template) == claim_uid(pv))
    // The claim is gone: such a volume is never expanded.
    .then(|| build_record(pv, &recipe, None, &parameters))
    .flatten()
}

/// The record of a verified PV, from what the provisioning Job that made it was given: its
/// deprovision and expansion recipes and its `PARAMETERS`, rendered once with the Job. A
/// label changed on the claim while the Job ran must not make deletion target other
/// storage than the Job made. `None` for a Job without these annotations.
pub fn record_from_attempt(
    pv: &PersistentVolume,
    job: &k8s_openapi::api::batch::v1::Job,
) -> Option<ConfigMap> {
    let recipe = crate::recipe::recipe_of(job, ANN_DEPROVISION_SPEC)?;
    let expand = crate::recipe::recipe_of(job, crate::names::ANN_EXPAND_SPEC);
    let parameters = env_of(job, "PARAMETERS")?;
    build_record(pv, &recipe, expand.as_ref(), &parameters).map(|r| with_job_owner(r, job))
}

/// The claim (namespace, name) a record says its volume was verified for.
pub fn record_claim(cm: &ConfigMap) -> Option<(String, String)> {
    let text = cm.data.as_ref()?.get(KEY_CLAIM)?;
    let (ns, name) = text.split_once('/')?;
    Some((ns.to_owned(), name.to_owned()))
}

/// Why a volume's record cannot be used; `Display` is the text told on the PV or claim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("it has no deprovision record of ours ({0}) in the config namespaces")]
    Missing(String),
    #[error("its deprovision record {record} does not belong to this PV (name {name}, uid {uid})")]
    NotThisPv {
        record: String,
        name: String,
        uid: String,
    },
    #[error("its deprovision record has no recipe")]
    NoRecipe,
    #[error("its deprovision record is not valid: {0}")]
    InvalidRecipe(String),
    #[error("its expansion recipe is not valid: {0}")]
    InvalidExpand(String),
    #[error("its record holds no expansion recipe")]
    NoExpandRecipe,
}

impl RecordError {
    /// The record of `pv` was looked for and not found.
    pub fn missing(pv: &PersistentVolume) -> Self {
        RecordError::Missing(record_name(pv.metadata.uid.as_deref().unwrap_or_default()))
    }
}

/// Reads a record back, provided it is ours (our label, written for this PV's name and uid).
pub fn read_record(cm: &ConfigMap, pv: &PersistentVolume) -> Result<Record, RecordError> {
    let labelled = cm
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_RECORD))
        .is_some_and(|v| v == "true");
    let data = cm.data.clone().unwrap_or_default();
    let uid = pv.metadata.uid.as_deref().unwrap_or_default();
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    if !labelled
        || uid.is_empty()
        || data.get(KEY_PV_UID).map(String::as_str) != Some(uid)
        || data.get(KEY_PV_NAME).map(String::as_str) != Some(name)
    {
        return Err(RecordError::NotThisPv {
            record: cm.metadata.name.clone().unwrap_or_default(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        });
    }
    let recipe = data
        .get(KEY_RECIPE)
        .ok_or(RecordError::NoRecipe)
        .and_then(|r| {
            serde_json::from_str(r).map_err(|e| RecordError::InvalidRecipe(e.to_string()))
        })?;
    let parameters = data
        .get(KEY_PARAMETERS)
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or_default();
    let expand = data
        .get(KEY_EXPAND)
        .map(|r| serde_json::from_str(r).map_err(|e| RecordError::InvalidExpand(e.to_string())))
        .transpose()?;
    Ok(Record {
        recipe,
        expand,
        parameters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(uid: &str) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pvc-1", "uid": uid}})).unwrap()
    }

    fn recipe() -> JobRecipe {
        serde_json::from_value(
            json!({"namespace": "cfg", "config": "cfg/c", "image": "img:1",
            "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": []}),
        )
        .unwrap()
    }

    const PARAMETERS: &str = "{\"dir\":\"/v/a\"}";

    #[test]
    fn a_record_is_bound_to_its_volume_uid() {
        let cm = build_record(&pv("u-1"), &recipe(), Some(&recipe()), PARAMETERS).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("flex-record-u-1"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("cfg"));
        assert_eq!(cm.metadata.owner_references.as_ref().unwrap()[0].uid, "u-1");
        let r = read_record(&cm, &pv("u-1")).unwrap();
        assert_eq!(r.recipe.image, "img:1");
        assert_eq!(r.parameters["dir"], "/v/a");
        let decoy = read_record(&cm, &pv("u-2")).unwrap_err().to_string();
        assert!(decoy.contains("does not belong"), "{decoy}");
        // A PV made by a provisioning Job whose claim is gone: the record comes from the
        // recipe in the Job, only for the PV its template names, made after the Job.
        let t = json!({"metadata": {"name": "pvc-1"}, "spec": {"claimRef": {"uid": "c-1"}}});
        let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {ANN_DEPROVISION_SPEC: serde_json::to_string(&recipe()).unwrap()}},
            "spec": {"template": {"spec": {"containers": [{"name": "p",
                "env": [{"name": "PV_TEMPLATE", "value": t.to_string()},
                        {"name": "PARAMETERS", "value": PARAMETERS}]}]}}}}))
        .unwrap();
        let late = |name: &str, claim: &str, at: &str| -> PersistentVolume {
            serde_json::from_value(
                json!({"metadata": {"name": name, "uid": "u-9", "creationTimestamp": at},
                "spec": {"claimRef": {"uid": claim}}}),
            )
            .unwrap()
        };
        let made = late("pvc-1", "c-1", "2026-01-01T00:00:05Z");
        let r = read_record(&record_from_job(&made, &job).unwrap(), &made).unwrap();
        assert_eq!(r.recipe.image, "img:1");
        assert_eq!(r.parameters["dir"], "/v/a");
        assert!(record_from_job(&late("decoy", "c-1", "2026-01-01T00:00:05Z"), &job).is_none());
        assert!(record_from_job(&late("pvc-1", "c-2", "2026-01-01T00:00:05Z"), &job).is_none());
        assert!(record_from_job(&late("pvc-1", "c-1", "2025-12-31T00:00:00Z"), &job).is_none());
        let mut unlabelled = cm.clone();
        unlabelled.metadata.labels = None;
        assert!(read_record(&unlabelled, &pv("u-1")).is_err());
    }
}
