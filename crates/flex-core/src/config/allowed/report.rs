//! The check of one reported volume source against its class's declarations: paths below a
//! prefix, servers, drivers, portals and monitors listed, secret references only in the
//! config namespace. Each refusal names the ConfigMap key an admin would change.

use serde_json::{Map, Value};

use super::super::ReportError;
use super::super::sources::{NOT_FROM_A_REPORT, PV_SOURCE_TYPES};
use super::{
    ALLOWED_CSI_DRIVERS, ALLOWED_MONITORS, ALLOWED_NFS_PATHS, ALLOWED_NFS_SERVERS, ALLOWED_PATHS,
    ALLOWED_PORTALS, AllowedVolumes, ExactVolume, NEEDED, is_below, segments, what_key_lists,
};
use std::collections::BTreeSet;

/// Fields that name a credential file on the node: a report choosing one would mount with
/// whatever key the node keeps there (an admin keyring included).
const NODE_CREDENTIAL_FILES: &[(&str, &str)] = &[("rbd", "keyring"), ("cephfs", "secretFile")];

/// How a reported value appears in a message: as written when it is plain text, quoted and
/// escaped otherwise, and cut short (an event holds at most 1,000 bytes).
fn as_shown(value: &str) -> String {
    let cut: String = value.chars().take(256).collect();
    let cut = if cut.len() < value.len() {
        format!("{cut}…")
    } else {
        cut
    };
    if cut.chars().any(|c| c.is_control() || c.is_whitespace()) {
        format!("{cut:?}")
    } else {
        cut
    }
}

fn wrong_type(kind: &str, field: &str, what: &'static str) -> ReportError {
    let (kind, field) = (kind.to_owned(), field.to_owned());
    ReportError::WrongType { kind, field, what }
}

fn text<'a>(kind: &str, body: &'a Map<String, Value>, field: &str) -> Result<&'a str, ReportError> {
    match body.get(field) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(ReportError::Missing {
            kind: kind.to_owned(),
            field: field.to_owned(),
        }),
        Some(_) => Err(wrong_type(kind, field, "that is not a string")),
    }
}

/// A list of strings; absent is empty.
fn strings<'a>(
    kind: &str,
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<Vec<&'a str>, ReportError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| wrong_type(kind, field, "that are not strings"))
            })
            .collect(),
        Some(_) => Err(wrong_type(kind, field, "that is not a list")),
    }
}

impl ExactVolume {
    /// Checks a `kind` volume source (a report, or a PV an image made) against this one. A
    /// report of a class with `volume-base` names its claim's directory and nothing else: a
    /// path below the base that is a link (planted by a buggy or compromised image) or
    /// another claim's directory would hand the claim's pods whatever it names.
    pub fn check(&self, kind: &str, body: &Map<String, Value>) -> Result<(), ReportError> {
        let matches = match (self, kind) {
            (ExactVolume::Path(p), "hostPath" | "local") => text(kind, body, "path")? == p,
            (ExactVolume::Nfs { server, path }, "nfs") => {
                text(kind, body, "server")? == server && text(kind, body, "path")? == path
            }
            _ => false,
        };
        if matches {
            return Ok(());
        }
        let shown = match kind {
            "nfs" => format!(
                "{}:{}",
                as_shown(text(kind, body, "server").unwrap_or_default()),
                as_shown(text(kind, body, "path").unwrap_or_default())
            ),
            _ => as_shown(text(kind, body, "path").unwrap_or_default()),
        };
        Err(ReportError::NotExact {
            kind: kind.to_owned(),
            shown,
            expected: self.to_string(),
        })
    }
}

impl AllowedVolumes {
    /// Checks the body of a reported `kind` source. Types without a declaration of their own
    /// are checked for secret references only.
    pub fn check_source(&self, kind: &str, body: &Map<String, Value>) -> Result<(), ReportError> {
        if let Some(exact) = &self.exact {
            exact.check(kind, body)?;
            return self.secrets(kind, body);
        }
        let needed = NEEDED
            .iter()
            .find(|(t, _)| *t == kind)
            .map(|(_, keys)| *keys)
            .unwrap_or_default();
        if let Some(key) = needed.iter().find(|k| self.get(k).is_none()) {
            return Err(ReportError::Undeclared {
                kind: kind.to_owned(),
                key,
                lists: what_key_lists(key),
            });
        }
        let listed = |what, value, key| self.listed(kind, what, value, key);
        match kind {
            "hostPath" | "local" => self.below(kind, text(kind, body, "path")?, ALLOWED_PATHS)?,
            "nfs" => {
                listed("server", text(kind, body, "server")?, ALLOWED_NFS_SERVERS)?;
                self.below(kind, text(kind, body, "path")?, ALLOWED_NFS_PATHS)?;
            }
            "csi" => listed("driver", text(kind, body, "driver")?, ALLOWED_CSI_DRIVERS)?,
            "iscsi" => {
                let target = text(kind, body, "targetPortal")?;
                for portal in std::iter::once(target).chain(strings(kind, body, "portals")?) {
                    listed("portal", portal, ALLOWED_PORTALS)?;
                }
            }
            "rbd" | "cephfs" => {
                let monitors = strings(kind, body, "monitors")?;
                if monitors.is_empty() {
                    return Err(ReportError::Missing {
                        kind: kind.to_owned(),
                        field: "monitors".to_owned(),
                    });
                }
                for monitor in monitors {
                    listed("monitor", monitor, ALLOWED_MONITORS)?;
                }
            }
            _ => {}
        }
        self.secrets(kind, body)
    }

