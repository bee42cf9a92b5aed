//! The shipped images on a hostile filesystem (issue #13): symbolic links planted below the
//! base, control characters in parameters, archives of one volume in the same second, and
//! lvm-kubectl's validation. The real entrypoints run through the sandbox's pod runner:
//! as bare pods with the env a Job's pod gets (so each case sets exactly the value under
//! test), and end to end through the controller with the shipped example ConfigMaps.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use common::cluster::Cluster;
use common::provisioning::{
    NS, bound, claim_with_pod, node_cluster, sandbox_only_with, storage_dir, wait_event,
    with_examples_on,
};
use common::sandbox::eventually;
use flex_provisioner::offline::{RenderInput, parse_documents, read_documents, render_files};
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

/// The node bare pods run on.
const NODE: &str = "node-a";
/// hostpath's base in `configmaps/hostpath.yaml`, as a node path.
const BASE: &str = "/var/lib/flex-provisioner/volumes";
const PV: &str = "pvc-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

/// What a finished pod reported.
#[derive(Debug)]
struct Outcome {
    code: i32,
    message: String,
    log: String,
}

/// Runs `image` as a bare pod on [`NODE`] with `env`, the export of nfs-subdir's example
/// mounted at /export when `nfs`, and waits until it has finished. The container gets the
/// securityContext of the image's shipped class ([`shipped_security`]), so the script has
/// exactly the capabilities its Jobs have.
async fn run_image(
    sb: &Cluster,
    pod: &str,
    image: &str,
    env: &[(&str, &str)],
    nfs: bool,
) -> Outcome {
    run_image_as(sb, pod, image, env, nfs, &shipped_security(image)).await
}

/// [`run_image`] with the container's `securityContext` given (`null`: none).
async fn run_image_as(
    sb: &Cluster,
    pod: &str,
    image: &str,
    env: &[(&str, &str)],
    nfs: bool,
    security: &Value,
) -> Outcome {
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    let real = sb.is_real_node();
    let image_ref = if real {
        format!("ghcr.io/flex-provisioner/{image}:0.1.0")
    } else {
        image.to_owned()
    };
    let mut container = json!({"name": "c", "image": image_ref, "env": env,
        "imagePullPolicy": "IfNotPresent"});
    if !security.is_null() {
        container["securityContext"] = security.clone();
    }
    let mut spec = json!({"nodeName": NODE, "restartPolicy": "Never"});
    if nfs {
        container["volumeMounts"] = json!([{"name": "export", "mountPath": "/export"}]);
        spec["volumes"] = if real {
            // No NFS server: the export's directory stands for it, as the kubelet mounts it.
            json!([{"name": "export", "hostPath": {"path": export_dir(sb), "type": "Directory"}}])
        } else {
            json!([{"name": "export",
                "nfs": {"server": "nfs.storage.example.com", "path": "/exports/k8s"}}])
        };
    } else if image == "hostpath" {
        // As configmaps/hostpath.yaml mounts its base: at the same path as on the node.
        let base = base_path(sb);
        container["volumeMounts"] = json!([{"name": "base", "mountPath": base}]);
        spec["volumes"] =
            json!([{"name": "base", "hostPath": {"path": base, "type": "DirectoryOrCreate"}}]);
        spec["securityContext"] = json!({"runAsUser": 0});
    }
    spec["containers"] = json!([container]);
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": pod}, "spec": spec})).unwrap(),
    )
    .await
    .unwrap();
    let status = eventually(60, &format!("pod {pod} to finish"), || async {
        let s = pods.get(pod).await.ok()?.status?;
        matches!(s.phase.as_deref(), Some("Succeeded" | "Failed")).then_some(s)
    })
    .await;
    let term = status.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    Outcome {
        code: term.exit_code,
        message: term.message.unwrap_or_default(),
        log: pod_log(sb, pod).await,
    }
}

/// What pod `pod` in `default` logged: from the kubelet on a real node (`kubectl logs`),
/// from the sandbox's node otherwise.
async fn pod_log(sb: &Cluster, pod: &str) -> String {
    match sb.sandbox() {
        Some(sim) => sim.kubelet.logs.get("default", pod),
        None => {
            let kubeconfig = sb.kubeconfig.clone();
            let args: Vec<String> = ["logs", "-n", "default", pod].map(String::from).to_vec();
            let out =
                tokio::task::spawn_blocking(move || common::cluster::kubectl(&kubeconfig, &args))
                    .await
                    .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    }
}

/// The container `securityContext` of the Jobs that `configmaps/<image>.yaml` runs, as the
/// controller builds them (`render` of the example, as the golden test does): the image's
/// own grant merged with ours.
fn shipped_security(image: &str) -> Value {
    let root = common::root();
    let example = root.join(format!("configmaps/{image}.yaml"));
    let class: StorageClass = read_documents(&example)
        .unwrap()
        .into_iter()
        .find(|d| d.kind == "StorageClass")
        .unwrap()
        .to_object()
        .unwrap();
    let waits = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
    let rendered = render_files(&RenderInput {
        config: example.clone(),
        class: example.clone(),
        claim: root.join("testdata/fixtures/claim.yaml"),
        node: waits.then(|| root.join("testdata/fixtures/node.yaml")),
        provisioner_name: class.provisioner.clone(),
        attempt: 1,
        ttl_seconds: 3600,
        expand_to: None,
        snapshot: None,
    })
    .unwrap_or_else(|e| panic!("{}: {e}", example.display()));
    let job = parse_documents(&rendered, "render")
        .unwrap()
        .into_iter()
        .find(|d| d.kind == "Job")
        .expect("render prints the Job");
    job.value["spec"]["template"]["spec"]["containers"][0]["securityContext"].clone()
}

/// `security` without its `capabilities.add`: our `drop: [ALL]` alone.
fn without_added_capabilities(security: &Value) -> Value {
    let mut s = security.clone();
    s["capabilities"]
        .as_object_mut()
        .expect("a capabilities object")
        .remove("add");
    s
}

/// Makes `path` belong to `uid`:`uid` with `mode`.
fn own(path: &Path, uid: u32, mode: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// In `vol`: `home/`, private to uid 1000 (mode `home_mode`), holding `secret` (0600, uid
/// 1000, modified at a fixed time), and `tmp/`, a sticky directory of uid 1000 holding a
/// file of uid 1001: what a volume's users leave in it.
fn users_files(vol: &Path, home_mode: u32) {
    let home = vol.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("secret"), "only mine").unwrap();
    std::fs::File::options()
        .write(true)
        .open(home.join("secret"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000))
        .unwrap();
    own(&home.join("secret"), 1000, 0o600);
    own(&home, 1000, home_mode);
    let tmp = vol.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("theirs"), "x").unwrap();
    own(&tmp.join("theirs"), 1001, 0o644);
    own(&tmp, 1000, 0o1777);
}

