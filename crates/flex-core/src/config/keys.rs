//! The reserved ConfigMap keys, and the checks on the other keys: misspelt reserved keys and
//! credentials pasted into a ConfigMap.

/// Every reserved key with its default and meaning; this table is the reference docs/configuration.md
/// documents and `check` uses to recognise misspellings.
pub const RESERVED_KEYS: &[(&str, &str, &str)] = &[
    (
        "plugin-name",
        "(unset)",
        "the provisioner this ConfigMap is for; another provisioner's ConfigMap is ignored",
    ),
    (
        "image",
        "(required)",
        "the provisioner image run by the Job",
    ),
    (
        "service-account-name",
        "the namespace's `default`",
        "service account of the Job's pod; with `pv-creator: image` it needs create/get on persistentvolumes, otherwise no permission at all (its token is not mounted)",
    ),
    (
        "node-selector",
        "(none)",
        "`key=value[,key=value...]` node labels the Job's pod must run on",
    ),
    (
        "command",
        "the image's entrypoint",
        "container command, a list such as `[\"/bin/provision\"]`",
    ),
    (
        "args",
        "the image's arguments",
        "container arguments, a list; each entry is a template rendered to one argument",
    ),
    (
        "deprovision-image",
        "`image`",
        "image run when a volume is deleted",
    ),
    (
        "deprovision-command",
        "`command`",
        "command of the deprovision container",
    ),
    (
        "deprovision-args",
        "`args`",
        "arguments of the deprovision container (templates)",
    ),
    (
        "expand-image",
        "`image`",
        "image run when a bound claim grows (classes with allowVolumeExpansion)",
    ),
    (
        "expand-command",
        "`command`",
        "command of the expansion container",
    ),
    (
        "expand-args",
        "`args`",
        "arguments of the expansion container (templates, rendered when the volume is provisioned)",
    ),
    (
        "snapshots",
        "`false`",
        "`true`: VolumeSnapshots of this class's claims are taken by Jobs (a VolumeSnapshotClass must name this provisioner as its driver), and claims may be restored from them; the image runs each with ACTION=snapshot, delete-snapshot and, for a restore, provision (docs/snapshots.md)",
    ),
    (
        "timeout",
        "`30m`",
        "how long one Job may run (`90s`, `10m`, `1h30m`), its activeDeadlineSeconds",
    ),
    (
        "retries",
        "`2`",
        "pod retries inside one Job (backoffLimit), 0 to 20",
    ),
    (
        "max-attempts",
        "no limit",
        "Jobs per claim before giving up; between attempts the delay grows exponentially",
    ),
    (
        "permanent-exit-codes",
        "`2`",
        "comma-separated exit codes (1-255) meaning the request can never succeed as it stands",
    ),
    (
        "node-local",
        "`false`",
        "`true`: run on the node the scheduler selected and pin the PV to it (WaitForFirstConsumer classes)",
    ),
    (
        "pod-template",
        "(none)",
        "YAML PodTemplateSpec fragment merged into the Job's pod (tolerations, resources, volumes, securityContext...)",
    ),
    (
        "max-concurrent",
        "no limit",
        "how many Jobs of this class may run at once",
    ),
    (
        super::privilege::ALLOW_PRIVILEGED_KEY,
        "`false`",
        "`true` lets `pod-template` make the pod privileged: privileged containers, added capabilities, hostPID/hostNetwork/hostIPC, hostPath volumes; without it those are an error",
    ),
    (
        "pv-creator",
        "`controller`",
        "who creates the PV: `controller` (the image reports its volume source in its termination message; the controller validates it and creates the PV; the pod gets no API token) or `image` (the image creates the PV with its service account, limited by deploy/'s admission policy)",
    ),
    (
        "data-sources",
        "none",
        "comma-separated kinds a claim's dataSource/dataSourceRef may name, e.g. `PersistentVolumeClaim` (a clone: the Job gets the source volume and its parameters) or `group/Kind` of an admin's own objects (the Job gets the object as JSON)",
    ),
    (
        "volume-sources",
        "every type but `hostPath`, `local`, `flexVolume`",
        "comma-separated volume source types a PV of this class may have (`nfs`, `iscsi`, `csi`, `local`, `hostPath`...); a report or PV with another type is refused; the node types must be listed by name",
    ),
    (
        super::allowed::ALLOWED_PATHS,
        "the literal `base-path` parameter, if any; else nothing",
        "comma-separated directories a reported `hostPath` or `local` path must lie strictly below (`<prefix>/<more>`, judged segment by segment; no `.`, `..` or empty segment); without it, every such report is refused",
    ),
    (
        super::allowed::ALLOWED_NFS_SERVERS,
        "nothing",
        "comma-separated NFS servers a reported `nfs` volume may name, compared as written; without it, every nfs report is refused",
    ),
    (
        super::allowed::ALLOWED_NFS_PATHS,
        "nothing",
        "comma-separated exports a reported `nfs` path must lie strictly below (as `allowed-paths`); without it, every nfs report is refused",
    ),
    (
        super::allowed::ALLOWED_CSI_DRIVERS,
        "nothing",
        "comma-separated CSI drivers a reported `csi` volume may name; without it, every csi report is refused",
    ),
    (
        super::allowed::ALLOWED_PORTALS,
        "nothing",
        "comma-separated iSCSI portals (`host[:port]`, as the image writes them) a reported `iscsi` targetPortal and portals must be among; without it, every iscsi report is refused",
    ),
    (
        super::allowed::ALLOWED_MONITORS,
        "nothing",
        "comma-separated Ceph monitors (`host[:port]`, as the image writes them) every monitor of a reported `rbd` or `cephfs` volume must be among; without it, every such report is refused",
    ),
    (
        super::volume_layout::VOLUME_BASE_KEY,
        "(none)",
        "the pod-template volume (hostPath or nfs, mounted whole by the container) that holds the class's volumes, one directory each: every Job then mounts only the directories it acts on, and a report must name exactly the claim's directory; needs `volume-directory`",
    ),
    (
        super::volume_layout::VOLUME_DIRECTORY_KEY,
        "(none)",
        "template of a claim's directory inside `volume-base`, e.g. `{{claim.namespace}}/{{claim.name}}-{{claim.uid}}`; rendered once, recorded, handed to the Jobs as `VOLUME_DIRECTORY`",
    ),
    (
        UNSANITISED_KEY,
        "(none)",
        "comma-separated parameter keys (or `args`, `deprovision-args`) that may take a claim's labels or annotations into a path unsanitised, because the image validates them; without it that is an error",
    ),
];

