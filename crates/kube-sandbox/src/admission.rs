//! Defaulting and validation on create and update, kind by kind, as far as controllers and
//! the conformance probes can tell the difference.

use serde_json::{Value, json};

use super::ids;
use super::resources::Resource;
use super::status::{ApiError, ApiResult, Cause};
use super::validation;
use crate::wellknown::{LABEL_HELP, SUBDOMAIN_HELP, is_dns_label, is_dns_subdomain};

fn invalid(r: &Resource, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(r.kind, r.group, name, causes)
}

pub fn validate_name(r: &Resource, name: &str) -> ApiResult<()> {
    let (ok, help) = match r.plural {
        "namespaces" | "services" => (is_dns_label(name), LABEL_HELP),
        _ if r.group == "rbac.authorization.k8s.io" => (
            !name.is_empty() && !name.contains('/') && !name.contains('%'),
            "may not contain '/' or '%'",
        ),
        "jobs" => (is_dns_subdomain(name) && name.len() <= 63, SUBDOMAIN_HELP),
        _ => (is_dns_subdomain(name), SUBDOMAIN_HELP),
    };
    if ok {
        return Ok(());
    }
    if name.is_empty() {
        return Err(invalid(
            r,
            name,
            vec![Cause::new(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )],
        ));
    }
    Err(invalid(
        r,
        name,
        vec![Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": {help}"),
        )],
    ))
}

fn validate_owner_references(r: &Resource, name: &str, obj: &Value) -> ApiResult<()> {
    let refs = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for rf in &refs {
        if rf
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
        {
            return Err(invalid(
                r,
                name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "metadata.ownerReferences.uid",
                    "Invalid value: \"\": must not be empty",
                )],
            ));
        }
    }
    let controllers: Vec<&Value> = refs
        .iter()
        .filter(|rf| rf.get("controller").and_then(Value::as_bool) == Some(true))
        .collect();
    if controllers.len() > 1 {
        let names: Vec<String> = controllers
            .iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c["kind"].as_str().unwrap_or_default(),
                    c["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        return Err(invalid(
            r,
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "metadata.ownerReferences",
                format!(
                    "Invalid value: [{}]: Only one reference can have Controller set to true. Found \"true\" in references for {}",
                    refs.iter().map(go_order).collect::<Vec<_>>().join(","),
                    names.join(" and ")
                ),
            )],
        ));
    }
    Ok(())
}

/// An owner reference serialised in the Go struct's field order, as the real message shows it.
fn go_order(rf: &Value) -> String {
    let fields: Vec<String> = [
        "apiVersion",
        "kind",
        "name",
        "uid",
        "controller",
        "blockOwnerDeletion",
    ]
    .iter()
    .filter_map(|k| {
        rf.get(*k)
            .filter(|v| !v.is_null())
            .map(|v| format!("\"{k}\":{v}"))
    })
    .collect();
    format!("{{{}}}", fields.join(","))
}

fn add_finalizer(obj: &mut Value, f: &str) {
    let list = obj["metadata"]
        .as_object_mut()
        .map(|m| m.entry("finalizers").or_insert_with(|| json!([])));
    if let Some(Value::Array(list)) = list
        && !list.iter().any(|x| x == f)
    {
        list.push(json!(f));
    }
}

fn default(obj: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let mut cur = obj;
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let m = cur.as_object_mut().expect("made an object above");
        if i == parts.len() - 1 {
            m.entry(p.to_string()).or_insert(value);
            return;
        }
        cur = m.entry(p.to_string()).or_insert_with(|| json!({}));
    }
}

/// Pod spec defaults the API server fills in, for pods and pod templates alike.
fn default_pod_spec(spec: &mut Value) {
    default(spec, "/restartPolicy", json!("Always"));
    default(spec, "/dnsPolicy", json!("ClusterFirst"));
    default(spec, "/schedulerName", json!("default-scheduler"));
    default(spec, "/terminationGracePeriodSeconds", json!(30));
    default(spec, "/securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            default(c, "/terminationMessagePath", json!("/dev/termination-log"));
            default(c, "/terminationMessagePolicy", json!("File"));
            default(c, "/imagePullPolicy", json!("IfNotPresent"));
            default(c, "/resources", json!({}));
        }
    }
}

