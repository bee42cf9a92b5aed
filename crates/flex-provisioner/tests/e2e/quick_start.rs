//! The quick start as a newcomer runs it: `sandbox --apply <example>` works for every
//! example under configmaps/ and examples/ (through `sandbox_cmd::apply_files`, the code
//! path of `--apply`, after the `INSTALL` the sandbox command applies), and, with auth on,
//! kubectl over HTTPS answers `auth can-i` truthfully for deploy/'s roles.
//! kubectl is required: the can-i test fails (it does not skip) when it is not installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use flex_provisioner::sandbox_cmd::{INSTALL, apply_builtin, apply_files};
use kube_sandbox::{Sandbox, SandboxOptions};

/// The repository root: example paths are relative to it, as in the README.
fn at_root() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::set_current_dir(root).unwrap();
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["configmaps", "examples"]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

async fn sandbox(auth: bool) -> Sandbox {
    Sandbox::start(SandboxOptions {
        auth,
        ..Default::default()
    })
    .await
    .expect("sandbox starts")
}

#[tokio::test]
async fn every_example_applies_cleanly_on_its_own() {
    at_root();
    let files = examples();
    assert!(
        files.len() >= 5,
        "configmaps/ and examples/ hold the examples: {files:?}"
    );
    for file in files {
        let sb = sandbox(false).await;
        for line in apply_builtin(&sb, INSTALL) {
            assert!(line.ends_with(" created"), "INSTALL: {line}");
        }
        let lines = apply_files(&sb, std::slice::from_ref(&file)).unwrap();
        assert!(!lines.is_empty(), "{} holds no object", file.display());
        for line in &lines {
            assert!(
                line.ends_with(" created"),
                "{}: {line}\n(all: {lines:#?})",
                file.display()
            );
        }
        // Every ServiceAccount a provisioner ConfigMap names exists in its namespace.
        for doc in flex_provisioner::offline::read_documents(&file).unwrap() {
            if doc.kind != "ConfigMap" {
                continue;
            }
            let Some(sa) = doc.value["data"]["service-account-name"].as_str() else {
                continue;
            };
            let ns = doc.value["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default");
            let rid = kube_sandbox::resources::find("", "v1", "serviceaccounts").unwrap();
            assert!(
                sb.api.get(rid, ns, sa).is_ok(),
                "{}: the ConfigMap's ServiceAccount {ns}/{sa} does not exist",
                file.display()
            );
        }
    }
}

#[tokio::test]
async fn applying_what_exists_again_keeps_it() {
    at_root();
    let sb = sandbox(false).await;
    apply_builtin(&sb, INSTALL);
    let lines = apply_files(&sb, &[PathBuf::from("deploy/serviceaccounts.yaml")]).unwrap();
    assert_eq!(
        lines,
        [
            "serviceaccount/flex-provisioner unchanged (already exists)",
            "serviceaccount/flex-provisioner-volume-writer unchanged (already exists)"
        ]
    );
}

fn kubectl(kubeconfig: &Path, args: &str) -> (i32, String, String) {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args.split_whitespace())
        .stdin(Stdio::null())
        .output()
        .expect(
            "kubectl must be installed for this test (Debian: apt-get install kubernetes-client)",
        );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

async fn kubectl_async(kubeconfig: &Path, args: &str) -> (i32, String, String) {
    let kc = kubeconfig.to_owned();
    let args = args.to_owned();
    tokio::task::spawn_blocking(move || kubectl(&kc, &args))
        .await
        .unwrap()
}

const CONTROLLER: &str = "--as=system:serviceaccount:flex-provisioner:flex-provisioner";
const WRITER: &str =
    "--as=system:serviceaccount:flex-provisioner-config:flex-provisioner-volume-writer";

#[tokio::test]
async fn auth_can_i_tells_the_truth_about_deploy_roles() {
    at_root();
    let sb = sandbox(true).await;
    for line in apply_builtin(&sb, INSTALL) {
        assert!(line.ends_with(" created"), "INSTALL: {line}");
    }
    let kc = sb.kubeconfig.clone();
    for (who, question, answer) in [
        (
            CONTROLLER,
            "list persistentvolumeclaims --all-namespaces",
            "yes",
        ),
        (CONTROLLER, "patch persistentvolumeclaims -n default", "yes"),
        (CONTROLLER, "delete persistentvolumes", "yes"),
        (CONTROLLER, "create persistentvolumes", "yes"),
        (
            CONTROLLER,
            "create jobs.batch -n flex-provisioner-config",
            "yes",
        ),
        (CONTROLLER, "create jobs.batch -n flex-provisioner", "no"),
        (CONTROLLER, "create jobs.batch -n default", "no"),
        (
            CONTROLLER,
            "create configmaps -n flex-provisioner-config",
            "yes",
        ),
        (CONTROLLER, "create configmaps -n flex-provisioner", "no"),
        (
            CONTROLLER,
            "update leases.coordination.k8s.io -n flex-provisioner",
            "yes",
        ),
        (
            CONTROLLER,
            "delete leases.coordination.k8s.io -n flex-provisioner",
            "no",
        ),
        (
            CONTROLLER,
            "update leases.coordination.k8s.io -n flex-provisioner-config",
            "no",
        ),
        (CONTROLLER, "get secrets -n flex-provisioner", "no"),
        // Caches, not reads per claim: nodes and the Job controller's events are watched; a
        // node is read only when a claim names one the cache lacks, and never written.
        (CONTROLLER, "watch nodes", "yes"),
        (CONTROLLER, "get nodes", "yes"),
        (CONTROLLER, "patch nodes", "no"),
        (CONTROLLER, "watch events -n flex-provisioner-config", "yes"),
        (CONTROLLER, "watch events -n default", "no"),
        (WRITER, "create persistentvolumes", "yes"),
        (WRITER, "get persistentvolumes", "yes"),
        (WRITER, "delete persistentvolumes", "no"),
        (WRITER, "list configmaps -n flex-provisioner-config", "no"),
        (WRITER, "create jobs.batch -n flex-provisioner-config", "no"),
    ] {
        let (rc, out, err) = kubectl_async(&kc, &format!("auth can-i {question} {who}")).await;
        assert_eq!(out, answer, "{who} can-i {question}: {err}");
        assert_eq!(
            rc,
            i32::from(answer == "no"),
            "{who} can-i {question}: {err}"
        );
    }

    // The same with the image account's own token (`kubectl create token`), and the 403
    // a refused request gets.
    let (rc, token, err) = kubectl_async(
        &kc,
        "create token flex-provisioner-volume-writer -n flex-provisioner-config",
    )
    .await;
    assert_eq!(rc, 0, "{err}");
    let admin = std::fs::read_to_string(&kc).unwrap();
    let writer_kc = sb.work_dir.join("kubeconfig-writer");
    std::fs::write(
        &writer_kc,
        admin.replace(sb.auth.as_ref().unwrap().admin_token(), &token),
    )
    .unwrap();
    let (rc, out, _) = kubectl_async(&writer_kc, "auth can-i create persistentvolumes").await;
    assert_eq!((rc, out.as_str()), (0, "yes"));
    let (rc, _, err) = kubectl_async(&writer_kc, "get configmaps -n flex-provisioner-config").await;
    assert_eq!(rc, 1);
    assert_eq!(
        err,
        "Error from server (Forbidden): configmaps is forbidden: User \"system:serviceaccount:flex-provisioner-config:flex-provisioner-volume-writer\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"flex-provisioner-config\""
    );
}
