//! The `pod-template` key: parsing a PodTemplateSpec fragment strictly, and merging it into
//! the pod we generate.
//!
//! Merge rules (documented in docs/configuration.md): objects merge key by key; the provisioner
//! container is matched by name; other lists (volumes, tolerations, env, volumeMounts...)
//! are appended to ours; a `securityContext` given in the fragment replaces ours whole,
//! because mixing a restricted default with a privileged override yields pods that cannot
//! start; our labels always win so Jobs stay traceable. (The Job builder, job.rs, then keeps
//! the container's `drop: [ALL]` and `allowPrivilegeEscalation: false` where a non-privileged
//! container's `securityContext` leaves them unsaid.)

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Map, Value};

use crate::names::CONTAINER_NAME;

/// Fields that the configuration sets through its own keys, or that would break the Job.
const OWNED_POD_FIELDS: &[(&str, &str)] = &[
    (
        "restartPolicy",
        "Jobs we create always use restartPolicy Never",
    ),
    (
        "nodeName",
        "use `node-selector` or `node-local` to place the pod",
    ),
    ("serviceAccountName", "use the `service-account-name` key"),
    ("serviceAccount", "use the `service-account-name` key"),
];
const OWNED_CONTAINER_FIELDS: &[(&str, &str)] = &[
    ("image", "use the `image` key"),
    ("command", "use the `command` key"),
    ("args", "use the `args` key"),
];

/// Parses the YAML fragment. Unknown or misspelt fields are errors: a silently dropped
/// `tolerations` typo would only show up as a pod that never schedules.
pub fn parse(text: &str) -> Result<PodTemplateSpec, String> {
    let mut value: Value =
        serde_yaml_ng::from_str(text).map_err(|e| format!("is not valid YAML: {e}"))?;
    let Value::Object(root) = &mut value else {
        return Err("must be a YAML mapping with `metadata` and/or `spec`".into());
    };
    if let Some(other) = root.keys().find(|k| *k != "metadata" && *k != "spec") {
        return Err(format!(
            "has top-level field `{other}`; a PodTemplateSpec has only `metadata` and `spec`"
        ));
    }
    let spec = root
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(spec) = spec else {
        return Err("`spec` must be a mapping".into());
    };
    for (field, fix) in OWNED_POD_FIELDS {
        if spec.contains_key(*field) {
            return Err(format!("sets `spec.{field}`, which is not allowed: {fix}"));
        }
    }
    let containers = spec
        .entry("containers")
        .or_insert_with(|| Value::Array(vec![Value::Object(Map::new())]));
    let Value::Array(containers) = containers else {
        return Err("`spec.containers` must be a list".into());
    };
    if containers.len() > 1 {
        return Err("lists more than one container; only the provisioner container can be adjusted (sidecars would keep the Job from finishing; use initContainers for set-up steps)".into());
    }
    for container in containers.iter_mut() {
        let Value::Object(c) = container else {
            return Err("`spec.containers[0]` must be a mapping".into());
        };
        match c.get("name") {
            None => {
                c.insert("name".into(), Value::String(CONTAINER_NAME.into()));
            }
            Some(Value::String(n)) if n == CONTAINER_NAME => {}
            Some(other) => {
                return Err(format!(
                    "names its container {other}; the provisioner container is called `{CONTAINER_NAME}` (or leave the name out)"
                ));
            }
        }
        for (field, fix) in OWNED_CONTAINER_FIELDS {
            if c.contains_key(*field) {
                return Err(format!(
                    "sets `spec.containers[0].{field}`, which is not allowed: {fix}"
                ));
            }
        }
    }
    quantities_to_strings(&mut value);
    let parsed: PodTemplateSpec = serde_json::from_value(value.clone())
        .map_err(|e| format!("is not a valid PodTemplateSpec: {e}"))?;
    let round_trip = serde_json::to_value(&parsed).map_err(|e| e.to_string())?;
    if let Some(path) = first_unknown_field(&value, &round_trip, "") {
        return Err(format!(
            "has unknown field `{path}`; check its spelling against the PodSpec reference"
        ));
    }
    Ok(parsed)
}

/// `cpu: 1` is valid in a manifest but a Quantity is a string in the typed model.
fn quantities_to_strings(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let is_quantity_map = matches!(k.as_str(), "limits" | "requests" | "overhead");
                if is_quantity_map && let Value::Object(q) = v {
                    for qv in q.values_mut() {
                        if let Value::Number(n) = qv {
                            *qv = Value::String(n.to_string());
                        }
                    }
                } else if k == "sizeLimit" && v.is_number() {
                    *v = Value::String(v.to_string());
                } else {
                    quantities_to_strings(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(quantities_to_strings),
        _ => {}
    }
}

fn first_unknown_field(input: &Value, parsed: &Value, path: &str) -> Option<String> {
    match (input, parsed) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match b.get(k) {
                None if !v.is_null() => Some(p),
                None => None,
                Some(pv) => first_unknown_field(v, pv, &p),
            }
        }),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_unknown_field(x, y, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// Env var names set in the fragment's container, to check for collisions with ours.
pub fn env_names(template: &PodTemplateSpec) -> Vec<String> {
    template
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.env.iter().flatten())
        .map(|e| e.name.clone())
        .collect()
}

