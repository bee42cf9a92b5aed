//! PersistentVolume rules (create and update), and the checks both kinds share.

use super::*;

// ---------------------------------------------------------------------------------------
// Shared pieces of both kinds.

pub(super) fn access_modes(errs: &mut Errs, spec: &Value, required_detail: &str) {
    let modes = list(spec, "accessModes");
    if modes.is_empty() {
        errs.required("spec.accessModes", required_detail);
    }
    let (mut rwop, mut other) = (false, false);
    for m in &modes {
        let s = m.as_str().unwrap_or_default();
        if !ACCESS_MODES.contains(&s) || !m.is_string() {
            errs.not_supported("spec.accessModes", bad_of(m), &ACCESS_MODES);
        }
        if s == "ReadWriteOncePod" {
            rwop = true;
        } else if ACCESS_MODES.contains(&s) {
            other = true;
        }
    }
    if rwop && other {
        errs.forbidden(
            "spec.accessModes",
            "may not use ReadWriteOncePod with other access modes",
        );
    }
}

pub(super) fn volume_mode(errs: &mut Errs, spec: &Value) {
    if let Some(m) = present(spec, "volumeMode")
        && !m.as_str().is_some_and(|s| VOLUME_MODES.contains(&s))
    {
        errs.not_supported("spec.volumeMode", bad_of(m), &VOLUME_MODES);
    }
}

/// validatePathNoBacksteps.
pub(super) fn no_backsteps(errs: &mut Errs, field: &str, path: &str) {
    if path.split('/').any(|p| p == "..") {
        errs.invalid(field, Bad::Str(path.to_owned()), "must not contain '..'");
    }
}

/// Go's path.Clean, for the one question asked of it: does an absolute path name `/`.
pub(super) fn cleans_to_root(p: &str) -> bool {
    if !p.starts_with('/') {
        return false;
    }
    let mut depth: usize = 0;
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => depth = depth.saturating_sub(1),
            _ => depth += 1,
        }
    }
    depth == 0
}

// ---------------------------------------------------------------------------------------
// PersistentVolume.

