//! Every rule of the declarations, each with its abuse: what a compromised or buggy image
//! could report (issue 27 reproduced `local: /` on the shipped hostpath class).

use std::collections::BTreeSet;

use serde_json::json;

use super::*;
use crate::config::sources::NOT_FROM_A_REPORT;
use crate::config::{Problem, Severity, Verdict, parse_config_map};

const BASE: &str = "/var/lib/flex-provisioner/volumes";

fn all_types() -> BTreeSet<String> {
    crate::config::sources::PV_SOURCE_TYPES
        .iter()
        .map(|t| (*t).to_owned())
        .collect()
}

/// Declarations as a ConfigMap would hold them, in config namespace `cfg`.
fn declared(keys: &[(&str, &str)]) -> AllowedVolumes {
    let mut a = AllowedVolumes::none("cfg");
    for (k, v) in keys {
        a.read(k, v).unwrap();
    }
    a
}

fn full() -> AllowedVolumes {
    declared(&[
        (ALLOWED_PATHS, "/var/lib/x, /srv/volumes/"),
        (ALLOWED_NFS_SERVERS, "nfs.example.com, 10.0.0.5"),
        (ALLOWED_NFS_PATHS, "/exports/k8s"),
        (ALLOWED_CSI_DRIVERS, "ebs.csi.aws.com"),
        (ALLOWED_PORTALS, "10.0.0.7:3260, 10.0.0.8:3260"),
        (ALLOWED_MONITORS, "10.0.1.1:6789, 10.0.1.2:6789"),
    ])
}

