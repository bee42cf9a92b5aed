//! Parsing one ConfigMap into a `ProvisionerConfig`, collecting every problem on the way.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;

use super::allowed::{self, AllowedVolumes, BASE_PATH_PARAMETER};
use super::keys::{UNSANITISED_KEY, is_reserved, looks_like_secret, misspelt_reserved_key};
use super::options::ParseOptions;
use super::privilege::{self, ALLOW_PRIVILEGED_KEY};
use super::problem::Problem;
use super::sources;
use super::unsanitised::{OptOut, base_key};
use super::volume_layout::{self, VOLUME_BASE_KEY, VOLUME_DIRECTORY_KEY};
use super::{
    DEFAULT_PERMANENT_EXIT_CODE, DEFAULT_RETRIES, DEFAULT_TIMEOUT, MAX_PARAMETERS, MAX_RETRIES,
    MAX_TEMPLATE_BYTES, ProvisionerConfig, pod_template, values,
};
use crate::names::{
    BUILTIN_ENV, CONFIG_TYPE_VALUE, LABEL_CONFIG_CLASS, LABEL_CONFIG_TYPE, is_dns_subdomain,
    is_env_name, parameter_env_name, process_env_reason,
};
use crate::template::{self, Finding};

/// The outcome of reading one ConfigMap.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The ConfigMap names another provisioner in `plugin-name`; it is not ours to judge.
    Ignored { reason: String },
    /// Ours. `config` is present exactly when no problem is an error.
    Checked {
        config: Option<Box<ProvisionerConfig>>,
        problems: Vec<Problem>,
    },
}

/// Words in a key that say its value is a filesystem path or a name in one.
const PATH_WORDS: &[&str] = &[
    "path",
    "dir",
    "directory",
    "export",
    "mount",
    "folder",
    "subdir",
    "share",
    "prefix",
];

/// Parses with the default options (the controller's account as deploy/ has it).
pub fn parse_config_map(cm: &ConfigMap, provisioner_name: &str) -> Verdict {
    parse_config_map_with(cm, &ParseOptions::new(provisioner_name))
}

/// Parses and checks one ConfigMap. Never panics: a panic while checking (a bug) is
/// contained and reported as an error of the ConfigMap, so one ConfigMap cannot stop the
/// controller from serving the others.
pub fn parse_config_map_with(cm: &ConfigMap, options: &ParseOptions) -> Verdict {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(cm, options))).unwrap_or_else(
        |_| Verdict::Checked {
            config: None,
            problems: vec![Problem::error(
                None,
                "checking this ConfigMap failed unexpectedly; this is a bug of flex-provisioner",
                "please report it with the ConfigMap",
            )],
        },
    )
}

fn parse(cm: &ConfigMap, options: &ParseOptions) -> Verdict {
    let provisioner_name = options.provisioner_name.as_str();
    let data = cm.data.clone().unwrap_or_default();
    if let Some(plugin) = data.get("plugin-name").map(|p| p.trim())
        && plugin != provisioner_name
    {
        return Verdict::Ignored {
            reason: format!(
                "its plugin-name `{plugin}` is not this provisioner (`{provisioner_name}`); run with --provisioner-name {plugin} or change plugin-name to serve it here"
            ),
        };
    }
    let mut p = Parser {
        problems: Vec::new(),
        unsanitised: OptOut::default(),
        template_bytes: 0,
    };
    let labels = cm.metadata.labels.clone().unwrap_or_default();
    let storage_class = p.discovery_labels(&labels);
    if cm.binary_data.as_ref().is_some_and(|b| !b.is_empty()) {
        p.problems.push(Problem::error(
            None,
            "binaryData is set, but only `data` is read",
            "move the values into `data`",
        ));
    }
    let config = p.build(cm, &data, storage_class);
    p.problems.extend(privilege::check(&config, options));
    let has_errors = p.problems.iter().any(Problem::is_error);
    Verdict::Checked {
        config: (!has_errors).then(|| Box::new(config)),
        problems: p.problems,
    }
}