pub(super) fn node_affinity(errs: &mut Errs, na: &Value) {
    let Some(required) = present(na, "required") else {
        errs.required(
            "spec.nodeAffinity.required",
            "must specify required node constraints",
        );
        return;
    };
    let terms = list(required, "nodeSelectorTerms");
    let terms_path = "spec.nodeAffinity.required.nodeSelectorTerms";
    if terms.is_empty() {
        errs.required(terms_path, "must have at least one node selector term");
        return;
    }
    for (i, term) in terms.iter().enumerate() {
        for (j, rq) in list(term, "matchExpressions").iter().enumerate() {
            let path = format!("{terms_path}[{i}].matchExpressions[{j}]");
            let values = list(rq, "values").len();
            match text(rq, "operator") {
                "In" | "NotIn" if values == 0 => errs.required(
                    format!("{path}.values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ),
                "Exists" | "DoesNotExist" if values > 0 => errs.forbidden(
                    format!("{path}.values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ),
                "Gt" | "Lt" if values != 1 => errs.required(
                    format!("{path}.values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                ),
                "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
                other => errs.invalid(
                    format!("{path}.operator"),
                    Bad::Str(other.to_owned()),
                    "not a valid selector operator",
                ),
            }
        }
    }
}

pub(super) fn host_path_source(errs: &mut Errs, src: &Value) {
    let path = text(src, "path");
    if path.is_empty() {
        errs.required("spec.hostPath.path", "");
        return;
    }
    no_backsteps(errs, "spec.hostPath.path", path);
    if let Some(t) = present(src, "type")
        && !t.as_str().is_some_and(|s| HOST_PATH_TYPES.contains(&s))
    {
        errs.not_supported("spec.hostPath.type", bad_of(t), &HOST_PATH_TYPES);
    }
}

pub(super) fn nfs_source(errs: &mut Errs, src: &Value) {
    if text(src, "server").is_empty() {
        errs.required("spec.nfs.server", "");
    }
    let path = text(src, "path");
    if path.is_empty() {
        errs.required("spec.nfs.path", "");
    }
    if !path.starts_with('/') {
        errs.invalid(
            "spec.nfs.path",
            Bad::Str(path.to_owned()),
            "must be an absolute path",
        );
    }
}

pub(super) fn local_source(errs: &mut Errs, src: &Value, affinity_given: bool) {
    let path = text(src, "path");
    if path.is_empty() {
        errs.required("spec.local.path", "");
    } else {
        no_backsteps(errs, "spec.local.path", path);
    }
    if !affinity_given {
        errs.required("spec.nodeAffinity", "Local volume requires node affinity");
    }
}

pub(super) fn secret_reference(errs: &mut Errs, path: &str, r: &Value) {
    let name = text(r, "name");
    if name.is_empty() {
        errs.required(format!("{path}.name"), "");
    } else {
        for msg in dns_subdomain_errors(name) {
            errs.invalid(format!("{path}.name"), Bad::Str(name.to_owned()), &msg);
        }
    }
    let ns = text(r, "namespace");
    if ns.is_empty() {
        errs.required(format!("{path}.namespace"), "");
    } else {
        for msg in dns_label_errors(ns) {
            errs.invalid(format!("{path}.namespace"), Bad::Str(ns.to_owned()), &msg);
        }
    }
}

pub(super) fn csi_source(errs: &mut Errs, src: &Value) {
    let driver = text(src, "driver");
    if driver.is_empty() {
        errs.required("spec.csi.driver", "");
    }
    if driver.len() > 63 {
        errs.too_long("spec.csi.driver", 63);
    }
    for msg in dns_subdomain_errors(&driver.to_lowercase()) {
        errs.invalid("spec.csi.driver", Bad::Str(driver.to_owned()), &msg);
    }
    if text(src, "volumeHandle").is_empty() {
        errs.required("spec.csi.volumeHandle", "");
    }
    for key in [
        "controllerPublishSecretRef",
        "controllerExpandSecretRef",
        "nodePublishSecretRef",
        "nodeExpandSecretRef",
    ] {
        if let Some(r) = present(src, key) {
            secret_reference(errs, &format!("spec.csi.{key}"), r);
        }
    }
}

/// The iSCSI qualified-name formats: `iqn.YYYY-MM.<authority>:<name>`, `eui.` and 16
/// alphanumerics, `naa.` and 32 alphanumerics.
pub(super) fn iscsi_name_ok(name: &str) -> bool {
    // `eui` or `naa`, any one character, then exactly n ASCII alphanumerics.
    let tail_ok = |n: usize| {
        let mut chars = name.chars().skip(3);
        chars.next().is_some() && {
            let rest: Vec<char> = chars.collect();
            rest.len() == n && rest.iter().all(char::is_ascii_alphanumeric)
        }
    };
    if name.starts_with("eui") {
        return tail_ok(16);
    }
    if name.starts_with("naa") {
        return tail_ok(32);
    }
    // The iqn pattern is not anchored at the start: any "iqn." may begin the match.
    name.match_indices("iqn.").any(|(i, _)| {
        let rest = &name.as_bytes()[i + 4..];
        if rest.len() < 8
            || !rest[..4].iter().all(u8::is_ascii_digit)
            || rest[4] != b'-'
            || !rest[5..7].iter().all(u8::is_ascii_digit)
            || rest[7] != b'.'
        {
            return false;
        }
        let rest = &name[i + 12..];
        let Some((head, tail)) = rest.split_once(':') else {
            return false;
        };
        !head.is_empty()
            && head
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            && !tail.is_empty()
            && !tail.contains([',', ';', '*', '&', '$', '|', ' ', '\t', '\n', '\r', '\u{c}'])
    })
}

pub(super) fn iscsi_name(errs: &mut Errs, field: &str, name: &str) {
    let known = ["iqn", "eui", "naa"].iter().any(|p| name.starts_with(p));
    if !known || !iscsi_name_ok(name) {
        errs.invalid(field, Bad::Str(name.to_owned()), "must be valid format");
    }
}

pub(super) fn iscsi_source(errs: &mut Errs, src: &Value, pv_name: &str) {
    let portal = text(src, "targetPortal");
    if portal.is_empty() {
        errs.required("spec.iscsi.targetPortal", "");
    }
    let initiator = present(src, "initiatorName").and_then(Value::as_str);
    if initiator.is_some() && pv_name.len() + 1 + portal.len() > 64 {
        errs.invalid(
            "spec.iscsi.targetportal",
            Bad::Str(portal.to_owned()),
            "Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified.",
        );
    }
    let iqn = text(src, "iqn");
    if iqn.is_empty() {
        errs.required("spec.iscsi.iqn", "");
    } else {
        iscsi_name(errs, "spec.iscsi.iqn", iqn);
    }
    let lun = src.get("lun").and_then(Value::as_i64).unwrap_or(0);
    if !(0..=255).contains(&lun) {
        errs.invalid(
            "spec.iscsi.lun",
            Bad::Int(lun),
            "must be between 0 and 255, inclusive",
        );
    }
    let chap = |k: &str| src.get(k).and_then(Value::as_bool).unwrap_or(false);
    let secret = present(src, "secretRef");
    if (chap("chapAuthDiscovery") || chap("chapAuthSession")) && secret.is_none() {
        errs.required("spec.iscsi.secretRef", "");
    }
    if let Some(s) = secret
        && text(s, "name").is_empty()
    {
        errs.required("spec.iscsi.secretRef.name", "");
    }
    if let Some(init) = initiator {
        iscsi_name(errs, "spec.iscsi.initiatorname", init);
    }
}

/// ValidatePersistentVolume (name aside, which admission checks first) and the volume
/// plugin check on the mount-options annotation.
pub(super) fn pv_errors(name: &str, obj: &Value) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    access_modes(&mut errs, spec, "");

    let capacity = present(spec, "capacity");
    let cap_map = capacity.and_then(Value::as_object);
    let cap_len = cap_map.map_or(0, Map::len);
    if cap_len == 0 {
        errs.required("spec.capacity", "");
    }
    if !cap_map.is_some_and(|m| m.contains_key("storage")) || cap_len > 1 {
        errs.not_supported(
            "spec.capacity",
            Bad::Raw(go_resource_list(capacity)),
            &["storage"],
        );
    }
    if let Some(m) = cap_map {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        for k in keys {
            let Some(q) = parse_quantity(&m[k.as_str()]) else {
                continue;
            };
            let field = format!("spec.capacity[{k}]");
            if q.value() < 0 {
                errs.invalid(
                    field.clone(),
                    Bad::Int(q.value()),
                    "must be a valid resource quantity",
                );
            }
            if q.nanos <= 0 {
                errs.invalid(field, Bad::Str(q.canonical()), "must be greater than zero");
            }
        }
    }

    let policy = present(spec, "persistentVolumeReclaimPolicy");
    if let Some(p) = policy
        && !p
            .as_str()
            .is_some_and(|s| s.is_empty() || RECLAIM_POLICIES.contains(&s))
    {
        errs.not_supported(
            "spec.persistentVolumeReclaimPolicy",
            bad_of(p),
            &RECLAIM_POLICIES,
        );
    }

    let affinity = present(spec, "nodeAffinity");
    if let Some(na) = affinity {
        node_affinity(&mut errs, na);
    }

    let mut count = 0;
    for (key, path_name) in PV_SOURCES {
        let Some(src) = present(spec, key) else {
            continue;
        };
        // The real code counts flexVolume without the "more than 1" check.
        if count > 0 && key != "flexVolume" {
            errs.forbidden(
                format!("spec.{path_name}"),
                "may not specify more than 1 volume type",
            );
            continue;
        }
        count += 1;
        match key {
            "hostPath" => host_path_source(&mut errs, src),
            "nfs" => nfs_source(&mut errs, src),
            "iscsi" => iscsi_source(&mut errs, src, name),
            "local" => local_source(&mut errs, src, affinity.is_some()),
            "csi" => csi_source(&mut errs, src),
            _ => {}
        }
    }
    if count == 0 {
        errs.required("spec", "must specify a volume type");
    }

    if let Some(hp) = present(spec, "hostPath")
        && cleans_to_root(text(hp, "path"))
        && policy.and_then(Value::as_str) == Some("Recycle")
    {
        errs.forbidden(
            "spec.persistentVolumeReclaimPolicy",
            "may not be 'recycle' for a hostPath mount of '/'",
        );
    }

    let class = text(spec, "storageClassName");
    if !class.is_empty() {
        class_name(&mut errs, "spec.storageClassName", class);
    }
    volume_mode(&mut errs, spec);
    if let Some(vac) = present(spec, "volumeAttributesClassName") {
        let vac = vac.as_str().unwrap_or_default();
        if vac.is_empty() {
            errs.required(
                "spec.volumeAttributesClassName",
                "an empty string is disallowed",
            );
        } else {
            class_name(&mut errs, "spec.volumeAttributesClassName", vac);
        }
        if present(spec, "csi").is_none() {
            errs.required(
                "spec.csi",
                "has to be specified when using volumeAttributesClassName",
            );
        }
    }
    errs
}

/// pkg/volume/validation: the mount-options annotation only on types that support it.
pub(super) fn pv_mount_option_errors(obj: &Value) -> Errs {
    let mut errs = Errs::default();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let supported = MOUNT_OPTION_TYPES
        .iter()
        .any(|k| present(&spec, k).is_some());
    let has = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MOUNT_OPTIONS_ANNOTATION));
    if !supported && has {
        errs.forbidden(
            format!("metadata.annotations.{MOUNT_OPTIONS_ANNOTATION}"),
            "may not specify mount options for this volume type",
        );
    }
    errs
}

pub(super) fn pv_source(spec: &Value) -> Value {
    let mut out = Map::new();
    for (key, _) in PV_SOURCES {
        if let Some(v) = spec.get(key).and_then(normalize) {
            out.insert(key.to_owned(), v);
        }
    }
    Value::Object(out)
}

pub(super) fn pv_update_errors(old: &Value, new: &Value) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let old_spec = old.get("spec").unwrap_or(&null);
    let new_spec = new.get("spec").unwrap_or(&null);
    let mut new_source = pv_source(new_spec);
    // A CSI volume may gain a controllerExpandSecretRef it did not have.
    if old_spec
        .pointer("/csi/controllerExpandSecretRef")
        .is_none_or(Value::is_null)
        && let Some(csi) = new_source.get_mut("csi").and_then(Value::as_object_mut)
    {
        csi.remove("controllerExpandSecretRef");
    }
    if new_source != pv_source(old_spec) {
        // The real message goes on with "\n" and a cmp.Diff of the internal Go structs.
        errs.forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation",
        );
    }
    immutable_volume_mode(&mut errs, old, new);
    let old_vac = present(old_spec, "volumeAttributesClassName");
    if old_vac.is_some() && present(new_spec, "volumeAttributesClassName").is_none() {
        errs.forbidden(
            "spec.volumeAttributesClassName",
            "update from non-nil value to nil is forbidden",
        );
    }
    errs
}
