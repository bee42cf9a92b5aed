//! What in a `pod-template` gives the Job's pod power over its node: privileged containers,
//! added capabilities, the host's namespaces and hostPath volumes. Such a template needs the
//! explicit opt-in `allow-privileged: "true"` (as local-path-provisioner guards its helper
//! pod), so that a ConfigMap cannot quietly hand every claim's Job the node.

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};

use super::ProvisionerConfig;
use super::options::ParseOptions;
use super::problem::Problem;

/// The opt-in key.
pub const ALLOW_PRIVILEGED_KEY: &str = "allow-privileged";

/// Every privileged feature of the template, each as the field that asks for it
/// (`spec.hostNetwork`, `spec.volumes[dev].hostPath`...), in document order.
pub fn privileged_features(template: &PodTemplateSpec) -> Vec<String> {
    let Some(spec) = &template.spec else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (field, on) in [
        ("hostPID", spec.host_pid),
        ("hostNetwork", spec.host_network),
        ("hostIPC", spec.host_ipc),
    ] {
        if on == Some(true) {
            found.push(format!("spec.{field}"));
        }
    }
    let lists: [(&str, Vec<&Container>); 2] = [
        ("containers", spec.containers.iter().collect()),
        (
            "initContainers",
            spec.init_containers.iter().flatten().collect(),
        ),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.into_iter().enumerate() {
            let Some(sc) = &c.security_context else {
                continue;
            };
            if sc.privileged == Some(true) {
                found.push(format!("spec.{list}[{i}].securityContext.privileged"));
            }
            let added = sc.capabilities.as_ref().and_then(|c| c.add.as_ref());
            if let Some(add) = added.filter(|a| !a.is_empty()) {
                found.push(format!(
                    "spec.{list}[{i}].securityContext.capabilities.add ({})",
                    add.join(", ")
                ));
            }
        }
    }
    // Ephemeral containers cannot be part of a pod template; the API server refuses them.
    for v in spec.volumes.iter().flatten() {
        if let Some(hp) = &v.host_path {
            found.push(format!("spec.volumes[{}].hostPath ({})", v.name, hp.path));
        }
    }
    found
}

/// What would let a Job act as more than a provisioner: the controller's own account,
/// or a privileged pod-template without the opt-in.
pub(super) fn check(c: &ProvisionerConfig, options: &ParseOptions) -> Vec<Problem> {
    let mut problems = Vec::new();
    if c.service_account.as_deref() == Some(options.controller_service_account.as_str())
        && c.namespace == options.controller_namespace
    {
        problems.push(Problem::error(
            Some("service-account-name"),
            format!(
                "`{}` is the controller's own service account (namespace `{}`): every claim's Job would run with the controller's permissions",
                options.controller_service_account, options.controller_namespace
            ),
            "name a service account made for the provisioner image, with only what it needs (deploy/ ships `flex-provisioner-volume-writer`)",
        ));
    }
    let features = c
        .pod_template
        .as_ref()
        .map(privileged_features)
        .unwrap_or_default();
    if !features.is_empty() && !c.allow_privileged {
        problems.push(Problem::error(
            Some("pod-template"),
            format!("gives the pod power over its node: {}", features.join(", ")),
            format!("remove them, or, if the image truly needs them (a hostPath or LVM provisioner), set `{ALLOW_PRIVILEGED_KEY}: \"true\"` and run its Jobs in a namespace whose Pod Security level allows it"),
        ));
    }
    if c.pv_creator == super::PvCreator::Controller
        && let Some(why) = c.pod_template.as_ref().and_then(token_requested)
    {
        problems.push(Problem::error(
            Some("pod-template"),
            format!("{why}, but with `pv-creator: controller` the Job's pod gets no API credentials: the controller creates the PV"),
            "remove it; an image that must call the API (e.g. `kubectl create` of the PV) needs `pv-creator: image`",
        ));
    }
    if features.is_empty() && c.allow_privileged {
        problems.push(Problem::warning(
            Some(ALLOW_PRIVILEGED_KEY),
            "is `true`, but the pod-template asks for nothing privileged",
            format!("remove `{ALLOW_PRIVILEGED_KEY}`, so that a later privileged change is refused until it is reviewed"),
        ));
    }
    problems
}

/// Where a pod-template asks for a service account token.
fn token_requested(t: &k8s_openapi::api::core::v1::PodTemplateSpec) -> Option<String> {
    let spec = t.spec.as_ref()?;
    if spec.automount_service_account_token == Some(true) {
        return Some("it sets automountServiceAccountToken: true".into());
    }
    spec.volumes
        .iter()
        .flatten()
        .find(|v| {
            v.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.service_account_token.is_some())
            })
        })
        .map(|v| format!("volume `{}` projects a service account token", v.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::pod_template::parse;

    fn features(yaml: &str) -> Vec<String> {
        privileged_features(&parse(yaml).unwrap())
    }

    #[test]
    fn each_privileged_feature_is_found() {
        assert_eq!(
            features(
                "spec:
  hostPID: true
  hostNetwork: true
  hostIPC: true
  initContainers: [{name: init, image: x, securityContext: {privileged: true}}]
  containers:
  - securityContext: {privileged: true, capabilities: {add: [SYS_ADMIN, NET_ADMIN], drop: [ALL]}}
  volumes:
  - {name: dev, hostPath: {path: /dev}}
  - {name: scratch, emptyDir: {}}"
            ),
            [
                "spec.hostPID",
                "spec.hostNetwork",
                "spec.hostIPC",
                "spec.containers[0].securityContext.privileged",
                "spec.containers[0].securityContext.capabilities.add (SYS_ADMIN, NET_ADMIN)",
                "spec.initContainers[0].securityContext.privileged",
                "spec.volumes[dev].hostPath (/dev)",
            ]
        );
    }

    #[test]
    fn ordinary_templates_are_not_privileged() {
        for yaml in [
            "spec: {}",
            "spec: {hostNetwork: false, containers: [{securityContext: {privileged: false, capabilities: {drop: [ALL], add: []}}}]}",
            "spec: {securityContext: {runAsUser: 0, runAsNonRoot: false}}",
            "spec: {volumes: [{name: export, nfs: {server: nfs.example.com, path: /exports}}]}",
        ] {
            assert!(features(yaml).is_empty(), "{yaml}");
        }
    }
}
