//! Events live once, in core/v1 form; events.k8s.io/v1 is a converted view of the same
//! objects, with the field names and the always-present keys of each API.

use serde_json::{Map, Value, json};

use super::status::{ApiError, Cause};

fn take(m: &mut Map<String, Value>, k: &str) -> Option<Value> {
    m.remove(k).filter(|v| !v.is_null())
}

fn non_empty(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Number(n)) => n.as_i64() != Some(0),
        _ => true,
    }
}

/// events.k8s.io/v1 -> core/v1 (for storage).
pub fn to_core(new: &Value) -> Value {
    let mut m = new.as_object().cloned().unwrap_or_default();
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    for (from, to) in [
        ("metadata", "metadata"),
        ("regarding", "involvedObject"),
        ("note", "message"),
        ("reason", "reason"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("series", "series"),
    ] {
        if let Some(v) = take(&mut m, from) {
            out.insert(to.into(), v);
        }
    }
    normalize_core(Value::Object(out))
}

/// The keys core/v1 always shows.
pub fn normalize_core(core: Value) -> Value {
    let mut m = core.as_object().cloned().unwrap_or_default();
    for k in ["eventTime", "firstTimestamp", "lastTimestamp"] {
        m.entry(k).or_insert(Value::Null);
    }
    for k in [
        "reportingComponent",
        "reportingInstance",
        "message",
        "reason",
        "type",
    ] {
        m.entry(k).or_insert(json!(""));
    }
    m.entry("source").or_insert(json!({}));
    m.entry("involvedObject").or_insert(json!({}));
    Value::Object(m)
}

/// core/v1 -> events.k8s.io/v1 (for reads and watches through that API).
pub fn to_new(core: &Value) -> Value {
    let mut m = core.as_object().cloned().unwrap_or_default();
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    let mut put = |k: &str, v: Option<Value>, always: bool| match v {
        Some(v) if always || non_empty(&Some(v.clone())) => {
            out.insert(k.into(), v);
        }
        None if always => {
            out.insert(k.into(), Value::Null);
        }
        _ => {}
    };
    put("metadata", take(&mut m, "metadata"), true);
    put("regarding", take(&mut m, "involvedObject"), true);
    put("note", take(&mut m, "message"), true);
    put("reason", take(&mut m, "reason"), true);
    put("type", take(&mut m, "type"), true);
    put("eventTime", take(&mut m, "eventTime"), true);
    put("action", take(&mut m, "action"), false);
    put("related", take(&mut m, "related"), false);
    put("series", take(&mut m, "series"), false);
    put(
        "reportingController",
        take(&mut m, "reportingComponent"),
        false,
    );
    put(
        "reportingInstance",
        take(&mut m, "reportingInstance"),
        false,
    );
    put(
        "deprecatedSource",
        Some(take(&mut m, "source").unwrap_or(json!({}))),
        true,
    );
    put(
        "deprecatedFirstTimestamp",
        take(&mut m, "firstTimestamp"),
        true,
    );
    put(
        "deprecatedLastTimestamp",
        take(&mut m, "lastTimestamp"),
        true,
    );
    put("deprecatedCount", take(&mut m, "count"), false);
    Value::Object(out)
}

/// What the real server requires of events written through events.k8s.io/v1.
pub fn validate_new(ev: &Value, name: &str) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if ev.get("eventTime").is_none_or(Value::is_null) {
        causes.push(Cause::new(
            "FieldValueRequired",
            "eventTime",
            "Required value",
        ));
    }
    let controller = ev
        .get("reportingController")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if controller.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "reportingController",
            "Required value",
        ));
        causes.push(Cause::new(
            "FieldValueInvalid",
            "reportingController",
            "Invalid value: \"\": name part must be non-empty",
        ));
        causes.push(Cause::new(
            "FieldValueInvalid",
            "reportingController",
            "Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("Event", "", name, causes))
    }
}

/// A core event's involved object must be in the event's namespace (or cluster-scoped).
pub fn validate_core(ev: &Value, namespace: &str, name: &str) -> Result<(), ApiError> {
    let ns = ev
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !ns.is_empty() && ns != namespace {
        return Err(ApiError::invalid(
            "Event",
            "",
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "involvedObject.namespace",
                format!("Invalid value: \"{ns}\": does not match event.namespace"),
            )],
        ));
    }
    Ok(())
}
