//! Who makes the PV (`pv-creator`) and which volume source types a class may hand out
//! (`volume-sources`).

use std::collections::BTreeSet;

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
    let known = |part: &str| {
        PV_SOURCE_TYPES
            .iter()
            .find(|t| t.eq_ignore_ascii_case(part))
    };
    let out = (items(text))
        .map(|part| match known(part) {
            Some(t) if *t == part => Ok(part.to_owned()),
            Some(t) => Err(format!("`{part}` is spelt `{t}` in a PersistentVolume")),
            None => Err(format!(
                "`{part}` is not a PersistentVolume source type; use the field names of a PV's spec, e.g. `nfs`, `iscsi`, `csi`, `local`, `hostPath`"
            )),
        })
        .collect::<Result<BTreeSet<_>, _>>()?;
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
}
