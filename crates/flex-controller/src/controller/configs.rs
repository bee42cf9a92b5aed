//! The configuration of each class, as the controller sees it: the one ConfigMap labelled
//! for the class, validated; invalid ones reported on the ConfigMap. An invalid ConfigMap
//! blocks its class until it is fixed: every decision is made from API objects alone, so a
//! restart never changes what a class does (no "last valid" copy lives only in memory).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::Store;

use flex_core::config::{
    ClassConfig, ParseOptions, Problem, StorageClassInfo, Unusable, Verdict, parse_config_map_with,
    select_for_class,
};

/// A class's configuration, owned (the planner borrows it as `ConfigState`).
#[derive(Debug, Clone)]
pub enum Resolved {
    /// Shared: one parse serves every claim of the class, and rendering moves it to a
    /// blocking thread without a copy.
    Ready(Arc<ClassConfig>),
    Unusable(String),
}

/// Problems found in a ConfigMap, to report on it once per version.
pub struct ConfigReport {
    pub config_map: ConfigMap,
    pub problems: Vec<Problem>,
}

/// What one version of a class's ConfigMap and StorageClass parse to.
type Parsed = (Option<Arc<ClassConfig>>, Vec<Problem>);

#[derive(Default)]
pub struct Configs {
    /// Per class: the versions last parsed and what they gave. Parsing (templates included)
    /// happens once per version, not once per claim reconcile.
    parsed: Mutex<HashMap<String, (String, Parsed)>>,
    /// Per ConfigMap uid: the last version whose problems were reported.
    reported: Mutex<HashMap<String, String>>,
}

impl Configs {
    pub fn resolve(
        &self,
        class_name: &str,
        options: &ParseOptions,
        classes: &Store<StorageClass>,
        config_maps: &[Store<ConfigMap>],
        namespaces: &[String],
    ) -> (Resolved, Option<ConfigReport>) {
        let provisioner_name = options.provisioner_name.as_str();
        let key = kube::runtime::reflector::ObjectRef::<StorageClass>::new(class_name);
        let class = class_name.to_owned();
        let unusable = |why: Unusable| (Resolved::Unusable(why.to_string()), None);
        let Some(sc) = classes.get(&key) else {
            return unusable(Unusable::NoClass(class));
        };
        let all: Vec<std::sync::Arc<ConfigMap>> =
            config_maps.iter().flat_map(Store::state).collect();
        let cm =
            match select_for_class(class_name, provisioner_name, all.iter().map(|c| c.as_ref())) {
                Err(problem) => return unusable(Unusable::Ambiguous { class, problem }),
                Ok(None) => {
                    let namespaces = namespaces.to_vec();
                    return unusable(Unusable::NoConfigMap { class, namespaces });
                }
                Ok(Some(cm)) => cm,
            };
        let config_map = format!(
            "{}/{}",
            cm.metadata.namespace.as_deref().unwrap_or_default(),
            cm.metadata.name.as_deref().unwrap_or_default()
        );
        let (joined, problems) = match self.parse_once(class_name, cm, &sc, options) {
            Ok(parsed) => parsed,
            Err(reason) => return unusable(Unusable::NotUsed { config_map, reason }),
        };
        let report = self.report_once(cm, &problems);
        match joined {
            Some(c) => (Resolved::Ready(c), report),
            None => {
                let errors = problems.iter().filter(|p| p.is_error());
                let errors = errors.map(ToString::to_string).collect();
                let why = Unusable::Invalid { config_map, errors };
                (Resolved::Unusable(why.to_string()), report)
            }
        }
    }