/// The opt-out of the path-traversal check, per key: `unsanitised-parameters: "dir,sub"`.
/// Only for images that validate the value themselves (refuse `/`, `..`, control characters).
pub const UNSANITISED_KEY: &str = "unsanitised-parameters";

pub fn is_reserved(key: &str) -> bool {
    RESERVED_KEYS.iter().any(|(k, _, _)| *k == key)
}

/// Spellings people reach for that are not the reserved key they mean.
const ALIASES: &[(&str, &str)] = &[
    ("serviceaccount", "service-account-name"),
    ("serviceaccountname", "service-account-name"),
    ("sa", "service-account-name"),
    ("nodeselector", "node-selector"),
    ("nodeselectors", "node-selector"),
    ("retry", "retries"),
    ("backofflimit", "retries"),
    ("maxretries", "retries"),
    ("attempts", "max-attempts"),
    ("maxattempt", "max-attempts"),
    ("deadline", "timeout"),
    ("activedeadlineseconds", "timeout"),
    ("timeoutseconds", "timeout"),
    ("podtemplatespec", "pod-template"),
    ("template", "pod-template"),
    ("provisioner", "plugin-name"),
    ("provisionername", "plugin-name"),
    ("plugin", "plugin-name"),
    ("deprovisionimages", "deprovision-image"),
    ("permanentexitcode", "permanent-exit-codes"),
    ("exitcodes", "permanent-exit-codes"),
    ("nodelocal", "node-local"),
    ("maxconcurrency", "max-concurrent"),
    ("concurrency", "max-concurrent"),
    ("images", "image"),
    ("privileged", "allow-privileged"),
    ("pvcreator", "pv-creator"),
    ("creator", "pv-creator"),
    ("volumesource", "volume-sources"),
    ("sources", "volume-sources"),
    ("allowedsources", "volume-sources"),
    ("datasource", "data-sources"),
    ("clonesources", "data-sources"),
    ("allowedpath", "allowed-paths"),
    ("allowedprefixes", "allowed-paths"),
    ("pathprefixes", "allowed-paths"),
    ("allowedhostpaths", "allowed-paths"),
    ("allowedlocalpaths", "allowed-paths"),
    ("allowedservers", "allowed-nfs-servers"),
    ("allowednfsserver", "allowed-nfs-servers"),
    ("allowednfsexports", "allowed-nfs-paths"),
    ("allowedexports", "allowed-nfs-paths"),
    ("alloweddrivers", "allowed-csi-drivers"),
    ("allowedcsidriver", "allowed-csi-drivers"),
    ("allowediscsiportals", "allowed-portals"),
    ("allowedtargetportals", "allowed-portals"),
    ("allowedcephmonitors", "allowed-monitors"),
    ("allowedmons", "allowed-monitors"),
];