fn check(allowed: &AllowedVolumes, report: serde_json::Value) -> Result<(), String> {
    check_report(&report.to_string(), &all_types(), allowed)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn refused(allowed: &AllowedVolumes, report: serde_json::Value, says: &str) {
    match check(allowed, report.clone()) {
        Ok(()) => panic!("{report} was accepted"),
        Err(e) => assert!(e.contains(says), "{report}: {e}\n  does not say: {says}"),
    }
}

#[test]
fn paths_lie_strictly_below_a_prefix() {
    let a = full();
    for path in ["/var/lib/x/a", "/var/lib/x/team/pvc-1", "/srv/volumes/v"] {
        assert_eq!(
            check(&a, json!({"local": {"path": path}})),
            Ok(()),
            "{path}"
        );
        assert_eq!(
            check(&a, json!({"hostPath": {"path": path, "type": "Directory"}})),
            Ok(()),
            "{path}"
        );
    }
    // The issue's report, and every way out of the prefix.
    refused(
        &a,
        json!({"local": {"path": "/"}}),
        "it reported local path /, which is not below allowed-paths (/var/lib/x, /srv/volumes): a volume lies strictly below a prefix, never at it or above it",
    );
    refused(
        &a,
        json!({"hostPath": {"path": "/etc"}}),
        "it reported hostPath path /etc, which is not below allowed-paths (/var/lib/x, /srv/volumes)",
    );
    for sneaky in [
        "/var/lib/x/../../etc",
        "/var/lib/x/a/..",
        "/var/lib/x/./a",
        "/var/lib/x//a",
        "/var/lib/x/a/",
        "var/lib/x/a",
        "",
        "/var/lib/x/a\n",
    ] {
        refused(
            &a,
            json!({"local": {"path": sneaky}}),
            "a path that is not absolute or has a `.`, `..` or empty segment is never below a prefix",
        );
    }
    // The prefix itself, a parent of it, and a sibling sharing its text.
    for (path, why) in [
        ("/var/lib/x", "never at it or above it"),
        ("/var/lib", "never at it or above it"),
        ("/var/lib/x-evil/a", "which is not below allowed-paths"),
        ("/var/lib/xa", "which is not below allowed-paths"),
    ] {
        refused(&a, json!({"local": {"path": path}}), why);
    }
    assert!(!is_below("/var/lib/x-evil", "/var/lib/x"));
    assert!(is_below("/var/lib/x/evil", "/var/lib/x"));
    refused(&a, json!({"local": {}}), "it reported local without path");
    refused(
        &a,
        json!({"local": {"path": 7}}),
        "it reported local path that is not a string",
    );
}

#[test]
fn a_path_type_without_a_declaration_is_refused() {
    let none = AllowedVolumes::none("cfg");
    refused(
        &none,
        json!({"local": {"path": "/var/lib/x/a"}}),
        "it reported a volume of type local, and this class declares no allowed-paths: an admin lists the directories below which the image's volumes lie in allowed-paths",
    );
    for (kind, key) in [
        ("hostPath", ALLOWED_PATHS),
        ("nfs", ALLOWED_NFS_SERVERS),
        ("csi", ALLOWED_CSI_DRIVERS),
        ("iscsi", ALLOWED_PORTALS),
        ("rbd", ALLOWED_MONITORS),
        ("cephfs", ALLOWED_MONITORS),
    ] {
        refused(&none, json!({ kind: {} }), &format!("declares no {key}"));
    }
    // Servers without paths: still refused, naming the missing key.
    let servers_only = declared(&[(ALLOWED_NFS_SERVERS, "10.0.0.5")]);
    refused(
        &servers_only,
        json!({"nfs": {"server": "10.0.0.5", "path": "/exports/k8s/a"}}),
        "declares no allowed-nfs-paths",
    );
    // Types without a declaration of their own pass on the secret rule alone.
    assert_eq!(
        check(
            &none,
            json!({"awsElasticBlockStore": {"volumeID": "vol-1"}})
        ),
        Ok(())
    );
}

#[test]
fn base_path_is_the_default_prefix_when_it_is_a_plain_path() {
    let mut a = AllowedVolumes::none("cfg");
    a.default_paths_from(Some(BASE));
    assert!(a.paths_from_base_path);
    assert_eq!(
        check(&a, json!({"local": {"path": format!("{BASE}/ns/pvc-1")}})),
        Ok(())
    );
    refused(
        &a,
        json!({"local": {"path": "/"}}),
        &format!(
            "it reported local path /, which is not below allowed-paths ({BASE}, the base-path parameter, as allowed-paths is unset)"
        ),
    );
    // A declared allowed-paths wins over base-path.
    let mut own = declared(&[(ALLOWED_PATHS, "/srv")]);
    own.default_paths_from(Some(BASE));
    assert_eq!(own.paths.as_deref(), Some(&["/srv".to_owned()][..]));
    assert!(!own.paths_from_base_path);
    // A templated or unusable base-path is no default.
    for base in ["/var/{{claim.namespace}}", "relative", "/", "/a/../b", ""] {
        let mut a = AllowedVolumes::none("cfg");
        a.default_paths_from(Some(base));
        assert_eq!(a.paths, None, "{base}");
    }
}

#[test]
fn nfs_servers_as_written_and_paths_below_the_exports() {
    let a = full();
    for (server, path) in [
        ("nfs.example.com", "/exports/k8s/team/pvc-1"),
        ("10.0.0.5", "/exports/k8s/v"),
    ] {
        assert_eq!(
            check(&a, json!({"nfs": {"server": server, "path": path}})),
            Ok(())
        );
    }
    refused(
        &a,
        json!({"nfs": {"server": "evil.example.com", "path": "/exports/k8s/v"}}),
        "it reported nfs server evil.example.com, which is not in allowed-nfs-servers (nfs.example.com, 10.0.0.5)",
    );
    // Compared as written: another spelling of an allowed server is another server.
    refused(
        &a,
        json!({"nfs": {"server": "NFS.example.com", "path": "/exports/k8s/v"}}),
        "not in allowed-nfs-servers",
    );
    for path in [
        "/exports",
        "/exports/k8s",
        "/exports/k8s-other/v",
        "/exports/k8s/../other",
        "/",
    ] {
        refused(
            &a,
            json!({"nfs": {"server": "10.0.0.5", "path": path}}),
            "which is not below allowed-nfs-paths (/exports/k8s)",
        );
    }
    refused(
        &a,
        json!({"nfs": {"path": "/exports/k8s/v"}}),
        "it reported nfs without server",
    );
}

#[test]
fn csi_drivers_are_listed() {
    let a = full();
    assert_eq!(
        check(
            &a,
            json!({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}})
        ),
        Ok(())
    );
    refused(
        &a,
        json!({"csi": {"driver": "other.csi.example.com", "volumeHandle": "vol-1"}}),
        "it reported csi driver other.csi.example.com, which is not in allowed-csi-drivers (ebs.csi.aws.com)",
    );
}

