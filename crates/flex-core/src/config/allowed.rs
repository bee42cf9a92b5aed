//! What a class's image may report, declared per class (`allowed-paths`, `allowed-nfs-servers`
//! ...): the controller builds a PV only from a report inside these (see `report`), since
//! an image's report is the one place where its bug becomes another tenant's data.

mod report;
pub use report::check_report;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use super::problem::Problem;
use super::sources::{PvCreator, items};

pub const ALLOWED_PATHS: &str = "allowed-paths";
pub const ALLOWED_NFS_SERVERS: &str = "allowed-nfs-servers";
pub const ALLOWED_NFS_PATHS: &str = "allowed-nfs-paths";
pub const ALLOWED_CSI_DRIVERS: &str = "allowed-csi-drivers";
pub const ALLOWED_PORTALS: &str = "allowed-portals";
pub const ALLOWED_MONITORS: &str = "allowed-monitors";
/// The parameter whose literal value is `allowed-paths` when that is unset: the shipped
/// hostpath image's base directory (configmaps/hostpath.yaml).
pub const BASE_PATH_PARAMETER: &str = "base-path";

/// Every declaration key, in the order they are documented.
pub const KEYS: &[&str] = &[
    ALLOWED_PATHS,
    ALLOWED_NFS_SERVERS,
    ALLOWED_NFS_PATHS,
    ALLOWED_CSI_DRIVERS,
    ALLOWED_PORTALS,
    ALLOWED_MONITORS,
];

/// The volume source types a report of which is refused until the class declares these
/// keys: each names a node directory, a server or a driver that any pod of the claim reaches.
pub const NEEDED: &[(&str, &[&str])] = &[
    ("cephfs", &[ALLOWED_MONITORS]),
    ("csi", &[ALLOWED_CSI_DRIVERS]),
    ("hostPath", &[ALLOWED_PATHS]),
    ("iscsi", &[ALLOWED_PORTALS]),
    ("local", &[ALLOWED_PATHS]),
    ("nfs", &[ALLOWED_NFS_SERVERS, ALLOWED_NFS_PATHS]),
    ("rbd", &[ALLOWED_MONITORS]),
];

/// The bytes of values one declaration key may list: the declarations travel on every
/// provisioning Job as an annotation (for `plan::orphan`), and annotations are limited.
pub const MAX_DECLARATION_BYTES: usize = 4096;

/// The declarations of one class, and the namespace secret references must name.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedVolumes {
    /// `allowed-paths`: hostPath and local paths must lie strictly below one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// `paths` is the `base-path` parameter, `allowed-paths` being unset.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paths_from_base_path: bool,
    /// `allowed-nfs-servers`, compared as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nfs_servers: Option<Vec<String>>,
    /// `allowed-nfs-paths`: nfs paths must lie strictly below one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nfs_paths: Option<Vec<String>>,
    /// `allowed-csi-drivers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csi_drivers: Option<Vec<String>>,
    /// `allowed-portals`: iscsi targetPortal and portals, compared as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub portals: Option<Vec<String>>,
    /// `allowed-monitors`: rbd and cephfs monitors, compared as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitors: Option<Vec<String>>,
    /// The config namespace (the ConfigMap's own): the only one a reported secret
    /// reference may name.
    pub secret_namespace: String,
    /// With `volume-base`: the one volume a report for this claim may name (the
    /// declarations above are then not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<ExactVolume>,
}

/// The volume a class with `volume-base` made for one claim: its base's node directory
/// or export, with the claim's rendered `volume-directory` below it (isolation.rs).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExactVolume {
    /// A `hostPath` or `local` volume at this path.
    Path(String),
    /// An `nfs` volume of this server and path.
    Nfs { server: String, path: String },
}

impl std::fmt::Display for ExactVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExactVolume::Path(p) => write!(f, "path {p}"),
            ExactVolume::Nfs { server, path } => write!(f, "nfs {server}:{path}"),
        }
    }
}

impl AllowedVolumes {
    /// Nothing declared: every report of a type in `NEEDED` is refused.
    pub fn none(secret_namespace: &str) -> Self {
        AllowedVolumes {
            secret_namespace: secret_namespace.to_owned(),
            ..AllowedVolumes::default()
        }
    }

    /// These declarations for one claim whose volume is exactly `exact`.
    pub fn with_exact(mut self, exact: Option<ExactVolume>) -> Self {
        self.exact = exact;
        self
    }

