//! Every manifest we ship parses as a Kubernetes object without unknown fields, the
//! kustomization applies (client dry run) against the sandbox, and the examples pass `check`.

use crate::common;

use std::path::{Path, PathBuf};

use flex_provisioner::offline::{check_files, read_documents};
use serde_json::Value;

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && p.file_name().unwrap() != "kustomization.yaml"
        })
        .collect();
    files.sort();
    files
}

/// The first key of `input` that the typed object dropped (an unknown or misspelt field).
fn unknown_field(input: &Value, typed: &Value, path: &str) -> Option<String> {
    match (input, typed) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| match b.get(k) {
            None if !v.is_null() => Some(format!("{path}.{k}")),
            None => None,
            Some(t) => unknown_field(v, t, &format!("{path}.{k}")),
        }),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| unknown_field(x, y, &format!("{path}[{i}]"))),
        _ => None,
    }
}

fn typed(kind: &str, v: &Value) -> Result<Value, String> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admission, apps::v1 as apps, core::v1 as core,
        policy::v1 as policy, rbac::v1 as rbac, storage::v1 as storage,
    };
    fn round<T: serde::de::DeserializeOwned + serde::Serialize>(
        v: &Value,
    ) -> Result<Value, String> {
        let t: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        serde_json::to_value(t).map_err(|e| e.to_string())
    }
    match kind {
        "Namespace" => round::<core::Namespace>(v),
        "ServiceAccount" => round::<core::ServiceAccount>(v),
        "ConfigMap" => round::<core::ConfigMap>(v),
        "Service" => round::<core::Service>(v),
        "PersistentVolumeClaim" => round::<core::PersistentVolumeClaim>(v),
        "Pod" => round::<core::Pod>(v),
        "Deployment" => round::<apps::Deployment>(v),
        "PodDisruptionBudget" => round::<policy::PodDisruptionBudget>(v),
        "StorageClass" => round::<storage::StorageClass>(v),
        "ClusterRole" => round::<rbac::ClusterRole>(v),
        "ClusterRoleBinding" => round::<rbac::ClusterRoleBinding>(v),
        "Role" => round::<rbac::Role>(v),
        "RoleBinding" => round::<rbac::RoleBinding>(v),
        "ValidatingAdmissionPolicy" => round::<admission::ValidatingAdmissionPolicy>(v),
        "ValidatingAdmissionPolicyBinding" => {
            round::<admission::ValidatingAdmissionPolicyBinding>(v)
        }
        other => Err(format!("unexpected kind {other}")),
    }
}

#[test]
fn every_manifest_is_a_valid_kubernetes_object() {
    common::at_root();
    let files: Vec<PathBuf> = ["deploy", "configmaps", "examples"]
        .iter()
        .flat_map(|d| yaml_files(d))
        .collect();
    assert!(files.len() >= 10, "{files:?}");
    let mut kinds = Vec::new();
    for f in &files {
        for doc in read_documents(f).unwrap() {
            let t = typed(&doc.kind, &doc.value)
                .unwrap_or_else(|e| panic!("{}: {} is not valid: {e}", f.display(), doc.kind));
            if let Some(field) = unknown_field(&doc.value, &t, "") {
                panic!("{}: {} has unknown field {field}", f.display(), doc.kind);
            }
            kinds.push(doc.kind.clone());
        }
    }
    for k in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ConfigMap",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(kinds.iter().any(|x| x == k), "no {k} shipped");
    }
}

#[test]
fn the_deployment_follows_least_privilege_and_is_probed() {
    common::at_root();
    let docs = read_documents(Path::new("deploy/deployment.yaml")).unwrap();
    let d = &docs[0].value;
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    // Production shape: a ready standby for fast failover, one pod replaced at a time, and
    // time to hand the Lease over on SIGTERM.
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    assert!(pod["terminationGracePeriodSeconds"].as_i64().unwrap() >= 10);
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert_eq!(
        c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name",
        "the pod name is passed for events"
    );
    // The images' account can only create and read PVs.
    let rbac = read_documents(Path::new("deploy/rbac.yaml")).unwrap();
    let writer = rbac
        .iter()
        .find(|r| {
            r.kind == "ClusterRole"
                && r.value["metadata"]["name"] == "flex-provisioner-volume-writer"
        })
        .unwrap();
    assert_eq!(
        writer.value["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["create", "get"]}])
    );
    let controller = rbac
        .iter()
        .find(|r| r.kind == "ClusterRole" && r.value["metadata"]["name"] == "flex-provisioner")
        .unwrap();
    let text = controller.value.to_string();
    assert!(!text.contains("\"*\""), "no wildcards");
    assert!(
        !text.contains("secrets"),
        "the controller never reads Secrets"
    );
}

#[test]
fn every_example_configuration_passes_check() {
    common::at_root();
    let ours: Vec<PathBuf> = yaml_files("configmaps")
        .into_iter()
        .filter(|p| !p.ends_with("original-proposal.yaml"))
        .collect();
    let report = check_files(&ours, &[], flex_core::names::DEFAULT_PROVISIONER_NAME);
    assert_eq!(
        (report.errors, report.warnings),
        (0, 0),
        "{:#?}",
        report.lines
    );
    let proposal = check_files(
        &[PathBuf::from("configmaps/original-proposal.yaml")],
        &[],
        "kubernetes.io/flex-provisioner",
    );
    assert_eq!(proposal.errors, 0, "{:#?}", proposal.lines);
}

/// Runs kubectl with the sandbox's kubeconfig; it must be installed (no silent skip).
async fn kubectl(kubeconfig: std::path::PathBuf, args: &[&str]) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .args(&args)
            .output()
            .expect("kubectl must be installed for this test (Debian: apt-get install kubernetes-client)")
    })
    .await
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn kubectl_builds_and_applies_the_kustomization_in_a_dry_run() {
    common::at_root();
    let sb = common::sandbox::start().await;
    let (ok, built, err) = kubectl(sb.kubeconfig.clone(), &["kustomize", "deploy/"]).await;
    assert!(ok, "kubectl kustomize deploy/: {err}");
    for kind in [
        "kind: ValidatingAdmissionPolicy\n",
        "kind: ValidatingAdmissionPolicyBinding\n",
        "name: flex-provisioner-config\n",
    ] {
        assert!(
            built.contains(kind),
            "missing {kind:?} in the kustomization"
        );
    }
    let (ok, stdout, err) = kubectl(
        sb.kubeconfig.clone(),
        &["apply", "--dry-run=client", "-k", "deploy/"],
    )
    .await;
    assert!(ok, "{err}{stdout}");
    for line in [
        "namespace/flex-provisioner created (dry run)",
        "namespace/flex-provisioner-config created (dry run)",
        "deployment.apps/flex-provisioner created (dry run)",
        "clusterrole.rbac.authorization.k8s.io/flex-provisioner-volume-writer created (dry run)",
        "validatingadmissionpolicy.admissionregistration.k8s.io/flex-provisioner-image-volumes created (dry run)",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/flex-provisioner-image-volumes created (dry run)",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    // The API server's own schema check of the policy (the sandbox validates the typed
    // object; it does not compile the CEL, see docs/sandbox-known-differences.md).
    let (ok, stdout, err) = kubectl(
        sb.kubeconfig.clone(),
        &[
            "apply",
            "--dry-run=server",
            "-f",
            "deploy/admission-policy.yaml",
        ],
    )
    .await;
    assert!(ok, "{err}{stdout}");
    assert!(
        stdout.contains("flex-provisioner-image-volumes created (server dry run)"),
        "{stdout}"
    );
}
