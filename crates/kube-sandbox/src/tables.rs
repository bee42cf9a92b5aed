//! Server-side printing (`meta.k8s.io/v1` Table), which `kubectl get` asks for: the columns
//! real clusters show for the kinds the provisioner's users look at.

use serde_json::{Value, json};

use super::ids;
use super::resources::Resource;

fn s(v: &Value, pointer: &str) -> String {
    match v.pointer(pointer) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn age(obj: &Value) -> String {
    let secs = ids::seconds_since(&s(obj, "/metadata/creationTimestamp")).unwrap_or(0.0) as u64;
    match secs {
        0..120 => format!("{secs}s"),
        120..7200 => format!("{}m", secs / 60),
        7200..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

fn join(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| short_mode(x.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn short_mode(m: &str) -> String {
    match m {
        "ReadWriteOnce" => "RWO",
        "ReadOnlyMany" => "ROX",
        "ReadWriteMany" => "RWX",
        "ReadWriteOncePod" => "RWOP",
        other => other,
    }
    .to_owned()
}

fn or_none(x: String) -> String {
    if x.is_empty() { "<unset>".into() } else { x }
}

/// Columns (name, priority) and the cells of one object.
fn columns(r: &Resource) -> Vec<(&'static str, u8)> {
    match r.plural {
        "persistentvolumeclaims" => vec![
            ("Name", 0),
            ("Status", 0),
            ("Volume", 0),
            ("Capacity", 0),
            ("Access Modes", 0),
            ("StorageClass", 0),
            ("VolumeAttributesClass", 0),
            ("Age", 0),
            ("VolumeMode", 1),
        ],
        "persistentvolumes" => vec![
            ("Name", 0),
            ("Capacity", 0),
            ("Access Modes", 0),
            ("Reclaim Policy", 0),
            ("Status", 0),
            ("Claim", 0),
            ("StorageClass", 0),
            ("VolumeAttributesClass", 0),
            ("Reason", 0),
            ("Age", 0),
            ("VolumeMode", 1),
        ],
        "pods" => vec![
            ("Name", 0),
            ("Ready", 0),
            ("Status", 0),
            ("Restarts", 0),
            ("Age", 0),
            ("IP", 1),
            ("Node", 1),
        ],
        "jobs" => vec![
            ("Name", 0),
            ("Status", 0),
            ("Completions", 0),
            ("Duration", 0),
            ("Age", 0),
        ],
        "events" if r.group.is_empty() => vec![
            ("Last Seen", 0),
            ("Type", 0),
            ("Reason", 0),
            ("Object", 0),
            ("Message", 0),
        ],
        "configmaps" => vec![("Name", 0), ("Data", 0), ("Age", 0)],
        "storageclasses" => vec![
            ("Name", 0),
            ("Provisioner", 0),
            ("ReclaimPolicy", 0),
            ("VolumeBindingMode", 0),
            ("AllowVolumeExpansion", 0),
            ("Age", 0),
        ],
        "namespaces" => vec![("Name", 0), ("Status", 0), ("Age", 0)],
        "nodes" => vec![
            ("Name", 0),
            ("Status", 0),
            ("Roles", 0),
            ("Age", 0),
            ("Version", 0),
        ],
        _ => vec![("Name", 0), ("Age", 0)],
    }
}

fn cells(r: &Resource, o: &Value) -> Vec<Value> {
    let name = s(o, "/metadata/name");
    let row: Vec<String> = match r.plural {
        "persistentvolumeclaims" => vec![
            name,
            s(o, "/status/phase"),
            s(o, "/spec/volumeName"),
            s(o, "/status/capacity/storage"),
            join(o, "/status/accessModes"),
            s(o, "/spec/storageClassName"),
            or_none(s(o, "/spec/volumeAttributesClassName")),
            age(o),
            s(o, "/spec/volumeMode"),
        ],
        "persistentvolumes" => {
            let claim = match s(o, "/spec/claimRef/name") {
                n if n.is_empty() => String::new(),
                n => format!("{}/{n}", s(o, "/spec/claimRef/namespace")),
            };
            vec![
                name,
                s(o, "/spec/capacity/storage"),
                join(o, "/spec/accessModes"),
                s(o, "/spec/persistentVolumeReclaimPolicy"),
                s(o, "/status/phase"),
                claim,
                s(o, "/spec/storageClassName"),
                or_none(s(o, "/spec/volumeAttributesClassName")),
                s(o, "/status/reason"),
                age(o),
                s(o, "/spec/volumeMode"),
            ]
        }
        "pods" => {
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |c| {
                    c.iter()
                        .filter(|x| x["ready"].as_bool() == Some(true))
                        .count()
                });
            let reason = o
                .pointer("/status/containerStatuses/0/state/waiting/reason")
                .or_else(|| o.pointer("/status/containerStatuses/0/state/terminated/reason"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| s(o, "/status/phase"));
            vec![
                name,
                format!("{ready}/{total}"),
                reason,
                "0".into(),
                age(o),
                s(o, "/status/podIP"),
                s(o, "/spec/nodeName"),
            ]
        }
        "jobs" => {
            let status = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| {
                    c.iter().rev().find(|x| {
                        x["status"] == "True" && (x["type"] == "Complete" || x["type"] == "Failed")
                    })
                })
                .map_or("Running".to_owned(), |c| {
                    c["type"].as_str().unwrap_or_default().to_owned()
                });
            let done = o
                .pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = o
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            vec![
                name,
                status,
                format!("{done}/{want}"),
                String::new(),
                age(o),
            ]
        }
        "events" if r.group.is_empty() => {
            let object = format!(
                "{}/{}",
                s(o, "/involvedObject/kind").to_lowercase(),
                s(o, "/involvedObject/name")
            );
            vec![
                age(o),
                s(o, "/type"),
                s(o, "/reason"),
                object,
                s(o, "/message"),
            ]
        }
        "configmaps" => {
            let n = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |d| d.len());
            vec![name, n.to_string(), age(o)]
        }
        "storageclasses" => vec![
            name,
            s(o, "/provisioner"),
            s(o, "/reclaimPolicy"),
            s(o, "/volumeBindingMode"),
            if o["allowVolumeExpansion"] == true {
                "true".into()
            } else {
                "false".into()
            },
            age(o),
        ],
        "namespaces" => vec![name, s(o, "/status/phase"), age(o)],
        "nodes" => vec![
            name,
            "Ready".into(),
            "<none>".into(),
            age(o),
            s(o, "/status/nodeInfo/kubeletVersion"),
        ],
        _ => vec![name, age(o)],
    };
    row.into_iter().map(Value::String).collect()
}

fn row(r: &Resource, o: &Value) -> Value {
    json!({"cells": cells(r, o), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": o["metadata"].clone()}})
}

fn table(r: &Resource, rows: Vec<Value>, rv: Value) -> Value {
    let defs: Vec<Value> = columns(r)
        .into_iter()
        .map(|(n, p)| json!({"name": n, "type": "string", "format": if n == "Name" { "name" } else { "" }, "description": "", "priority": p}))
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
           "columnDefinitions": defs, "rows": rows})
}

pub fn table_for_list(r: &Resource, list: &Value) -> Value {
    let rows = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| row(r, o))
        .collect();
    table(r, rows, list["metadata"]["resourceVersion"].clone())
}

pub fn table_for_object(r: &Resource, obj: &Value) -> Value {
    table(
        r,
        vec![row(r, obj)],
        obj["metadata"]["resourceVersion"].clone(),
    )
}