    /// The values declared under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Vec<String>> {
        match key {
            ALLOWED_PATHS => self.paths.as_ref(),
            ALLOWED_NFS_SERVERS => self.nfs_servers.as_ref(),
            ALLOWED_NFS_PATHS => self.nfs_paths.as_ref(),
            ALLOWED_CSI_DRIVERS => self.csi_drivers.as_ref(),
            ALLOWED_PORTALS => self.portals.as_ref(),
            ALLOWED_MONITORS => self.monitors.as_ref(),
            _ => None,
        }
    }

    fn slot(&mut self, key: &str) -> Option<&mut Option<Vec<String>>> {
        match key {
            ALLOWED_PATHS => Some(&mut self.paths),
            ALLOWED_NFS_SERVERS => Some(&mut self.nfs_servers),
            ALLOWED_NFS_PATHS => Some(&mut self.nfs_paths),
            ALLOWED_CSI_DRIVERS => Some(&mut self.csi_drivers),
            ALLOWED_PORTALS => Some(&mut self.portals),
            ALLOWED_MONITORS => Some(&mut self.monitors),
            _ => None,
        }
    }

    /// Reads one declaration key's value into its place. Returns the fix-it message when
    /// the value is not a declaration.
    pub fn read(&mut self, key: &str, text: &str) -> Result<(), String> {
        let values = match key {
            ALLOWED_PATHS | ALLOWED_NFS_PATHS => path_prefixes(text)?,
            ALLOWED_CSI_DRIVERS => csi_drivers(text)?,
            _ => hosts(text)?,
        };
        if let Some(slot) = self.slot(key) {
            *slot = Some(values);
            if key == ALLOWED_PATHS {
                self.paths_from_base_path = false;
            }
        }
        Ok(())
    }

    /// With `allowed-paths` unset, the literal `base-path` parameter is its value, when it is
    /// a path prefix `allowed-paths` would accept.
    pub fn default_paths_from(&mut self, base_path: Option<&str>) {
        if self.paths.is_some() {
            return;
        }
        let literal = base_path.filter(|b| !b.contains("{{"));
        if let Some(prefix) = literal.and_then(|b| path_prefix(b).ok()) {
            self.paths = Some(vec![prefix]);
            self.paths_from_base_path = true;
        }
    }

    /// What was declared by the admin's own keys, for the claim's inputs digest (a change
    /// re-opens a claim whose report was refused); `None` when no key is set, so that the
    /// digest of a class without declarations is what it was before they existed.
    pub fn declared(&self) -> Option<serde_json::Value> {
        let mut own = self.clone();
        if own.paths_from_base_path {
            own.paths = None;
            own.paths_from_base_path = false;
        }
        own.secret_namespace = String::new();
        own.exact = None;
        (own != AllowedVolumes::default()).then(|| serde_json::to_value(&own).unwrap_or_default())
    }

    /// The values of `key` as messages show them: `(a, b)`, saying where a default came from.
    fn shown(&self, key: &str) -> String {
        let values = self.get(key).map(|v| v.join(", ")).unwrap_or_default();
        if key == ALLOWED_PATHS && self.paths_from_base_path {
            format!("({values}, the {BASE_PATH_PARAMETER} parameter, as {ALLOWED_PATHS} is unset)")
        } else {
            format!("({values})")
        }
    }

    /// What a class accepts from a report, one line each, for `render`.
    pub fn describe(&self, creator: PvCreator, sources: &BTreeSet<String>) -> Vec<String> {
        let types: Vec<&str> = sources.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        if creator == PvCreator::Image {
            out.push(format!(
                "pv-creator: image: the image creates the PV itself; the controller verifies its source type ({}, from volume-sources), and deploy/'s admission policy limits what it may hold (its parameters: the ConfigMap flex-provisioner-image-volumes, deploy/admission-policy-params.yaml); the allowed-* keys are not read",
                types.join(", ")
            ));
            return out;
        }
        out.push(format!(
            "the image's report: exactly one volume source, of a type in volume-sources ({}); the rest of the PV comes from the template above",
            types.join(", ")
        ));
        for (kind, keys) in NEEDED.iter().filter(|(t, _)| sources.contains(*t)) {
            let rules: Vec<String> = keys
                .iter()
                .map(|key| match self.get(key) {
                    None => format!("{key} is not set, so every {kind} report is refused"),
                    Some(_) if matches!(*key, ALLOWED_PATHS | ALLOWED_NFS_PATHS) => {
                        format!("path strictly below {key} {}", self.shown(key))
                    }
                    Some(_) => format!("{} in {key} {}", field_of(kind, key), self.shown(key)),
                })
                .collect();
            out.push(format!("{kind}: {}", rules.join("; ")));
        }
        let unchecked: Vec<&str> = types
            .iter()
            .copied()
            .filter(|t| !NEEDED.iter().any(|(n, _)| n == t))
            .collect();
        if !unchecked.is_empty() {
            out.push(format!(
                "{}: no allowed-* key applies; accepted as reported, secret references aside",
                unchecked.join(", ")
            ));
        }
        out.push(format!(
            "secret references (secretRef, csi *SecretRef, azureFile secretNamespace): only in namespace {}, the config namespace",
            self.secret_namespace
        ));
        out
    }
}

