//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and strategic merge patch
//! with the merge keys and directives of the Kubernetes types the sandbox serves.

use serde_json::{Map, Value};

use super::status::ApiError;

pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn rejected() -> ApiError {
    ApiError::new(
        422,
        Some("Invalid"),
        "the server rejected our request due to an error in our request",
    )
    .with_details(serde_json::json!({}))
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(Vec<String>, String), ApiError> {
    if path.is_empty() {
        return Err(rejected());
    }
    let mut parts: Vec<String> = path.split('/').skip(1).map(unescape).collect();
    let last = parts.pop().ok_or_else(rejected)?;
    Ok((parts, last))
}

fn parent_mut<'a>(doc: &'a mut Value, parts: &[String]) -> Result<&'a mut Value, ApiError> {
    let mut cur = doc;
    for p in parts {
        cur = match cur {
            Value::Object(m) => m.get_mut(p).ok_or_else(rejected)?,
            Value::Array(a) => {
                let i: usize = p.parse().map_err(|_| rejected())?;
                a.get_mut(i).ok_or_else(rejected)?
            }
            _ => return Err(rejected()),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), ApiError> {
    let (parts, last) = split_pointer(path)?;
    match parent_mut(doc, &parts)? {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last.parse().map_err(|_| rejected())?;
                if i > a.len() {
                    return Err(rejected());
                }
                a.insert(i, value);
            }
        }
        _ => return Err(rejected()),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, ApiError> {
    let (parts, last) = split_pointer(path)?;
    match parent_mut(doc, &parts)? {
        Value::Object(m) => m.remove(&last).ok_or_else(rejected),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| rejected())?;
            if i >= a.len() {
                return Err(rejected());
            }
            Ok(a.remove(i))
        }
        _ => Err(rejected()),
    }
}

fn get<'a>(doc: &'a Value, path: &str) -> Result<&'a Value, ApiError> {
    doc.pointer(path).ok_or_else(rejected)
}

pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let Value::Array(ops) = patch else {
        let found = match patch {
            Value::Object(_) => "object",
            Value::String(_) => "string",
            Value::Number(_) => "number",
            _ => "value",
        };
        return Err(ApiError::bad_request(format!(
            "error decoding patch: json: cannot unmarshal {found} into Go value of type []handlers.jsonPatchOp"
        )));
    };
    for op in ops {
        let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
        let value = || op.get("value").cloned().ok_or_else(rejected);
        match op.get("op").and_then(Value::as_str) {
            Some("add") => add(doc, path, value()?)?,
            Some("remove") => {
                remove(doc, path)?;
            }
            Some("replace") => {
                remove(doc, path)?;
                add(doc, path, value()?)?;
            }
            Some("move") => {
                let from = op.get("from").and_then(Value::as_str).unwrap_or_default();
                let v = remove(doc, from)?;
                add(doc, path, v)?;
            }
            Some("copy") => {
                let from = op.get("from").and_then(Value::as_str).unwrap_or_default();
                let v = get(doc, from)?.clone();
                add(doc, path, v)?;
            }
            Some("test") => {
                if *get(doc, path)? != value()? {
                    return Err(rejected());
                }
            }
            _ => return Err(rejected()),
        }
    }
    Ok(())
}

/// The merge key of a list field in the Kubernetes types, where it has one.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists of scalars that merge as sets.
fn is_primitive_merge_list(field: &str) -> bool {
    field == "finalizers"
}

pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = p.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (t.get_mut(field), v) {
                list.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(Value::Array(current)), Value::Array(items)) => {
                if let Some(key) = merge_key(k) {
                    merge_list_by_key(current, items, key);
                } else if is_primitive_merge_list(k) {
                    for item in items {
                        if !current.contains(item) {
                            current.push(item.clone());
                        }
                    }
                } else {
                    *current = items.clone();
                }
            }
            (Some(current), Value::Object(_)) if current.is_object() => strategic_merge(current, v),
            _ => {
                let mut fresh = Value::Null;
                strategic_merge(&mut fresh, v);
                t.insert(k.clone(), strip_directives(fresh));
            }
        }
    }
}

fn strip_directives(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k, strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_directives).collect()),
        other => other,
    }
}

fn merge_list_by_key(current: &mut Vec<Value>, items: &[Value], key: &str) {
    for item in items {
        let id = item.get(key);
        let pos = current
            .iter()
            .position(|c| c.get(key) == id && id.is_some());
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                current.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut current[i], item),
            (None, false) => current.push(strip_directives(item.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut d = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        merge_patch(
            &mut d,
            &json!({"a": null, "b": {"c": 5}, "l": [9], "n": "x"}),
        );
        assert_eq!(d, json!({"b": {"c": 5, "d": 3}, "l": [9], "n": "x"}));
    }

    #[test]
    fn json_patch_ops_and_failures() {
        let mut d = json!({"metadata": {"labels": {"a": "1"}}, "l": [1, 2]});
        json_patch(
            &mut d,
            &json!([
                {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                {"op": "replace", "path": "/metadata/labels/a", "value": "3"},
                {"op": "add", "path": "/l/-", "value": 3},
                {"op": "remove", "path": "/l/0"},
                {"op": "test", "path": "/l/0", "value": 2},
                {"op": "copy", "from": "/l/0", "path": "/c"},
                {"op": "move", "from": "/c", "path": "/m"},
                {"op": "add", "path": "/metadata/labels/x~1y", "value": "z"}
            ]),
        )
        .unwrap();
        assert_eq!(
            d,
            json!({"metadata": {"labels": {"a": "3", "b": "2", "x/y": "z"}}, "l": [2, 3], "m": 2})
        );
        assert_eq!(
            json_patch(&mut d, &json!([{"op": "test", "path": "/m", "value": 9}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            json_patch(&mut d, &json!([{"op": "remove", "path": "/nope"}]))
                .unwrap_err()
                .code,
            422
        );
        let e = json_patch(&mut d, &json!({"op": "add"})).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message.contains("cannot unmarshal object"),
            "{}",
            e.message
        );
    }

    #[test]
    fn strategic_merge_keys_and_directives() {
        let mut pod = json!({
            "metadata": {"finalizers": ["a", "b"], "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "a", "image": "i1"}, {"name": "b", "image": "i2"}],
                     "tolerations": [{"key": "t"}]},
            "data": {"k": "v", "j": "w"}
        });
        strategic_merge(
            &mut pod,
            &json!({
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"], "labels": {"x": null, "y": "2"}},
                "spec": {"containers": [{"name": "b", "image": "i3"}, {"name": "a", "$patch": "delete"}, {"name": "n", "image": "i4"}],
                         "tolerations": [{"key": "u"}]},
                "data": {"$patch": "replace", "only": "this"}
            }),
        );
        assert_eq!(
            pod,
            json!({
                "metadata": {"finalizers": ["b", "c"], "labels": {"y": "2"}},
                "spec": {"containers": [{"name": "b", "image": "i3"}, {"name": "n", "image": "i4"}],
                         "tolerations": [{"key": "u"}]},
                "data": {"only": "this"}
            })
        );
    }
}
