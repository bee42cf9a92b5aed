//! The `render` and `check` commands as a kube admin runs them: output, exit codes, help.

use crate::common;

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flex-provisioner"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("FLEX_PROVISIONER_NAME")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn render_prints_the_job_and_pv_template() {
    common::at_root();
    let o = run(&[
        "render",
        "--config",
        "configmaps/nfs-subdir.yaml",
        "--class",
        "configmaps/nfs-subdir.yaml",
        "--claim",
        "testdata/fixtures/claim.yaml",
        "--attempt",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["kind"], "Job");
    assert_eq!(
        docs[0]["metadata"]["name"],
        "provision-3f0c1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b-3"
    );
    assert_eq!(docs[1]["kind"], "PersistentVolume");
    assert_eq!(docs[1]["spec"]["storageClassName"], "nfs-shared");
}

#[test]
fn render_shows_the_expansion_job_for_a_new_size() {
    common::at_root();
    let base = [
        "render",
        "--config",
        "configmaps/nfs-subdir.yaml",
        "--class",
        "configmaps/nfs-subdir.yaml",
        "--claim",
        "testdata/fixtures/claim.yaml",
        "--action",
        "expand",
    ];
    let o = run(&[&base[..], &["--size", "20Gi"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let job: serde_json::Value = serde_yaml_ng::from_str(&stdout(&o)).unwrap();
    assert!(
        job["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("expand-"),
        "{job}"
    );
    let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    let var = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .map(|e| e["value"].clone())
    };
    assert_eq!(var("ACTION"), Some(serde_json::json!("expand")));
    assert_eq!(var("REQUESTED_SIZE"), Some(serde_json::json!("20Gi")));
    assert_eq!(
        var("REQUESTED_BYTES"),
        Some(serde_json::json!((20u64 << 30).to_string()))
    );
    assert!(var("PV_JSON").is_some());
    // Without a size, and with one that does not grow the claim: one line saying why.
    let o = run(&base);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--size"), "{}", stderr(&o));
    let o = run(&[&base[..], &["--size", "1Mi"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is not more than the claim's request"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn render_explains_what_is_missing_in_one_line() {
    common::at_root();
    let o = run(&[
        "render",
        "--config",
        "configmaps/hostpath.yaml",
        "--class",
        "configmaps/hostpath.yaml",
        "--claim",
        "testdata/fixtures/claim.yaml",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("pass --node NODE.yaml"), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );

    let o = run(&[
        "render",
        "--config",
        "testdata/fixtures/original-proposal-verbatim.yaml",
        "--class",
        "configmaps/original-proposal.yaml",
        "--claim",
        "testdata/fixtures/claim.yaml",
        "--provisioner-name",
        "kubernetes.io/flex-provisioner",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("key `service-token`"), "{}", stderr(&o));

    let o = run(&[
        "render",
        "--config",
        "nope.yaml",
        "--class",
        "x",
        "--claim",
        "y",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope.yaml"), "{}", stderr(&o));
}

#[test]
fn check_passes_the_examples_and_fails_bad_configurations() {
    common::at_root();
    let o = run(&[
        "check",
        "configmaps/hostpath.yaml",
        "configmaps/nfs-subdir.yaml",
        "configmaps/lvm-kubectl.yaml",
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("3 ConfigMap(s) checked: 0 error(s), 0 warning(s)"),
        "{}",
        stdout(&o)
    );

    let o = run(&[
        "check",
        "--provisioner-name",
        "kubernetes.io/flex-provisioner",
        "testdata/fixtures/original-proposal-verbatim.yaml",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let line = out.lines().find(|l| l.contains("service-token")).unwrap();
    assert!(line.starts_with("testdata/fixtures/original-proposal-verbatim.yaml: ConfigMap admin/custom-isci-provisioner: error: key `service-token`:"), "{line}");
    assert!(line.contains("fix: "), "{line}");

    // Warnings pass unless --strict.
    let o = run(&[
        "check",
        "--provisioner-name",
        "kubernetes.io/flex-provisioner",
        "configmaps/original-proposal.yaml",
    ]);
    assert!(o.status.success());
    let dir = std::env::temp_dir().join(format!("flex-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let unpinned = dir.join("unpinned.yaml");
    std::fs::write(&unpinned, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {type: provisioner-config, storage-class: s}}\ndata: {image: repo/img}\n").unwrap();
    let path = unpinned.to_str().unwrap();
    assert!(run(&["check", path]).status.success());
    let o = run(&["check", "--strict", path]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("warning: key `image`"),
        "{}",
        stdout(&o)
    );

    // Cross-checks with a StorageClass given separately, and one bad file among good ones.
    let immediate = dir.join("sc.yaml");
    std::fs::write(&immediate, "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local-hostpath}\nprovisioner: flex-provisioner.io/job\n").unwrap();
    let broken = dir.join("broken.yaml");
    std::fs::write(&broken, "kind: [").unwrap();
    let hostpath_cm = dir.join("hostpath-cm.yaml");
    let text = std::fs::read_to_string("configmaps/hostpath.yaml").unwrap();
    std::fs::write(&hostpath_cm, text.split("---").nth(1).unwrap()).unwrap();
    let o = run(&[
        "check",
        hostpath_cm.to_str().unwrap(),
        broken.to_str().unwrap(),
        "--class",
        immediate.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("key `node-local`: is `true`, but class `local-hostpath` binds Immediately"),
        "{out}"
    );
    assert!(out.contains("broken.yaml: error: "), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_is_complete_for_every_subcommand() {
    common::at_root();
    let top = stdout(&run(&["--help"]));
    for word in ["render", "check", "--version"] {
        assert!(top.contains(word), "top-level help lacks {word}:\n{top}");
    }
    let render = stdout(&run(&["render", "--help"]));
    for word in [
        "--config",
        "--class",
        "--claim",
        "--node",
        "--attempt",
        "--job-ttl",
        "--provisioner-name",
        "FLEX_PROVISIONER_NAME",
        "default class",
    ] {
        assert!(render.contains(word), "render help lacks {word}:\n{render}");
    }
    let check = stdout(&run(&["check", "--help"]));
    for word in [
        "--class",
        "--strict",
        "--provisioner-name",
        "exits 1",
        "one line per problem",
    ] {
        assert!(check.contains(word), "check help lacks {word}:\n{check}");
    }
}

/// `sandbox --auth`: the kubeconfig it writes carries an admin token and the CA, and
/// kubectl's `auth can-i` answers as a cluster with deploy/'s RBAC would.
#[test]
fn sandbox_with_auth_answers_kubectl_auth_can_i_as_a_cluster() {
    let dir = std::env::temp_dir().join(format!("flex-cli-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_flex-provisioner"))
        .args(["sandbox", "--auth", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .expect("kubectl is installed (Debian: apt-get install kubernetes-client)")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // deploy/'s RBAC is installed with the in-sandbox controller: wait for its role.
    let answer = loop {
        let out = kubectl(&[
            "auth",
            "can-i",
            "list",
            "persistentvolumeclaims",
            "--as=system:serviceaccount:flex-provisioner:flex-provisioner",
        ]);
        if String::from_utf8_lossy(&out.stdout).trim() == "yes" {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "{out:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(answer.status.success());
    let refused = kubectl(&[
        "auth",
        "can-i",
        "list",
        "secrets",
        "--as=system:serviceaccount:flex-provisioner:flex-provisioner",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(String::from_utf8_lossy(&refused.stdout).trim(), "no");
    let _ = std::fs::remove_dir_all(&dir);
}