/// The hostpath image's env for `action` on `directory`.
fn hostpath_env<'a>(sb: &Cluster, action: &'a str, directory: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("ACTION", action),
        ("BASE_PATH", base_path(sb)),
        ("DIRECTORY", directory),
        ("PV_TYPE", "local"),
        ("PV_NAME", PV),
        ("SELECTED_NODE", NODE),
    ]
}

/// The nfs-subdir image's env for `action` on `subdir`, as `configmaps/nfs-subdir.yaml`.
fn nfs_env<'a>(action: &'a str, subdir: &'a str, on_delete: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("ACTION", action),
        ("NFS_SERVER", "nfs.storage.example.com"),
        ("NFS_EXPORT", "/exports/k8s"),
        ("EXPORT_ROOT", "/export"),
        ("SUBDIR", subdir),
        ("ON_DELETE", on_delete),
        ("PV_NAME", PV),
    ]
}

/// `env` with `key` set to `value`.
fn with<'a>(
    mut env: Vec<(&'a str, &'a str)>,
    key: &'a str,
    value: &'a str,
) -> Vec<(&'a str, &'a str)> {
    env.retain(|(k, _)| *k != key);
    env.push((key, value));
    env
}

/// hostpath's base on a sandbox node.
fn node_base(sb: &Cluster, node: &str) -> PathBuf {
    sb.node_root(node)
        .join(base_path(sb).trim_start_matches('/'))
}

/// hostpath's base as its Jobs name it: [`BASE`] on the sandbox's nodes; on a real node,
/// whose paths are the host's, a directory of the test's own cluster.
fn base_path(sb: &Cluster) -> &'static str {
    match sb.real_dir() {
        Some(dir) if sb.is_real_node() => {
            // Leaked once per test: the env's values borrow it for the whole test.
            Box::leak(dir.join("volumes").display().to_string().into_boxed_str())
        }
        _ => BASE,
    }
}

/// Where the sandbox keeps the files of nfs-subdir's example export.
fn export_dir(sb: &Cluster) -> PathBuf {
    let dir = sb.nfs_dir("nfs.storage.example.com", "/exports/k8s");
    if sb.is_real_node() {
        // The export as an NFS server would offer it to nfs-subdir's non-root user: the
        // kubelet mounts this directory in its place (there is no NFS server here).
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    dir
}

/// A directory outside every base, with `victim/keep` in it and `victim` at mode 0700: what
/// a planted link points at.
fn outside(sb: &Cluster) -> PathBuf {
    let out = match sb.sandbox() {
        Some(sim) => sim.work_dir.join("outside"),
        None => sb.real_dir().unwrap().join("outside"),
    };
    let victim = out.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), "not yours").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
    out
}

/// Asserts that what [`outside`] made is exactly as it was.
fn assert_outside_untouched(out: &Path) {
    assert_eq!(
        names(out),
        ["victim"],
        "nothing was created outside the base"
    );
    let victim = out.join("victim");
    assert_eq!(names(&victim), ["keep"], "nothing was added or removed");
    assert_eq!(
        std::fs::read_to_string(victim.join("keep")).unwrap(),
        "not yours"
    );
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "no chmod outside the base");
}

/// The names in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A scratch directory of the test's own, removed when dropped (also when the test fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "flex-{what}-{}-{}",
            std::process::id(),
            kube_sandbox::ids::name_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

#[tokio::test]
async fn hostpath_refuses_a_link_planted_in_the_base_at_provision() {
    let sb = node_cluster().await;
    let out = outside(&sb);
    let base = node_base(&sb, NODE);
    std::fs::create_dir_all(base.join("team")).unwrap();
    // A component of the path is a link out of the base.
    symlink(&out, base.join("default")).unwrap();
    let r = run_image(
        &sb,
        "at-component",
        "hostpath",
        &hostpath_env(&sb, "provision", "default/victim"),
        false,
    )
    .await;
    assert_eq!(r.code, 2, "the permanent exit code: {r:?}");
    assert!(
        r.message.contains(&format!(
            "refusing {}/default: it is a symbolic link",
            base_path(&sb)
        )),
        "a clear message naming the link: {r:?}"
    );
    // The claim's own directory is a link out of the base.
    symlink(out.join("victim"), base.join("team/data")).unwrap();
    let r = run_image(
        &sb,
        "at-directory",
        "hostpath",
        &hostpath_env(&sb, "provision", "team/data"),
        false,
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.message.contains(&format!(
            "refusing {}/team/data: it is a symbolic link",
            base_path(&sb)
        )),
        "{r:?}"
    );
    // Even a link that stays inside the base is not followed.
    symlink(base.join("team"), base.join("loop")).unwrap();
    let r = run_image(
        &sb,
        "inside",
        "hostpath",
        &hostpath_env(&sb, "provision", "loop/x"),
        false,
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        !base.join("team/x").exists(),
        "nothing made through the link"
    );
    assert_outside_untouched(&out);
    assert!(is_link(&base.join("default")) && is_link(&base.join("team/data")));
}

