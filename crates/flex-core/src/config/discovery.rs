//! Which ConfigMap configures a class: labelled `type=provisioner-config` and
//! `storage-class=<class>`, and not claimed by another provisioner through `plugin-name`.

use k8s_openapi::api::core::v1::ConfigMap;

use super::problem::Problem;
use crate::names::{CONFIG_TYPE_VALUE, LABEL_CONFIG_CLASS, LABEL_CONFIG_TYPE, label};

/// Whether a ConfigMap is a provisioner configuration for `class` that this provisioner serves.
pub fn is_config_map_for_class(cm: &ConfigMap, class: &str, provisioner_name: &str) -> bool {
    label(&cm.metadata, LABEL_CONFIG_TYPE) == Some(CONFIG_TYPE_VALUE)
        && label(&cm.metadata, LABEL_CONFIG_CLASS) == Some(class)
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

/// Why a class cannot be served as its objects stand: said on each of its pending claims.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("StorageClass {0} does not exist")]
    NoClass(String),
    #[error("configuration of class {class}: {}; fix: {}", problem.what, problem.fix)]
    Ambiguous { class: String, problem: Problem },
    #[error("no ConfigMap labelled type=provisioner-config, storage-class={class} in namespace(s) {}; create one to configure this class", namespaces.join(", "))]
    NoConfigMap {
        class: String,
        namespaces: Vec<String>,
    },
    /// `config_map` is `namespace/name`.
    #[error("ConfigMap {config_map} is not used: {reason}")]
    NotUsed { config_map: String, reason: String },
    #[error("ConfigMap {config_map} is invalid: {}", errors.join("; "))]
    Invalid {
        config_map: String,
        errors: Vec<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_class_says_what_to_do() {
        let none = Unusable::NoConfigMap {
            class: "gold".into(),
            namespaces: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            none.to_string(),
            "no ConfigMap labelled type=provisioner-config, storage-class=gold in namespace(s) a, b; create one to configure this class"
        );
        let invalid = Unusable::Invalid {
            config_map: "a/cfg".into(),
            errors: vec!["x".into(), "y".into()],
        };
        assert_eq!(invalid.to_string(), "ConfigMap a/cfg is invalid: x; y");
        let two = Problem::error(None, "2 ConfigMaps configure class `gold`", "keep one");
        let ambiguous = Unusable::Ambiguous {
            class: "gold".into(),
            problem: two,
        };
        assert_eq!(
            ambiguous.to_string(),
            "configuration of class gold: 2 ConfigMaps configure class `gold`; fix: keep one"
        );
    }
}
