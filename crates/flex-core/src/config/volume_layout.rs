//! The `volume-base` and `volume-directory` keys: a class whose volumes are directories of
//! one base (a node directory, an export) names the base's pod-template volume and each
//! claim's directory in it, so that the kubelet mounts only that directory
//! (isolation.rs), and reports are judged exactly.

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::problem::Problem;
use crate::isolation;
use crate::names::CONTAINER_NAME;

pub const VOLUME_BASE_KEY: &str = "volume-base";
pub const VOLUME_DIRECTORY_KEY: &str = "volume-directory";

/// Where a class's volumes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeLayout {
    /// The pod-template volume holding every volume of the class.
    pub base: String,
    /// The template of a claim's directory, relative to the base.
    pub directory: String,
}

/// The layout the two keys give, or the problems that keep it from being used. Both keys
/// or neither; the base must be a `hostPath` or `nfs` volume of the pod-template that the
/// provisioner container mounts, once and whole.
pub fn read(
    base: Option<&str>,
    directory: Option<&str>,
    template: Option<&PodTemplateSpec>,
) -> (Option<VolumeLayout>, Vec<Problem>) {
    let err = |key, what: String, fix: &str| (None, vec![Problem::error(Some(key), what, fix)]);
    let (base, directory) = match (base.map(str::trim), directory) {
        (None, None) => return (None, shared_base_warnings(template)),
        (Some(_), None) => {
            return err(
                VOLUME_BASE_KEY,
                format!("is set, but {VOLUME_DIRECTORY_KEY} is not"),
                "set volume-directory to each claim's directory in the base, e.g. `{{claim.namespace}}/{{claim.name}}-{{claim.uid}}`",
            );
        }
        (None, Some(_)) => {
            return err(
                VOLUME_DIRECTORY_KEY,
                format!("is set, but {VOLUME_BASE_KEY} is not"),
                "set volume-base to the name of the pod-template volume that holds the volumes",
            );
        }
        (Some(b), Some(d)) => (b, d),
    };
    let fix = "declare the base under pod-template `spec.volumes` (hostPath or nfs) and mount it whole in the container; the controller replaces that mount with the volume's own directory";
    let names = |what: &str| {
        err(
            VOLUME_BASE_KEY,
            format!("names volume `{base}`, {what}"),
            fix,
        )
    };
    let Some(template) = template else {
        return names("but there is no pod-template");
    };
    let Some(volume) = isolation::pod_volume(template, base) else {
        return names("which the pod-template does not declare");
    };
    if volume.host_path.is_none() && volume.nfs.is_none() {
        return names("which is neither hostPath nor nfs");
    }
    let mounts: Vec<_> = template
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .flat_map(|c| c.volume_mounts.iter().flatten().map(move |m| (c, m)))
        .filter(|(_, m)| m.name == base)
        .collect();
    let whole_once = matches!(mounts.as_slice(), [(c, m)] if c.name == CONTAINER_NAME
        && m.sub_path.is_none() && m.sub_path_expr.is_none());
    if !whole_once {
        return names(&format!(
            "which the pod-template must mount exactly once, whole (no subPath), in the {CONTAINER_NAME} container"
        ));
    }
    let mut problems = Vec::new();
    if !directory.contains('/') {
        problems.push(Problem::warning(
            Some(VOLUME_DIRECTORY_KEY),
            "has no `/`: a deprovision Job mounts a volume's parent directory, here the whole base",
            "give each namespace a directory of its own, e.g. `{{claim.namespace}}/{{claim.name}}-{{claim.uid}}`",
        ));
    }
    let layout = VolumeLayout {
        base: base.to_owned(),
        directory: directory.to_owned(),
    };
    (Some(layout), problems)
}