struct Parser {
    problems: Vec<Problem>,
    unsanitised: OptOut,
    /// Template source seen so far, against `MAX_TEMPLATE_BYTES`.
    template_bytes: usize,
}

impl Parser {
    fn err(&mut self, key: &str, what: impl Into<String>, fix: impl Into<String>) {
        self.problems.push(Problem::error(Some(key), what, fix));
    }

    fn discovery_labels(&mut self, labels: &BTreeMap<String, String>) -> String {
        if labels.get(LABEL_CONFIG_TYPE).map(String::as_str) != Some(CONFIG_TYPE_VALUE) {
            self.problems.push(Problem::error(
                None,
                format!("the ConfigMap lacks the label `{LABEL_CONFIG_TYPE}: {CONFIG_TYPE_VALUE}`, so the provisioner never finds it"),
                format!("add `{LABEL_CONFIG_TYPE}: {CONFIG_TYPE_VALUE}` under metadata.labels"),
            ));
        }
        match labels.get(LABEL_CONFIG_CLASS) {
            Some(class) if is_dns_subdomain(class) => class.clone(),
            Some(class) => {
                self.problems.push(Problem::error(
                    None,
                    format!(
                        "label `{LABEL_CONFIG_CLASS}: {class}` is not a valid StorageClass name"
                    ),
                    "use the exact metadata.name of the StorageClass",
                ));
                String::new()
            }
            None => {
                self.problems.push(Problem::error(
                    None,
                    format!(
                        "the ConfigMap lacks the label `{LABEL_CONFIG_CLASS}`, so no class uses it"
                    ),
                    format!(
                        "add `{LABEL_CONFIG_CLASS}: <StorageClass name>` under metadata.labels"
                    ),
                ));
                String::new()
            }
        }
    }