#[tokio::test]
async fn hostpath_deprovision_never_follows_a_link_nor_removes_outside_the_base() {
    let sb = node_cluster().await;
    let out = outside(&sb);
    let base = node_base(&sb, NODE);
    std::fs::create_dir_all(base.join("team")).unwrap();
    symlink(&out, base.join("default")).unwrap();
    symlink(out.join("victim"), base.join("team/data")).unwrap();
    for (pod, dir) in [
        ("at-component", "default/victim"),
        ("at-directory", "team/data"),
    ] {
        let r = run_image(
            &sb,
            pod,
            "hostpath",
            &hostpath_env(&sb, "deprovision", dir),
            false,
        )
        .await;
        assert_eq!(r.code, 2, "refused with the permanent exit code: {r:?}");
        assert!(
            r.message.contains("is a symbolic link") && r.message.contains("nothing was changed"),
            "{r:?}"
        );
    }
    assert_outside_untouched(&out);
    assert!(
        is_link(&base.join("default")) && is_link(&base.join("team/data")),
        "links left for the admin"
    );

    // Links the tenant made inside its own volume are removed, never what they point at.
    let vol = base.join("ns/vol");
    std::fs::create_dir_all(vol.join("sub")).unwrap();
    std::fs::write(vol.join("sub/own"), "mine").unwrap();
    symlink(&out, vol.join("escape")).unwrap();
    symlink(out.join("victim"), vol.join("sub/escape-dir")).unwrap();
    symlink(out.join("victim/keep"), vol.join("escape-file")).unwrap();
    let r = run_image(
        &sb,
        "inner-links",
        "hostpath",
        &hostpath_env(&sb, "deprovision", "ns/vol"),
        false,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!vol.exists() && !is_link(&vol), "the volume is gone");
    assert!(
        !base.join("ns").exists(),
        "its parent, left empty, is gone too"
    );
    assert!(base.is_dir(), "the base stays");
    assert_outside_untouched(&out);

    // Already gone is success.
    let r = run_image(
        &sb,
        "gone",
        "hostpath",
        &hostpath_env(&sb, "deprovision", "ns/vol"),
        false,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.log.contains("already gone"), "{r:?}");
}

#[tokio::test]
async fn hostpath_refuses_control_characters_in_its_paths() {
    let sb = node_cluster().await;
    let base = node_base(&sb, NODE);
    for (i, dir) in [
        "default/a\nb",
        "default/a\tb",
        "default/x\n",
        "default/\u{1b}[1mx",
    ]
    .iter()
    .enumerate()
    {
        for action in ["provision", "deprovision"] {
            let r = run_image(
                &sb,
                &format!("dir-{action}-{i}"),
                "hostpath",
                &hostpath_env(&sb, action, dir),
                false,
            )
            .await;
            assert_eq!(r.code, 2, "{dir:?} ({action}): {r:?}");
            assert!(
                r.message
                    .contains("parameter directory contains a control character"),
                "a clear message: {r:?}"
            );
            assert_eq!(r.message.lines().count(), 1, "one line: {r:?}");
        }
    }
    let r = run_image(
        &sb,
        "base",
        "hostpath",
        &with(
            hostpath_env(&sb, "provision", "default/a"),
            "BASE_PATH",
            "/srv\n/etc",
        ),
        false,
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.message
            .contains("parameter base-path contains a control character"),
        "{r:?}"
    );
    // The kubelet makes the mounted base; nothing was made in it.
    assert!(names(&base).is_empty(), "no stray directory was made");
    if !sb.is_real_node() {
        assert!(!sb.node_root(NODE).join("srv").exists());
    }
}

#[tokio::test]
async fn nfs_subdir_refuses_links_planted_in_the_export() {
    let sb = node_cluster().await;
    let out = outside(&sb);
    let export = export_dir(&sb);
    std::fs::create_dir_all(&export).unwrap();
    symlink(&out, export.join("shared")).unwrap();
    let cases = [
        ("provision", "shared/default-data", "delete"),
        ("deprovision", "shared/victim", "delete"),
        ("deprovision", "shared/victim", "archive"),
    ];
    for (i, (action, subdir, on_delete)) in cases.into_iter().enumerate() {
        let r = run_image(
            &sb,
            &format!("link-{i}"),
            "nfs-subdir",
            &nfs_env(action, subdir, on_delete),
            true,
        )
        .await;
        assert_eq!(r.code, 2, "{action} {subdir} ({on_delete}): {r:?}");
        assert!(
            r.message
                .contains("refusing /export/shared: it is a symbolic link"),
            "{r:?}"
        );
    }
    assert_outside_untouched(&out);
    // The subdirectory itself a link, at deprovisioning.
    std::fs::create_dir_all(export.join("team")).unwrap();
    symlink(out.join("victim"), export.join("team/data")).unwrap();
    for on_delete in ["delete", "archive"] {
        let r = run_image(
            &sb,
            &format!("final-{on_delete}"),
            "nfs-subdir",
            &nfs_env("deprovision", "team/data", on_delete),
            true,
        )
        .await;
        assert_eq!(r.code, 2, "{r:?}");
        assert!(
            r.message
                .contains("refusing /export/team/data: it is a symbolic link"),
            "{r:?}"
        );
    }
    assert_outside_untouched(&out);
    assert_eq!(names(&export.join("team")), ["data"], "nothing archived");
}

