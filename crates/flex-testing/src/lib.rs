//! What flex-provisioner's end-to-end tests and benchmarks share: fixture builders and
//! API-validity assertions (here), a cluster to run on (`cluster`), the controller beside a
//! sandbox (`provisioning`), as its own process (`controller_process`), and the scenarios
//! the tests and the benchmarks both run (`hostile`, `burst_timing`, `populate`).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use flex_core::claim::ClaimRequest;
use flex_core::config::{ClassConfig, StorageClassInfo, Verdict, parse_config_map};
use flex_core::job::{DEFAULT_JOB_TTL_SECONDS, ProvisionContext, provision_job};
use flex_core::names::{
    DEFAULT_PROVISIONER_NAME, is_dns_label, is_dns_subdomain, is_env_name, is_label_key,
    is_label_value,
};
use flex_core::rendered::render_for_claim;
use flex_core::volume::pv_template;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;

pub const P: &str = DEFAULT_PROVISIONER_NAME;

/// `config("silver").set("image", "x:1")`: a provisioner ConfigMap under construction.
pub struct CmBuilder(ConfigMap);

pub fn config(class: &str) -> CmBuilder {
    CmBuilder(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{class}-config"), "namespace": "storage-admin",
                         "labels": {"type": "provisioner-config", "storage-class": class}},
            "data": {"image": "registry.example.com/prov:1.0"}
        }))
        .unwrap(),
    )
}

impl CmBuilder {
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.0
            .data
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }
    pub fn unset(mut self, key: &str) -> Self {
        self.0.data.get_or_insert_with(Default::default).remove(key);
        self
    }
    pub fn name(mut self, ns: &str, name: &str) -> Self {
        self.0.metadata.namespace = Some(ns.into());
        self.0.metadata.name = Some(name.into());
        self
    }
    pub fn label(mut self, key: &str, value: Option<&str>) -> Self {
        let labels = self.0.metadata.labels.get_or_insert_with(Default::default);
        match value {
            Some(v) => labels.insert(key.into(), v.into()),
            None => labels.remove(key),
        };
        self
    }
    pub fn build(self) -> ConfigMap {
        self.0
    }
}

pub fn storage_class(name: &str, binding: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "provisioner": P,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
        "mountOptions": ["noatime"],
        "parameters": {"tier": "2"}
    }))
    .unwrap()
}

/// `claim("team-a", "data").class("silver").size("1Gi")`.
pub struct ClaimBuilder(serde_json::Value);

pub fn claim(ns: &str, name: &str) -> ClaimBuilder {
    ClaimBuilder(json!({
        "metadata": {"name": name, "namespace": ns,
                     "uid": "3f0c1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b", "labels": {}, "annotations": {}},
        "spec": {"storageClassName": "silver", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
}

impl ClaimBuilder {
    pub fn class(mut self, c: &str) -> Self {
        self.0["spec"]["storageClassName"] = json!(c);
        self
    }
    pub fn size(mut self, s: &str) -> Self {
        self.0["spec"]["resources"]["requests"]["storage"] = json!(s);
        self
    }
    pub fn modes(mut self, m: &[&str]) -> Self {
        self.0["spec"]["accessModes"] = json!(m);
        self
    }
    pub fn block(mut self) -> Self {
        self.0["spec"]["volumeMode"] = json!("Block");
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["labels"][k] = json!(v);
        self
    }
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    pub fn selected_node(self, n: &str) -> Self {
        self.annotation("volume.kubernetes.io/selected-node", n)
    }
    pub fn build(self) -> PersistentVolumeClaim {
        serde_json::from_value(self.0).unwrap()
    }
}

pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": format!("{name}.example.com"),
            "topology.kubernetes.io/zone": "west-1a"}}
    }))
    .unwrap()
}

/// The validated class configuration, panicking with the problems if there are any.
pub fn class_config(cm: &ConfigMap, sc: &StorageClass) -> ClassConfig {
    let provisioner = match parse_config_map(cm, P) {
        Verdict::Checked {
            config: Some(c), ..
        } => *c,
        other => panic!("configuration rejected: {other:#?}"),
    };
    ClassConfig::new(provisioner, StorageClassInfo::from_class(sc), P).unwrap()
}

