//! Field errors worded like apimachinery's, the 422 answer, name rules and small JSON readers.

use super::*;
use crate::wellknown::{LABEL_HELP, SUBDOMAIN_HELP};

// ---------------------------------------------------------------------------------------
// Field errors, worded like apimachinery's field.Error.ErrorBody.

/// A rejected value as Go's error printer shows it.
pub(super) enum Bad {
    /// A string (or a named string type): quoted.
    Str(String),
    /// An integer: bare.
    Int(i64),
    /// Already rendered (Go's `%#v` of a struct or map, or a `Stringer`).
    Raw(String),
}

impl Bad {
    pub(super) fn render(&self) -> String {
        match self {
            Bad::Str(s) => go_quote(s),
            Bad::Int(i) => i.to_string(),
            Bad::Raw(s) => s.clone(),
        }
    }
}

/// Go's `%q`: a double-quoted string with Go escapes.
pub(super) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[derive(Default)]
pub(super) struct Errs(pub(super) Vec<Cause>);

impl Errs {
    pub(super) fn with_detail(head: &str, detail: &str) -> String {
        if detail.is_empty() {
            head.to_owned()
        } else {
            format!("{head}: {detail}")
        }
    }

    pub(super) fn required(&mut self, field: impl Into<String>, detail: &str) {
        self.0.push(Cause::new(
            "FieldValueRequired",
            field,
            Self::with_detail("Required value", detail),
        ));
    }

    pub(super) fn forbidden(&mut self, field: impl Into<String>, detail: &str) {
        self.0.push(Cause::new(
            "FieldValueForbidden",
            field,
            Self::with_detail("Forbidden", detail),
        ));
    }

    pub(super) fn too_long(&mut self, field: impl Into<String>, max: usize) {
        self.0.push(Cause::new(
            "FieldValueTooLong",
            field,
            format!("Too long: must have at most {max} bytes"),
        ));
    }

    pub(super) fn invalid(&mut self, field: impl Into<String>, value: Bad, detail: &str) {
        let head = format!("Invalid value: {}", value.render());
        self.0.push(Cause::new(
            "FieldValueInvalid",
            field,
            Self::with_detail(&head, detail),
        ));
    }

    pub(super) fn not_supported(
        &mut self,
        field: impl Into<String>,
        value: Bad,
        supported: &[&str],
    ) {
        let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let head = format!("Unsupported value: {}", value.render());
        self.0.push(Cause::new(
            "FieldValueNotSupported",
            field,
            Self::with_detail(&head, &format!("supported values: {}", list.join(", "))),
        ));
    }

    pub(super) fn extend(&mut self, other: Errs) {
        self.0.extend(other.0);
    }
}

/// The 422 answer: every cause in details, the distinct ones in the message.
pub(super) fn invalid_error(r: &Resource, name: &str, causes: Vec<Cause>) -> ApiError {
    let mut seen = HashSet::new();
    let distinct: Vec<Cause> = causes
        .iter()
        .filter(|c| seen.insert(format!("{}: {}", c.field, c.message)))
        .cloned()
        .collect();
    let mut e = ApiError::invalid(r.kind, r.group, name, distinct);
    if let Some(d) = e.details.as_mut() {
        d["causes"] = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "field": c.field, "message": c.message}))
            .collect();
    }
    e
}

pub(super) fn finish(r: &Resource, name: &str, errs: Errs) -> ApiResult<()> {
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(invalid_error(r, name, errs.0))
    }
}

// ---------------------------------------------------------------------------------------
// Name rules (IsDNS1123Subdomain / IsDNS1123Label), as separate messages like the real ones.

pub(super) fn label_chars_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(super) fn dns_subdomain_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_owned());
    }
    if !s.split('.').all(label_chars_ok) {
        out.push(SUBDOMAIN_HELP.to_owned());
    }
    out
}

pub(super) fn dns_label_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_owned());
    }
    if !label_chars_ok(s) {
        out.push(LABEL_HELP.to_owned());
    }
    out
}

const QUALIFIED_NAME_HELP: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn qualified_name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// IsQualifiedName: a name of at most 63 characters with an optional DNS subdomain prefix
/// and '/', each message as the real one words it.
pub(super) fn qualified_name_errors(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_HELP} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    let mut out = Vec::new();
    match prefix {
        Some("") => out.push("prefix part must be non-empty".to_owned()),
        Some(p) => out.extend(
            dns_subdomain_errors(p)
                .into_iter()
                .map(|m| format!("prefix part {m}")),
        ),
        None => {}
    }
    if name.is_empty() {
        out.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".to_owned());
    }
    if !qualified_name_part_ok(name) {
        out.push(format!("name part {QUALIFIED_NAME_HELP}"));
    }
    out
}

/// ValidateClassName: storage and volume-attributes class names are DNS subdomains.
pub(super) fn class_name(errs: &mut Errs, field: &str, value: &str) {
    for msg in dns_subdomain_errors(value) {
        errs.invalid(field, Bad::Str(value.to_owned()), &msg);
    }
}

// ---------------------------------------------------------------------------------------
// Small readers: JSON null counts as absent, as it does for Go pointers, maps and slices.

pub(super) fn present<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

pub(super) fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

pub(super) fn list<'a>(v: &'a Value, key: &str) -> Vec<&'a Value> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

pub(super) fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// A value printed as Go prints a named string type (quoted), whatever JSON type it has.
pub(super) fn bad_of(v: &Value) -> Bad {
    match v {
        Value::String(s) => Bad::Str(s.clone()),
        other => Bad::Raw(other.to_string()),
    }
}