    /// Runs a value parser, recording its error against the key.
    fn value<T>(
        &mut self,
        key: &str,
        raw: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        match parse(raw) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(key, e, fix_for(key));
                None
            }
        }
    }

    /// Compiles and lints one template; returns whether it reads `node.*`.
    fn template(&mut self, key: &str, source: &str) -> bool {
        // A template over its own limit is refused by `compile`, and not counted here.
        if source.len() <= template::MAX_SOURCE_BYTES {
            let before = self.template_bytes;
            self.template_bytes += source.len();
            if self.template_bytes > MAX_TEMPLATE_BYTES {
                // Reported once, at the key that crosses the limit; the rest are not parsed.
                if before <= MAX_TEMPLATE_BYTES {
                    self.err(
                        key,
                        format!("the ConfigMap's templates reach {} bytes here; at most {MAX_TEMPLATE_BYTES} are allowed in all", self.template_bytes),
                        "a parameter needs a short value built from a few variables; put fixed data in the image or a mounted ConfigMap (pod-template)",
                    );
                }
                return false;
            }
        }
        let compiled = match template::compile(source) {
            Ok(t) => t,
            Err(e) => {
                let fix = match &e {
                    template::TemplateError::Unsupported(_) => {
                        "use variables, helpers and the built-in blocks (`if`, `each`, `with`...) only; write the value out instead of a partial"
                    }
                    template::TemplateError::Limit(_) => {
                        "simplify the template; a parameter needs a short value built from a few variables"
                    }
                    _ => "close every `{{` with `}}` and every `{{#block}}` with `{{/block}}`",
                };
                self.err(key, e.to_string(), fix);
                return false;
            }
        };
        let mut uses_node = false;
        let path_like = is_path_like(key) || template::writes_slash(&compiled);
        for finding in template::lint(&compiled) {
            match finding {
                Finding::UnknownVariable { path, known } => self.err(
                    key,
                    format!("the template uses unknown variable `{path}`"),
                    format!("use one of: {}", known.join(", ")),
                ),
                Finding::UnknownHelper { name } => self.err(
                    key,
                    format!("the template calls unknown helper `{name}`"),
                    format!(
                        "use one of: {}",
                        template::HELPERS
                            .iter()
                            .map(|(h, _)| *h)
                            .chain(template::BUILTIN_HELPERS.iter().copied())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
                Finding::UnsanitisedUserText { path } if path_like => {
                    let base = base_key(key);
                    if !self.unsanitised.allows(key) {
                        self.err(
                            key,
                            format!("`{path}` is free text chosen by the claim's author and reaches this path-like value unsanitised: a `/` or `..` in it would escape the directory (path traversal)"),
                            format!("wrap it: `{{{{dnslabel {path}}}}}`; or, if the image validates the value itself, list `{base}` in `{UNSANITISED_KEY}`"),
                        );
                    }
                }
                Finding::UnsanitisedUserText { .. } => {}
                Finding::UsesNode { .. } => uses_node = true,
            }
        }
        uses_node
    }

    fn list(
        &mut self,
        key: &str,
        raw: &str,
        templated: bool,
        node_users: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        let list = self.value(key, raw, values::string_list)?;
        if templated {
            for (i, entry) in list.iter().enumerate() {
                if self.template(&format!("{key}[{i}]"), entry) {
                    node_users.push(format!("{key}[{i}]"));
                }
            }
        }
        Some(list)
    }

    fn build(
        &mut self,
        cm: &ConfigMap,
        data: &BTreeMap<String, String>,
        storage_class: String,
    ) -> ProvisionerConfig {
        let mut c = defaults(cm, storage_class);
        let mut read = Read::default();
        let parameters = data.keys().filter(|k| !is_reserved(k)).count();
        read.too_many = parameters > MAX_PARAMETERS;
        if read.too_many {
            self.problems.push(Problem::error(
                None,
                format!("the ConfigMap has {parameters} parameters; at most {MAX_PARAMETERS} are allowed, so none of them is checked"),
                "hand the provisioner a few parameters; put fixed data in the image or a mounted ConfigMap (pod-template)",
            ));
        }
        self.unsanitised = OptOut::read(data, &mut self.problems);
        for (key, raw) in data {
            self.read_key(&mut c, &mut read, key, raw);
        }
        self.check_whole(&mut c, data, read);
        c
    }

    /// One key of the ConfigMap into `c` (the image and the parameters' env names into
    /// `read`, for the checks of the whole).
    fn read_key(&mut self, c: &mut ProvisionerConfig, read: &mut Read, key: &str, raw: &str) {
        let (image, envs, too_many) = (&mut read.image, &mut read.envs, read.too_many);
        match key {
            "plugin-name" | UNSANITISED_KEY => {}
            "image" => *image = self.value(key, raw, values::image),
            "service-account-name" => {
                c.service_account = self.value(key, raw, |v| {
                    let v = v.trim();
                    if is_dns_subdomain(v) {
                        Ok(v.to_owned())
                    } else {
                        Err(format!("`{v}` is not a valid service account name"))
                    }
                });
            }
            "node-selector" => {
                c.node_selector = self
                    .value(key, raw, values::node_selector)
                    .unwrap_or_default();
            }
            "command" => c.command = self.list(key, raw, false, &mut c.node_users),
            "args" => c.args = self.list(key, raw, true, &mut c.node_users),
            "deprovision-image" => c.deprovision_image = self.value(key, raw, values::image),
            "deprovision-command" => {
                c.deprovision_command = self.list(key, raw, false, &mut c.node_users)
            }
            "deprovision-args" => c.deprovision_args = self.list(key, raw, true, &mut c.node_users),
            "expand-image" => c.expand_image = self.value(key, raw, values::image),
            "expand-command" => c.expand_command = self.list(key, raw, false, &mut c.node_users),
            "expand-args" => c.expand_args = self.list(key, raw, true, &mut c.node_users),
            "timeout" => {
                c.timeout = self
                    .value(key, raw, values::duration)
                    .unwrap_or(DEFAULT_TIMEOUT)
            }
            "retries" => {
                c.retries = self
                    .value(key, raw, |v| values::integer(v, 0, MAX_RETRIES))
                    .unwrap_or(DEFAULT_RETRIES);
            }
            "max-attempts" => {
                c.max_attempts = self.value(key, raw, |v| values::integer(v, 1, 1000))
            }
            "permanent-exit-codes" => {
                c.permanent_exit_codes =
                    self.value(key, raw, values::exit_codes).unwrap_or_default();
            }
            "node-local" => c.node_local = self.value(key, raw, values::boolean).unwrap_or(false),
            "snapshots" => c.snapshots = self.value(key, raw, values::boolean).unwrap_or(false),
            "pod-template" => c.pod_template = self.value(key, raw, pod_template::parse),
            VOLUME_BASE_KEY => read.volume_base = Some(raw.to_owned()),
            VOLUME_DIRECTORY_KEY => {
                if self.template(key, raw) {
                    c.node_users.push(key.to_owned());
                }
                read.volume_directory = Some(raw.to_owned());
            }
            ALLOW_PRIVILEGED_KEY => {
                c.allow_privileged = self.value(key, raw, values::boolean).unwrap_or(false)
            }
            "max-concurrent" => {
                c.max_concurrent = self.value(key, raw, |v| values::integer(v, 1, 10_000))
            }
            "pv-creator" => {
                c.pv_creator = self
                    .value(key, raw, sources::pv_creator)
                    .unwrap_or_default()
            }
            "data-sources" => {
                if let Some(s) = self.value(key, raw, sources::data_sources) {
                    c.data_sources = s;
                }
            }
            "volume-sources" => {
                if let Some(s) = self.value(key, raw, sources::volume_sources) {
                    c.volume_sources = s;
                }
            }
            _ if allowed::KEYS.contains(&key) => {
                let _ = self.value(key, raw, |v| c.allowed_volumes.read(key, v));
            }
            _ if too_many => {}
            _ => {
                debug_assert!(!is_reserved(key));
                if let Some(param) = self.parameter(key, raw, envs) {
                    if self.template(key, raw) {
                        c.node_users.push(key.to_owned());
                    }
                    c.parameters.insert(key.to_owned(), param);
                }
            }
        }
    }

    /// The checks that need every key: the `allowed-*` declarations against the volume
    /// types, the pod-template's env against ours, and the image.
    fn check_whole(
        &mut self,
        c: &mut ProvisionerConfig,
        data: &BTreeMap<String, String>,
        read: Read,
    ) {
        let Read {
            image,
            envs,
            volume_base,
            volume_directory,
            ..
        } = read;
        let (layout, problems) = volume_layout::read(
            volume_base.as_deref(),
            volume_directory.as_deref(),
            c.pod_template.as_ref(),
        );
        c.volume_layout = layout;
        self.problems.extend(problems);
        self.problems.extend(self.unsanitised.unneeded());
        let base_path = data.get(BASE_PATH_PARAMETER).map(String::as_str);
        c.allowed_volumes.default_paths_from(base_path);
        let declared: BTreeSet<&str> = allowed::KEYS
            .iter()
            .copied()
            .filter(|k| data.contains_key(*k))
            .collect();
        self.problems.extend(allowed::problems(
            &c.allowed_volumes,
            c.pv_creator,
            &c.volume_sources,
            data.contains_key("volume-sources"),
            &declared,
            base_path,
        ));
        if let Some(t) = &c.pod_template {
            for name in pod_template::env_names(t) {
                if BUILTIN_ENV.contains(&name.as_str()) || envs.contains_key(&name) {
                    self.err(
                        "pod-template",
                        format!("sets env var `{name}`, which the provisioner already sets"),
                        "rename it; built-in variables and parameters cannot be overridden",
                    );
                }
            }
        }
        match image {
            Some(i) => {
                if !values::image_is_pinned(&i) {
                    self.problems.push(Problem::warning(
                        Some("image"),
                        format!("`{i}` has no tag or uses `latest`, so nodes may run different code"),
                        "pin a version tag or a digest, e.g. `:1.4` or `@sha256:...`",
                    ));
                }
                c.image = i;
            }
            None if !data.contains_key("image") => self.err(
                "image",
                "is missing; without it there is nothing to run",
                "set `image:` to the provisioner image, e.g. `registry.example.com/nfs-provision:1.0`",
            ),
            None => {}
        }
    }

    /// Checks a non-reserved key: not a credential, not a misspelt reserved key, and an env
    /// name that is valid and unique.
    fn parameter(
        &mut self,
        key: &str,
        raw: &str,
        envs: &mut BTreeMap<String, String>,
    ) -> Option<String> {
        if let Some(why) = looks_like_secret(key, raw) {
            let fix = if key == "service-token" {
                "delete it and set `service-account-name`: the Job's pod gets that account's credentials from Kubernetes"
            } else {
                "keep credentials in a Secret and hand them to the pod through `pod-template` (env valueFrom.secretKeyRef or a secret volume)"
            };
            self.err(key, format!("looks like a credential ({why}); ConfigMaps are readable by anyone who can read the namespace"), fix);
            return None;
        }
        if let Some(meant) = misspelt_reserved_key(key) {
            self.err(
                key,
                format!("looks like a misspelling of the reserved key `{meant}`, so it would silently become a parameter"),
                format!("rename it to `{meant}`, or choose a parameter name that is not so close to it"),
            );
            return None;
        }
        let env = parameter_env_name(key);
        if !is_env_name(&env) {
            self.err(
                key,
                format!("gives env var name `{env}`, which is not valid"),
                "start the parameter name with a letter",
            );
            return None;
        }
        if BUILTIN_ENV.contains(&env.as_str()) {
            self.err(
                key,
                format!("gives env var `{env}`, which is a built-in variable of the Job"),
                "rename the parameter; the built-in value is always set by the provisioner",
            );
            return None;
        }
        if let Some(why) = process_env_reason(&env) {
            self.err(
                key,
                format!("gives env var `{env}`, which the container must not receive from a parameter: {why}"),
                "rename the parameter (e.g. prefix it: `volume-path` gives VOLUME_PATH); set process variables in `pod-template` if the image truly needs them",
            );
            return None;
        }
        if let Some(other) = envs.insert(env.clone(), key.to_owned()) {
            self.err(
                key,
                format!("gives env var `{env}`, the same as parameter `{other}`"),
                "rename one of them; both would be handed to the pod under one name",
            );
            return None;
        }
        Some(raw.to_owned())
    }
}

/// A key whose name says it holds a path (its template may also show it, see
/// `template::writes_slash`).
fn is_path_like(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    PATH_WORDS.iter().any(|w| k.contains(w))
}

fn fix_for(key: &str) -> String {
    super::keys::RESERVED_KEYS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, default, meaning)| format!("`{key}` is {meaning} (default {default})"))
        .unwrap_or_else(|| "correct the value".into())
}

/// What reading the keys collects for the checks of the whole ConfigMap.
#[derive(Default)]
struct Read {
    image: Option<String>,
    envs: BTreeMap<String, String>,
    /// More parameters than are checked: none is read.
    too_many: bool,
    volume_base: Option<String>,
    volume_directory: Option<String>,
}

/// A ConfigMap's configuration before any key is read: every default.
fn defaults(cm: &ConfigMap, storage_class: String) -> ProvisionerConfig {
    let namespace = (cm.metadata.namespace.clone()).unwrap_or_else(|| "default".into());
    ProvisionerConfig {
        allowed_volumes: AllowedVolumes::none(&namespace),
        namespace,
        name: cm.metadata.name.clone().unwrap_or_default(),
        storage_class,
        timeout: DEFAULT_TIMEOUT,
        retries: DEFAULT_RETRIES,
        permanent_exit_codes: BTreeSet::from([DEFAULT_PERMANENT_EXIT_CODE]),
        volume_sources: sources::default_sources(),
        ..Default::default()
    }
}