#[test]
fn secret_references_name_the_config_namespace() {
    let a = full();
    let csi = |field: &str, reference: serde_json::Value| json!({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "v", field: reference}});
    for field in [
        "nodePublishSecretRef",
        "nodeStageSecretRef",
        "controllerPublishSecretRef",
        "controllerExpandSecretRef",
        "nodeExpandSecretRef",
    ] {
        assert_eq!(
            check(&a, csi(field, json!({"name": "s", "namespace": "cfg"}))),
            Ok(())
        );
        refused(
            &a,
            csi(field, json!({"name": "admin", "namespace": "kube-system"})),
            &format!(
                "it reported csi {field} in namespace kube-system; a secret reference in a report must name the config namespace cfg"
            ),
        );
        refused(
            &a,
            csi(field, json!({"name": "s"})),
            &format!(
                "it reported csi {field} without a namespace; a secret reference in a report must name the config namespace cfg"
            ),
        );
        refused(
            &a,
            csi(field, json!({"name": "s", "namespace": ""})),
            "without a namespace",
        );
        refused(&a, csi(field, json!("s")), "that is not an object");
    }
    // A null reference is no reference.
    assert_eq!(check(&a, csi("nodeStageSecretRef", json!(null))), Ok(()));
    // secretRef in every source that has one, whatever else the source is.
    let other = json!({"name": "s", "namespace": "tenant-b"});
    for report in [
        json!({"iscsi": {"targetPortal": "10.0.0.7:3260", "iqn": "iqn.x", "lun": 0, "secretRef": other}}),
        json!({"rbd": {"monitors": ["10.0.1.1:6789"], "image": "i", "secretRef": other}}),
        json!({"cephfs": {"monitors": ["10.0.1.1:6789"], "secretRef": other}}),
        json!({"cinder": {"volumeID": "v", "secretRef": other}}),
        json!({"flexVolume": {"driver": "x/y", "secretRef": other}}),
        json!({"scaleIO": {"gateway": "g", "system": "s", "secretRef": other}}),
        json!({"storageos": {"volumeName": "v", "secretRef": other}}),
    ] {
        refused(&a, report, "secretRef in namespace tenant-b");
    }
    assert_eq!(
        check(
            &a,
            json!({"cinder": {"volumeID": "v", "secretRef": {"name": "s", "namespace": "cfg"}}})
        ),
        Ok(())
    );
    // azureFile names its Secret's namespace in a field of its own; unset, it would be the
    // pod's namespace, which the image did not choose.
    assert_eq!(
        check(
            &a,
            json!({"azureFile": {"secretName": "s", "shareName": "x", "secretNamespace": "cfg"}})
        ),
        Ok(())
    );
    refused(
        &a,
        json!({"azureFile": {"secretName": "s", "shareName": "x", "secretNamespace": "kube-system"}}),
        "it reported azureFile secretNamespace in namespace kube-system",
    );
    refused(
        &a,
        json!({"azureFile": {"secretName": "s", "shareName": "x"}}),
        "it reported azureFile without secretNamespace",
    );
    // A keyring on the node is a credential the report may not pick.
    refused(
        &a,
        json!({"rbd": {"monitors": ["10.0.1.1:6789"], "image": "i", "keyring": "/etc/ceph/ceph.client.admin.keyring"}}),
        "it reported rbd keyring /etc/ceph/ceph.client.admin.keyring, a credential file on the node",
    );
    refused(
        &a,
        json!({"cephfs": {"monitors": ["10.0.1.1:6789"], "secretFile": "/etc/ceph/admin.secret"}}),
        "it reported cephfs secretFile /etc/ceph/admin.secret",
    );
}