#[tokio::test]
async fn nfs_subdir_refuses_control_characters_in_its_parameters() {
    let sb = node_cluster().await;
    let export = export_dir(&sb);
    std::fs::create_dir_all(&export).unwrap();
    let r = run_image(
        &sb,
        "subdir",
        "nfs-subdir",
        &nfs_env("provision", "shared/a\nb", "delete"),
        true,
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.message
            .contains("parameter subdir contains a control character"),
        "{r:?}"
    );
    for (i, (key, value)) in [
        ("NFS_SERVER", "nfs.storage.example.com\nevil.example.com"),
        ("NFS_EXPORT", "/exports/k8s\n/etc"),
        ("EXPORT_ROOT", "/export\t"),
    ]
    .into_iter()
    .enumerate()
    {
        let env = with(nfs_env("provision", "shared/a", "delete"), key, value);
        let r = run_image(&sb, &format!("param-{i}"), "nfs-subdir", &env, true).await;
        assert_eq!(r.code, 2, "{key}: {r:?}");
        assert!(
            r.message.contains("contains a control character"),
            "{key}: {r:?}"
        );
    }
    // A quote would have gone into the volume source's JSON.
    let env = with(
        nfs_env("provision", "shared/a", "delete"),
        "NFS_EXPORT",
        "/exports/k8s\",\"x\":\"",
    );
    let r = run_image(&sb, "quote", "nfs-subdir", &env, true).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.message.contains("parameter nfs-export"), "{r:?}");
    assert!(
        names(&export).is_empty(),
        "no stray directory: {:?}",
        names(&export)
    );
}

/// A `date` that always tells the same second, so that every archive below is made "in the
/// same second" whatever the machine's speed.
fn frozen_clock() -> Scratch {
    let dir = Scratch::new("frozen-clock");
    let date = dir.0.join("date");
    std::fs::write(
        &date,
        "#!/bin/sh\ncase \"$*\" in *%Y*) echo 20260101T000000Z ;; *) echo 1767225600 ;; esac\n",
    )
    .unwrap();
    std::fs::set_permissions(&date, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[tokio::test]
async fn nfs_subdir_archives_of_one_volume_in_the_same_second_are_all_kept_apart() {
    let clock = frozen_clock();
    let sb = sandbox_only_with(|mut o| {
        o.extra_path.insert(0, clock.0.clone());
        o
    })
    .await;
    let shared = export_dir(&sb).join("shared");
    let sub = "default-data";
    for i in 1..=4 {
        std::fs::create_dir_all(shared.join(sub)).unwrap();
        std::fs::write(shared.join(sub).join("n"), i.to_string()).unwrap();
        let r = run_image(
            &sb,
            &format!("archive-{i}"),
            "nfs-subdir",
            &nfs_env("deprovision", &format!("shared/{sub}"), "archive"),
            true,
        )
        .await;
        assert_eq!(r.code, 0, "archive {i}: {r:?}");
    }
    let archives = names(&shared);
    assert_eq!(
        archives.len(),
        4,
        "one archive each, none over another: {archives:?}"
    );
    assert!(
        archives
            .iter()
            .all(|a| a.starts_with(&format!("archived-{sub}"))),
        "{archives:?}"
    );
    assert!(
        archives.contains(&format!("archived-{sub}")),
        "the first keeps the documented name: {archives:?}"
    );
    let mut kept = BTreeSet::new();
    for a in &archives {
        let dir = shared.join(a);
        assert!(dir.is_dir() && !is_link(&dir), "{a}");
        assert_eq!(
            names(&dir),
            ["n"],
            "{a} holds its own volume only, nothing nested"
        );
        kept.insert(std::fs::read_to_string(dir.join("n")).unwrap());
    }
    assert_eq!(
        kept,
        ["1", "2", "3", "4"].map(String::from).into(),
        "every archive's data is kept"
    );
}

/// Fake LVM tools and kubectl that log each call to `$SANDBOX_STATE/calls`: volume group
/// vg-k8s exists with 4096 MiB free, logical volumes exist only at deprovisioning.
fn fake_lvm() -> Scratch {
    let dir = Scratch::new("fake-lvm");
    let script = r#"#!/bin/sh
name=$(basename "$0")
printf '%s %s\n' "$name" "$*" >> "$SANDBOX_STATE/calls"
case $name in
    vgs) case " $* " in *" vg-k8s "*) ;; *) exit 5 ;; esac
         case "$*" in *vg_free*) echo "  4096.00" ;; esac ;;
    lvs) case "$*" in
             *pvc-5a5a*) ;;
             *lv_size*) [ "$ACTION" = expand ] || exit 5; echo "  1024.00" ;;
             *) [ "$ACTION" = deprovision ] || [ "$ACTION" = expand ] || exit 5 ;;
         esac ;;
    kubectl) cat > "$SANDBOX_STATE/pv.json" ;;
