//! Static checks of a template before any claim exists: every variable must exist in the
//! context schema, every helper must exist, and user-controlled text in a path-like
//! parameter must be sanitised.

use handlebars::template::{HelperTemplate, Parameter, Template, TemplateElement};
use handlebars::{Path, PathSeg};

use super::helpers::{BUILTIN_HELPERS, HELPERS};

/// The shape of the template context (docs/configuration.md, "Templates").
#[derive(Debug, Clone, Copy)]
pub enum Field {
    Value,
    /// A list of strings (`claim.accessModes`).
    List,
    /// Free keys an admin or a node chose (class parameters, node labels).
    Map,
    /// Free keys a claim's author chose (its labels and annotations).
    UserMap,
    Object(&'static [(&'static str, Field)]),
}

use Field::{List, Map, Object, UserMap, Value};

pub const SCHEMA: &[(&str, Field)] = &[
    (
        "claim",
        Object(&[
            ("name", Value),
            ("namespace", Value),
            ("uid", Value),
            ("labels", UserMap),
            ("annotations", UserMap),
            (
                "size",
                Object(&[("bytes", Value), ("mib", Value), ("gib", Value)]),
            ),
            ("accessModes", List),
            ("volumeMode", Value),
        ]),
    ),
    ("volume", Object(&[("name", Value)])),
    (
        "class",
        Object(&[
            ("name", Value),
            ("parameters", Map),
            ("reclaimPolicy", Value),
            ("mountOptions", List),
            ("volumeBindingMode", Value),
        ]),
    ),
    ("node", Object(&[("name", Value), ("labels", Map)])),
    ("provisioner", Object(&[("name", Value)])),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    UnknownVariable {
        path: String,
        known: Vec<String>,
    },
    UnknownHelper {
        name: String,
    },
    /// A claim label/annotation used as-is; these are free text chosen by the user.
    UnsanitisedUserText {
        path: String,
    },
    /// `node.*` is only filled for WaitForFirstConsumer classes.
    UsesNode {
        path: String,
    },
}

/// Walks a compiled template and reports every finding.
pub fn lint(template: &Template) -> Vec<Finding> {
    let mut findings = Vec::new();
    walk(&template.elements, &mut findings, &[Scope::Root], false);
    findings.dedup();
    findings
}

/// Whether the template's literal text holds a `/` (the template builds a path). Only the
/// text counts: every block's closing tag `{{/if}}` has one too.
pub fn writes_slash(template: &Template) -> bool {
    fn any(elements: &[TemplateElement]) -> bool {
        elements.iter().any(|e| match e {
            TemplateElement::RawString(s) => s.contains('/'),
            TemplateElement::HelperBlock(ht) => [&ht.template, &ht.inverse]
                .into_iter()
                .flatten()
                .any(|t| any(&t.elements)),
            _ => false,
        })
    }
    any(&template.elements)
}

/// What relative paths resolve against, innermost last.
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    /// The root context, whose shape is `SCHEMA`.
    Root,
    /// Inside `each`/`with` over data no claim author wrote (class parameters, access
    /// modes...): items we cannot type, so nothing is checked.
    Nested,
    /// Inside `each`/`with` over a claim's labels or annotations, or over something that
    /// holds them (`claim`, `this` at the root): every item and `@key` is the user's text.
    User,
}

/// Helpers whose arguments never reach the output as text: they test or count them.
const NOT_OUTPUT: &[&str] = &[
    "if", "unless", "each", "with", "eq", "ne", "gt", "gte", "lt", "lte", "and", "or", "not", "len",
];

/// Helpers whose result is safe as a path component whatever their argument.
const SANITISERS: &[&str] = &["dnslabel"];

fn walk(elements: &[TemplateElement], out: &mut Vec<Finding>, scopes: &[Scope], sanitised: bool) {
    for element in elements {
        match element {
            TemplateElement::Expression(ht) | TemplateElement::HtmlExpression(ht) => {
                helper(ht, out, scopes, sanitised);
            }
            TemplateElement::HelperBlock(ht) => {
                helper(ht, out, scopes, sanitised);
                let name = name_of(&ht.name);
                let mut inner = scopes.to_vec();
                if matches!(name.as_deref(), Some("each" | "with")) {
                    inner.push(match ht.params.first() {
                        Some(p) => classify(p, scopes),
                        None => Scope::Nested,
                    });
                }
                if let Some(t) = &ht.template {
                    walk(&t.elements, out, &inner, sanitised);
                }
                if let Some(t) = &ht.inverse {
                    walk(&t.elements, out, scopes, sanitised);
                }
            }
            _ => {}
        }
    }
}