#[test]
fn portals_and_monitors_are_listed() {
    let a = full();
    assert_eq!(
        check(
            &a,
            json!({"iscsi": {"targetPortal": "10.0.0.7:3260", "portals": ["10.0.0.8:3260"], "iqn": "iqn.x", "lun": 0}})
        ),
        Ok(())
    );
    refused(
        &a,
        json!({"iscsi": {"targetPortal": "10.6.6.6:3260", "iqn": "iqn.x", "lun": 0}}),
        "it reported iscsi portal 10.6.6.6:3260, which is not in allowed-portals (10.0.0.7:3260, 10.0.0.8:3260)",
    );
    refused(
        &a,
        json!({"iscsi": {"targetPortal": "10.0.0.7:3260", "portals": ["10.0.0.8:3260", "10.6.6.6"], "iqn": "iqn.x", "lun": 0}}),
        "it reported iscsi portal 10.6.6.6, which is not in allowed-portals",
    );
    refused(
        &a,
        json!({"iscsi": {"iqn": "iqn.x", "lun": 0}}),
        "it reported iscsi without targetPortal",
    );
    for kind in ["rbd", "cephfs"] {
        assert_eq!(
            check(
                &a,
                json!({ kind: {"monitors": ["10.0.1.1:6789", "10.0.1.2:6789"], "image": "i"}})
            ),
            Ok(())
        );
        refused(
            &a,
            json!({ kind: {"monitors": ["10.0.1.1:6789", "10.6.6.6:6789"], "image": "i"}}),
            &format!(
                "it reported {kind} monitor 10.6.6.6:6789, which is not in allowed-monitors (10.0.1.1:6789, 10.0.1.2:6789)"
            ),
        );
        refused(
            &a,
            json!({ kind: {"monitors": [], "image": "i"}}),
            "without monitors",
        );
        refused(
            &a,
            json!({ kind: {"monitors": "10.0.1.1:6789"}}),
            "monitors that is not a list",
        );
    }
}

#[test]
fn odd_values_are_shown_quoted_and_cut_short() {
    let a = full();
    let long = format!("/etc/{}", "a".repeat(1000));
    let e = check(&a, json!({"hostPath": {"path": long}})).unwrap_err();
    assert!(e.len() < 700, "{e}");
    assert!(e.contains('…'), "{e}");
    let e = check(&a, json!({"hostPath": {"path": "/etc\nsecond line"}})).unwrap_err();
    assert!(e.contains(r#""/etc\nsecond line""#), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn declarations_are_read_and_refused_like_other_values() {
    assert_eq!(
        path_prefixes("[/a/b, \"/c/\"]").unwrap(),
        ["/a/b".to_owned(), "/c".to_owned()]
    );
    assert_eq!(path_prefixes("/a, /a").unwrap(), ["/a".to_owned()]);
    for (bad, says) in [
        ("/", "`/` would admit every directory"),
        ("relative/dir", "not a plain absolute path"),
        ("/a/../b", "not a plain absolute path"),
        ("/a//b", "not a plain absolute path"),
        ("/a/./b", "not a plain absolute path"),
        ("/v/{{claim.namespace}}", "not as a template"),
        (" , ", "lists nothing"),
    ] {
        assert!(
            path_prefixes(bad).unwrap_err().contains(says),
            "{bad}: {:?}",
            path_prefixes(bad)
        );
    }
    let huge = vec!["/a".repeat(50); 100].join(",");
    assert!(path_prefixes(&huge).unwrap_err().contains("at most 4096"));
    assert_eq!(
        hosts("nfs.example.com, 10.0.0.5:2049, [fd00::1]:6789").unwrap(),
        ["nfs.example.com", "10.0.0.5:2049", "[fd00::1]:6789"]
    );
    for bad in ["nfs example", "a/b", "a;b", "\u{7}"] {
        assert!(hosts(bad).is_err(), "{bad}");
    }
    assert_eq!(
        csi_drivers("ebs.csi.aws.com, Disk.CSI.example-1").unwrap(),
        ["ebs.csi.aws.com", "Disk.CSI.example-1"]
    );
    for bad in ["-x", "x-", "a/b", &"a".repeat(64)] {
        assert!(csi_drivers(bad).is_err(), "{bad}");
    }
}

fn config_map(data: serde_json::Value) -> k8s_openapi::api::core::v1::ConfigMap {
    let mut all = json!({"image": "registry.example.com/prov:1.0"});
    json_merge(&mut all, data);
    serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "cfg",
                     "labels": {"type": "provisioner-config", "storage-class": "s"}},
        "data": all,
    }))
    .unwrap()
}

fn json_merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// The parsed declarations and every problem found.
fn parsed(data: serde_json::Value) -> (Option<AllowedVolumes>, Vec<Problem>) {
    match parse_config_map(&config_map(data), crate::names::DEFAULT_PROVISIONER_NAME) {
        Verdict::Checked { config, problems } => (config.map(|c| c.allowed_volumes), problems),
        Verdict::Ignored { reason } => panic!("{reason}"),
    }
}

fn warned(problems: &[Problem], key: &str) -> Option<String> {
    problems
        .iter()
        .find(|p| p.severity == Severity::Warning && p.key.as_deref() == Some(key))
        .map(ToString::to_string)
}