/// Merges the admin's fragment into the pod we generated, by the rules in the module docs.
pub fn merge(ours: &PodTemplateSpec, theirs: &PodTemplateSpec) -> PodTemplateSpec {
    let mut base = serde_json::to_value(ours).unwrap_or(Value::Null);
    let overlay = serde_json::to_value(theirs).unwrap_or(Value::Null);
    merge_value(&mut base, &overlay, "");
    let mut merged: PodTemplateSpec = serde_json::from_value(base).unwrap_or_else(|_| ours.clone());
    // Our labels identify the Job's pods; an admin's label must not hide them.
    if let Some(our_labels) = ours.metadata.as_ref().and_then(|m| m.labels.clone()) {
        let labels = merged
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default);
        labels.extend(our_labels);
    }
    merged
}

fn merge_value(base: &mut Value, overlay: &Value, key: &str) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, ov) in o {
                // A securityContext is replaced whole, never merged.
                match b.get_mut(k) {
                    Some(bv) if k != "securityContext" => merge_value(bv, ov, k),
                    _ => drop(b.insert(k.clone(), ov.clone())),
                }
            }
        }
        (Value::Array(b), Value::Array(o)) if key == "containers" => {
            for oc in o {
                let name = oc.get("name");
                match b.iter_mut().find(|bc| bc.get("name") == name) {
                    Some(bc) => merge_value(bc, oc, ""),
                    None => b.push(oc.clone()),
                }
            }
        }
        (Value::Array(b), Value::Array(o)) => b.extend(o.iter().cloned()),
        (b, o) => *b = o.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_typical_fragment() {
        let t = parse(
            r#"
metadata:
  labels: { team: storage }
spec:
  priorityClassName: system-cluster-critical
  tolerations: [{ key: storage, operator: Exists, effect: NoSchedule }]
  imagePullSecrets: [{ name: regcred }]
  volumes: [{ name: export, nfs: { server: 10.0.0.1, path: /exports } }]
  containers:
  - resources: { requests: { cpu: 100m, memory: 64Mi }, limits: { cpu: 1 } }
    volumeMounts: [{ name: export, mountPath: /export }]
"#,
        )
        .unwrap();
        let spec = t.spec.unwrap();
        assert_eq!(spec.containers[0].name, CONTAINER_NAME);
        assert_eq!(
            spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "1"
        );
        assert_eq!(spec.tolerations.unwrap().len(), 1);
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for (yaml, needle) in [
            ("spec: [1]", "`spec` must be a mapping"),
            ("- a", "must be a YAML mapping"),
            (
                "spec: {tolerationz: []}",
                "unknown field `spec.tolerationz`",
            ),
            (
                "spec: {containers: [{resources: {limitz: {}}}]}",
                "unknown field `spec.containers[0].resources.limitz`",
            ),
            ("spec: {restartPolicy: Always}", "restartPolicy"),
            ("spec: {nodeName: n1}", "node-selector"),
            ("spec: {serviceAccountName: x}", "service-account-name"),
            ("spec: {containers: [{image: x}]}", "use the `image` key"),
            (
                "spec: {containers: [{command: [x]}]}",
                "use the `command` key",
            ),
            (
                "spec: {containers: [{name: sidecar}]}",
                "called `provisioner`",
            ),
            ("spec: {containers: [{}, {}]}", "more than one container"),
            ("kind: Pod", "top-level field `kind`"),
            ("spec: {tolerations: 3}", "not a valid PodTemplateSpec"),
            ("spec: {: :", "not valid YAML"),
        ] {
            let e = parse(yaml).unwrap_err();
            assert!(e.contains(needle), "{yaml}: {e}");
        }
    }

    #[test]
    fn merge_follows_the_documented_rules() {
        let ours: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"flex-provisioner.io/action": "provision"}},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": true},
                "containers": [{
                    "name": "provisioner", "image": "img",
                    "env": [{"name": "ACTION", "value": "provision"}],
                    "securityContext": {"allowPrivilegeEscalation": false}
                }]
            }
        }))
        .unwrap();
        let theirs = parse(
            r#"
metadata: { labels: { flex-provisioner.io/action: hijack, team: a } }
spec:
  securityContext: { runAsUser: 0 }
  volumes: [{ name: v, emptyDir: {} }]
  containers:
  - env: [{ name: EXTRA, value: "1" }]
    securityContext: { privileged: true }
"#,
        )
        .unwrap();
        let merged = merge(&ours, &theirs);
        let labels = merged.metadata.unwrap().labels.unwrap();
        assert_eq!(labels["flex-provisioner.io/action"], "provision");
        assert_eq!(labels["team"], "a");
        let spec = merged.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let psc = spec.security_context.unwrap();
        assert_eq!(psc.run_as_user, Some(0));
        assert_eq!(
            psc.run_as_non_root, None,
            "their securityContext replaces ours whole"
        );
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("img"));
        let env: Vec<_> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
        assert_eq!(env, ["ACTION", "EXTRA"]);
        let csc = c.security_context.as_ref().unwrap();
        assert_eq!(csc.privileged, Some(true));
        assert_eq!(csc.allow_privilege_escalation, None);
        assert_eq!(spec.volumes.unwrap().len(), 1);
        assert_eq!(env_names(&theirs), ["EXTRA"]);
    }
}