/// The scope a block over `p` opens: `User` exactly when `p`, output unsanitised, would
/// be reported as the user's text.
fn classify(p: &Parameter, scopes: &[Scope]) -> Scope {
    let mut probe = Vec::new();
    parameter(p, &mut probe, scopes, false);
    if probe
        .iter()
        .any(|f| matches!(f, Finding::UnsanitisedUserText { .. }))
    {
        Scope::User
    } else {
        Scope::Nested
    }
}

fn name_of(p: &Parameter) -> Option<String> {
    match p {
        Parameter::Name(n) => Some(n.clone()),
        Parameter::Path(Path::Relative((_, raw))) => Some(raw.clone()),
        _ => None,
    }
}

fn is_known_helper(name: &str) -> bool {
    HELPERS.iter().any(|(h, _)| *h == name) || BUILTIN_HELPERS.contains(&name)
}

fn helper(ht: &HelperTemplate, out: &mut Vec<Finding>, scopes: &[Scope], sanitised: bool) {
    let is_call = !ht.params.is_empty() || !ht.hash.is_empty() || ht.block;
    if is_call {
        let name = name_of(&ht.name).unwrap_or_default();
        if !is_known_helper(&name) {
            out.push(Finding::UnknownHelper { name: name.clone() });
        }
        let sanitises =
            sanitised || SANITISERS.contains(&name.as_str()) || NOT_OUTPUT.contains(&name.as_str());
        for p in ht.params.iter().chain(ht.hash.values()) {
            parameter(p, out, scopes, sanitises);
        }
    } else {
        parameter(&ht.name, out, scopes, sanitised);
    }
}

fn user_text(raw: &str, out: &mut Vec<Finding>, sanitised: bool) {
    if !sanitised {
        let path = if raw.is_empty() { "this" } else { raw };
        out.push(Finding::UnsanitisedUserText {
            path: path.to_owned(),
        });
    }
}

fn parameter(p: &Parameter, out: &mut Vec<Finding>, scopes: &[Scope], sanitised: bool) {
    let innermost = scopes.last().copied().unwrap_or(Scope::Root);
    match p {
        Parameter::Path(Path::Relative((segs, raw))) => {
            // `@root` and `..` come as grammar-rule segments whose type is private; the raw
            // text says which.
            let rooted = raw.starts_with("@root");
            let ups = if rooted {
                0
            } else {
                segs.iter()
                    .filter(|s| !matches!(s, PathSeg::Named(_)))
                    .count()
            };
            let scope = if rooted {
                Scope::Root
            } else {
                // More `..` than blocks resolves against the root, as Handlebars does.
                scopes
                    .len()
                    .checked_sub(1 + ups)
                    .map_or(Scope::Root, |i| scopes[i])
            };
            let names: Vec<&str> = segs
                .iter()
                .filter_map(|s| match s {
                    PathSeg::Named(n) => Some(n.as_str()),
                    _ => None,
                })
                .collect();
            match scope {
                Scope::Root => check_path(raw, &names, out, sanitised),
                Scope::User => user_text(raw, out, sanitised),
                Scope::Nested => {}
            }
        }
        // `@key` of a loop over the user's map is the user's text (`@index`, `@first` and
        // `@last` are numbers and booleans). `with` inherits `@key`, so any user scope counts.
        Parameter::Path(Path::Local((_, name, raw)))
            if name == "key" && scopes.contains(&Scope::User) =>
        {
            user_text(raw, out, sanitised);
        }
        Parameter::Name(n) => match innermost {
            Scope::Root => check_path(n, &[n.as_str()], out, sanitised),
            Scope::User => user_text(n, out, sanitised),
            Scope::Nested => {}
        },
        Parameter::Subexpression(sub) => {
            if let TemplateElement::Expression(ht) = sub.element.as_ref() {
                helper(ht, out, scopes, sanitised);
            }
        }
        _ => {}
    }
}

/// Whether a field is, or holds, text a claim's author chose.
fn holds_user_text(field: &Field) -> bool {
    match field {
        UserMap => true,
        Object(children) => children.iter().any(|(_, f)| holds_user_text(f)),
        Map | Value | List => false,
    }
}