/// The spec defaults of volumes and claims, applied whenever the real server decodes one.
fn default_volume_spec(r: &Resource, obj: &mut Value) {
    match (r.group, r.plural) {
        ("", "persistentvolumeclaims") => {
            default(obj, "/spec/volumeMode", json!("Filesystem"));
        }
        ("", "persistentvolumes") => {
            default(obj, "/spec/volumeMode", json!("Filesystem"));
            default(obj, "/spec/persistentVolumeReclaimPolicy", json!("Retain"));
        }
        _ => {}
    }
}

/// Defaults and validation for a new object. `obj` already has name, namespace, uid and
/// creationTimestamp.
pub fn prepare_create(r: &Resource, obj: &mut Value) -> ApiResult<()> {
    validation::check_decodable(r, obj)?;
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if !r.create_only {
        validate_name(r, &name)?;
    }
    validate_owner_references(r, &name, obj)?;
    if r.generation {
        obj["metadata"]["generation"] = json!(1);
    }
    match (r.group, r.plural) {
        ("", "namespaces") => {
            default(obj, "/spec/finalizers", json!(["kubernetes"]));
            obj["status"] = json!({"phase": "Active"});
            default(obj, "/metadata/labels", json!({}));
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        ("", "persistentvolumeclaims") => {
            default_volume_spec(r, obj);
            validation::shape_claim_data_sources(obj, None);
            obj["status"] = json!({"phase": "Pending"});
            add_finalizer(obj, "kubernetes.io/pvc-protection");
            validation::validate_create(r, &name, obj)?;
        }
        ("", "persistentvolumes") => {
            default_volume_spec(r, obj);
            obj["status"] = json!({"phase": "Pending"});
            add_finalizer(obj, "kubernetes.io/pv-protection");
            validation::validate_create(r, &name, obj)?;
        }
        ("", "secrets") => prepare_secret(obj),
        ("storage.k8s.io", "storageclasses") => {
            default(obj, "/reclaimPolicy", json!("Delete"));
            default(obj, "/volumeBindingMode", json!("Immediate"));
        }
        ("", "pods") => {
            let containers = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if containers == 0 {
                return Err(invalid(
                    r,
                    &name,
                    vec![Cause::new(
                        "FieldValueRequired",
                        "spec.containers",
                        "Required value",
                    )],
                ));
            }
            let spec = obj.get_mut("spec").expect("checked above");
            default_pod_spec(spec);
            default(spec, "/serviceAccountName", json!("default"));
            let gated = spec
                .get("schedulingGates")
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty());
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            if gated {
                obj["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                    "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastProbeTime": null, "lastTransitionTime": ids::now()}]);
            }
        }
        ("batch", "jobs") => prepare_job(r, obj, &name)?,
        ("", "events") => {
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            super::events::validate_core(obj, &ns, &name)?;
            *obj = super::events::normalize_core(obj.clone());
        }
        ("authorization.k8s.io", "selfsubjectaccessreviews") => {
            obj["status"] = json!({"allowed": true, "reason": "the sandbox allows everything"});
        }
        _ => {
            if r.status && obj.get("status").is_none() {
                obj["status"] = json!({});
            }
        }
    }
    Ok(())
}

/// A Secret's defaults (`type: Opaque`) and its write-only `stringData`, which the API
/// server folds into `data` (base64) and never stores.
fn prepare_secret(obj: &mut Value) {
    use base64::Engine;
    default(obj, "/type", json!("Opaque"));
    let Some(Value::Object(plain)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !obj["data"].is_object() {
        obj["data"] = json!({});
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    for (k, v) in plain {
        obj["data"][k] = json!(b64.encode(v.as_str().unwrap_or_default()));
    }
}

fn prepare_job(r: &Resource, obj: &mut Value, name: &str) -> ApiResult<()> {
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let has_pfp = obj
        .pointer("/spec/podFailurePolicy")
        .is_some_and(|v| !v.is_null());
    let restart = obj
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if has_pfp && restart != "Never" {
        return Err(invalid(
            r,
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.template.spec.restartPolicy",
                format!(
                    "Invalid value: \"{restart}\": only \"Never\" is supported when podFailurePolicy is specified"
                ),
            )],
        ));
    }
    if restart != "Never" && restart != "OnFailure" {
        return Err(invalid(
            r,
            name,
            vec![Cause::new(
                "FieldValueNotSupported",
                "spec.template.spec.restartPolicy",
                format!(
                    "Unsupported value: \"{restart}\": supported values: \"OnFailure\", \"Never\""
                ),
            )],
        ));
    }
    for (k, v) in [
        ("backoffLimit", json!(6)),
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("manualSelector", json!(false)),
        (
            "podReplacementPolicy",
            json!(if has_pfp {
                "Failed"
            } else {
                "TerminatingOrFailed"
            }),
        ),
    ] {
        default(obj, &format!("/spec/{k}"), v);
    }
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    });
    obj["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    default(obj, "/spec/template/metadata/labels", json!({}));
    for (k, v) in labels.as_object().expect("literal object") {
        obj["spec"]["template"]["metadata"]["labels"][k] = v.clone();
    }
    if obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.is_empty())
    {
        obj["metadata"]["labels"] = obj["spec"]["template"]["metadata"]["labels"].clone();
    }
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
    obj["status"] = json!({});
    Ok(())
}

