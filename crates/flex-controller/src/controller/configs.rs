//! The configuration of each class, as the controller sees it: the one ConfigMap labelled
//! for the class, validated; invalid ones reported on the ConfigMap; the last valid
//! configuration kept while a newer one is invalid.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::Store;

use crate::config::{
    ClassConfig, Problem, StorageClassInfo, Verdict, parse_config_map, select_for_class,
};

/// A class's configuration, owned (the planner borrows it as `ConfigState`).
#[derive(Debug, Clone)]
pub enum Resolved {
    Ready(ClassConfig),
    Stale(ClassConfig, String),
    Unusable(String),
}

/// Problems found in a ConfigMap, to report on it once per version.
pub struct ConfigReport {
    pub config_map: ConfigMap,
    pub problems: Vec<Problem>,
}

#[derive(Default)]
pub struct Configs {
    last_valid: Mutex<HashMap<String, ClassConfig>>,
    reported: Mutex<HashSet<String>>,
}

impl Configs {
    pub fn resolve(
        &self,
        class_name: &str,
        provisioner_name: &str,
        classes: &Store<StorageClass>,
        config_maps: &[Store<ConfigMap>],
        namespaces: &[String],
    ) -> (Resolved, Option<ConfigReport>) {
        let key = kube::runtime::reflector::ObjectRef::<StorageClass>::new(class_name);
        let Some(sc) = classes.get(&key) else {
            return (
                Resolved::Unusable(format!("StorageClass {class_name} does not exist")),
                None,
            );
        };
        let all: Vec<std::sync::Arc<ConfigMap>> =
            config_maps.iter().flat_map(Store::state).collect();
        let last = self
            .last_valid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(class_name)
            .cloned();
        let degrade = |problem: String| match &last {
            Some(c) => Resolved::Stale(c.clone(), problem),
            None => Resolved::Unusable(problem),
        };
        let cm = match select_for_class(
            class_name,
            provisioner_name,
            all.iter().map(|c| c.as_ref()),
        ) {
            Err(p) => {
                return (
                    degrade(format!(
                        "configuration of class {class_name}: {}; fix: {}",
                        p.what, p.fix
                    )),
                    None,
                );
            }
            Ok(None) => {
                return (
                    degrade(format!(
                        "no ConfigMap labelled type=provisioner-config, storage-class={class_name} in namespace(s) {}; create one to configure this class",
                        namespaces.join(", ")
                    )),
                    None,
                );
            }
            Ok(Some(cm)) => cm.clone(),
        };
        let source = format!(
            "{}/{}",
            cm.metadata.namespace.as_deref().unwrap_or_default(),
            cm.metadata.name.as_deref().unwrap_or_default()
        );
        let (config, mut problems) = match parse_config_map(&cm, provisioner_name) {
            Verdict::Ignored { reason } => {
                return (
                    degrade(format!("ConfigMap {source} is not used: {reason}")),
                    None,
                );
            }
            Verdict::Checked { config, problems } => (config, problems),
        };
        let joined = config.and_then(|c| {
            match ClassConfig::new(*c, StorageClassInfo::from_class(&sc), provisioner_name) {
                Ok(j) => Some(j),
                Err(more) => {
                    problems.extend(more);
                    None
                }
            }
        });
        let report = self.report_once(&cm, &problems);
        match joined {
            Some(c) => {
                self.last_valid
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(class_name.to_owned(), c.clone());
                (Resolved::Ready(c), report)
            }
            None => {
                let errors: Vec<String> = problems
                    .iter()
                    .filter(|p| p.is_error())
                    .map(ToString::to_string)
                    .collect();
                (
                    degrade(format!(
                        "ConfigMap {source} is invalid: {}",
                        errors.join("; ")
                    )),
                    report,
                )
            }
        }
    }

    /// The problems of this version of a ConfigMap, the first time they are seen.
    fn report_once(&self, cm: &ConfigMap, problems: &[Problem]) -> Option<ConfigReport> {
        if problems.is_empty() {
            return None;
        }
        let key = format!(
            "{}/{}",
            cm.metadata.uid.as_deref().unwrap_or_default(),
            cm.metadata.resource_version.as_deref().unwrap_or_default()
        );
        self.reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key)
            .then(|| ConfigReport {
                config_map: cm.clone(),
                problems: problems.to_vec(),
            })
    }
}