fn check_path(raw: &str, names: &[&str], out: &mut Vec<Finding>, sanitised: bool) {
    if names.is_empty() {
        // `this` at the root: the whole context, labels and annotations included.
        return user_text(raw, out, sanitised);
    }
    let mut fields: &[(&str, Field)] = SCHEMA;
    let mut prefix = String::new();
    for (i, name) in names.iter().enumerate() {
        let Some((_, field)) = fields.iter().find(|(k, _)| k == name) else {
            out.push(Finding::UnknownVariable {
                path: raw.to_owned(),
                known: fields.iter().map(|(k, _)| format!("{prefix}{k}")).collect(),
            });
            return;
        };
        if i == 0 && *name == "node" {
            out.push(Finding::UsesNode {
                path: raw.to_owned(),
            });
        }
        prefix.push_str(name);
        prefix.push('.');
        let last = names.len() == i + 1;
        match field {
            // A whole object that holds user text (`{{json claim}}`) carries it along.
            Object(_) if last && holds_user_text(field) => {
                return user_text(raw, out, sanitised);
            }
            Object(children) => fields = children,
            UserMap => return user_text(raw, out, sanitised),
            Map => return,
            Value | List => {
                if !last {
                    out.push(Finding::UnknownVariable {
                        path: raw.to_owned(),
                        known: vec![prefix.trim_end_matches('.').to_owned()],
                    });
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn findings(src: &str) -> Vec<Finding> {
        lint(&Template::compile(src).unwrap())
    }

    #[test]
    fn known_variables_pass() {
        for src in [
            "plain text",
            "{{claim.name}}-{{claim.namespace}}-{{claim.uid}}-{{volume.name}}",
            "{{claim.size.gib}} {{claim.size.mib}} {{claim.size.bytes}} {{claim.volumeMode}}",
            "{{class.name}} {{class.parameters.tier}} {{class.reclaimPolicy}}",
            "{{join claim.accessModes \",\"}} {{join class.mountOptions \" \"}}",
            "{{provisioner.name}} {{class.volumeBindingMode}}",
            "{{#if claim.labels.fast}}ssd{{else}}hdd{{/if}}",
            "{{#each claim.accessModes}}{{this}}{{@index}}{{/each}}",
            "{{#each class.parameters}}{{@key}}={{this}} {{@root.claim.name}}{{/each}}",
            "{{dnslabel (default claim.labels.team \"shared\") 20}}",
            "{{lookup claim.annotations \"x\"}}",
        ] {
            let f: Vec<_> = findings(src)
                .into_iter()
                .filter(|f| !matches!(f, Finding::UnsanitisedUserText { .. }))
                .collect();
            assert!(f.is_empty(), "{src}: {f:?}");
        }
    }

    #[test]
    fn unknown_variables_and_helpers_are_found() {
        assert!(matches!(
            &findings("{{claim.nmae}}")[..],
            [Finding::UnknownVariable { path, known }] if path == "claim.nmae" && known.contains(&"claim.name".to_string())
        ));
        assert!(matches!(
            &findings("{{pvc.name}}")[..],
            [Finding::UnknownVariable { path, .. }] if path == "pvc.name"
        ));
        assert!(matches!(
            &findings("{{claim.size.gib.x}}")[..],
            [Finding::UnknownVariable { .. }]
        ));
        assert!(matches!(
            &findings("{{#each claim.labels}}{{@root.claim.nope}}{{/each}}")[..],
            [Finding::UnknownVariable { path, .. }] if path == "@root.claim.nope"
        ));
        assert!(matches!(
            &findings("{{shout claim.name}}")[..],
            [Finding::UnknownHelper { name }] if name == "shout"
        ));
        assert!(matches!(
            &findings("{{upper (nope claim.name)}}")[..],
            [Finding::UnknownHelper { name }] if name == "nope"
        ));
        assert!(matches!(
            &findings("{{zone}}")[..],
            [Finding::UnknownVariable { path, .. }] if path == "zone"
        ));
    }

    #[test]
    fn user_text_must_be_sanitised() {
        assert!(matches!(
            &findings("/exports/{{claim.annotations.dir}}")[..],
            [Finding::UnsanitisedUserText { path }] if path == "claim.annotations.dir"
        ));
        assert!(findings("/exports/{{dnslabel claim.labels.team}}").is_empty());
        assert!(findings("/exports/{{dnslabel (default claim.labels.team \"x\")}}").is_empty());
        assert!(findings("{{class.parameters.base}}/{{claim.name}}").is_empty());
    }

    #[test]
    fn node_use_is_reported() {
        assert!(matches!(
            &findings("{{node.labels.[topology.kubernetes.io/zone]}}")[..],
            [Finding::UsesNode { path }] if path == "node.labels.[topology.kubernetes.io/zone]"
        ));
    }
}
