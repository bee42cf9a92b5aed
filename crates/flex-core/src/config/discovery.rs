//! Which ConfigMap configures a class: labelled `type=provisioner-config` and
//! `storage-class=<class>`, and not claimed by another provisioner through `plugin-name`.

use k8s_openapi::api::core::v1::ConfigMap;

use super::problem::Problem;
use crate::names::{CONFIG_TYPE_VALUE, LABEL_CONFIG_CLASS, LABEL_CONFIG_TYPE};

fn label<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    crate::names::label(&cm.metadata, key)
}

/// Whether a ConfigMap is a provisioner configuration for `class` that this provisioner serves.
pub fn is_config_map_for_class(cm: &ConfigMap, class: &str, provisioner_name: &str) -> bool {
    label(cm, LABEL_CONFIG_TYPE) == Some(CONFIG_TYPE_VALUE)
        && label(cm, LABEL_CONFIG_CLASS) == Some(class)
        && cm
            .data
            .as_ref()
            .and_then(|d| d.get("plugin-name"))
            .is_none_or(|p| p.trim() == provisioner_name)
}

/// The one ConfigMap for `class`; two or more is a configuration error naming all of them,
/// since picking one silently would make provisioning depend on list order.
pub fn select_for_class<'a>(
    class: &str,
    provisioner_name: &str,
    config_maps: impl IntoIterator<Item = &'a ConfigMap>,
) -> Result<Option<&'a ConfigMap>, Problem> {
    let mut found: Vec<&ConfigMap> = config_maps
        .into_iter()
        .filter(|cm| is_config_map_for_class(cm, class, provisioner_name))
        .collect();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => {
            let mut names: Vec<String> = found
                .iter()
                .map(|cm| {
                    format!(
                        "{}/{}",
                        cm.metadata.namespace.as_deref().unwrap_or("default"),
                        cm.metadata.name.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            names.sort();
            Err(Problem::error(
                None,
                format!(
                    "{} ConfigMaps configure class `{class}`: {}",
                    names.len(),
                    names.join(", ")
                ),
                "keep exactly one: delete the others or change their `storage-class` label",
            ))
        }
    }
}
