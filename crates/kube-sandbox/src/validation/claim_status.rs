//! What the status subresource of a claim checks (ValidatePersistentVolumeClaimStatusUpdate):
//! capacities, and the expansion bookkeeping resizers write (`allocatedResources`,
//! `allocatedResourceStatuses`). Conditions are not checked by the real server, whatever
//! their type.

use super::*;

/// The ClaimResourceStatus values, sorted as Go's `sets.List` prints them.
pub(super) const RESIZE_STATUSES: [&str; 5] = [
    "ControllerResizeInProgress",
    "ControllerResizeInfeasible",
    "NodeResizeInProgress",
    "NodeResizeInfeasible",
    "NodeResizePending",
];

/// Resource names a claim may account for: qualified names, and of the names Kubernetes
/// owns (no prefix, or a `kubernetes.io/` one) only `storage`.
fn resource_key_errors(errs: &mut Errs, path: &str, key: &str) -> bool {
    let before = errs.0.len();
    for msg in qualified_name_errors(key) {
        errs.invalid(path, Bad::Str(key.to_owned()), &msg);
    }
    if errs.0.len() != before {
        return true;
    }
    let native = !key.contains('/') || key.contains("kubernetes.io/");
    if native && key != "storage" {
        errs.not_supported(path, Bad::Str(key.to_owned()), &["storage"]);
        return true;
    }
    false
}

/// validateBasicResource: a quantity below zero, shown as its whole units.
fn basic_resource(errs: &mut Errs, path: String, v: &Value) {
    if let Some(q) = parse_quantity(v)
        && q.value() < 0
    {
        errs.invalid(
            path,
            Bad::Int(q.value()),
            "must be a valid resource quantity",
        );
    }
}

/// Go ranges over maps in no fixed order; sorted keys keep the answer stable.
fn sorted(m: Option<&Value>) -> Vec<(&String, &Value)> {
    let mut out: Vec<(&String, &Value)> = m
        .and_then(Value::as_object)
        .map(|o| o.iter().filter(|(_, v)| !v.is_null()).collect())
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

pub(super) fn pvc_status_errors(new: &Value) -> Errs {
    let mut errs = Errs::default();
    let status = new.get("status");
    for (k, v) in sorted(status.and_then(|s| s.get("capacity"))) {
        basic_resource(&mut errs, format!("status.capacity[{k}]"), v);
    }
    // The real path names the field in the singular, and the bad value is the key.
    let status_path = "status.allocatedResourceStatus";
    for (k, v) in sorted(status.and_then(|s| s.get("allocatedResourceStatuses"))) {
        resource_key_errors(&mut errs, status_path, k);
        if !v.as_str().is_some_and(|s| RESIZE_STATUSES.contains(&s)) {
            errs.not_supported(status_path, Bad::Str(k.clone()), &RESIZE_STATUSES);
        }
    }
    let alloc_path = "status.allocatedResources";
    for (k, v) in sorted(status.and_then(|s| s.get("allocatedResources"))) {
        if resource_key_errors(&mut errs, alloc_path, k) {
            continue;
        }
        // ValidateResourceQuantityValue follows, but a negative amount has already been
        // reported here.
        basic_resource(&mut errs, format!("{alloc_path}[{k}]"), v);
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(status: Value) -> Vec<String> {
        pvc_status_errors(&json!({ "status": status }))
            .0
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn expansion_bookkeeping() {
        assert!(
            messages(json!({
                "allocatedResources": {"storage": "2Gi"},
                "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
                "conditions": [{"type": "AnythingAtAll", "status": "True"}],
            }))
            .is_empty()
        );
        assert_eq!(
            messages(json!({"allocatedResourceStatuses": {"storage": "Resizing"}})),
            [
                "status.allocatedResourceStatus: Unsupported value: \"storage\": supported values: \"ControllerResizeInProgress\", \"ControllerResizeInfeasible\", \"NodeResizeInProgress\", \"NodeResizeInfeasible\", \"NodeResizePending\""
            ]
        );
        assert_eq!(
            messages(json!({"allocatedResources": {"cpu": "1"}})),
            [
                "status.allocatedResources: Unsupported value: \"cpu\": supported values: \"storage\""
            ]
        );
        assert!(messages(json!({"allocatedResources": {"example.com/iops": "5"}})).is_empty());
        assert_eq!(
            messages(json!({"allocatedResources": {"storage": "-1Gi"}})),
            [
                "status.allocatedResources[storage]: Invalid value: -1073741824: must be a valid resource quantity"
            ]
        );
    }
}