/// Everything a claim produces: the Job for `attempt` and the PV template.
pub fn produce(
    cm: &ConfigMap,
    sc: &StorageClass,
    pvc: &PersistentVolumeClaim,
    node: Option<&Node>,
    attempt: u32,
) -> (Job, PersistentVolume) {
    let config = class_config(cm, sc);
    let claim = ClaimRequest::from_claim(pvc).unwrap();
    let node = node.map(flex_core::claim::NodeInfo::from_node);
    let rendered = render_for_claim(&config, &claim, node.as_ref(), P).unwrap();
    let pv = pv_template(&config, &claim, node.as_ref(), P);
    let job = provision_job(
        ProvisionContext {
            config: &config,
            claim: &claim,
            node: node.as_ref(),
            rendered: &rendered,
            pv_template: &pv,
            provisioner_name: P,
            source: None,
            inputs_hash: &flex_core::inputs::inputs_hash(&config, &claim),
        },
        attempt,
        DEFAULT_JOB_TTL_SECONDS,
    );
    (job, pv)
}

/// The value of env var `name` in the Job's container.
pub fn env(job: &Job, name: &str) -> Option<String> {
    envs(job).get(name).cloned()
}

/// The Job's (only) container.
pub fn container(job: &Job) -> &k8s_openapi::api::core::v1::Container {
    &job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}

/// Every env var of the Job's container, by name.
pub fn envs(job: &Job) -> BTreeMap<String, String> {
    container(job)
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn assert_meta_valid(
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
    for (k, v) in meta.labels.iter().flatten() {
        assert!(is_label_key(k), "{kind}: label key {k:?}");
        assert!(is_label_value(v), "{kind}: label {k}={v:?}");
    }
    for k in meta.annotations.iter().flatten().map(|(k, _)| k) {
        assert!(is_label_key(k), "{kind}: annotation key {k:?}");
    }
    let size: usize = meta
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    assert!(size < 256 * 1024, "{kind}: annotations total {size} bytes");
    for f in meta.finalizers.iter().flatten() {
        assert!(is_label_key(f), "{kind}: finalizer {f:?}");
    }
}

/// Asserts what the API server would check of a Job we generate.
pub fn assert_job_valid(job: &Job) {
    let name = job.metadata.name.as_deref().unwrap();
    assert!(is_dns_label(name), "job name {name:?} (len {})", name.len());
    assert!(is_dns_label(job.metadata.namespace.as_deref().unwrap()));
    assert_meta_valid("Job", &job.metadata);
    let spec = job.spec.as_ref().unwrap();
    assert_meta_valid("pod template", spec.template.metadata.as_ref().unwrap());
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.containers.len(), 1);
    for c in &pod.containers {
        assert!(is_dns_label(&c.name));
        assert!(c.image.as_deref().is_some_and(|i| !i.is_empty()));
        let mut seen = std::collections::BTreeSet::new();
        for e in c.env.iter().flatten() {
            assert!(is_env_name(&e.name), "env name {:?}", e.name);
            assert!(seen.insert(e.name.clone()), "env {} given twice", e.name);
        }
    }
    if let Some(sa) = &pod.service_account_name {
        assert!(is_dns_subdomain(sa));
    }
    for rule in spec.pod_failure_policy.iter().flat_map(|p| &p.rules) {
        if let Some(codes) = &rule.on_exit_codes {
            assert!(!codes.values.is_empty() && codes.values.len() <= 255);
            assert!(
                codes.values.iter().all(|v| *v != 0),
                "0 is not allowed with In"
            );
            assert!(
                codes.values.windows(2).all(|w| w[0] < w[1]),
                "values must be sorted and unique"
            );
        }
    }
}

pub fn assert_pv_valid(pv: &PersistentVolume) {
    let name = pv.metadata.name.as_deref().unwrap();
    assert!(is_dns_subdomain(name), "pv name {name:?}");
    assert_meta_valid("PV", &pv.metadata);
    let spec = pv.spec.as_ref().unwrap();
    assert!(spec.capacity.as_ref().unwrap().contains_key("storage"));
    assert!(!spec.access_modes.as_ref().unwrap().is_empty());
}

pub mod burst_timing;
pub mod cluster;
pub mod controller_process;
pub mod hostile;
pub mod populate;
pub mod provisioning;
// The sandbox crate's own test helpers (starting a sandbox, waiting for conditions).
pub use kube_sandbox::testing as sandbox;

/// The `flex-provisioner` binary cargo built beside the running test or benchmark
/// (`target/<profile>/deps/<test>` runs; the binary is `target/<profile>/flex-provisioner`).
pub fn binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the running test's path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent());
    profile_dir
        .expect("target/<profile>")
        .join("flex-provisioner")
}

/// The repository root: examples, images, deploy/ and testdata/ are found from here.
pub fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// Runs the test from the repository root, so that paths read as in the README
/// (`configmaps/hostpath.yaml`). Every test asks for the same directory, so the order in
/// which parallel tests call this does not matter.
pub fn at_root() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_current_dir(root()).expect("cd to the repository root"));
}
