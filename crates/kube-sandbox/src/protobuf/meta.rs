//! apimachinery's meta/v1 types (ObjectMeta, LabelSelector...) from protobuf to JSON.

use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::Value;

use super::ProtobufError;
use super::json::Obj;

/// Fails when `rest` still holds a field: what the sandbox does not convert must never be
/// dropped silently. Each converter `take`s the fields it converts out of the message
/// first, so anything left is a field it does not know.
pub fn leftover<T: Default + PartialEq + std::fmt::Debug>(
    kind: &str,
    rest: &T,
) -> Result<(), ProtobufError> {
    if *rest == T::default() {
        return Ok(());
    }
    let mut shown = set_fields(&format!("{rest:?}"));
    if shown.len() > 300 {
        let mut end = 300;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
    }
    Err(ProtobufError::UnsupportedField {
        kind: kind.to_owned(),
        fields: shown,
    })
}

/// The fields of a message's `Debug` form (`Name { a: None, b: Some(..) }`) that are set:
/// what the refusal should name.
fn set_fields(debug: &str) -> String {
    let (Some(open), Some(close)) = (debug.find('{'), debug.rfind('}')) else {
        return debug.to_owned();
    };
    let inner = &debug[open + 1..close];
    let mut fields = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut start) = (0i32, false, false, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '{' | '[' | '(' if !quoted => depth += 1,
            '}' | ']' | ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                fields.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    fields.push(inner[start..].trim());
    fields
        .into_iter()
        .filter(|f| {
            !(f.is_empty() || f.ends_with(": None") || f.ends_with(": []") || f.ends_with(": {}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `metav1.Time` as RFC 3339; the zero time (what Go sends for an unset one) is none.
pub fn time(t: Option<meta::Time>) -> Option<Value> {
    let t = t?;
    let seconds = t.seconds.unwrap_or(0);
    if seconds == 0 && t.nanos.unwrap_or(0) == 0 {
        return None;
    }
    let stamp = jiff::Timestamp::from_second(seconds).ok()?;
    Some(Value::String(
        stamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    ))
}

pub fn object_meta(m: Option<meta::ObjectMeta>) -> Result<Value, ProtobufError> {
    let mut m = m.unwrap_or_default();
    let owners = std::mem::take(&mut m.owner_references)
        .into_iter()
        .map(owner_reference)
        .collect::<Result<Vec<_>, _>>()?;
    // Set by the server alone; the JSON path ignores them on create as well.
    m.self_link = None;
    let creation = time(m.creation_timestamp.take());
    let out = Obj::new()
        .str("name", m.name.take())
        .str("generateName", m.generate_name.take())
        .str("namespace", m.namespace.take())
        .str("uid", m.uid.take())
        .str("resourceVersion", m.resource_version.take())
        .nonzero("generation", m.generation.take())
        .obj("creationTimestamp", creation)
        .obj("deletionTimestamp", time(m.deletion_timestamp.take()))
        .opt(
            "deletionGracePeriodSeconds",
            m.deletion_grace_period_seconds.take(),
        )
        .map("labels", std::mem::take(&mut m.labels))
        .map("annotations", std::mem::take(&mut m.annotations))
        .list("ownerReferences", owners)
        .strs("finalizers", std::mem::take(&mut m.finalizers))
        .done();
    leftover("ObjectMeta", &m)?;
    Ok(out)
}

fn owner_reference(mut o: meta::OwnerReference) -> Result<Value, ProtobufError> {
    let out = Obj::new()
        .str("apiVersion", o.api_version.take())
        .str("kind", o.kind.take())
        .str("name", o.name.take())
        .str("uid", o.uid.take())
        .opt("controller", o.controller.take())
        .opt("blockOwnerDeletion", o.block_owner_deletion.take())
        .done();
    leftover("OwnerReference", &o)?;
    Ok(out)
}

pub fn label_selector(mut s: meta::LabelSelector) -> Result<Value, ProtobufError> {
    let exprs = std::mem::take(&mut s.match_expressions)
        .into_iter()
        .map(|mut r| {
            let v = Obj::new()
                .str("key", r.key.take())
                .str("operator", r.operator.take())
                .strs("values", std::mem::take(&mut r.values))
                .done();
            leftover("LabelSelectorRequirement", &r).map(|()| v)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = Obj::new()
        .map("matchLabels", std::mem::take(&mut s.match_labels))
        .list("matchExpressions", exprs)
        .done();
    leftover("LabelSelector", &s)?;
    Ok(out)
}
