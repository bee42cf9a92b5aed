//! Who makes the PV (`pv-creator`) and which volume source types a class may hand out
//! (`volume-sources`).

use super::ReportError;
use std::collections::BTreeSet;

use super::allowed::AllowedVolumes;

/// Who creates the PersistentVolume of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PvCreator {
    /// The image reports a volume source; the controller validates it and creates the PV.
    /// The Job's pod gets no API credentials.
    #[default]
    Controller,
    /// The image creates the PV itself with its service account (the original proposal).
    Image,
}

impl PvCreator {
    pub fn as_str(self) -> &'static str {
        match self {
            PvCreator::Controller => "controller",
            PvCreator::Image => "image",
        }
    }
}

pub fn pv_creator(text: &str) -> Result<PvCreator, String> {
    match text.trim() {
        "controller" => Ok(PvCreator::Controller),
        "image" => Ok(PvCreator::Image),
        other => Err(format!(
            "`{other}` is neither `controller` (the image reports a volume source, the controller creates the PV) nor `image` (the image creates the PV)"
        )),
    }
}

/// Every volume source field of a PersistentVolumeSpec (Kubernetes 1.36).
pub const PV_SOURCE_TYPES: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

/// Types that hand a pod a directory of its node (`hostPath`, `local`) or run a driver
/// binary on the node with options from the report (`flexVolume`): a provisioner image that
/// reports one of them decides what of a node any pod using the claim can reach, so a class
/// must list them by name.
pub const NODE_SOURCE_TYPES: &[&str] = &["flexVolume", "hostPath", "local"];

/// The types a class allows when it does not say: every type but the node ones.
pub fn default_sources() -> BTreeSet<String> {
    PV_SOURCE_TYPES
        .iter()
        .filter(|t| !NODE_SOURCE_TYPES.contains(t))
        .map(|t| (*t).to_owned())
        .collect()
}

/// The entries of `a, b` or `[a, "b"]`, trimmed, empty ones left out.
pub(super) fn items(text: &str) -> impl Iterator<Item = &str> {
    let inner = text.trim();
    let inner = inner
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(inner);
    inner
        .split(',')
        .map(|part| part.trim().trim_matches(|c| c == '"' || c == '\''))
        .filter(|part| !part.is_empty())
}

/// `volume-sources: "local,hostPath"` (a YAML list such as `[local, hostPath]` also reads).
pub fn volume_sources(text: &str) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    for part in items(text) {
        match PV_SOURCE_TYPES
            .iter()
            .find(|t| t.eq_ignore_ascii_case(part))
        {
            Some(t) if *t == part => {
                out.insert(part.to_owned());
            }
            Some(t) => return Err(format!("`{part}` is spelt `{t}` in a PersistentVolume")),
            None => {
                return Err(format!(
                    "`{part}` is not a PersistentVolume source type; use the field names of a PV's spec, e.g. `nfs`, `iscsi`, `csi`, `local`, `hostPath`"
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("lists no volume source type".into());
    }
    Ok(out)
}

/// `data-sources: "PersistentVolumeClaim, backup.example.com/Restore"`: kinds a claim's data
/// source may name, `Kind` in the core group or `group/Kind`.
pub fn data_sources(text: &str) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    for part in items(text) {
        let (group, kind) = part.rsplit_once('/').unwrap_or(("", part));
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        let group_ok = group.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        }) || group.is_empty();
        if !kind_ok || !group_ok || (part.contains('/') && group.is_empty()) {
            return Err(format!(
                "`{part}` is not a kind: write `PersistentVolumeClaim` for the core group, or `group/Kind` such as `backup.example.com/Restore`"
            ));
        }
        out.insert(part.to_owned());
    }
    if out.is_empty() {
        return Err("lists no kind".into());
    }
    Ok(out)
}

/// The volume source fields set in a PV's spec (as JSON), in spec order.
pub fn sources_in(spec: &serde_json::Value) -> Vec<String> {
    PV_SOURCE_TYPES
        .iter()
        .filter(|t| spec.get(**t).is_some_and(|v| !v.is_null()))
        .map(|t| (*t).to_owned())
        .collect()
}

/// The rest of a PersistentVolume, and of its spec: what the controller takes from the claim,
/// the class and the template, never from an image's report.
pub const NOT_FROM_A_REPORT: &[&str] = &[
    "accessModes",
    "apiVersion",
    "capacity",
    "claimRef",
    "kind",
    "metadata",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "spec",
    "status",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
];