esac
exit 0
"#;
    for tool in [
        "vgs",
        "lvs",
        "lvcreate",
        "lvremove",
        "mkfs.ext4",
        "mkfs.xfs",
        "kubectl",
        "lvextend",
        "dd",
        "e2fsck",
        "resize2fs",
        "xfs_admin",
    ] {
        let p = dir.0.join(tool);
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn lvm_env(action: &str) -> Vec<(&str, &str)> {
    vec![
        ("ACTION", action),
        ("PV_NAME", PV),
        ("VOLUME_GROUP", "vg-k8s"),
        ("SIZE_MIB", "1024"),
        ("FILESYSTEM", "ext4"),
        ("SELECTED_NODE", NODE),
        (
            "PV_TEMPLATE",
            r#"{"apiVersion":"v1","kind":"PersistentVolume","spec":{"capacity":{"storage":"1Gi"}}}"#,
        ),
    ]
}

#[tokio::test]
async fn lvm_kubectl_refuses_newline_joined_and_odd_values_before_any_lvm_command() {
    let tools = fake_lvm();
    let sb = sandbox_only_with(|mut o| {
        o.extra_path.insert(0, tools.0.clone());
        o
    })
    .await;
    let calls = sb.state_dir(NODE).join("calls");
    let bad: &[(&str, &str, &str)] = &[
        ("provision", "VOLUME_GROUP", "vg-k8s\nvg-other"),
        ("deprovision", "VOLUME_GROUP", "vg-k8s\nvg-other"),
        ("provision", "SIZE_MIB", "1024\n4096"),
        ("provision", "SIZE_MIB", "1024\n"),
        ("provision", "PV_NAME", &format!("{PV}\npvc-other")),
        ("deprovision", "PV_NAME", &format!("{PV}\npvc-other")),
        ("provision", "FILESYSTEM", "ext4\nxfs"),
        ("provision", "VOLUME_GROUP", "vg k8s"),
        ("provision", "VOLUME_GROUP", "vg-k8s/../x"),
        ("provision", "VOLUME_GROUP", "-vg-k8s"),
        ("provision", "VOLUME_GROUP", ".."),
        ("provision", "VOLUME_GROUP", &"v".repeat(128)),
        ("provision", "SIZE_MIB", "0"),
        ("provision", "SIZE_MIB", "12a"),
        ("provision", "SIZE_MIB", "1234567890123456"),
        ("provision", "PV_NAME", "pvc-ZZ"),
        ("provision", "PV_NAME", "other-name"),
    ];
    for (i, (action, key, value)) in bad.iter().enumerate() {
        let r = run_image(
            &sb,
            &format!("bad-{i}"),
            "lvm-kubectl",
            &with(lvm_env(action), key, value),
            false,
        )
        .await;
        assert_eq!(r.code, 2, "{action} {key}={value:?}: {r:?}");
        assert!(
            !r.message.is_empty() && r.message.lines().count() == 1,
            "{r:?}"
        );
        if value.contains('\n') {
            assert!(
                r.message.contains("contains a control character"),
                "{key}: {r:?}"
            );
        }
        assert!(
            !calls.exists(),
            "no LVM command ran for {key}={value:?}: {}",
            std::fs::read_to_string(&calls).unwrap_or_default()
        );
    }

    // The same image with good values does its work (the fakes stand in for LVM).
    let r = run_image(
        &sb,
        "good-provision",
        "lvm-kubectl",
        &lvm_env("provision"),
        false,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(
        log.contains(&format!("lvcreate --yes --name {PV} --size 1024m vg-k8s\n")),
        "{log}"
    );
    assert!(
        log.contains(&format!("mkfs.ext4 -q /dev/vg-k8s/{PV}\n")),
        "{log}"
    );
    let pv = std::fs::read_to_string(sb.state_dir(NODE).join("pv.json")).unwrap();
    let pv: Value = serde_json::from_str(&pv).unwrap();
    assert_eq!(
        pv["spec"]["local"],
        json!({"path": format!("/dev/vg-k8s/{PV}"), "fsType": "ext4"})
    );
    let r = run_image(
        &sb,
        "good-deprovision",
        "lvm-kubectl",
        &lvm_env("deprovision"),
        false,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(
        log.contains(&format!("lvremove --yes vg-k8s/{PV}\n")),
        "{log}"
    );
    let r = run_image(
        &sb,
        "no-vg",
        "lvm-kubectl",
        &with(lvm_env("provision"), "VOLUME_GROUP", "vg-other"),
        false,
    )
    .await;
    assert_eq!(
        r.code, 3,
        "a missing volume group keeps its own code: {r:?}"
    );
}

/// lvm-kubectl grows a volume with `lvextend --resizefs` and clones one with a block copy
/// of the source logical volume, then grows the copy's filesystem.
#[tokio::test]
async fn lvm_kubectl_expands_and_clones() {
    let tools = fake_lvm();
    let sb = sandbox_only_with(|mut o| {
        o.extra_path.insert(0, tools.0.clone());
        o
    })
    .await;
    let calls = sb.state_dir(NODE).join("calls");
    let r = run_image(
        &sb,
        "grow",
        "lvm-kubectl",
        &with(lvm_env("expand"), "REQUESTED_BYTES", "2147483648"),
        false,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(
        log.contains(&format!(
            "lvextend --yes --resizefs --size 2048m vg-k8s/{PV}\n"
        )),
        "{log}"
    );
    let r = run_image(
        &sb,
        "grow-bad",
        "lvm-kubectl",
        &with(lvm_env("expand"), "REQUESTED_BYTES", "2Gi"),
        false,
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    std::fs::remove_file(&calls).unwrap();
    let source = json!({"metadata": {"name": "pvc-5a5a"}, "spec": {"local": {"path": "/dev/vg-k8s/pvc-5a5a", "fsType": "ext4"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}})
    .to_string();
    let r = run_image(
        &sb,
        "clone",
        "lvm-kubectl",
        &with(lvm_env("provision"), "SOURCE_PV_JSON", &source),
        false,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(
        log.contains(&format!(
            "dd if=/dev/vg-k8s/pvc-5a5a of=/dev/vg-k8s/{PV} bs=4M conv=fsync status=none\n"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("resize2fs /dev/vg-k8s/{PV}\n")),
        "{log}"
    );
    assert!(
        !log.contains("mkfs"),
        "a clone keeps the source's filesystem: {log}"
    );
    // A raw block source into a class that formats: refused before any copy.
    std::fs::remove_file(&calls).unwrap();
    let raw = source.replace(r#""fsType":"ext4","#, "");
    assert_ne!(raw, source);
    let r = run_image(
        &sb,
        "clone-raw",
        "lvm-kubectl",
        &with(lvm_env("provision"), "SOURCE_PV_JSON", &raw),
        false,
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.message.contains("a clone keeps its source's"), "{r:?}");
    assert!(
        !std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .contains("dd ")
    );
    // A source that is not one of this image's logical volumes is refused before any copy.
    std::fs::remove_file(&calls).unwrap();
    let elsewhere = source.replace("/dev/vg-k8s/pvc-5a5a", "/dev/sda1");
    let r = run_image(
        &sb,
        "clone-bad",
        "lvm-kubectl",
        &with(lvm_env("provision"), "SOURCE_PV_JSON", &elsewhere),
        false,
    )
    .await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.message.contains("not a logical volume this image made"),
        "{r:?}"
    );
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(!log.contains("dd "), "{log}");
}

/// A hostpath clone copies links inside the source as links, and a link an interrupted
/// earlier attempt left in the new volume is removed before copying, never written through.
#[tokio::test]
async fn hostpath_clone_never_writes_through_or_follows_a_link() {
    let sb = node_cluster().await;
    let out = outside(&sb);
    let base = node_base(&sb, NODE);
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x"), "copied").unwrap();
    symlink(out.join("victim"), src.join("link")).unwrap();
    let dst = base.join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    symlink(out.join("victim/keep"), dst.join("x")).unwrap();
    let source = json!({"spec": {"local": {"path": format!("{}/src", base_path(&sb))},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}})
    .to_string();
    let template = r#"{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pvc-0a0a"},"spec":{"capacity":{"storage":"1Gi"}}}"#;
    let env = with(
        with(
            with(
                hostpath_env(&sb, "provision", "dst"),
                "SOURCE_PV_JSON",
                &source,
            ),
            "PV_CREATOR",
            "controller",
        ),
        "PV_TEMPLATE",
        template,
    );
    let r = run_image(&sb, "clone", "hostpath", &env, false).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!is_link(&dst.join("x")), "the stale link was replaced");
    assert_eq!(std::fs::read_to_string(dst.join("x")).unwrap(), "copied");
    assert!(is_link(&dst.join("link")), "a link is copied as a link");
    assert_outside_untouched(&out);
    // A source outside the base is refused before anything is copied.
    let elsewhere = source.replace(&format!("{}/src", base_path(&sb)), "/etc");
    let env = with(
        with(
            with(
                hostpath_env(&sb, "provision", "dst2"),
                "SOURCE_PV_JSON",
                &elsewhere,
            ),
            "PV_CREATOR",
            "controller",
        ),
        "PV_TEMPLATE",
        template,
    );
    let r = run_image(&sb, "clone-elsewhere", "hostpath", &env, false).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.message.contains("is not below"), "{r:?}");
}

/// hostpath runs as root with only the capabilities configmaps/hostpath.yaml grants; those
/// are what remove a volume holding files private to its users (a 0700 directory of uid
/// 1000, a file of uid 1001 in a sticky directory). Without them the same removal fails and
/// keeps the files: the grant is what makes it work.
#[tokio::test]
async fn hostpath_deprovision_removes_other_users_private_files_with_the_shipped_capabilities() {
    let sb = node_cluster().await;
    let shipped = shipped_security("hostpath");
    assert_eq!(
        shipped["capabilities"],
        json!({"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"]}),
        "{shipped}"
    );
    assert_eq!(shipped["allowPrivilegeEscalation"], false, "{shipped}");
    let vol = node_base(&sb, NODE).join("default/private");
    users_files(&vol, 0o700);

    let bare = without_added_capabilities(&shipped);
    let env = hostpath_env(&sb, "deprovision", "default/private");
    let r = run_image_as(&sb, "no-caps", "hostpath", &env, false, &bare).await;
    assert_eq!(r.code, 1, "a transient failure: {r:?}");
    assert!(
        r.message.contains("cannot remove everything in")
            && r.message
                .contains("without the capabilities DAC_OVERRIDE FOWNER"),
        "names what the pod lacks: {r:?}"
    );
    assert_eq!(
        std::fs::metadata(vol.join("home/secret")).unwrap().uid(),
        1000,
        "the private file is still there"
    );

    let r = run_image_as(&sb, "shipped-caps", "hostpath", &env, false, &shipped).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!vol.exists(), "the volume is gone");
    assert!(
        !vol.parent().unwrap().exists(),
        "its parent, left empty, too"
    );
}

/// A clone of a volume holding another user's private files copies them as they are
/// (owner, group, mode with setgid, time, content) with the shipped capabilities; without
/// them the copy fails (exit 2: permanent until the class grants them) and leaves nothing
/// behind, and the retry with them starts the copy afresh.
#[tokio::test]
async fn hostpath_clone_keeps_other_users_files_as_they_are_with_the_shipped_capabilities() {
    let sb = node_cluster().await;
    let base = node_base(&sb, NODE);
    users_files(&base.join("src"), 0o2770);
    let source = json!({"spec": {"local": {"path": format!("{}/src", base_path(&sb))},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}})
    .to_string();
    let template = r#"{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pvc-0a0a"},"spec":{"capacity":{"storage":"1Gi"}}}"#;
    let env = with(
        with(
            with(
                hostpath_env(&sb, "provision", "dst"),
                "SOURCE_PV_JSON",
                &source,
            ),
            "PV_CREATOR",
            "controller",
        ),
        "PV_TEMPLATE",
        template,
    );
    let shipped = shipped_security("hostpath");
    let bare = without_added_capabilities(&shipped);
    let r = run_image_as(&sb, "clone-no-caps", "hostpath", &env, false, &bare).await;
    assert_eq!(r.code, 2, "permanent until the class grants them: {r:?}");
    assert!(
        r.message.contains("copying")
            && r.message
                .contains("without the capabilities DAC_OVERRIDE CHOWN FOWNER FSETID"),
        "{r:?}"
    );
    assert!(
        !base.join("dst").exists(),
        "the failed attempt left nothing behind"
    );

    let r = run_image_as(&sb, "clone-shipped-caps", "hostpath", &env, false, &shipped).await;
    assert_eq!(r.code, 0, "{r:?}");
    let dst = base.join("dst");
    let (home, secret) = (dst.join("home"), dst.join("home/secret"));
    let meta = |p: &Path| std::fs::symlink_metadata(p).unwrap();
    assert_eq!((meta(&home).uid(), meta(&home).gid()), (1000, 1000));
    assert_eq!(meta(&home).mode() & 0o7777, 0o2770, "setgid kept");
    assert_eq!((meta(&secret).uid(), meta(&secret).gid()), (1000, 1000));
    assert_eq!(meta(&secret).mode() & 0o7777, 0o600);
    assert_eq!(meta(&secret).mtime(), 1_600_000_000);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "only mine");
    let tmp = dst.join("tmp");
    assert_eq!(
        (meta(&tmp).uid(), meta(&tmp).mode() & 0o7777),
        (1000, 0o1777)
    );
    assert_eq!(meta(&tmp.join("theirs")).uid(), 1001);
}

/// nfs-subdir keeps our restricted securityContext: no capability at all (an added one
/// would do nothing for its non-root user, and the server squashes root). Archiving a
/// volume that holds its users' private files needs none: it is a rename beside it.
/// Deleting such a volume is up to the export's permissions: without them the image fails
/// transiently, says why, and removes none of those files.
#[tokio::test]
async fn nfs_subdir_needs_no_capability_to_archive_and_deletes_only_what_the_export_allows() {
    let sb = node_cluster().await;
    let shipped = shipped_security("nfs-subdir");
    assert_eq!(
        shipped,
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
    );
    let shared = export_dir(&sb).join("shared");
    users_files(&shared.join("kept"), 0o700);
    // As nfs-subdir makes its directories (dir-mode 0777), so its non-root user can rename
    // in it.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = run_image(
        &sb,
        "archive-private",
        "nfs-subdir",
        &nfs_env("deprovision", "shared/kept", "archive"),
        true,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let archived = shared.join("archived-kept");
    assert_eq!(names(&archived), ["home", "tmp"]);
    let secret = std::fs::metadata(archived.join("home/secret")).unwrap();
    assert_eq!((secret.uid(), secret.mode() & 0o7777), (1000, 0o600));

    users_files(&shared.join("gone"), 0o700);
    let r = run_image(
        &sb,
        "delete-private",
        "nfs-subdir",
        &nfs_env("deprovision", "shared/gone", "delete"),
        true,
    )
    .await;
    assert_eq!(
        r.code, 1,
        "transient: the admin can fix the export and retry: {r:?}"
    );
    assert!(r.message.contains("files of another user?"), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(shared.join("gone/home/secret")).unwrap_or_default(),
        "only mine"
    );
}

/// With `volume-base` the kubelet makes a volume's directory, as root, with the base's mode.
/// nfs-subdir's non-root user cannot change that mode: when `dir-mode` asks for another one,
/// the provisioning fails for good with what to change; when it matches, nothing is changed
/// and the volume is made. Only a real node runs the image as its own user (the sandbox
/// runs images as root; docs/sandbox-known-differences.md).
#[tokio::test]
async fn nfs_subdir_says_why_it_cannot_set_the_mode_of_a_directory_the_kubelet_made() {
    let sb = node_cluster().await;
    if !sb.is_real_node() {
        eprintln!(
            "an image's own non-root user needs a real node: this test runs in the real-node lane (scripts/e2e-real --real-node)"
        );
        return;
    }
    let made = export_dir(&sb).join("team/by-kubelet");
    std::fs::create_dir_all(&made).unwrap();
    for dir in [made.parent().unwrap(), &made] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let env = nfs_env("provision", "team/by-kubelet", "delete");
    let r = run_image(&sb, "kubelet-made", "nfs-subdir", &env, true).await;
    assert_eq!(r.code, 2, "no retry changes the owner: {r:?}");
    assert!(
        r.message.contains("has mode 755 and belongs to uid 0")
            && r.message.contains("set dir-mode to its mode"),
        "{r:?}"
    );
    assert!(made.is_dir(), "the kubelet's directory is left in place");
    assert_eq!(std::fs::metadata(&made).unwrap().mode() & 0o7777, 0o755);

    let template = r#"{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pvc-0a0a"},"spec":{"capacity":{"storage":"1Gi"}}}"#;
    let env = with(
        with(with(env, "DIR_MODE", "0755"), "PV_CREATOR", "controller"),
        "PV_TEMPLATE",
        template,
    );
    let r = run_image(&sb, "kubelet-made-same-mode", "nfs-subdir", &env, true).await;
    assert_eq!(r.code, 0, "a matching mode is left as it is: {r:?}");
    assert!(r.message.contains("/exports/k8s/team/by-kubelet"), "{r:?}");
}

#[test]
fn entrypoints_find_the_shared_library_beside_them_and_the_images_ship_it() {
    common::at_root();
    let lib =
        "COPY provisioner-images/lib/safe-path.sh /usr/local/lib/flex-provisioner/safe-path.sh";
    for image in ["hostpath", "nfs-subdir", "lvm-kubectl"] {
        let dockerfile =
            std::fs::read_to_string(format!("provisioner-images/{image}/Dockerfile")).unwrap();
        assert!(
            dockerfile.contains(lib),
            "{image}'s Dockerfile copies the library"
        );
        let entrypoint =
            std::fs::read_to_string(format!("provisioner-images/{image}/entrypoint")).unwrap();
        assert!(
            entrypoint.contains("\"$(dirname -- \"$0\")/../lib/safe-path.sh\" /usr/local/lib/flex-provisioner/safe-path.sh"),
            "{image} looks beside itself, then where its Dockerfile puts the library"
        );

        // Copied alone, the entrypoint says what is missing, with the permanent code.
        let scratch = Scratch::new(&format!("lib-{image}"));
        let dir = &scratch.0;
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::copy(
            format!("provisioner-images/{image}/entrypoint"),
            dir.join("bin/entrypoint"),
        )
        .unwrap();
        let run = |dir: &Path| {
            let out = std::process::Command::new("sh")
                .arg(dir.join("bin/entrypoint"))
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("ACTION", "provision")
                .env("PV_NAME", PV)
                .env("DIRECTORY", "a\nb")
                .env("SUBDIR", "a\nb")
                .env("NFS_SERVER", "a\nb")
                .env("VOLUME_GROUP", "a\nb")
                .env("BASE_PATH", BASE)
                .env("TERMINATION_LOG", dir.join("termination-log"))
                .output()
                .unwrap();
            let message = std::fs::read_to_string(dir.join("termination-log")).unwrap_or_default();
            (out.status.code(), message)
        };
        let (code, message) = run(dir);
        assert_eq!(code, Some(2), "{image}: {message}");
        assert!(
            message.contains("safe-path.sh is missing"),
            "{image}: {message}"
        );
        // With the library at ../lib, as in the repository, its checks run.
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::copy(
            "provisioner-images/lib/safe-path.sh",
            dir.join("lib/safe-path.sh"),
        )
        .unwrap();
        let (code, message) = run(dir);
        assert_eq!(code, Some(2), "{image}: {message}");
        assert!(
            message.contains("contains a control character"),
            "{image}: {message}"
        );
    }
}

// End to end through the controller with the shipped example ConfigMaps.

#[tokio::test]
async fn hostpath_end_to_end_a_link_planted_in_the_base_fails_the_claim_and_touches_nothing() {
    common::at_root();
    let (sb, _c) = with_examples_on(
        sandbox_only_with(|o| o).await,
        &["configmaps/hostpath.yaml"],
    )
    .await;
    let out = outside(&sb);
    // Whichever node the claim lands on, its namespace's directory is a link out.
    for node in ["node-a", "node-b"] {
        let base = node_base(&sb, node);
        std::fs::create_dir_all(&base).unwrap();
        symlink(&out, base.join("default")).unwrap();
    }
    claim_with_pod(&sb, "data", "local-hostpath", "data-user").await;
    // The Job mounts only the claim's directory (volume-base): the kubelet refuses the
    // subPath through the link before the image runs (the image refuses such a link too:
    // the tests above), and the claim says why.
    let m = wait_event(&sb, "data", "ProvisionerPodNotStarting", "subPath", 60).await;
    assert!(
        m.contains("CreateContainerConfigError") && m.contains("not within volume path"),
        "{m}"
    );
    assert_eq!(jobs_of_ns(&sb, "provision").await, 1);
    assert_outside_untouched(&out);
}

/// The Jobs of one action in the examples' namespace.
async fn jobs_of_ns(sb: &Cluster, action: &str) -> usize {
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(sb.client().unwrap(), NS)
        .list(&ListParams::default().labels(&format!("flex-provisioner.io/action={action}")))
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test]
async fn hostpath_end_to_end_a_volume_replaced_by_a_link_is_not_deprovisioned_through_it() {
    common::at_root();
    let (sb, _c) = with_examples_on(
        sandbox_only_with(|o| o).await,
        &["configmaps/hostpath.yaml"],
    )
    .await;
    let out = outside(&sb);
    claim_with_pod(&sb, "data", "local-hostpath", "data-user").await;
    let claim = bound(&sb, "data", 60).await;
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(30, "the user pod to finish", || async {
        let p = pods.get("data-user").await.ok()?;
        (p.status?.phase.as_deref() == Some("Succeeded")).then_some(())
    })
    .await;
    pods.delete("data-user", &DeleteParams::default())
        .await
        .unwrap();
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let dir = storage_dir(&sb, &pvs.get(&pv_name).await.unwrap());
    assert!(dir.join("hello.txt").is_file());
    // Someone with access to the node swaps the volume's directory for a link out.
    std::fs::remove_dir_all(&dir).unwrap();
    symlink(out.join("victim"), &dir).unwrap();
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .delete("data", &Default::default())
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(sb.client().unwrap(), "default");
    let m = eventually(60, "a VolumeFailedDelete event naming the link", || async {
        events
            .list(&ListParams::default().fields(&format!("involvedObject.name={pv_name}")))
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("VolumeFailedDelete"))
            .filter_map(|e| e.message)
            .find(|m| m.contains("symbolic link"))
    })
    .await;
    assert!(m.contains("nothing was changed"), "{m}");
    assert!(
        pvs.get_opt(&pv_name).await.unwrap().is_some(),
        "the PV stays"
    );
    assert_outside_untouched(&out);
    assert!(is_link(&dir), "the link is left for the admin");
    // The admin removes the link: the next attempt finds the volume gone and completes.
    std::fs::remove_file(&dir).unwrap();
    eventually(
        90,
        "the PV to be deprovisioned after the link is removed",
        || async { pvs.get_opt(&pv_name).await.unwrap().is_none().then_some(()) },
    )
    .await;
    assert_outside_untouched(&out);
}