/// Validation of an update against the stored object; identity fields are kept. `sub` names
/// the subresource written (`Some("status")`), if any.
pub fn prepare_update(
    r: &Resource,
    old: &Value,
    new: &mut Value,
    sub: Option<&str>,
) -> ApiResult<()> {
    validation::check_decodable(r, new)?;
    let name = old["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    ] {
        match old["metadata"].get(k) {
            Some(v) => new["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    validate_owner_references(r, &name, new)?;
    if old["metadata"].get("deletionTimestamp").is_some() {
        let before: Vec<&Value> = old["metadata"]["finalizers"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let added: Vec<String> = new["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| !before.contains(f))
            .map(|f| format!("{f}"))
            .collect();
        if !added.is_empty() {
            let msg = format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                added.join(", ")
            );
            let cause = Cause::new("FieldValueForbidden", "metadata.finalizers", msg.clone());
            let mut e = invalid(r, &name, vec![cause.clone()]);
            // The real server reports this cause twice; keep the same shape.
            if let Some(causes) = e.details.as_mut().and_then(|d| d["causes"].as_array_mut()) {
                let first = causes[0].clone();
                causes.push(first);
            }
            return Err(e);
        }
    }
    if r.group.is_empty() && r.plural == "pods" {
        validate_pod_update(r, &name, old, new)?;
    }
    // A spec the client left as stored (always so for status writes) is not defaulted
    // again: the stored one already was.
    let claim = r.group.is_empty() && r.plural == "persistentvolumeclaims";
    let mut old_shaped = None;
    if old.get("spec") != new.get("spec") {
        default_volume_spec(r, new);
        if claim {
            // The claim strategy shapes the data sources of the new spec, and of the stored
            // one for the comparison (claims stored before the fields were filled in).
            validation::shape_claim_data_sources(new, Some(old));
            // Measured against itself, only the filling-in applies.
            let mut o = old.clone();
            validation::shape_claim_data_sources(&mut o, Some(old));
            old_shaped = Some(o);
        }
    }
    let status = sub == Some("status");
    validation::validate_update(r, &name, old_shaped.as_ref().unwrap_or(old), new, status)?;
    if r.generation {
        let spec_changed = old.get("spec") != new.get("spec");
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(if spec_changed {
            generation + 1
        } else {
            generation
        });
    }
    Ok(())
}

fn validate_pod_update(r: &Resource, name: &str, old: &Value, new: &Value) -> ApiResult<()> {
    let count = |v: &Value| {
        v.pointer("/spec/containers")
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    if count(old) != count(new) {
        return Err(invalid(
            r,
            name,
            vec![Cause::new(
                "FieldValueForbidden",
                "spec.containers",
                "Forbidden: pod updates may not add or remove containers",
            )],
        ));
    }
    let gates = |v: &Value| -> Vec<String> {
        v.pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g["name"].as_str().map(str::to_owned))
            .collect()
    };
    let before = gates(old);
    let added: Vec<String> = gates(new)
        .into_iter()
        .filter(|g| !before.contains(g))
        .collect();
    if let Some(g) = added.first() {
        return Err(invalid(
            r,
            name,
            vec![Cause::new(
                "FieldValueForbidden",
                "spec.schedulingGates[0].name",
                format!("Forbidden: only deletion is allowed, but found new scheduling gate '{g}'"),
            )],
        ));
    }
    Ok(())
}