/// What of a `kind` source a host-like key is compared with, for `describe`.
fn field_of(kind: &str, key: &str) -> &'static str {
    match (kind, key) {
        ("nfs", _) => "server",
        ("csi", _) => "driver",
        ("iscsi", _) => "targetPortal and portals",
        _ => "monitors",
    }
}

/// The problems of a class's declarations that do not block: a type the class allows that
/// lacks its declaration (every report of it is refused), and a declaration nothing reads.
pub fn problems(
    allowed: &AllowedVolumes,
    creator: PvCreator,
    sources: &BTreeSet<String>,
    sources_listed: bool,
    keys_set: &BTreeSet<&str>,
    base_path: Option<&str>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    if creator == PvCreator::Image {
        for key in keys_set {
            out.push(Problem::warning(
                Some(key),
                "is not read with pv-creator: image: the image creates the PV itself, and the controller only checks a report",
                "limit image-mode PVs with deploy/'s admission policy parameters (the ConfigMap flex-provisioner-image-volumes), or remove the key",
            ));
        }
        return out;
    }
    for key in keys_set {
        let used_by: Vec<&str> = NEEDED
            .iter()
            .filter(|(t, keys)| keys.contains(key) && sources.contains(*t))
            .map(|(t, _)| *t)
            .collect();
        if used_by.is_empty() {
            let types: Vec<&str> = NEEDED
                .iter()
                .filter(|(_, keys)| keys.contains(key))
                .map(|(t, _)| *t)
                .collect();
            out.push(Problem::warning(
                Some(key),
                format!(
                    "is set, but volume-sources allows none of {}, so nothing reads it",
                    types.join(", ")
                ),
                format!(
                    "remove it, or add the type the image reports to volume-sources ({})",
                    types.join(" or ")
                ),
            ));
        }
    }
    // A class that does not list its types says nothing about what its image reports: the
    // missing declarations show when a report comes (its message names the key).
    if !sources_listed {
        return out;
    }
    let mut missing: Vec<(&str, Vec<&str>)> = Vec::new();
    for (kind, keys) in NEEDED.iter().filter(|(t, _)| sources.contains(*t)) {
        for key in keys.iter().filter(|k| allowed.get(k).is_none()) {
            match missing.iter_mut().find(|(k, _)| k == key) {
                Some((_, kinds)) => kinds.push(kind),
                None => missing.push((key, vec![kind])),
            }
        }
    }
    for (key, kinds) in missing {
        let mut fix = format!(
            "add `{key}` listing {}, or remove {} from volume-sources",
            what_key_lists(key),
            kinds.join(" and ")
        );
        if key == ALLOWED_PATHS
            && let Some(base) = base_path
        {
            fix.push_str(&format!(
                " (the `{BASE_PATH_PARAMETER}` parameter `{base}` is a template or not a plain absolute path, so it is no default)"
            ));
        }
        out.push(Problem::warning(
            Some(key),
            format!(
                "is not set, but volume-sources allows {}: every {} report is refused",
                kinds.join(" and "),
                kinds.join(" or ")
            ),
            fix,
        ));
    }
    out
}

/// What an admin writes under `key`, for messages.
fn what_key_lists(key: &str) -> &'static str {
    match key {
        ALLOWED_PATHS => "the directories below which the image's volumes lie",
        ALLOWED_NFS_SERVERS => "the NFS servers the image hands out",
        ALLOWED_NFS_PATHS => "the exports below which the image's volumes lie",
        ALLOWED_CSI_DRIVERS => "the CSI drivers the image hands out",
        ALLOWED_PORTALS => "the iSCSI portals the image hands out",
        _ => "the Ceph monitors the image hands out",
    }
}