/// Checks a volume source reported by an image (the termination message of its pod): a JSON
/// object with exactly one key, a source type the class allows (`allowed`), whose value is
/// an object inside what the class declares (`declared`, see `config::allowed`). Returns the
/// source as it goes into the PV's spec.
pub fn check_report(
    report: &str,
    allowed: &BTreeSet<String>,
    declared: &AllowedVolumes,
) -> Result<serde_json::Map<String, serde_json::Value>, ReportError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_source_kinds() {
        let kinds =
            data_sources("[PersistentVolumeClaim, \"backup.example.com/Restore\"]").unwrap();
        assert!(kinds.contains("PersistentVolumeClaim"));
        assert!(kinds.contains("backup.example.com/Restore"));
        for bad in [
            "persistentvolumeclaim",
            "/Restore",
            "Backup.Example/Restore",
            "a b",
            "",
            "x/",
        ] {
            assert!(data_sources(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn creators() {
        assert_eq!(pv_creator("controller"), Ok(PvCreator::Controller));
        assert_eq!(pv_creator(" image "), Ok(PvCreator::Image));
        assert!(pv_creator("pod").unwrap_err().contains("neither"));
    }

    #[test]
    fn source_lists() {
        assert_eq!(
            volume_sources("local, hostPath").unwrap(),
            BTreeSet::from(["hostPath".to_owned(), "local".to_owned()])
        );
        assert_eq!(volume_sources("[nfs]").unwrap().len(), 1);
        assert!(
            volume_sources("hostpath")
                .unwrap_err()
                .contains("`hostPath`")
        );
        assert!(volume_sources("disk").unwrap_err().contains("not a"));
        assert!(volume_sources(" , ").is_err());
        let d = default_sources();
        assert!(d.contains("nfs") && d.contains("csi"));
        assert!(!d.contains("hostPath") && !d.contains("local") && !d.contains("flexVolume"));
    }

    #[test]
    fn reports() {
        let nfs = BTreeSet::from(["nfs".to_owned()]);
        let mut declared = AllowedVolumes::none("cfg");
        declared.read("allowed-nfs-servers", "a").unwrap();
        declared.read("allowed-nfs-paths", "/x").unwrap();
        let check = |r: &str| check_report(r, &nfs, &declared).map_err(|e| e.to_string());
        assert!(check(r#"{"nfs":{"server":"a","path":"/x/v"}}"#).is_ok());
        assert!(
            check(r#"{"nfs":{"server":"a"},"hostPath":{"path":"/"}}"#)
                .unwrap_err()
                .contains("exactly one")
        );
        assert!(
            check(r#"{"hostPath":{"path":"/"}}"#)
                .unwrap_err()
                .contains("does not allow")
        );
        assert!(check("{nfs").unwrap_err().contains("not JSON"));
        assert!(check(" ").unwrap_err().contains("no volume source"));
        assert!(check("[1]").unwrap_err().contains("object"));
        assert!(
            check(r#"{"flocker":{}}"#)
                .unwrap_err()
                .contains("does not allow")
        );
        assert!(
            check(r#"{"disk":{}}"#)
                .unwrap_err()
                .contains("not a PersistentVolume source")
        );
        assert!(check(r#"{"nfs":"x"}"#).is_err());
        // Inside the type, the declarations decide (config::allowed has every rule).
        assert!(
            check(r#"{"nfs":{"server":"b","path":"/x/v"}}"#)
                .unwrap_err()
                .contains("which is not in allowed-nfs-servers (a)")
        );
    }

    /// The PV's node affinity, capacity, modes, reclaim policy, mount options, volume mode,
    /// claim and class are the controller's: a report naming any of them is refused for
    /// that, alone or beside a source (before, two keys were refused as "two keys" and a
    /// lone `nodeAffinity` as "not a source type": right, but not saying why).
    #[test]
    fn a_report_carries_only_the_volume_source() {
        let nfs = BTreeSet::from(["nfs".to_owned()]);
        let mut declared = AllowedVolumes::none("cfg");
        declared.read("allowed-nfs-servers", "a").unwrap();
        declared.read("allowed-nfs-paths", "/x").unwrap();
        let source = r#""nfs":{"server":"a","path":"/x/v"}"#;
        for field in NOT_FROM_A_REPORT {
            for report in [
                format!(r#"{{{source},"{field}":{{}}}}"#),
                format!(r#"{{"{field}":{{}}}}"#),
            ] {
                let e = check_report(&report, &nfs, &declared)
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.starts_with(&format!(
                        "its report carries {field}, which a report may not set"
                    )),
                    "{report}: {e}"
                );
            }
        }
        let e = check_report(
            r#"{"nfs":{"server":"a","path":"/x/v"},"nodeAffinity":{"required":{}},"capacity":{"storage":"1Pi"}}"#,
            &nfs,
            &declared,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("carries capacity, nodeAffinity,"), "{e}");
        assert!(e.contains("never from the image"), "{e}");
        // A whole PV is refused the same way.
        let e = check_report(
            r#"{"apiVersion":"v1","kind":"PersistentVolume","spec":{"nfs":{}}}"#,
            &nfs,
            &declared,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("carries apiVersion, kind, spec"), "{e}");
    }
}
