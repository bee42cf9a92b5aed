//! A JSON object builder with the omission rules of Kubernetes' JSON encoding (`omitempty`),
//! so an object decoded from protobuf is stored exactly as the same object sent as JSON.
//! Go's protobuf marshalling writes every non-pointer field, empty or not; its JSON
//! encoding leaves the empty ones out.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Map, Value};

/// An object under construction.
#[derive(Default)]
pub struct Obj(Map<String, Value>);

impl Obj {
    pub fn new() -> Self {
        Obj::default()
    }

    /// A string field; `None` and `""` are left out.
    pub fn str(mut self, key: &str, v: Option<String>) -> Self {
        if let Some(s) = v.filter(|s| !s.is_empty()) {
            self.0.insert(key.into(), Value::String(s));
        }
        self
    }

    /// A pointer field (`*bool`, `*int64`...): present when set, even to its zero value.
    pub fn opt<T: Into<Value>>(mut self, key: &str, v: Option<T>) -> Self {
        if let Some(v) = v {
            self.0.insert(key.into(), v.into());
        }
        self
    }

    /// A non-pointer number with `omitempty`: left out when zero.
    pub fn nonzero(mut self, key: &str, v: Option<i64>) -> Self {
        if let Some(n) = v.filter(|n| *n != 0) {
            self.0.insert(key.into(), n.into());
        }
        self
    }

    /// A non-pointer bool with `omitempty`: left out when false.
    pub fn flag(mut self, key: &str, v: Option<bool>) -> Self {
        if v == Some(true) {
            self.0.insert(key.into(), Value::Bool(true));
        }
        self
    }

    /// A list of strings; empty lists are left out.
    pub fn strs(self, key: &str, v: Vec<String>) -> Self {
        self.list(key, v.into_iter().map(Value::String).collect())
    }

    /// A list; empty lists are left out.
    pub fn list(mut self, key: &str, v: Vec<Value>) -> Self {
        if !v.is_empty() {
            self.0.insert(key.into(), Value::Array(v));
        }
        self
    }

    /// A map of strings; empty maps are left out.
    pub fn map(mut self, key: &str, v: BTreeMap<String, String>) -> Self {
        if !v.is_empty() {
            let m = v.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
            self.0.insert(key.into(), Value::Object(m));
        }
        self
    }

    /// A map of bytes, base64-encoded as `[]byte` is in JSON; empty maps are left out.
    pub fn bytes_map(mut self, key: &str, v: BTreeMap<String, Vec<u8>>) -> Self {
        if !v.is_empty() {
            let b64 = base64::engine::general_purpose::STANDARD;
            let m = v
                .into_iter()
                .map(|(k, v)| (k, Value::String(b64.encode(v))))
                .collect();
            self.0.insert(key.into(), Value::Object(m));
        }
        self
    }

    /// A nested object; `None` is left out (an empty object is kept, as Go keeps structs).
    pub fn obj(mut self, key: &str, v: Option<Value>) -> Self {
        if let Some(v) = v {
            self.0.insert(key.into(), v);
        }
        self
    }

    pub fn done(self) -> Value {
        Value::Object(self.0)
    }
}
