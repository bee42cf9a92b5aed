//! PersistentVolumeClaim rules (create and update) and the semantic equality updates use.

use super::*;

// ---------------------------------------------------------------------------------------
// PersistentVolumeClaim.

/// ValidatePersistentVolumeClaimSpec (the selector aside); `any_group` lets data sources
/// name any API group, as for a stored claim that already names one.
pub(super) fn pvc_errors(obj: &Value, any_group: bool) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    access_modes(&mut errs, spec, "at least 1 access mode is required");
    let storage = spec
        .pointer("/resources/requests")
        .and_then(Value::as_object)
        .and_then(|m| m.get("storage"))
        .filter(|v| !v.is_null());
    match storage.and_then(parse_quantity) {
        None if storage.is_none() => errs.required("spec.resources[storage]", ""),
        None => {}
        Some(q) if q.nanos <= 0 => errs.invalid(
            "spec.resources[storage]",
            Bad::Str(q.canonical()),
            "must be greater than zero",
        ),
        Some(_) => {}
    }
    if let Some(class) = present(spec, "storageClassName").and_then(Value::as_str)
        && !class.is_empty()
    {
        class_name(&mut errs, "spec.storageClassName", class);
    }
    volume_mode(&mut errs, spec);
    data_source_errors(&mut errs, spec, any_group);
    if let Some(vac) = present(spec, "volumeAttributesClassName").and_then(Value::as_str)
        && !vac.is_empty()
    {
        class_name(&mut errs, "spec.volumeAttributesClassName", vac);
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Semantic equality (apiequality.Semantic.DeepEqual on the decoded object): JSON null, empty
// lists and empty maps stand for Go's nil, and quantities compare by value.

pub(super) fn normalize(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Array(a) => Some(Value::Array(
            a.iter()
                .map(|x| normalize(x).unwrap_or(Value::Null))
                .collect(),
        )),
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .filter_map(|(k, x)| normalize(x).map(|x| (k.clone(), x)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        other => Some(other.clone()),
    }
}

/// A quantity map with each value replaced by its exact amount.
pub(super) fn normalize_quantities(m: &mut Value) {
    if let Some(obj) = m.as_object_mut() {
        for v in obj.values_mut() {
            if let Some(q) = parse_quantity(v) {
                *v = json!(format!("{}n", q.nanos));
            }
        }
    }
}

pub(super) fn normal_claim_spec(spec: &Value) -> Value {
    let mut s = spec.clone();
    for key in ["requests", "limits"] {
        if let Some(m) = s.pointer_mut(&format!("/resources/{key}")) {
            normalize_quantities(m);
        }
    }
    // volumeName is a plain string in Go: "" and absent are the same.
    if s.get("volumeName").and_then(Value::as_str) == Some("")
        && let Some(m) = s.as_object_mut()
    {
        m.remove("volumeName");
    }
    normalize(&s).unwrap_or_else(|| json!({}))
}

pub(super) fn storage_request(spec: &Value) -> Option<Quantity> {
    spec.pointer("/resources/requests/storage")
        .and_then(parse_quantity)
}

/// Go's `%#v` of a *PersistentVolumeMode (or of nil) in ValidateImmutableField.
pub(super) fn immutable_volume_mode(errs: &mut Errs, old: &Value, new: &Value) {
    let o = old.pointer("/spec/volumeMode").filter(|v| !v.is_null());
    let n = new.pointer("/spec/volumeMode").filter(|v| !v.is_null());
    if o != n {
        // A nil pointer prints as the string "null", quoted.
        let shown = n.map_or(Bad::Str("null".into()), bad_of);
        errs.invalid("volumeMode", shown, "field is immutable");
    }
}

pub(super) fn pvc_update_errors(old: &Value, new: &Value) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let old_spec = old.get("spec").unwrap_or(&null);
    let new_spec = new.get("spec").unwrap_or(&null);
    let mut old_clone = old_spec.clone();
    let mut new_clone = new_spec.clone();
    if !old_clone.is_object() {
        old_clone = json!({});
    }
    if !new_clone.is_object() {
        new_clone = json!({});
    }

    // The PV controller sets volumeName once.
    if text(old_spec, "volumeName").is_empty() {
        old_clone["volumeName"] = new_spec.get("volumeName").cloned().unwrap_or(Value::Null);
    }

    let old_sc = present(old_spec, "storageClassName").and_then(Value::as_str);
    let new_sc = present(new_spec, "storageClassName").and_then(Value::as_str);
    let old_ann = annotation(old, BETA_STORAGE_CLASS_ANNOTATION);
    let new_ann = annotation(new, BETA_STORAGE_CLASS_ANNOTATION);
    let from_annotation = old_ann.is_some()
        && old_sc.is_none()
        && new_sc.is_some()
        && new_sc == old_ann
        && (new_ann.is_none() || new_ann == old_ann);
    if from_annotation {
        new_clone["storageClassName"] = Value::Null;
    } else {
        if new_ann != old_ann {
            errs.invalid(
                format!("metadata.annotations.{BETA_STORAGE_CLASS_ANNOTATION}"),
                Bad::Str(new_ann.unwrap_or_default().to_owned()),
                "field is immutable",
            );
        }
        let from_nil =
            new_sc.is_some() && old_sc.is_none() && (old_ann.is_none() || new_sc == old_ann);
        if from_nil {
            new_clone["storageClassName"] = old_clone
                .get("storageClassName")
                .cloned()
                .unwrap_or(Value::Null);
        }
    }

    let bound = new.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    if bound
        && new_clone
            .pointer("/resources/requests")
            .is_some_and(Value::is_object)
    {
        new_clone["resources"]["requests"]["storage"] = old_spec
            .pointer("/resources/requests/storage")
            .cloned()
            .unwrap_or_else(|| json!("0"));
    }
    if bound && present(&new_clone, "volumeAttributesClassName").is_some() {
        new_clone["volumeAttributesClassName"] = old_clone
            .get("volumeAttributesClassName")
            .cloned()
            .unwrap_or(Value::Null);
    }

    if normal_claim_spec(&new_clone) != normal_claim_spec(&old_clone) {
        // The real message goes on with "\n" and a cmp.Diff of the internal Go structs.
        errs.forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        );
    }

    let zero = || Quantity::parse("0").expect("zero parses");
    let old_size = storage_request(old_spec).unwrap_or_else(zero);
    let new_size = storage_request(new_spec).unwrap_or_else(zero);
    let status_size = old
        .pointer("/status/capacity/storage")
        .and_then(parse_quantity)
        .unwrap_or_else(zero);
    // RecoverVolumeExpansionFailure is on: a claim may shrink back, but not to or below
    // what its volume already has.
    if new_size.nanos < old_size.nanos && new_size.nanos <= status_size.nanos {
        errs.forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        );
    }

    immutable_volume_mode(&mut errs, old, new);

    let old_vac = present(old_spec, "volumeAttributesClassName");
    let new_vac = present(new_spec, "volumeAttributesClassName");
    if old_vac.is_some() && old_vac != new_vac {
        match new_vac.and_then(Value::as_str) {
            None => errs.forbidden(
                "spec.volumeAttributesClassName",
                "update from non-nil value to nil is forbidden",
            ),
            Some("") => errs.forbidden(
                "spec.volumeAttributesClassName",
                "update from non-nil value to an empty string is forbidden",
            ),
            Some(_) => {}
        }
    }
    errs
}
