//! Template helpers for what kube admins commonly need: defaults, case, truncation,
//! DNS-label sanitising, joining lists and JSON. All are value helpers, so they compose as
//! subexpressions: `{{dnslabel (default claim.labels.team "shared")}}`.

use handlebars::{
    Context, Handlebars, Helper, HelperDef, JsonRender, PathAndJson, RenderContext, RenderError,
    RenderErrorReason, ScopedJson,
};
use serde_json::Value;

use crate::names::sanitize_dns_label;

/// Names and one-line descriptions, for `check` (unknown helper) and docs/configuration.md.
pub const HELPERS: &[(&str, &str)] = &[
    (
        "default",
        "`{{default value \"fallback\"}}`: the value, or the fallback when it is missing or empty",
    ),
    ("lower", "`{{lower value}}`: lower case"),
    ("upper", "`{{upper value}}`: upper case"),
    (
        "trunc",
        "`{{trunc value 20}}`: at most that many characters",
    ),
    (
        "dnslabel",
        "`{{dnslabel value}}` or `{{dnslabel value 30}}`: a valid DNS label (lower case, `[a-z0-9-]`, at most 63 or the given length); use it for any user text that ends up in a path or name",
    ),
    (
        "replace",
        "`{{replace value \"from\" \"to\"}}`: every occurrence replaced",
    ),
    (
        "join",
        "`{{join claim.accessModes \",\"}}`: a list joined with a separator",
    ),
    ("json", "`{{json value}}`: the value as JSON"),
];

/// Handlebars' own helpers that are also available.
pub const BUILTIN_HELPERS: &[&str] = &[
    "if", "unless", "each", "with", "lookup", "eq", "ne", "gt", "gte", "lt", "lte", "and", "or",
    "not", "len",
];

pub fn register(registry: &mut Handlebars<'static>) {
    registry.register_helper("default", Box::new(Default));
    registry.register_helper("lower", Box::new(Lower));
    registry.register_helper("upper", Box::new(Upper));
    registry.register_helper("trunc", Box::new(Trunc));
    registry.register_helper("dnslabel", Box::new(DnsLabel));
    registry.register_helper("replace", Box::new(Replace));
    registry.register_helper("join", Box::new(Join));
    registry.register_helper("json", Box::new(Json));
}

type Out<'rc> = Result<ScopedJson<'rc>, RenderError>;

/// A parameter that must be present: a missing one is the same error strict mode gives for
/// a missing variable, so the user sees which variable it was.
fn required<'a, 'rc>(h: &'a Helper<'rc>, idx: usize) -> Result<&'a PathAndJson<'rc>, RenderError> {
    let name = h.name().to_owned();
    let p = h
        .param(idx)
        .ok_or(RenderErrorReason::ParamNotFoundForIndex("helper", idx))
        .map_err(|e| RenderErrorReason::Other(format!("helper `{name}`: {e}")))?;
    if p.is_value_missing() {
        return Err(RenderError::strict_error(p.relative_path()));
    }
    Ok(p)
}

fn text(h: &Helper<'_>, idx: usize) -> Result<String, RenderError> {
    Ok(required(h, idx)?.value().render())
}

fn number(h: &Helper<'_>, idx: usize) -> Result<usize, RenderError> {
    let name = h.name().to_owned();
    required(h, idx)?
        .value()
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            RenderErrorReason::Other(format!(
                "helper `{name}`: argument {} must be a whole number",
                idx + 1
            ))
            .into()
        })
}

fn string<'rc>(s: String) -> Out<'rc> {
    Ok(ScopedJson::Derived(Value::String(s)))
}

macro_rules! value_helper {
    ($name:ident, |$h:ident| $body:expr) => {
        struct $name;
        impl HelperDef for $name {
            fn call_inner<'reg: 'rc, 'rc>(
                &self,
                $h: &Helper<'rc>,
                _: &'reg Handlebars<'reg>,
                _: &'rc Context,
                _: &mut RenderContext<'reg, 'rc>,
            ) -> Out<'rc> {
                $body
            }
        }
    };
}

value_helper!(Default, |h| {
    let fallback = text(h, 1)?;
    match h.param(0) {
        Some(p) if !p.is_value_missing() && !p.value().is_null() && p.value().render() != "" => {
            within_budget(h, p.value().render().len())?;
            Ok(ScopedJson::Derived(p.value().clone()))
        }
        _ => bounded(h, fallback),
    }
});
value_helper!(Lower, |h| bounded(h, text(h, 0)?.to_lowercase()));
value_helper!(Upper, |h| bounded(h, text(h, 0)?.to_uppercase()));
value_helper!(Trunc, |h| {
    let s = text(h, 0)?;
    string(s.chars().take(number(h, 1)?).collect())
});
value_helper!(DnsLabel, |h| {
    let max = if h.param(1).is_some() {
        number(h, 1)?
    } else {
        63
    };
    string(sanitize_dns_label(&text(h, 0)?, max))
});
/// Refuses a helper result over the per-value cap *before* it is built (a `replace` of a
/// 200 KB annotation could otherwise ask for gigabytes), and checks the claim's clock.
fn within_budget(h: &Helper<'_>, bytes: usize) -> Result<(), RenderError> {
    if bytes > super::MAX_OUTPUT_BYTES {
        super::budget::trip(super::Exceeded::Value);
        return Err(RenderErrorReason::Other(format!(
            "helper `{}` would make a value of {bytes} bytes; at most {} are allowed",
            h.name(),
            super::MAX_OUTPUT_BYTES
        ))
        .into());
    }
    super::budget::charge(0).map_err(|e| RenderErrorReason::Other(e.message()).into())
}

/// A helper's text result, within the per-value cap.
fn bounded<'rc>(h: &Helper<'_>, s: String) -> Out<'rc> {
    within_budget(h, s.len())?;
    string(s)
}

value_helper!(Replace, |h| {
    let (s, from, to) = (text(h, 0)?, text(h, 1)?, text(h, 2)?);
    // An empty pattern matches between every two characters.
    let matches = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from.as_str()).count()
    };
    within_budget(h, s.len().saturating_add(matches.saturating_mul(to.len())))?;
    string(s.replace(&from, &to))
});
value_helper!(Join, |h| {
    let sep = text(h, 1)?;
    let joined = match required(h, 0)?.value() {
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(JsonRender::render).collect();
            let bytes = parts.iter().map(String::len).sum::<usize>()
                + sep.len().saturating_mul(parts.len().saturating_sub(1));
            within_budget(h, bytes)?;
            parts.join(&sep)
        }
        other => other.render(),
    };
    string(joined)
});
value_helper!(Json, |h| bounded(h, required(h, 0)?.value().to_string()));