    /// The class's ConfigMap joined with its StorageClass, parsed once per version of the
    /// two (one parse serves every claim of the class); `Err`: the ConfigMap is not for
    /// this provisioner, and why.
    fn parse_once(
        &self,
        class_name: &str,
        cm: &ConfigMap,
        sc: &StorageClass,
        options: &ParseOptions,
    ) -> Result<Parsed, String> {
        let version = format!(
            "{}/{}/{}/{}",
            cm.metadata.uid.as_deref().unwrap_or_default(),
            cm.metadata.resource_version.as_deref().unwrap_or_default(),
            sc.metadata.uid.as_deref().unwrap_or_default(),
            sc.metadata.resource_version.as_deref().unwrap_or_default()
        );
        let cached = crate::lock(&self.parsed)
            .get(class_name)
            .filter(|(v, _)| *v == version)
            .map(|(_, parsed)| parsed.clone());
        if let Some(parsed) = cached {
            return Ok(parsed);
        }
        let (config, mut problems) = match parse_config_map_with(cm, options) {
            Verdict::Ignored { reason } => return Err(reason),
            Verdict::Checked { config, problems } => (config, problems),
        };
        let provisioner_name = options.provisioner_name.as_str();
        let joined = config.and_then(|c| {
            match ClassConfig::new(*c, StorageClassInfo::from_class(sc), provisioner_name) {
                Ok(j) => Some(Arc::new(j)),
                Err(more) => {
                    problems.extend(more);
                    None
                }
            }
        });
        crate::lock(&self.parsed).insert(
            class_name.to_owned(),
            (version, (joined.clone(), problems.clone())),
        );
        Ok((joined, problems))
    }

    /// The problems of this version of a ConfigMap, the first time they are seen.
    fn report_once(&self, cm: &ConfigMap, problems: &[Problem]) -> Option<ConfigReport> {
        if problems.is_empty() {
            return None;
        }
        let uid = cm.metadata.uid.clone().unwrap_or_default();
        let version = cm.metadata.resource_version.clone().unwrap_or_default();
        let previous = crate::lock(&self.reported).insert(uid, version.clone());
        (previous.as_deref() != Some(version.as_str())).then(|| ConfigReport {
            config_map: cm.clone(),
            problems: problems.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn objects() -> (StorageClass, ConfigMap) {
        let sc = serde_json::from_value(json!({
            "metadata": {"name": "gold", "uid": "sc-1", "resourceVersion": "1"},
            "provisioner": "example.com/p"
        }))
        .unwrap();
        let cm = serde_json::from_value(json!({
            "metadata": {"name": "gold-config", "namespace": "cfg", "uid": "cm-1", "resourceVersion": "1",
                         "labels": {"type": "provisioner-config", "storage-class": "gold"}},
            "data": {"image": "img:1", "export": "/x/{{claim.name}}"}
        }))
        .unwrap();
        (sc, cm)
    }

    #[test]
    fn a_configuration_is_parsed_once_per_version() {
        let (sc, mut cm) = objects();
        let (classes, mut class_writer) = reflector::store::<StorageClass>();
        let (maps, mut map_writer) = reflector::store::<ConfigMap>();
        class_writer.apply_watcher_event(&Event::Apply(sc));
        map_writer.apply_watcher_event(&Event::Apply(cm.clone()));
        let configs = Configs::default();
        let ns = ["cfg".to_string()];
        let ready = |r: Resolved| match r {
            Resolved::Ready(c) => c,
            other => panic!("{other:?}"),
        };
        let resolve = || {
            let options = ParseOptions::new("example.com/p");
            let (r, _) =
                configs.resolve("gold", &options, &classes, std::slice::from_ref(&maps), &ns);
            ready(r)
        };
        let first = resolve();
        assert_eq!(first.provisioner.image, "img:1");
        for _ in 0..4 {
            assert!(Arc::ptr_eq(&resolve(), &first), "parsed once per version");
        }
        cm.metadata.resource_version = Some("2".into());
        cm.data
            .as_mut()
            .unwrap()
            .insert("image".into(), "img:2".into());
        map_writer.apply_watcher_event(&Event::Apply(cm));
        let second = resolve();
        assert_eq!(
            second.provisioner.image, "img:2",
            "a new version is parsed again"
        );
        assert!(Arc::ptr_eq(&resolve(), &second));
    }
}