    fn listed(
        &self,
        kind: &str,
        what: &'static str,
        value: &str,
        key: &'static str,
    ) -> Result<(), ReportError> {
        if self.get(key).is_some_and(|v| v.iter().any(|a| a == value)) {
            return Ok(());
        }
        Err(ReportError::NotListed {
            kind: kind.to_owned(),
            what,
            shown: as_shown(value),
            key,
            allowed: self.shown(key),
        })
    }

    fn below(&self, kind: &str, path: &str, key: &'static str) -> Result<(), ReportError> {
        let prefixes = self.get(key).map(Vec::as_slice).unwrap_or_default();
        if prefixes.iter().any(|p| is_below(path, p)) {
            return Ok(());
        }
        let why = if path == "/" || prefixes.iter().any(|p| p == path || is_below(p, path)) {
            ": a volume lies strictly below a prefix, never at it or above it"
        } else if segments(path).is_none() {
            ": a path that is not absolute or has a `.`, `..` or empty segment is never below a prefix"
        } else {
            ""
        };
        Err(ReportError::NotBelow {
            kind: kind.to_owned(),
            shown: as_shown(path),
            key,
            allowed: self.shown(key),
            why,
        })
    }

    /// Secret references of any source (`secretRef`, csi's `*SecretRef`, azureFile's
    /// `secretNamespace`) must name the config namespace: a Secret elsewhere (kube-system,
    /// another tenant's namespace) is not the class's to hand out. A reference without a
    /// namespace is refused too, since Kubernetes would read it from a namespace the image
    /// did not name.
    fn secrets(&self, kind: &str, body: &Map<String, Value>) -> Result<(), ReportError> {
        let elsewhere = |field: &str, namespace: Option<String>| ReportError::SecretElsewhere {
            kind: kind.to_owned(),
            field: field.to_owned(),
            namespace,
            config_namespace: self.secret_namespace.clone(),
        };
        for (field, value) in body {
            let reference = field == "secretRef" || field.ends_with("SecretRef");
            let namespace = match (reference, kind, field.as_str(), value) {
                (_, _, _, Value::Null) => continue,
                (true, _, _, Value::Object(r)) => r.get("namespace"),
                (true, _, _, _) => return Err(wrong_type(kind, field, "that is not an object")),
                (false, "azureFile", "secretNamespace", v) => Some(v),
                _ => continue,
            };
            match namespace {
                Some(Value::String(ns)) if *ns == self.secret_namespace => {}
                Some(Value::String(ns)) if !ns.is_empty() => {
                    return Err(elsewhere(field, Some(as_shown(ns))));
                }
                _ => return Err(elsewhere(field, None)),
            }
        }
        if kind == "azureFile" && body.get("secretNamespace").is_none_or(Value::is_null) {
            return Err(ReportError::AzureWithoutSecretNamespace {
                config_namespace: self.secret_namespace.clone(),
            });
        }
        for (_, field) in NODE_CREDENTIAL_FILES.iter().filter(|(t, _)| *t == kind) {
            if let Some(v) = body.get(*field).filter(|v| !v.is_null()) {
                let file = v.as_str().map(as_shown).unwrap_or_else(|| v.to_string());
                return Err(ReportError::NodeCredentialFile {
                    kind: kind.to_owned(),
                    field: (*field).to_owned(),
                    file,
                    config_namespace: self.secret_namespace.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Checks a volume source reported by an image (the termination message of its pod): a JSON
/// object with exactly one key, a source type the class allows (`allowed`), whose value is
/// an object inside what the class declares (`declared`, see `config::allowed`). Returns the
/// source as it goes into the PV's spec.
pub fn check_report(
    report: &str,
    allowed: &BTreeSet<String>,
    declared: &AllowedVolumes,
) -> Result<Map<String, Value>, ReportError> {
    if report.trim().is_empty() {
        return Err(ReportError::Empty);
    }
    let value: serde_json::Value =
        serde_json::from_str(report.trim()).map_err(|e| ReportError::NotJson(e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(ReportError::NotAnObject);
    };
    // Before the count: `{"nfs": ..., "nodeAffinity": ...}` is an attempt to set what the
    // controller owns, and says so, rather than merely "two keys".
    let owned: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| NOT_FROM_A_REPORT.contains(k))
        .collect();
    if !owned.is_empty() {
        return Err(ReportError::SetsWhatTheControllerOwns(owned.join(", ")));
    }
    if map.len() != 1 {
        let keys: Vec<&str> = map.keys().map(String::as_str).collect();
        return Err(ReportError::NotOneSource {
            count: map.len(),
            keys: keys.join(", "),
        });
    }
    let (kind, body) = map.iter().next().expect("one entry");
    if !PV_SOURCE_TYPES.contains(&kind.as_str()) {
        return Err(ReportError::NotASourceType(kind.clone()));
    }
    if !allowed.contains(kind) {
        return Err(ReportError::TypeNotAllowed {
            kind: kind.clone(),
            allowed: allowed.iter().cloned().collect::<Vec<_>>().join(","),
        });
    }
    let Some(body) = body.as_object() else {
        return Err(ReportError::BodyNotAnObject(kind.clone()));
    };
    declared.check_source(kind, body)?;
    Ok(map)
}
