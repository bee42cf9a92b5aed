//! Field validation of PersistentVolumes and PersistentVolumeClaims as kube-apiserver does it
//! (pkg/apis/core/validation and pkg/volume/validation): the same rules, field paths, wording
//! and order, so a client gets the 422 a real cluster would send. What is left out is listed
//! at the end of this comment; everything else a client writes passes.
//!
//! Shape of the answer: the real server collects every field error, reports each as a cause,
//! and writes the message from the distinct ones only (`ErrorList.ToAggregate`). On update the
//! create rules run twice (once from the strategy, once inside the update validation), so the
//! causes hold them twice while the message shows them once; that is kept here.
//!
//! Not checked (a real server would): label-selector syntax in a claim's `selector`,
//! node-selector key syntax in `nodeAffinity`, the per-source fields of the rarer volume
//! types (only hostPath, local, nfs, iscsi and csi are looked into; the others are only
//! counted), and PV `nodeAffinity` immutability. The PersistentVolumeClaimResize admission
//! plugin, which needs the StorageClass, is in `crate::claim_resize`.
//! Update messages leave out the `cmp.Diff` the real server appends after "immutable after
//! creation": it prints Go's internal structs, which a JSON server cannot reproduce.

mod claim;
mod claim_status;
mod data_source;
mod errors;
mod quantity;
mod volume;

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::resources::Resource;
use crate::status::{ApiError, ApiResult, Cause};

use claim::*;
use claim_status::*;
pub use data_source::shape_claim_data_sources;
use data_source::*;
use errors::*;
pub use quantity::check_decodable;
use quantity::*;
use volume::*;

pub(super) const MOUNT_OPTIONS_ANNOTATION: &str = "volume.beta.kubernetes.io/mount-options";
pub(super) const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

pub(super) const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
pub(super) const RECLAIM_POLICIES: [&str; 3] = ["Delete", "Recycle", "Retain"];
pub(super) const VOLUME_MODES: [&str; 2] = ["Block", "Filesystem"];
pub(super) const HOST_PATH_TYPES: [&str; 8] = [
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];