fn normalize(key: &str) -> String {
    key.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Optimal-string-alignment distance: edits, counting a swap of neighbours as one.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The reserved key an unreserved key most likely meant, if it looks like a misspelling.
/// Short keys only match closely, so ordinary parameters (`zone`, `tags`) are left alone.
pub fn misspelt_reserved_key(key: &str) -> Option<&'static str> {
    if is_reserved(key) {
        return None;
    }
    let norm = normalize(key);
    if let Some((_, target)) = ALIASES.iter().find(|(alias, _)| *alias == norm) {
        return Some(target);
    }
    RESERVED_KEYS.iter().map(|(k, _, _)| *k).find(|reserved| {
        let target = normalize(reserved);
        if norm == target {
            return true;
        }
        let allowed = match target.len() {
            0..=4 => 0,
            5..=8 => 1,
            _ => 2,
        };
        // The distance is at least the difference in length: skip the quadratic work for
        // long keys, which `check` may meet by the thousand in a 1 MiB ConfigMap.
        norm.len().abs_diff(target.len()) <= allowed && edit_distance(&norm, &target) <= allowed
    })
}

/// Why a key or value looks like a credential, if it does. A ConfigMap is readable by far
/// more people than a Secret, so such a configuration is refused rather than used.
pub fn looks_like_secret(key: &str, value: &str) -> Option<&'static str> {
    let k = key.to_ascii_lowercase();
    let words: Vec<&str> = k.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    // `token` only counts as the last word, so `token-bucket-size` stays a parameter.
    let anywhere = ["password", "passwd", "secret", "credential", "credentials"];
    let joined = words.concat();
    if words.iter().any(|w| anywhere.contains(w))
        || joined.contains("apikey")
        || joined.contains("privatekey")
        || joined.ends_with("token")
        || joined.ends_with("password")
    {
        return Some("its name says it holds a credential");
    }
    if value.contains("PRIVATE KEY-----") {
        return Some("its value is a PEM private key");
    }
    let v = value.trim();
    let jwt_parts: Vec<&str> = v.split('.').collect();
    if v.starts_with("eyJ")
        && jwt_parts.len() == 3
        && jwt_parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    {
        return Some("its value is a bearer token (JWT)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspellings_are_recognised() {
        for (typo, meant) in [
            ("imgae", "image"),
            ("Image", "image"),
            ("timout", "timeout"),
            ("service_account_name", "service-account-name"),
            ("serviceAccountName", "service-account-name"),
            ("service-acount-name", "service-account-name"),
            ("service-account", "service-account-name"),
            ("nodeSelector", "node-selector"),
            ("retry", "retries"),
            ("retires", "retries"),
            ("max_attempts", "max-attempts"),
            ("permanent-exit-code", "permanent-exit-codes"),
            ("podTemplate", "pod-template"),
            ("deprovison-image", "deprovision-image"),
            ("node_local", "node-local"),
            ("backoffLimit", "retries"),
            ("allowed-path", "allowed-paths"),
            ("allowedPaths", "allowed-paths"),
            ("path-prefixes", "allowed-paths"),
            ("allowed-nfs-server", "allowed-nfs-servers"),
            ("allowed_nfs_paths", "allowed-nfs-paths"),
            ("allowed-csi-driver", "allowed-csi-drivers"),
            ("allowed-drivers", "allowed-csi-drivers"),
            ("allowed-portal", "allowed-portals"),
            ("allowed-monitor", "allowed-monitors"),
            ("alowed-paths", "allowed-paths"),
        ] {
            assert_eq!(misspelt_reserved_key(typo), Some(meant), "{typo}");
        }
    }

    #[test]
    fn ordinary_parameters_are_not_misspellings() {
        for key in [
            "zone",
            "tags",
            "export",
            "use-nfs-server",
            "base-path",
            "on-delete",
            "pool",
            "size-gb",
            "arg",
            "mode",
            "server",
            "volume-group",
            "nfs-server",
            "nfs-export",
            "export-root",
            "nfs-servers",
            "csi-driver",
            "portal",
            "monitors",
        ] {
            assert_eq!(misspelt_reserved_key(key), None, "{key}");
        }
        for (key, _, _) in RESERVED_KEYS {
            assert_eq!(misspelt_reserved_key(key), None);
        }
    }

    #[test]
    fn secrets_are_recognised() {
        assert!(looks_like_secret("service-token", "23092390532lksf90kwelklfw").is_some());
        assert!(looks_like_secret("password", "x").is_some());
        assert!(looks_like_secret("array-api-key", "x").is_some());
        assert!(looks_like_secret("chap-secret", "x").is_some());
        assert!(looks_like_secret("authtoken", "x").is_some());
        assert!(
            looks_like_secret(
                "cert",
                "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----"
            )
            .is_some()
        );
        assert!(
            looks_like_secret("auth", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl")
                .is_some()
        );
        assert!(looks_like_secret("zone", "west").is_none());
        assert!(looks_like_secret("use-nfs-server", "10.10.2.4").is_none());
        assert!(looks_like_secret("token-bucket-size", "10").is_none());
        assert!(looks_like_secret("export", "/exports/{{claim.name}}").is_none());
    }
}
