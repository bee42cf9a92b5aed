//! Field ownership (`metadata.managedFields`): Update operations take over the fields they
//! change, server-side apply owns exactly the fields of its configuration, conflicts when
//! another manager owns a field with a different value, and drops fields it stops applying.
//! Lists are owned whole (atomic), which is what the sandbox's users rely on.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

pub type Path = Vec<String>;

const SYSTEM_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Leaf paths of an object that managers can own; `status` only for the status subresource.
pub fn leaf_paths(obj: &Value, status: bool) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(map) = obj.as_object() else {
        return out;
    };
    for (k, v) in map {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if !status => {}
            "metadata" => {
                if status {
                    continue;
                }
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    if SYSTEM_METADATA.contains(&mk.as_str()) {
                        continue;
                    }
                    walk(mv, &mut vec!["metadata".into(), mk.clone()], &mut out);
                }
            }
            _ if status && k != "status" => {}
            _ => walk(v, &mut vec![k.clone()], &mut out),
        }
    }
    out
}

fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(k.clone());
                walk(child, path, out);
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |cur, p| cur.get(p))
}

/// Removes a leaf and any parent map it leaves empty (but never `metadata` itself).
pub fn remove_path(obj: &mut Value, path: &[String]) {
    fn go(cur: &mut Value, path: &[String], top: bool) -> bool {
        let Some(map) = cur.as_object_mut() else {
            return false;
        };
        if path.len() == 1 {
            map.remove(&path[0]);
        } else if let Some(child) = map.get_mut(&path[0])
            && go(child, &path[1..], false)
            && !(top && path[0] == "metadata")
        {
            map.remove(&path[0]);
        }
        map.is_empty()
    }
    if !path.is_empty() {
        go(obj, path, true);
    }
}

fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut cur = &mut root;
        for p in path {
            cur = cur
                .entry(format!("f:{p}"))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("fields are objects");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn go(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("f:"))
            .collect();
        if children.is_empty() {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            return;
        }
        for (k, child) in children {
            path.push(k[2..].to_owned());
            go(child, path, out);
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    go(v, &mut Vec::new(), &mut out);
    out
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub subresource: Option<String>,
    pub api_version: String,
    pub time: String,
    pub paths: BTreeSet<Path>,
}

pub fn read(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_owned(),
            operation: e["operation"].as_str().unwrap_or("Update").to_owned(),
            subresource: e["subresource"].as_str().map(str::to_owned),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
            time: e["time"].as_str().unwrap_or_default().to_owned(),
            paths: from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

pub fn write(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.paths.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.paths),
            });
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Records an Update-style write (create, update, patch): the manager takes over every
/// field it changed; fields that are gone are owned by nobody.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    now: &str,
) {
    let status = subresource == Some("status");
    let mut entries = old.map(read).unwrap_or_default();
    let new_paths = leaf_paths(new, status);
    let changed: BTreeSet<Path> = new_paths
        .iter()
        .filter(|p| old.and_then(|o| value_at(o, p)) != value_at(new, p))
        .cloned()
        .collect();
    let all_new: BTreeSet<Path> = leaf_paths(new, false)
        .union(&leaf_paths(new, true))
        .cloned()
        .collect();
    for e in &mut entries {
        e.paths
            .retain(|p| all_new.contains(p) && !changed.contains(p));
    }
    if !changed.is_empty() {
        let sub = subresource.map(str::to_owned);
        match entries
            .iter_mut()
            .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub)
        {
            Some(e) => {
                e.paths.extend(changed);
                e.time = now.to_owned();
            }
            None => entries.push(Entry {
                manager: manager.to_owned(),
                operation: "Update".into(),
                subresource: sub,
                api_version: api_version.to_owned(),
                time: now.to_owned(),
                paths: changed,
            }),
        }
    }
    write(new, &entries);
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    pub manager: String,
    pub field: String,
}