/// The segments of a plain absolute path: `None` for a relative path, `/` itself, or one
/// with a `.`, `..` or empty segment or a control character. Judged on the text alone: a
/// report names a path on a node or a server the controller cannot look at.
pub(crate) fn segments(path: &str) -> Option<Vec<&str>> {
    let rest = path.strip_prefix('/')?;
    if path.chars().any(char::is_control) {
        return None;
    }
    let segments: Vec<&str> = rest.split('/').collect();
    segments
        .iter()
        .all(|s| !s.is_empty() && *s != "." && *s != "..")
        .then_some(segments)
}

/// Whether `path` lies strictly below `prefix` (`<prefix>/<more>`), segment by segment, so
/// `/var/lib/x-evil` is not below `/var/lib/x`.
pub fn is_below(path: &str, prefix: &str) -> bool {
    match (segments(path), segments(prefix)) {
        (Some(p), Some(base)) => p.len() > base.len() && p.starts_with(&base),
        _ => false,
    }
}

fn not_a_template(text: &str) -> Result<(), String> {
    if text.contains("{{") {
        return Err("is read as it is, not as a template: list the values themselves".into());
    }
    Ok(())
}

fn bounded(values: Vec<String>) -> Result<Vec<String>, String> {
    let bytes: usize = values.iter().map(String::len).sum();
    if bytes > MAX_DECLARATION_BYTES {
        return Err(format!(
            "lists {bytes} bytes of values; at most {MAX_DECLARATION_BYTES} are allowed: list the parents the volumes share"
        ));
    }
    if values.is_empty() {
        return Err("lists nothing; remove the key, or list what the image reports".into());
    }
    let mut seen = BTreeSet::new();
    Ok(values
        .into_iter()
        .filter(|v| seen.insert(v.clone()))
        .collect())
}

/// One prefix: a plain absolute path other than `/` (one trailing `/` is ignored).
fn path_prefix(text: &str) -> Result<String, String> {
    let p = text.trim();
    let p = if p.len() > 1 {
        p.strip_suffix('/').unwrap_or(p)
    } else {
        p
    };
    if p == "/" {
        return Err("`/` would admit every directory (`/etc` included): list the directory that holds the volumes, e.g. `/var/lib/flex-provisioner/volumes`".into());
    }
    if segments(p).is_none() {
        return Err(format!(
            "`{p}` is not a plain absolute path: it must start with `/` and have no `.`, `..` or empty segment"
        ));
    }
    Ok(p.to_owned())
}

/// `allowed-paths`, `allowed-nfs-paths`: comma-separated path prefixes.
pub fn path_prefixes(text: &str) -> Result<Vec<String>, String> {
    not_a_template(text)?;
    bounded(items(text).map(path_prefix).collect::<Result<_, _>>()?)
}

/// `allowed-nfs-servers`, `allowed-portals`, `allowed-monitors`: host names or addresses,
/// with a port where the image reports one (`10.0.0.5:3260`, `[fd00::1]:6789`).
pub fn hosts(text: &str) -> Result<Vec<String>, String> {
    let ok = |h: &str| {
        h.len() <= 261
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
    };
    each(text, ok, |h| {
        format!(
            "`{h}` is not a host name or address (A-Z a-z 0-9 . - : [ ] _, with a port if the image reports one)"
        )
    })
}

/// `allowed-csi-drivers`: CSI driver names (at most 63 of alphanumerics, `-` and `.`,
/// alphanumeric at both ends, as the CSI specification has them).
pub fn csi_drivers(text: &str) -> Result<Vec<String>, String> {
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let ok = |d: &str| {
        d.len() <= 63
            && ends(d.chars().next())
            && ends(d.chars().last())
            && d.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    each(text, ok, |d| {
        format!(
            "`{d}` is not a CSI driver name (at most 63 of A-Z a-z 0-9 - ., alphanumeric at both ends), e.g. `ebs.csi.aws.com`"
        )
    })
}

/// The comma-separated items of `text`, each one `ok` says is well formed; the first that
/// is not is the error `not` words.
fn each(
    text: &str,
    ok: impl Fn(&str) -> bool,
    not: impl Fn(&str) -> String,
) -> Result<Vec<String>, String> {
    not_a_template(text)?;
    let checked = items(text).map(|i| if ok(i) { Ok(i.to_owned()) } else { Err(not(i)) });
    bounded(checked.collect::<Result<_, _>>()?)
}