#[test]
fn the_config_map_declares_and_check_warns_about_what_is_missing() {
    let (a, problems) = parsed(json!({
        "volume-sources": "nfs, local",
        "allowed-nfs-servers": "10.0.0.5",
        "allowed-nfs-paths": "/exports",
        "allowed-paths": "/srv/v",
    }));
    assert!(problems.is_empty(), "{problems:#?}");
    let a = a.unwrap();
    assert_eq!(a.secret_namespace, "cfg");
    assert_eq!(a.nfs_servers.as_deref(), Some(&["10.0.0.5".to_owned()][..]));
    // The shipped hostpath image's base-path stands for allowed-paths.
    let (a, problems) = parsed(json!({"volume-sources": "local", "base-path": BASE}));
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(a.unwrap().paths, Some(vec![BASE.to_owned()]));
    // A listed type without its declaration: a warning naming the key, not an error.
    let (a, problems) =
        parsed(json!({"volume-sources": "nfs,csi,local,hostPath,iscsi,rbd,cephfs"}));
    assert!(a.is_some(), "warnings do not block: {problems:#?}");
    assert!(problems.iter().all(|p| !p.is_error()), "{problems:#?}");
    for (key, says) in [
        (
            ALLOWED_PATHS,
            "volume-sources allows hostPath and local: every hostPath or local report is refused",
        ),
        (
            ALLOWED_NFS_SERVERS,
            "volume-sources allows nfs: every nfs report is refused",
        ),
        (ALLOWED_NFS_PATHS, "every nfs report is refused"),
        (ALLOWED_CSI_DRIVERS, "every csi report is refused"),
        (ALLOWED_PORTALS, "every iscsi report is refused"),
        (ALLOWED_MONITORS, "volume-sources allows cephfs and rbd"),
    ] {
        let w =
            warned(&problems, key).unwrap_or_else(|| panic!("no warning for {key}: {problems:#?}"));
        assert!(w.contains(says), "{w}");
        assert!(w.contains(&format!("fix: add `{key}` listing")), "{w}");
    }
    assert_eq!(problems.len(), 6, "{problems:#?}");
    // A templated base-path is no default, and the warning says why.
    let (_, problems) =
        parsed(json!({"volume-sources": "local", "base-path": "/v/{{claim.namespace}}"}));
    let w = warned(&problems, ALLOWED_PATHS).unwrap();
    assert!(
        w.contains("is a template or not a plain absolute path"),
        "{w}"
    );
    // A class that does not list its types is not warned: the refusal names the key.
    let (_, problems) = parsed(json!({}));
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_declaration_nothing_reads_is_a_warning_and_a_bad_one_an_error() {
    let (_, problems) = parsed(json!({"volume-sources": "nfs", "allowed-paths": "/srv",
        "allowed-nfs-servers": "a", "allowed-nfs-paths": "/e"}));
    let w = warned(&problems, ALLOWED_PATHS).unwrap();
    assert!(
        w.contains("volume-sources allows none of hostPath, local"),
        "{w}"
    );
    assert_eq!(problems.len(), 1, "{problems:#?}");
    // Image mode: the image creates the PV, the controller reads no report.
    let (_, problems) = parsed(json!({"pv-creator": "image", "volume-sources": "local",
        "allowed-paths": "/dev/vg"}));
    let w = warned(&problems, ALLOWED_PATHS).unwrap();
    assert!(w.contains("is not read with pv-creator: image"), "{w}");
    assert!(w.contains("flex-provisioner-image-volumes"), "{w}");
    let (_, problems) = parsed(json!({"pv-creator": "image", "volume-sources": "local"}));
    assert!(problems.is_empty(), "{problems:#?}");
    // A malformed value is an error naming the key and what it is for.
    let (a, problems) = parsed(json!({"allowed-paths": "/"}));
    assert!(a.is_none());
    let e = problems.iter().find(|p| p.is_error()).unwrap().to_string();
    assert!(
        e.starts_with("error: key `allowed-paths`: `/` would admit every directory"),
        "{e}"
    );
    assert!(
        e.contains("fix: `allowed-paths` is comma-separated directories"),
        "{e}"
    );
    // A misspelt key is caught rather than becoming a parameter.
    let (a, problems) = parsed(json!({"allowed-path": "/srv"}));
    assert!(a.is_none());
    assert!(
        problems[0]
            .what
            .contains("misspelling of the reserved key `allowed-paths`"),
        "{problems:#?}"
    );
}

#[test]
fn what_a_class_accepts_is_described() {
    let sources = BTreeSet::from(["fc".to_owned(), "local".to_owned(), "nfs".to_owned()]);
    let mut a = declared(&[(ALLOWED_NFS_SERVERS, "10.0.0.5")]);
    a.default_paths_from(Some(BASE));
    let lines = a.describe(PvCreator::Controller, &sources);
    assert_eq!(
        lines,
        [
            "the image's report: exactly one volume source, of a type in volume-sources (fc, local, nfs); the rest of the PV comes from the template above".to_owned(),
            format!("local: path strictly below allowed-paths ({BASE}, the base-path parameter, as allowed-paths is unset)"),
            "nfs: server in allowed-nfs-servers (10.0.0.5); allowed-nfs-paths is not set, so every nfs report is refused".to_owned(),
            "fc: no allowed-* key applies; accepted as reported, secret references aside".to_owned(),
            "secret references (secretRef, csi *SecretRef, azureFile secretNamespace): only in namespace cfg, the config namespace".to_owned(),
        ]
    );
    let lines = a.describe(PvCreator::Image, &sources);
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("pv-creator: image"), "{lines:?}");
}

