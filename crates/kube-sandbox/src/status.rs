//! API errors as the real API server words them, rendered as `Status` objects.

use serde_json::{Value, json};

use super::resources::Resource;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    /// `None` for internal errors, which real servers send without a reason.
    pub reason: Option<&'static str>,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds, for 429 and 504 answers.
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

fn details(r: &Resource, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": r.plural});
    if !r.group.is_empty() {
        d["group"] = json!(r.group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: Option<&'static str>, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn with_details(mut self, d: Value) -> Self {
        self.details = Some(d);
        self
    }

    pub fn not_found(r: &Resource, name: &str) -> Self {
        Self::new(
            404,
            Some("NotFound"),
            format!("{} \"{name}\" not found", r.plural),
        )
        .with_details(details(r, name))
    }

    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(
            404,
            Some("NotFound"),
            format!("namespaces \"{ns}\" not found"),
        )
        .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    pub fn unknown_resource() -> Self {
        Self::new(
            404,
            Some("NotFound"),
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn already_exists(r: &Resource, name: &str) -> Self {
        Self::new(
            409,
            Some("AlreadyExists"),
            format!("{} \"{name}\" already exists", r.plural),
        )
        .with_details(details(r, name))
    }

    pub fn conflict(r: &Resource, name: &str) -> Self {
        Self::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                r.plural
            ),
        )
        .with_details(details(r, name))
    }

    /// A delete precondition that does not hold; worded with the Kind, as the real server does.
    pub fn precondition(r: &Resource, name: &str, what: &str) -> Self {
        let mut d = json!({"name": name, "kind": r.kind});
        if !r.group.is_empty() {
            d["group"] = json!(r.group);
        }
        Self::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {what}",
                r.kind
            ),
        )
        .with_details(d)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, Some("BadRequest"), message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, None, message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, Some("Expired"), message)
    }

    /// 422 with field causes, like the real server's validation errors.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let rendered: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let joined = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let mut d = json!({"name": name, "kind": kind, "causes": causes.iter().map(Cause::to_json).collect::<Vec<_>>()});
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        Self::new(
            422,
            Some("Invalid"),
            format!("{kind} \"{name}\" is invalid: {joined}"),
        )
        .with_details(d)
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "code": self.code,
        });
        if let Some(r) = self.reason {
            s["reason"] = json!(r);
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if let Some(secs) = self.retry_after {
            let d = s["details"].as_object_mut().map(|_| ()).is_some();
            if !d {
                s["details"] = json!({});
            }
            s["details"]["retryAfterSeconds"] = json!(secs);
        }
        s
    }
}

/// One field error of a 422 answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn new(reason: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Cause {
            reason,
            field: field.into(),
            message: message.into(),
        }
    }

    fn to_json(&self) -> Value {
        json!({"reason": self.reason, "field": self.field, "message": self.message})
    }
}

/// The `Success` status a delete answers with when the object is gone at once.
pub fn success_status(r: &Resource, name: &str, uid: &str) -> Value {
    let mut d = details(r, name);
    d["uid"] = json!(uid);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}
