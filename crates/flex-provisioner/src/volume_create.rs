//! `flex-provisioner volume create`: the PV helper for provisioner images. With
//! `PV_CREATOR=controller` (the default of a class) it writes the volume source to the
//! termination log, where the controller reads it and creates the PV; with `image` it merges
//! the source into `PV_TEMPLATE` and creates the PV with the pod's credentials. A PV that
//! already exists for the same claim counts as success, so a retried pod is harmless.

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::Value;

/// Why a PV could not be created; `permanent()` chooses the exit code.
#[derive(Debug, thiserror::Error)]
pub enum VolumeCreateError {
    #[error("{0}")]
    Input(String),
    #[error(
        "PersistentVolume {name} already exists for another claim ({other}); refusing to touch it"
    )]
    Taken { name: String, other: String },
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Report(String),
}

impl VolumeCreateError {
    /// Retrying cannot help: the image should exit with the permanent code.
    pub fn permanent(&self) -> bool {
        match self {
            VolumeCreateError::Input(_) | VolumeCreateError::Taken { .. } => true,
            VolumeCreateError::Api(kube::Error::Api(s)) => matches!(s.code, 400 | 403 | 422),
            VolumeCreateError::Api(_) | VolumeCreateError::Report(_) => false,
        }
    }
}

/// The PV `volume create` would submit: the template with the source merged into its spec.
pub fn build(template: &str, source: &str) -> Result<PersistentVolume, VolumeCreateError> {
    let mut pv: Value = serde_json::from_str(template)
        .map_err(|e| VolumeCreateError::Input(format!("PV_TEMPLATE is not valid JSON: {e}")))?;
    let src: Value = serde_json::from_str(source)
        .map_err(|e| VolumeCreateError::Input(format!("--source is not valid JSON: {e}")))?;
    let Value::Object(src) = src else {
        return Err(VolumeCreateError::Input(
            "--source must be a JSON object such as {\"nfs\":{\"server\":\"…\",\"path\":\"…\"}}"
                .into(),
        ));
    };
    if src.len() != 1 {
        return Err(VolumeCreateError::Input(format!(
            "--source must hold exactly one volume source (e.g. nfs, hostPath, local, iscsi), not {}",
            src.len()
        )));
    }
    let spec = pv
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| VolumeCreateError::Input("PV_TEMPLATE has no spec".into()))?;
    for (k, v) in src {
        spec.insert(k, v);
    }
    serde_json::from_value(pv)
        .map_err(|e| VolumeCreateError::Input(format!("the resulting PV is not valid: {e}")))
}

/// What the kubelet keeps of a termination message: a longer report would reach the
/// controller cut short, as invalid JSON.
pub const MAX_REPORT_BYTES: usize = 4096;

/// Writes the volume source (already checked by `build`) to the termination log, compact.
pub fn report(source: &str, termination_log: &str) -> Result<(), VolumeCreateError> {
    let value: Value = serde_json::from_str(source)
        .map_err(|e| VolumeCreateError::Input(format!("--source is not valid JSON: {e}")))?;
    let text = value.to_string();
    if text.len() > MAX_REPORT_BYTES {
        return Err(VolumeCreateError::Input(format!(
            "--source is {} bytes; a termination message holds at most {MAX_REPORT_BYTES}",
            text.len()
        )));
    }
    std::fs::write(termination_log, text).map_err(|e| {
        VolumeCreateError::Report(format!("cannot write the report to {termination_log}: {e}"))
    })
}

/// Creates the PV; `Ok(false)` when it already existed for the same claim.
pub async fn create(client: Client, pv: &PersistentVolume) -> Result<bool, VolumeCreateError> {
    let api: Api<PersistentVolume> = Api::all(client);
    let name = pv.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), pv).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(&name).await?;
            let uid = |p: &PersistentVolume| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .and_then(|r| r.uid.clone())
            };
            if uid(&existing) == uid(pv) {
                Ok(false)
            } else {
                Err(VolumeCreateError::Taken {
                    name,
                    other: uid(&existing).unwrap_or_default(),
                })
            }
        }
        Err(e) => Err(e.into()),
    }
}
