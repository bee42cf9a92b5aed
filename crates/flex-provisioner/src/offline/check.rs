//! `check`: validate ConfigMaps offline, one line per problem (file, object, key, what is
//! wrong, how to fix it). StorageClasses found in the same files or given with `--class`
//! are used for the checks that need both halves.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::storage::v1::StorageClass;

use super::files::read_documents;
use flex_core::Error;
use flex_core::config::{
    ClassConfig, ParseOptions, Problem, Severity, StorageClassInfo, Verdict, parse_config_map_with,
};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CheckReport {
    pub lines: Vec<String>,
    pub errors: usize,
    pub warnings: usize,
    pub config_maps: usize,
}

impl CheckReport {
    fn add(&mut self, origin: &str, problem: &Problem) {
        match problem.severity {
            Severity::Error => self.errors += 1,
            Severity::Warning => self.warnings += 1,
        }
        self.lines.push(format!("{origin}: {problem}"));
    }

    pub fn summary(&self) -> String {
        format!(
            "{} ConfigMap(s) checked: {} error(s), {} warning(s)",
            self.config_maps, self.errors, self.warnings
        )
    }
}

/// Checks every ConfigMap in `files`. Unreadable files are errors of the report, not of the
/// call, so one bad file does not hide the findings about the others.
pub fn check_files(files: &[PathBuf], classes: &[PathBuf], provisioner_name: &str) -> CheckReport {
    check_files_with(files, classes, &ParseOptions::new(provisioner_name))
}

/// `check_files` with every parse option (e.g. a controller that does not run as deploy/'s
/// `flex-provisioner/flex-provisioner` service account).
pub fn check_files_with(
    files: &[PathBuf],
    classes: &[PathBuf],
    options: &ParseOptions,
) -> CheckReport {
    let provisioner_name = options.provisioner_name.as_str();
    let mut report = CheckReport::default();
    let mut config_maps: Vec<(String, ConfigMap)> = Vec::new();
    let mut storage_classes: BTreeMap<String, StorageClass> = BTreeMap::new();
    for path in files.iter().chain(classes) {
        let docs = match read_documents(path) {
            Ok(d) => d,
            Err(e) => {
                report.add(&path.display().to_string(), &input_problem(&e));
                continue;
            }
        };
        for doc in docs {
            match doc.kind.as_str() {
                "ConfigMap" => match doc.to_object::<ConfigMap>() {
                    Ok(cm) => config_maps.push((doc.path.clone(), cm)),
                    Err(e) => report.add(&doc.path, &input_problem(&e)),
                },
                "StorageClass" => match doc.to_object::<StorageClass>() {
                    Ok(sc) => {
                        storage_classes.insert(sc.metadata.name.clone().unwrap_or_default(), sc);
                    }
                    Err(e) => report.add(&doc.path, &input_problem(&e)),
                },
                _ => {}
            }
        }
    }
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, cm) in &config_maps {
        let origin = format!(
            "{path}: ConfigMap {}/{}",
            cm.metadata.namespace.as_deref().unwrap_or("default"),
            cm.metadata.name.as_deref().unwrap_or_default()
        );
        report.config_maps += 1;
        match parse_config_map_with(cm, options) {
            Verdict::Ignored { reason } => {
                report.lines.push(format!("{origin}: ignored: {reason}"));
            }
            Verdict::Checked { config, problems } => {
                for p in &problems {
                    report.add(&origin, p);
                }
                let Some(config) = config else { continue };
                owners
                    .entry(config.storage_class.clone())
                    .or_default()
                    .push(config.source());
                if let Some(sc) = storage_classes.get(&config.storage_class)
                    && let Err(problems) = ClassConfig::new(
                        *config,
                        StorageClassInfo::from_class(sc),
                        provisioner_name,
                    )
                {
                    for p in &problems {
                        report.add(&origin, p);
                    }
                }
            }
        }
    }
    for (class, sources) in owners.iter().filter(|(_, s)| s.len() > 1) {
        report.add(
            &format!("class {class}"),
            &Problem::error(
                None,
                format!(
                    "{} ConfigMaps configure it: {}",
                    sources.len(),
                    sources.join(", ")
                ),
                "keep exactly one: delete the others or change their `storage-class` label",
            ),
        );
    }
    if config_maps.is_empty() && report.errors == 0 {
        report.add(
            "input",
            &Problem::error(
                None,
                "no ConfigMap found in the given files",
                "pass the files that hold your provisioner ConfigMaps",
            ),
        );
    }
    report
}

fn input_problem(e: &Error) -> Problem {
    Problem::error(
        None,
        e.to_string(),
        "give a readable YAML file of Kubernetes objects",
    )
}
