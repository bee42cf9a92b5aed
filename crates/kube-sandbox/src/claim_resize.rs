//! The PersistentVolumeClaimResize admission plugin
//! (plugin/pkg/admission/storage/persistentvolume/resize): a claim's storage request may
//! only grow when the claim is bound and its StorageClass allows volume expansion. It is a
//! validating plugin, so it runs after field validation: a 422 wins over its 403. Writes to
//! subresources (status) are not its concern.

use serde_json::{Value, json};

use crate::status::{ApiError, ApiResult};
use crate::validation::requested_storage;

const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// GetPersistentVolumeClaimClass: the beta annotation wins over the field.
pub(crate) fn claim_class(claim: &Value) -> &str {
    claim
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
        .and_then(Value::as_str)
        .or_else(|| {
            claim
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str)
        })
        .unwrap_or_default()
}

fn forbidden(name: &str, why: &str) -> ApiError {
    ApiError::new(
        403,
        Some("Forbidden"),
        format!("persistentvolumeclaims \"{name}\" is forbidden: {why}"),
    )
    .with_details(json!({"name": name, "kind": "persistentvolumeclaims"}))
}

/// Admits (or refuses) the update of claim `name` from `old` to `new`; `classes` are the
/// StorageClasses the plugin's lister holds.
pub(crate) fn admit(name: &str, old: &Value, new: &Value, classes: &[Value]) -> ApiResult<()> {
    if requested_storage(new) <= requested_storage(old) {
        return Ok(());
    }
    if old.pointer("/status/phase").and_then(Value::as_str) != Some("Bound") {
        return Err(forbidden(
            name,
            "Only bound persistent volume claims can be expanded",
        ));
    }
    let (class, old_class) = (claim_class(new), claim_class(old));
    let allowed = !class.is_empty()
        && class == old_class
        && classes
            .iter()
            .find(|sc| sc.pointer("/metadata/name").and_then(Value::as_str) == Some(class))
            .and_then(|sc| sc.get("allowVolumeExpansion"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    if !allowed {
        return Err(forbidden(
            name,
            "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(size: &str, phase: &str) -> Value {
        json!({"metadata": {"name": "c"}, "spec": {"storageClassName": "fast",
            "resources": {"requests": {"storage": size}}}, "status": {"phase": phase}})
    }

    #[test]
    fn growth_needs_a_bound_claim_and_an_expandable_class() {
        let expandable = [json!({"metadata": {"name": "fast"}, "allowVolumeExpansion": true})];
        let fixed = [json!({"metadata": {"name": "fast"}})];
        let (small, big) = (claim("1Gi", "Bound"), claim("2Gi", "Bound"));
        assert!(admit("c", &small, &big, &expandable).is_ok());
        assert!(admit("c", &big, &small, &fixed).is_ok(), "not growth");
        let e = admit("c", &small, &big, &fixed).unwrap_err();
        assert_eq!(e.code, 403);
        assert!(
            e.message
                .ends_with("the storageclass that provisions the pvc must support resize")
        );
        assert!(admit("c", &small, &big, &[]).is_err(), "no class");
        let e = admit("c", &claim("1Gi", "Pending"), &big, &expandable).unwrap_err();
        assert_eq!(
            e.message,
            "persistentvolumeclaims \"c\" is forbidden: Only bound persistent volume claims can be expanded"
        );
    }
}