/// The PersistentVolumeSource fields in the order the real validation visits them:
/// (JSON field, name used in the field path of the "more than 1 volume type" error).
pub(super) const PV_SOURCES: [(&str, &str); 22] = [
    ("hostPath", "hostPath"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("nfs", "nfs"),
    ("rbd", "rbd"),
    ("quobyte", "quobyte"),
    ("cephfs", "cephFS"),
    ("iscsi", "iscsi"),
    ("cinder", "cinder"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("scaleIO", "scaleIO"),
    ("local", "local"),
    ("storageos", "storageos"),
    ("csi", "csi"),
];

/// Volume types whose PVs may carry the mount-options annotation; any other type (hostPath,
/// local, csi, fc, flexVolume, ...) is refused. `spec.mountOptions` itself is not validated
/// by the real server for any type.
pub(super) const MOUNT_OPTION_TYPES: [&str; 13] = [
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "nfs",
    "rbd",
    "quobyte",
    "iscsi",
    "cinder",
    "cephfs",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "photonPersistentDisk",
];

// ---------------------------------------------------------------------------------------
// Entry points, called by admission after defaulting.

/// Validation of a new PersistentVolume or PersistentVolumeClaim.
pub fn validate_create(r: &Resource, name: &str, obj: &Value) -> ApiResult<()> {
    match (r.group, r.plural) {
        ("", "persistentvolumes") => {
            let mut errs = pv_errors(name, obj);
            errs.extend(pv_mount_option_errors(obj));
            finish(r, name, errs)
        }
        ("", "persistentvolumeclaims") => finish(r, name, pvc_errors(obj, false)),
        _ => Ok(()),
    }
}

/// A claim's requested storage in nano-units (absent or unreadable: zero), as the
/// admission plugins compare requests.
pub fn requested_storage(obj: &Value) -> i128 {
    obj.get("spec")
        .and_then(storage_request)
        .map_or(0, |q| q.nanos)
}

/// Validation of a write to an existing PersistentVolume or PersistentVolumeClaim;
/// `status` says it came through the status subresource.
///
/// A status write leaves the spec as stored, and the real server validates neither the
/// spec nor the volume's annotations then. A claim's status write has rules of its own. A
/// main write that leaves the spec as it is stands for the same: the spec was valid when
/// stored, and only the annotation rules (which look at metadata) are applied, when the
/// annotation changed.
pub fn validate_update(
    r: &Resource,
    name: &str,
    old: &Value,
    new: &Value,
    status: bool,
) -> ApiResult<()> {
    let spec_changed = old.get("spec") != new.get("spec");
    if status && (r.group, r.plural) == ("", "persistentvolumeclaims") {
        return finish(r, name, pvc_status_errors(new));
    }
    match (r.group, r.plural) {
        ("", "persistentvolumes") => {
            if !spec_changed {
                let changed = annotation(old, MOUNT_OPTIONS_ANNOTATION)
                    != annotation(new, MOUNT_OPTIONS_ANNOTATION);
                let errs = if changed {
                    pv_mount_option_errors(new)
                } else {
                    Errs::default()
                };
                return finish(r, name, errs);
            }
            // The strategy validates the new object, then ValidatePersistentVolumeUpdate
            // validates it again before the update rules.
            let mut errs = pv_errors(name, new);
            errs.extend(pv_mount_option_errors(new));
            errs.extend(pv_errors(name, new));
            errs.extend(pv_update_errors(old, new));
            finish(r, name, errs)
        }
        ("", "persistentvolumeclaims") => {
            if !spec_changed {
                let mut errs = Errs::default();
                let (o, n) = (
                    annotation(old, BETA_STORAGE_CLASS_ANNOTATION),
                    annotation(new, BETA_STORAGE_CLASS_ANNOTATION),
                );
                if o != n {
                    errs.invalid(
                        format!("metadata.annotations.{BETA_STORAGE_CLASS_ANNOTATION}"),
                        Bad::Str(n.unwrap_or_default().to_owned()),
                        "field is immutable",
                    );
                }
                return finish(r, name, errs);
            }
            // As for volumes: the claim rules run twice, then the update rules.
            let any_group = allows_any_group(old);
            let mut errs = pvc_errors(new, any_group);
            errs.extend(pvc_errors(new, any_group));
            errs.extend(pvc_update_errors(old, new));
            finish(r, name, errs)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn quantities_parse_and_print_like_resource_quantity() {
        assert_eq!(q("1Gi").nanos, (1i128 << 30) * NANO);
        assert_eq!(q("1.5Gi").nanos, 3 * (1i128 << 29) * NANO);
        assert_eq!(q("100m").nanos, 100_000_000);
        assert_eq!(q("1e3").nanos, 1000 * NANO);
        assert!([q("0"), q("0Gi"), q("-0")].iter().all(|z| z.nanos == 0));
        assert_eq!(q("0Gi").canonical(), "0");
        assert_eq!(q("-1Gi").canonical(), "-1Gi");
        assert_eq!(q("-1000").canonical(), "-1k");
        assert_eq!(q("-1500").canonical(), "-1500");
        assert_eq!(q("-0.5").canonical(), "-500m");
        assert_eq!(q("-1e3").canonical(), "-1e3");
        assert_eq!(q("-1Gi").value(), -(1 << 30));
        assert_eq!(Quantity::parse("abc").unwrap_err(), QUANTITY_FORMAT_ERROR);
        assert_eq!(Quantity::parse("1GB").unwrap_err(), QUANTITY_FORMAT_ERROR);
        assert_eq!(Quantity::parse("1KG").unwrap_err(), QUANTITY_SUFFIX_ERROR);
        assert_eq!(Quantity::parse("").unwrap_err(), QUANTITY_FORMAT_ERROR);
        assert_eq!(Quantity::parse("1.2.3").unwrap_err(), QUANTITY_FORMAT_ERROR);
    }

    #[test]
    fn resource_lists_print_like_go() {
        assert_eq!(go_resource_list(None), "core.ResourceList(nil)");
        assert_eq!(go_resource_list(Some(&json!({}))), "core.ResourceList{}");
        assert_eq!(
            go_resource_list(Some(&json!({"cpu": "1"}))),
            "core.ResourceList{\"cpu\":resource.Quantity{i:resource.int64Amount{value:1, scale:0}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:\"1\", Format:\"DecimalSI\"}}"
        );
    }

    #[test]
    fn iscsi_names() {
        assert!(iscsi_name_ok("iqn.2001-04.com.example:storage"));
        assert!(!iscsi_name_ok("iqn.2001-04.com.example"));
        assert!(iscsi_name_ok("eui.02004567A425678D"));
        assert!(!iscsi_name_ok("eui.0200"));
        assert!(iscsi_name_ok("naa.52004567BA64678D52004567BA64678D"));
    }

    #[test]
    fn root_paths() {
        assert!(cleans_to_root("/"));
        assert!(cleans_to_root("//./"));
        assert!(cleans_to_root("/a/.."));
        assert!(!cleans_to_root("/a"));
        assert!(!cleans_to_root("a/.."));
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    }
}