/// A class without `volume-base` whose container mounts a writable node directory (a
/// hostPath of type Directory or DirectoryOrCreate) or export whole: every Job of the class can reach every volume in it.
fn shared_base_warnings(template: Option<&PodTemplateSpec>) -> Vec<Problem> {
    let Some(t) = template else {
        return vec![];
    };
    // A node directory (not a device tree such as an LVM class's /dev) or an export.
    let shared = |name: &str| {
        isolation::pod_volume(t, name).is_some_and(|v| {
            let directory = v.host_path.as_ref().is_some_and(|h| {
                matches!(h.type_.as_deref(), Some("Directory" | "DirectoryOrCreate"))
            });
            directory || v.nfs.as_ref().is_some_and(|n| n.read_only != Some(true))
        })
    };
    t.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .filter(|m| m.read_only != Some(true) && m.sub_path.is_none() && shared(&m.name))
        .map(|m| {
            Problem::warning(
                Some("pod-template"),
                format!(
                    "mounts volume `{}` whole and writable: if it holds the class's volumes, every Job (and a link planted in any volume) reaches every tenant's data",
                    m.name
                ),
                format!(
                    "set `{VOLUME_BASE_KEY}: {}` and `{VOLUME_DIRECTORY_KEY}` so each Job mounts only its volume's directory",
                    m.name
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::config::{Problem, Severity, Verdict, VolumeLayout, parse_config_map};

    const TEMPLATE: &str = "spec:\n  volumes: [{name: base, hostPath: {path: /srv/v, type: Directory}}, {name: tmp, emptyDir: {}}]\n  containers:\n  - volumeMounts: [{name: base, mountPath: /srv/v}]\n";

    fn parsed(data: serde_json::Value) -> (Option<VolumeLayout>, Vec<Problem>) {
        let mut all = json!({"image": "registry.example.com/prov:1.0", "allow-privileged": "true"});
        all.as_object_mut()
            .unwrap()
            .extend(data.as_object().unwrap().clone());
        let cm = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "cfg",
                         "labels": {"type": "provisioner-config", "storage-class": "s"}},
            "data": all,
        }))
        .unwrap();
        match parse_config_map(&cm, crate::names::DEFAULT_PROVISIONER_NAME) {
            Verdict::Checked { config, problems } => {
                (config.and_then(|c| c.volume_layout), problems)
            }
            Verdict::Ignored { reason } => panic!("{reason}"),
        }
    }

    fn said(problems: &[Problem], severity: Severity, key: &str) -> Option<String> {
        problems
            .iter()
            .find(|p| p.severity == severity && p.key.as_deref() == Some(key))
            .map(ToString::to_string)
    }

    #[test]
    fn both_keys_name_a_mounted_node_directory_or_export() {
        let dir = "{{claim.namespace}}/{{claim.name}}-{{claim.uid}}";
        let (layout, problems) = parsed(json!({"pod-template": TEMPLATE,
            "volume-base": "base", "volume-directory": dir}));
        assert_eq!(
            layout,
            Some(VolumeLayout {
                base: "base".into(),
                directory: dir.into()
            }),
            "{problems:?}"
        );
        assert!(problems.is_empty(), "{problems:?}");
        for (data, key, says) in [
            (
                json!({"pod-template": TEMPLATE, "volume-base": "base"}),
                "volume-base",
                "volume-directory is not",
            ),
            (
                json!({"pod-template": TEMPLATE, "volume-directory": dir}),
                "volume-directory",
                "volume-base is not",
            ),
            (
                json!({"volume-base": "base", "volume-directory": dir}),
                "volume-base",
                "no pod-template",
            ),
            (
                json!({"pod-template": TEMPLATE, "volume-base": "nope", "volume-directory": dir}),
                "volume-base",
                "does not declare",
            ),
            (
                json!({"pod-template": TEMPLATE, "volume-base": "tmp", "volume-directory": dir}),
                "volume-base",
                "neither hostPath nor nfs",
            ),
            (
                json!({"pod-template": TEMPLATE.replace("mountPath: /srv/v}", "mountPath: /srv/v, subPath: a}"), "volume-base": "base", "volume-directory": dir}),
                "volume-base",
                "exactly once, whole",
            ),
            (
                json!({"pod-template": TEMPLATE, "volume-base": "base", "volume-directory": "{{claim.annotations.dir}}"}),
                "volume-directory",
                "path traversal",
            ),
        ] {
            let (layout, problems) = parsed(data.clone());
            assert_eq!(layout, None, "{data}");
            let error = said(&problems, Severity::Error, key)
                .unwrap_or_else(|| panic!("{data}: {problems:?}"));
            assert!(error.contains(says), "{error}");
        }
        let (_, problems) = parsed(json!({"pod-template": TEMPLATE,
            "volume-base": "base", "volume-directory": "{{claim.uid}}"}));
        assert!(
            said(&problems, Severity::Warning, "volume-directory")
                .unwrap()
                .contains("whole base")
        );
    }

    /// Without the keys, `check` warns about a pod-template that mounts a node directory
    /// whole and writable.
    #[test]
    fn a_whole_shared_base_is_warned_about() {
        let (_, problems) = parsed(json!({"pod-template": TEMPLATE}));
        let warning = said(&problems, Severity::Warning, "pod-template").unwrap();
        assert!(
            warning.contains("`base`") && warning.contains("volume-base: base"),
            "{warning}"
        );
        let read_only =
            TEMPLATE.replace("mountPath: /srv/v}", "mountPath: /srv/v, readOnly: true}");
        let (_, problems) = parsed(json!({"pod-template": read_only}));
        assert_eq!(said(&problems, Severity::Warning, "pod-template"), None);
    }
}