/// Server-side apply of `config` by `manager` onto `current` (the object as stored, or an
/// empty object for a create). Returns the new object with managedFields set.
pub fn apply(
    current: &Value,
    config: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    let applied = leaf_paths(config, false);
    let mut entries = read(current);
    let mut conflicts = Vec::new();
    for e in entries.iter_mut().filter(|e| e.manager != manager) {
        let contested: Vec<Path> = e
            .paths
            .iter()
            .filter(|p| applied.contains(*p) && value_at(current, p) != value_at(config, p))
            .cloned()
            .collect();
        for p in contested {
            if force {
                e.paths.remove(&p);
            } else {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    field: format!(".{}", p.join(".")),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut next = current.clone();
    let previously: BTreeSet<Path> = entries
        .iter()
        .filter(|e| e.manager == manager && e.operation == "Apply")
        .flat_map(|e| e.paths.iter().cloned())
        .collect();
    let others: BTreeSet<Path> = entries
        .iter()
        .filter(|e| e.manager != manager)
        .flat_map(|e| e.paths.iter().cloned())
        .collect();
    for p in previously.difference(&applied) {
        if !others.contains(p) {
            remove_path(&mut next, p);
        }
    }
    for p in &applied {
        if let Some(v) = value_at(config, p) {
            set_path(&mut next, p, v.clone());
        }
    }
    entries.retain(|e| !(e.manager == manager && e.operation == "Apply"));
    entries.push(Entry {
        manager: manager.to_owned(),
        operation: "Apply".into(),
        subresource: None,
        api_version: api_version.to_owned(),
        time: now.to_owned(),
        paths: applied,
    });
    write(&mut next, &entries);
    Ok(next)
}

fn set_path(obj: &mut Value, path: &[String], v: Value) {
    let mut cur = obj;
    for (i, p) in path.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let m = cur.as_object_mut().expect("made an object above");
        if i == path.len() - 1 {
            m.insert(p.clone(), v);
            return;
        }
        cur = m
            .entry(p.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(data: Value, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "x", "labels": labels}, "data": data})
    }

    #[test]
    fn apply_conflicts_force_and_drop() {
        let a = cm(json!({"k1": "a", "k2": "a"}), json!({"owner": "a"}));
        let created = apply(&json!({"metadata": {}}), &a, "fp-a", false, "v1", "t").unwrap();
        assert_eq!(created["data"], json!({"k1": "a", "k2": "a"}));
        let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k1": "b"}});
        let conflicts = apply(&created, &b, "fp-b", false, "v1", "t").unwrap_err();
        assert_eq!(
            conflicts,
            vec![Conflict {
                manager: "fp-a".into(),
                field: ".data.k1".into()
            }]
        );
        let forced = apply(&created, &b, "fp-b", true, "v1", "t").unwrap();
        assert_eq!(forced["data"], json!({"k1": "b", "k2": "a"}));
        let entries = read(&forced);
        assert_eq!(entries.len(), 2);
        assert!(
            !entries[0]
                .paths
                .contains(&vec!["data".to_string(), "k1".to_string()])
        );
        // fp-a stops applying its label and changes k2: the label goes, k1 stays fp-b's.
        let a2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k2": "a2"}});
        let dropped = apply(&forced, &a2, "fp-a", false, "v1", "t").unwrap();
        assert_eq!(dropped["data"], json!({"k1": "b", "k2": "a2"}));
        assert!(dropped["metadata"].get("labels").is_none(), "{dropped}");
    }

    #[test]
    fn updates_take_over_changed_fields() {
        let mut v1 = cm(json!({"a": "1"}), json!({}));
        record_update(None, &mut v1, "creator", None, "v1", "t");
        let mut v2 = v1.clone();
        v2["data"]["b"] = json!("2");
        record_update(Some(&v1), &mut v2, "merger", None, "v1", "t");
        let managers: Vec<(String, String)> = read(&v2)
            .into_iter()
            .map(|e| (e.manager, e.operation))
            .collect();
        assert_eq!(
            managers,
            vec![
                ("creator".into(), "Update".into()),
                ("merger".into(), "Update".into())
            ]
        );
    }
}