#[test]
fn the_declarations_travel_as_json_and_only_declared_ones_count_as_inputs() {
    let mut a = full();
    let text = serde_json::to_string(&a).unwrap();
    assert_eq!(serde_json::from_str::<AllowedVolumes>(&text).unwrap(), a);
    assert!(a.declared().is_some());
    let mut base_only = AllowedVolumes::none("cfg");
    base_only.default_paths_from(Some(BASE));
    assert_eq!(base_only.declared(), None);
    assert_eq!(AllowedVolumes::none("cfg").declared(), None);
    a.secret_namespace = "other".into();
    assert_eq!(a.declared(), full().declared());
}

/// With `volume-base`, a report names the claim's directory and nothing else: not a link
/// planted below the base (`base/x -> /`), not another claim's directory, not another type
/// or server; each refusal names `volume-directory` and what was expected.
#[test]
fn an_exact_volume_accepts_only_the_claims_own_directory() {
    let own = format!("{BASE}/team-a/data-1");
    let exact = full().with_exact(Some(ExactVolume::Path(own.clone())));
    let types = all_types();
    for kind in ["local", "hostPath"] {
        let ok = json!({ kind: {"path": own} }).to_string();
        assert!(check_report(&ok, &types, &exact).is_ok(), "{kind}");
    }
    for (report, shows) in [
        (json!({"local": {"path": format!("{BASE}/x")}}), "/x"),
        (
            json!({"local": {"path": format!("{BASE}/team-b/data-2")}}),
            "team-b",
        ),
        (json!({"hostPath": {"path": format!("{own}/..")}}), "/.."),
        (json!({"local": {"path": format!("{own}/sub")}}), "/sub"),
        (json!({"local": {"path": "/"}}), "/"),
        (
            json!({"nfs": {"server": "10.0.0.5", "path": "/exports/k8s/a"}}),
            "10.0.0.5",
        ),
    ] {
        let why = check_report(&report.to_string(), &types, &exact)
            .expect_err(&report.to_string())
            .to_string();
        assert!(why.contains("volume-directory"), "{why}");
        assert!(why.contains(&own), "{why}");
        assert!(why.contains(shows), "{why}");
    }
    let nfs = full().with_exact(Some(ExactVolume::Nfs {
        server: "10.0.0.5".into(),
        path: "/exports/k8s/a".into(),
    }));
    let ok = json!({"nfs": {"server": "10.0.0.5", "path": "/exports/k8s/a"}});
    assert!(check_report(&ok.to_string(), &types, &nfs).is_ok());
    for bad in [
        json!({"nfs": {"server": "nfs.example.com", "path": "/exports/k8s/a"}}),
        json!({"nfs": {"server": "10.0.0.5", "path": "/exports/k8s/b"}}),
        json!({"local": {"path": "/exports/k8s/a"}}),
    ] {
        assert!(
            check_report(&bad.to_string(), &types, &nfs).is_err(),
            "{bad}"
        );
    }
    // Secret references are still checked.
    let secret = json!({"nfs": {"server": "10.0.0.5", "path": "/exports/k8s/a",
                                "secretRef": {"name": "s", "namespace": "kube-system"}}});
    assert!(check_report(&secret.to_string(), &types, &nfs).is_err());
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
