//! The digest of what a provisioning attempt is made from (configuration and claim), which
//! its Job carries: a permanent failure is retried only once the digest changes.

use crate::claim::ClaimRequest;
use crate::config::ClassConfig;

/// Annotation on a provisioning Job: a hash of what the attempt was made from, so a
/// permanent failure is retried only once the claim or the configuration changed.
pub const ANN_INPUTS: &str = "flex-provisioner.io/inputs";

/// Version of the canonical form below: bumped whenever what it holds changes, so that a
/// change of form never reads as a change of the user's inputs.
const INPUTS_FORM: &str = "v2";

/// A stable digest of everything an attempt is made from: the configuration and the claim.
/// The inputs are written as canonical JSON (objects with sorted keys, fixed fields) and
/// hashed with SHA-256, so neither a dependency upgrade nor a change of `Debug` output
/// re-opens a claim that gave up. Annotations written by Kubernetes or by us are
/// bookkeeping, not input.
pub fn inputs_hash(config: &ClassConfig, claim: &ClaimRequest) -> String {
    use sha2::Digest;
    let user_annotations: std::collections::BTreeMap<&String, &String> = claim
        .annotations
        .iter()
        .filter(|(k, _)| !k.contains("kubernetes.io/") && !k.starts_with(crate::names::PREFIX))
        .collect();
    let p = &config.provisioner;
    let c = &config.class;
    let mut canonical = serde_json::json!({
        "form": INPUTS_FORM,
        "config": {
            "image": p.image, "serviceAccount": p.service_account, "nodeSelector": p.node_selector,
            "command": p.command, "args": p.args, "timeoutSeconds": p.timeout.as_secs(),
            "retries": p.retries, "maxAttempts": p.max_attempts,
            "permanentExitCodes": p.permanent_exit_codes, "nodeLocal": p.node_local,
            "podTemplate": p.pod_template, "parameters": p.parameters,
            "pvCreator": p.pv_creator, "volumeSources": p.volume_sources,
        },
        "class": {
            "name": c.name, "parameters": c.parameters, "reclaimPolicy": c.reclaim_policy,
            "mountOptions": c.mount_options, "volumeBindingMode": c.volume_binding_mode,
        },
        "claim": {
            "requested": claim.requested, "accessModes": claim.access_modes,
            "volumeMode": claim.volume_mode, "labels": claim.labels,
            "annotations": user_annotations,
        },
    });
    // Only when the ConfigMap declares any: the digest of a class without declarations
    // stays what it was before they existed (see the test of a fixed digest).
    if let Some(declared) = p.allowed_volumes.declared() {
        canonical["config"]["allowedVolumes"] = declared;
    }
    if let Some(layout) = &p.volume_layout {
        canonical["config"]["volumeLayout"] =
            serde_json::json!({"base": layout.base, "directory": layout.directory});
    }
    let digest = sha2::Sha256::digest(canonical.to_string().as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{INPUTS_FORM}-{hex}")
}
