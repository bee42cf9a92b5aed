//! The shipped hostpath image as a storage admin runs it: its example ConfigMap, its Jobs'
//! pods with exactly the capabilities the pod-template grants, another user's private files
//! in the volume. On a real kubelet in the real-node lane (`FLEX_E2E_REAL_NODE`, see
//! `scripts/e2e-real`), where the kubelet mounts the pod-template's volumes, enforces the
//! securityContext and takes the termination message; on the sandbox otherwise.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::cluster::{Cluster, NODES, kubectl};
use common::provisioning::{claim_events, claim_object, create_pod, grow, storage_dir, wait_event};
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// hostpath's base in `configmaps/hostpath.yaml`, as a node path.
const BASE: &str = "/var/lib/flex-provisioner/volumes";
/// The capabilities `configmaps/hostpath.yaml` grants its Jobs.
const SHIPPED_CAPS: &str = "add: [CHOWN, DAC_OVERRIDE, FOWNER, FSETID]";
/// Another user's files, as a tenant's pod writes them: a private tree of uid 999, a setgid
/// directory of group 1234 and a link inside the volume.
const TENANT_FILES: &str = "set -e; d=${SANDBOX_ROOT:-}/data
mkdir -p $d/private/deep; echo secret > $d/private/deep/key
chmod 600 $d/private/deep/key; chmod 700 $d/private $d/private/deep; chown -R 999:999 $d/private
mkdir $d/shared; echo g > $d/shared/g; chown -R 0:1234 $d/shared; chmod 2770 $d/shared
ln -s private/deep/key $d/link";

/// `configmaps/hostpath.yaml` as class `class` whose Jobs get `caps` (a capabilities
/// `add:` line); on a real node its base lives in the cluster's own directory.
async fn hostpath_class(cluster: &Cluster, class: &str, caps: &str) -> PathBuf {
    let mut text = std::fs::read_to_string("configmaps/hostpath.yaml").unwrap();
    let base = match cluster.real_dir() {
        Some(dir) if cluster.is_real_node() => dir.join("volumes").display().to_string(),
        _ => BASE.to_owned(),
    };
    assert!(
        text.contains(SHIPPED_CAPS),
        "the example grants {SHIPPED_CAPS}"
    );
    text = text
        .replace(BASE, &base)
        .replace(SHIPPED_CAPS, caps)
        .replace("local-hostpath", class)
        .replace("name: hostpath-provisioner", &format!("name: {class}"));
    apply_example(cluster, class, &text).await;
    PathBuf::from(base)
}

/// Applies an example's (adapted) text as an admin would with `kubectl apply -f`, after
/// allowing privileged pods in the config namespace as the example says to.
async fn apply_example(cluster: &Cluster, what: &str, text: &str) {
    common::provisioning::allow_privileged_jobs(cluster).await;
    let file = std::env::temp_dir().join(format!(
        "flex-{what}-{}.yaml",
        kube_sandbox::ids::name_suffix()
    ));
    std::fs::write(&file, text).unwrap();
    let applied = cluster.apply_files(std::slice::from_ref(&file));
    let _ = std::fs::remove_file(&file);
    for line in applied {
        assert!(line.ends_with("created"), "{line}");
    }
}

/// A pod on the first node that runs `script` with claim `claim` at /data and has finished
/// with success (its log in the failure otherwise).
async fn shell_pod(cluster: &Cluster, name: &str, claim: &str, script: &str) {
    create_pod(
        cluster,
        busybox_pod(name, claim, json!(["sh", "-c", script])),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client().unwrap(), "default");
    let phase = eventually(120, &format!("pod {name} to finish"), || async {
        let p = pods.get(name).await.ok()?;
        let phase = p.status?.phase?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    let log = if cluster.is_real_node() {
        let out = kubectl_async(cluster, &["logs", "-n", "default", name]).await;
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::new()
    };
    assert_eq!(phase, "Succeeded", "pod {name} failed: {log}");
    pods.delete(name, &DeleteParams::default()).await.unwrap();
}

/// kubectl, off the test's runtime (which may be serving the sandbox's API).
async fn kubectl_async(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    let kubeconfig = cluster.kubeconfig.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || kubectl(&kubeconfig, &args))
        .await
        .unwrap()
}

async fn clone_claim(cluster: &Cluster, name: &str, class: &str, source: &str) {
    let mut c = claim_object(name, class);
    c.spec.as_mut().unwrap().data_source_ref = Some(
        serde_json::from_value(json!({"kind": "PersistentVolumeClaim", "name": source})).unwrap(),
    );
    Api::<PersistentVolumeClaim>::namespaced(cluster.client().unwrap(), "default")
        .create(&PostParams::default(), &c)
        .await
        .unwrap();
}

async fn plain_claim(cluster: &Cluster, name: &str, class: &str) {
    Api::<PersistentVolumeClaim>::namespaced(cluster.client().unwrap(), "default")
        .create(&PostParams::default(), &claim_object(name, class))
        .await
        .unwrap();
}

/// Waits up to `secs` for claim `name` to bind; fails with the claim's events otherwise.
async fn bound(cluster: &Cluster, name: &str, secs: u64) -> PersistentVolumeClaim {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client().unwrap(), "default");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Ok(c) = claims.get(name).await
            && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        {
            return c;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "claim {name} did not bind within {secs}s; its events: {:#?}",
                claim_events(cluster, name).await
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

async fn volume_of(cluster: &Cluster, claim: &PersistentVolumeClaim) -> PersistentVolume {
    let name = claim.spec.as_ref().unwrap().volume_name.clone().unwrap();
    Api::<PersistentVolume>::all(cluster.client().unwrap())
        .get(&name)
        .await
        .unwrap()
}

async fn delete_claim(cluster: &Cluster, name: &str) {
    Api::<PersistentVolumeClaim>::namespaced(cluster.client().unwrap(), "default")
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// `TENANT_FILES` as copied into `copy` (by `what`) from `src`: each with its owner, group
/// and mode, and the link as a link.
fn kept_as_they_were(copy: &Path, src: &Path, what: &str) {
    for p in [
        "private",
        "private/deep",
        "private/deep/key",
        "shared",
        "shared/g",
    ] {
        assert_eq!(
            owner_mode(&copy.join(p)),
            owner_mode(&src.join(p)),
            "{p}: {what} keeps owner, group and mode"
        );
    }
    assert_eq!(
        std::fs::read_link(copy.join("link")).unwrap(),
        Path::new("private/deep/key"),
        "{what} copies a link as a link"
    );
}

/// (uid, gid, mode with its setuid/setgid/sticky bits) of `p`, not following a link.
fn owner_mode(p: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

#[tokio::test]
async fn hostpath_provisions_clones_expands_and_deprovisions_another_users_private_files() {
    common::at_root();
    let cluster = common::provisioning::node_cluster().await;
    let _c = common::provisioning::controller(&cluster);
    let base = hostpath_class(&cluster, "hostpath", SHIPPED_CAPS).await;

    plain_claim(&cluster, "src", "hostpath").await;
    shell_pod(&cluster, "tenant", "src", TENANT_FILES).await;
    let src = bound(&cluster, "src", 60).await;
    let src_pv = volume_of(&cluster, &src).await;
    let src_dir = storage_dir(&cluster, &src_pv);
    assert_eq!(
        owner_mode(&src_dir.join("private/deep/key")),
        (999, 999, 0o600)
    );

    clone_claim(&cluster, "copy", "hostpath", "src").await;
    shell_pod(
        &cluster,
        "reader",
        "copy",
        "cat ${SANDBOX_ROOT:-}/data/private/deep/key",
    )
    .await;
    let copy = bound(&cluster, "copy", 120).await;
    let copy_pv = volume_of(&cluster, &copy).await;
    let copy_dir = storage_dir(&cluster, &copy_pv);
    kept_as_they_were(&copy_dir, &src_dir, "the clone");
    assert_eq!(owner_mode(&copy_dir.join("shared")), (0, 1234, 0o2770));
    assert_eq!(
        std::fs::read_to_string(copy_dir.join("private/deep/key")).unwrap(),
        "secret\n"
    );

    grow(&cluster, "copy", "2Gi").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client().unwrap(), "default");
    eventually(120, "the clone's claim to show 2Gi", || async {
        let c = claims.get("copy").await.ok()?;
        let cap = c.status?.capacity?.get("storage")?.0.clone();
        (cap == "2Gi").then_some(())
    })
    .await;

    delete_claim(&cluster, "copy").await;
    delete_claim(&cluster, "src").await;
    // The PVs go only once their deprovision Jobs succeeded, that is after each script
    // also removed the parents it emptied: a directory gone says less (its Job may still
    // be about to remove the namespace's).
    eventually(
        120,
        "both volumes deprovisioned and their PVs gone",
        || async {
            let pvs = Api::<PersistentVolume>::all(cluster.client().unwrap());
            for pv in [&src_pv, &copy_pv] {
                if pvs
                    .get_opt(pv.metadata.name.as_deref()?)
                    .await
                    .ok()?
                    .is_some()
                {
                    return None;
                }
            }
            (!copy_dir.exists() && !src_dir.exists()).then_some(())
        },
    )
    .await;
    let ns_dir = cluster.node_root(NODES[0]).join(
        base.join("default")
            .display()
            .to_string()
            .trim_start_matches('/'),
    );
    // Nothing of the namespace is left: where volumes are mounted (a kubelet, the sandbox
    // run as root), a deprovision Job sees only the namespace's directory, which it cannot
    // remove from inside (a mount point), so the empty directory stays; where they are
    // linked it goes with its last volume.
    let left = std::fs::read_dir(&ns_dir)
        .map(|d| d.count())
        .unwrap_or_default();
    assert_eq!(left, 0, "{} still holds {left} entries", ns_dir.display());
    assert_eq!(ns_dir.exists(), cluster.mounts_volumes());
}

#[tokio::test]
async fn hostpath_without_a_needed_capability_fails_each_operation_with_a_clear_event() {
    common::at_root();
    let cluster = common::provisioning::node_cluster().await;
    let _c = common::provisioning::controller(&cluster);
    // No capability at all: root that cannot enter another user's private directory.
    hostpath_class(&cluster, "bare", "add: []").await;
    // Everything but CHOWN: the copy can read, but not give the files their owners.
    hostpath_class(&cluster, "nochown", "add: [DAC_OVERRIDE, FOWNER, FSETID]").await;

    plain_claim(&cluster, "src", "bare").await;
    shell_pod(&cluster, "tenant", "src", TENANT_FILES).await;
    let src = bound(&cluster, "src", 60).await;
    let src_dir = storage_dir(&cluster, &volume_of(&cluster, &src).await);

    // A clone that cannot read: a permanent failure naming the capability.
    clone_claim(&cluster, "unread", "bare", "src").await;
    shell_pod_pending(&cluster, "unread-pod", "unread").await;
    wait_event(
        &cluster,
        "unread",
        "ProvisioningFailed",
        "DAC_OVERRIDE",
        120,
    )
    .await;

    // A clone that would lose owners: refused, not reported as a success.
    clone_claim(&cluster, "unowned", "nochown", "src").await;
    shell_pod_pending(&cluster, "unowned-pod", "unowned").await;
    let msg = wait_event(&cluster, "unowned", "ProvisioningFailed", "CHOWN", 120).await;
    assert!(
        msg.contains("999:999"),
        "the event names what would change: {msg}"
    );
    // Neither failed clone left anything it copied: the directories the kubelet made for
    // their Jobs (volume-base) are emptied, the only entries beside the source's.
    let parent = src_dir.parent().unwrap().to_owned();
    let mut left = 0;
    for entry in std::fs::read_dir(&parent).unwrap() {
        let path = entry.unwrap().path();
        if path == src_dir {
            continue;
        }
        left += 1;
        assert!(path.is_dir() && !path.is_symlink(), "{}", path.display());
        let inside: Vec<_> = std::fs::read_dir(&path).unwrap().collect();
        assert!(inside.is_empty(), "{} holds {inside:?}", path.display());
    }
    assert!(
        left <= 2,
        "one directory per failed clone at most in {}",
        parent.display()
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client().unwrap(), "default");
    for name in ["unread", "unowned"] {
        let c = claims.get(name).await.unwrap();
        assert_ne!(c.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    }

    // Removing another user's private files without DAC_OVERRIDE: the volume stays, and
    // its PV says why.
    let pv = src.spec.as_ref().unwrap().volume_name.clone().unwrap();
    delete_claim(&cluster, "src").await;
    eventually(
        120,
        "a deprovisioning failure that names the capability",
        || async {
            common::provisioning::events_about(&cluster, &pv)
                .await
                .into_iter()
                .find(|(_, m)| m.contains("DAC_OVERRIDE"))
        },
    )
    .await;
    assert!(
        src_dir.join("private").exists(),
        "the volume is kept while it cannot be removed"
    );
}

/// The hostpath example's image line.
const HOSTPATH_IMAGE: &str = "  image: ghcr.io/flex-provisioner/hostpath:0.1.0\n";

/// What a Job's pod must never reach, beside the volumes it works on: another namespace's
/// volume on the same node (`<base>/other-team/vault`) and a sibling claim's.
async fn neighbours(cluster: &Cluster, base: &Path) {
    let other_on_node = cluster
        .node_root(NODES[0])
        .join(base.join("other-team/vault").strip_prefix("/").unwrap());
    std::fs::create_dir_all(&other_on_node).unwrap();
    std::fs::write(other_on_node.join("key"), "other-tenant-secret\n").unwrap();
    plain_claim(cluster, "sibling", "hostpath").await;
    shell_pod(
        cluster,
        "sibling-writer",
        "sibling",
        "echo sibling > /data/sibling-file",
    )
    .await;
    bound(cluster, "sibling", 60).await;
}

/// Claim `src` of `class`, bound, holding `source-file` and links planted to the other
/// namespace's volume (by its path, and up from the volume).
async fn planted_source(cluster: &Cluster, class: &str, base: &Path) {
    plain_claim(cluster, "src", class).await;
    let plant = format!(
        "echo mine > /data/source-file; ln -s {} /data/to-other; ln -s ../../other-team/vault /data/up-to-other",
        base.join("other-team/vault").display()
    );
    shell_pod(cluster, "src-writer", "src", &plant).await;
    bound(cluster, "src", 60).await;
}

/// A script that lists what its pod sees below `base`, and what the planted link reads,
/// into the termination message, then fails for good (so the listing is told).
fn listing(base: &Path) -> String {
    format!(
        "log=${{TERMINATION_LOG:-/dev/termination-log}}; find {base} > $log 2>&1; cat {base}/default/*/to-other/key >> $log 2>&1; exit 2",
        base = base.display()
    )
}

/// The hostpath example as class `lister`, its image line replaced by `image` (an image
/// and a command).
async fn lister_class(cluster: &Cluster, base: &Path, image: &str) {
    let text = std::fs::read_to_string("configmaps/hostpath.yaml").unwrap();
    assert!(text.contains(HOSTPATH_IMAGE), "the example names its image");
    let text = text
        .replace(BASE, &base.display().to_string())
        .replace("local-hostpath", "lister")
        .replace("name: hostpath-provisioner", "name: lister")
        .replace(HOSTPATH_IMAGE, image);
    apply_example(cluster, "lister", &text).await;
}

/// A pod of the base image on the first node running `command`, with claim `claim` at /data.
fn busybox_pod(name: &str, claim: &str, command: serde_json::Value) -> serde_json::Value {
    json!({"metadata": {"name": name},
    "spec": {"restartPolicy": "Never",
             "nodeSelector": {"kubernetes.io/hostname": NODES[0]},
             "containers": [{"name": "c", "image": "localhost/busybox:1.35",
                 "imagePullPolicy": "Never", "command": command,
                 "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
             "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}})
}

/// A consumer of `claim` that only needs to be scheduled (so a WaitForFirstConsumer claim
/// gets its node); it never starts while the claim cannot bind.
async fn shell_pod_pending(cluster: &Cluster, name: &str, claim: &str) {
    create_pod(cluster, busybox_pod(name, claim, json!(["true"]))).await;
}

#[tokio::test]
async fn an_image_that_writes_a_termination_message_and_fails_shows_it_in_describe_pvc() {
    common::at_root();
    let cluster = common::provisioning::node_cluster().await;
    let _c = common::provisioning::controller(&cluster);
    hostpath_class(&cluster, "hostpath", SHIPPED_CAPS).await;
    // An admin's mistake the image refuses (exit 2, with a termination message).
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.client().unwrap(), common::provisioning::NS);
    cms.patch(
        "hostpath",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"data": {"dir-mode": "rwx"}})),
    )
    .await
    .unwrap();
    plain_claim(&cluster, "odd", "hostpath").await;
    shell_pod_pending(&cluster, "odd-pod", "odd").await;
    let needle = "parameter dir-mode 'rwx' is not an octal mode";
    wait_event(&cluster, "odd", "ProvisioningFailed", needle, 120).await;
    let out = kubectl_async(&cluster, &["describe", "pvc", "-n", "default", "odd"]).await;
    let described = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl describe pvc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        described.contains(needle),
        "kubectl describe pvc shows the image's message:\n{described}\nevents: {:?}",
        claim_events(&cluster, "odd").await
    );
}

#[tokio::test]
async fn an_image_that_fails_with_only_a_log_shows_its_last_lines_on_the_claim() {
    common::at_root();
    let cluster = common::provisioning::node_cluster().await;
    let _c = common::provisioning::controller(&cluster);
    // No termination message: the Job's FallbackToLogsOnError hands the kubelet's tail of
    // the log to the claim's event instead. The base image runs as root, which the Jobs'
    // runAsNonRoot refuses: the class names a user.
    let failing = "[\"sh\", \"-c\", \"echo 'pool gold is full' >&2; exit 3\"]";
    common::provisioning::class(
        &cluster,
        "logs-only",
        "Immediate",
        "localhost/busybox:1.35",
        json!({"command": failing,
               "pod-template": "spec:\n  securityContext:\n    runAsUser: 65534\n"}),
    )
    .await;
    plain_claim(&cluster, "full", "logs-only").await;
    wait_event(
        &cluster,
        "full",
        "ProvisioningFailed",
        "pool gold is full",
        120,
    )
    .await;

    if cluster.is_real_node() {
        // Without a user, the kubelet refuses to start the image as root (the sandbox does
        // not check runAsNonRoot): the claim says why its Job's pod does not start.
        common::provisioning::class(
            &cluster,
            "as-root",
            "Immediate",
            "localhost/busybox:1.35",
            json!({"command": failing}),
        )
        .await;
        plain_claim(&cluster, "rooted", "as-root").await;
        let msg = eventually(120, "an event on why the pod does not start", || async {
            claim_events(&cluster, "rooted")
                .await
                .into_iter()
                .find(|(_, m)| m.contains("runAsNonRoot"))
        })
        .await;
        assert!(msg.1.contains("CreateContainerConfigError"), "{msg:?}");
    }
}

/// `configmaps/nfs-subdir.yaml` as shipped. On a real node, where no NFS server runs, the
/// export is a directory of the host (writable by the image's user, as an export with
/// `all_squash` is) served by `serve_nfs_from_directories`. Returns the export's directory.
async fn nfs_subdir_class(cluster: &Cluster) -> PathBuf {
    let export = cluster.nfs_dir("nfs.storage.example.com", "/exports/k8s");
    let mut text = std::fs::read_to_string("configmaps/nfs-subdir.yaml").unwrap();
    if cluster.is_real_node() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&export).unwrap();
        std::fs::set_permissions(&export, std::fs::Permissions::from_mode(0o777)).unwrap();
        serve_nfs_from_directories(cluster).await;
        let image = "  image: ghcr.io/flex-provisioner/nfs-subdir:0.1.0\n";
        assert!(text.contains(image));
        // A hostPath is a node's power: the stand-in needs the class's explicit opt-in.
        text = text.replace(image, &format!("{image}  allow-privileged: \"true\"\n"));
    }
    apply_example(cluster, "nfs-subdir", &text).await;
    export
}

/// A real node has no NFS server: a MutatingAdmissionPolicy turns each `nfs` volume of a
/// pod, as the pod is created, into a hostPath of `Cluster::nfs_dir`. The ConfigMap, the
/// Jobs and the PVs keep their NFS sources, which is what the controller checks a report
/// against; only the kubelet mounts a directory in the server's place. Returns once the API
/// server applies the policy (a server-side dry run of such a pod shows the hostPath).
async fn serve_nfs_from_directories(cluster: &Cluster) {
    let root = cluster.nfs_dir("", "");
    let root = root.display().to_string();
    let root = root.trim_end_matches('/');
    let policy = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {{ name: nfs-from-directories }}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {{ apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods] }}
  matchConditions:
  - name: has-nfs
    expression: has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.nfs))
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        lists.range(size(object.spec.volumes))
          .filter(i, has(object.spec.volumes[i].nfs))
          .map(i, JSONPatch{{op: "replace", path: "/spec/volumes/" + string(i),
            value: Object.spec.volumes{{name: object.spec.volumes[i].name,
              hostPath: Object.spec.volumes.hostPath{{type: "Directory",
                path: "{root}/" + object.spec.volumes[i].nfs.server + object.spec.volumes[i].nfs.path}}}}}})
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {{ name: nfs-from-directories }}
spec: {{ policyName: nfs-from-directories }}
"#
    );
    let file = std::env::temp_dir().join(format!(
        "flex-nfs-policy-{}.yaml",
        kube_sandbox::ids::name_suffix()
    ));
    std::fs::write(&file, policy).unwrap();
    let applied = cluster.apply_files(std::slice::from_ref(&file));
    let _ = std::fs::remove_file(&file);
    assert_eq!(applied.len(), 2, "{applied:?}");
    let probe = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nfs-probe", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "localhost/busybox:1.35"}],
            "volumes": [{"name": "e", "nfs": {"server": "nfs.storage.example.com", "path": "/exports/k8s"}}],
        },
    });
    let pods: Api<Pod> = Api::namespaced(cluster.client().unwrap(), "default");
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(60, "the NFS stand-in policy to apply", || async {
        let p = pods
            .create(&dry_run, &serde_json::from_value(probe.clone()).unwrap())
            .await
            .ok()?;
        let volume = p.spec?.volumes?.into_iter().find(|v| v.name == "e")?;
        (volume.nfs.is_none() && volume.host_path?.path.ends_with("/exports/k8s")).then_some(())
    })
    .await;
}

/// The export directory of an NFS PV's path (below /exports/k8s).
fn export_path(export: &Path, pv: &PersistentVolume) -> PathBuf {
    let path = &pv.spec.as_ref().unwrap().nfs.as_ref().unwrap().path;
    export.join(
        path.strip_prefix("/exports/k8s/")
            .expect("a path below the export"),
    )
}

#[tokio::test]
async fn nfs_subdir_provisions_clones_and_archives_as_its_own_user() {
    common::at_root();
    let cluster = common::provisioning::node_cluster().await;
    let _c = common::provisioning::controller(&cluster);
    let export = nfs_subdir_class(&cluster).await;

    plain_claim(&cluster, "src", "nfs-shared").await;
    let src = bound(&cluster, "src", 120).await;
    let src_dir = export_path(&export, &volume_of(&cluster, &src).await);
    assert!(src_dir.is_dir(), "{}", src_dir.display());
    if cluster.is_real_node() {
        // volume-base: the kubelet made the claim's directory and its namespace's (as root
        // here; a squashing server makes them its anonymous user's) with the export's own
        // mode, in which the image's non-root user works; it cannot chmod them and need not.
        for dir in [&src_dir, &src_dir.parent().unwrap().to_owned()] {
            assert_eq!(owner_mode(dir).2, 0o777, "{}", dir.display());
        }
    }
    // What the claim's users wrote, as the export's squashed user: the image's own (the
    // sandbox runs images as its own user, root; see docs/sandbox-known-differences.md).
    let squashed = if cluster.is_real_node() { 65534 } else { 0 };
    std::fs::create_dir_all(src_dir.join("docs")).unwrap();
    std::fs::write(src_dir.join("docs/report"), "q3").unwrap();
    for p in ["docs", "docs/report"] {
        std::os::unix::fs::lchown(src_dir.join(p), Some(squashed), Some(squashed)).unwrap();
    }

    clone_claim(&cluster, "copy", "nfs-shared", "src").await;
    let copy = bound(&cluster, "copy", 120).await;
    let copy_dir = export_path(&export, &volume_of(&cluster, &copy).await);
    assert_eq!(
        std::fs::read_to_string(copy_dir.join("docs/report")).unwrap(),
        "q3"
    );
    assert_eq!(owner_mode(&copy_dir.join("docs/report")).0, squashed);

    delete_claim(&cluster, "copy").await;
    delete_claim(&cluster, "src").await;
    let shared = src_dir.parent().unwrap().to_owned();
    let archived = eventually(120, "both volumes to be archived", || async {
        let names: Vec<String> = std::fs::read_dir(&shared)
            .ok()?
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        (names.len() == 2 && names.iter().all(|n| n.starts_with("archived-"))).then_some(names)
    })
    .await;
    assert!(
        archived
            .iter()
            .any(|n| shared.join(n).join("docs/report").is_file()),
        "the data is kept in the archive: {archived:?}"
    );
}

/// What a Job's pod of a class with `volume-base` can reach: a provisioner that lists every
/// file below the base it sees, as an image with a bug (or a cp that follows a link swapped
/// in by the source's tenant) could read them, and fails with the list. Cloning a tenant's
/// volume, it sees the new directory and the source, never another namespace's volume nor
/// a sibling claim's, and a link planted in the source points nowhere. Only pods that get
/// their volumes mounted (`subPath`) can show this: a kubelet, or the sandbox run as root;
/// the simulated node of a real control plane links them (docs/sandbox-known-differences.md).
#[tokio::test]
async fn a_clone_job_sees_only_the_source_and_the_new_volume() {
    common::at_root();
    let cluster = common::provisioning::node_cluster().await;
    assert!(
        cluster.mounts_volumes(),
        "what a Job's pod can reach needs pods with mounted volumes: a real node, or the sandbox run as root"
    );
    let _c = common::provisioning::controller(&cluster);
    let base = hostpath_class(&cluster, "hostpath", SHIPPED_CAPS).await;
    neighbours(&cluster, &base).await;
    planted_source(&cluster, "hostpath", &base).await;
    // The lister: the hostpath example's class and mounts, another program.
    let lister = serde_json::to_string(&["sh", "-c", &listing(&base)]).unwrap();
    lister_class(
        &cluster,
        &base,
        &format!("  image: localhost/busybox:1.35\n  command: '{lister}'\n"),
    )
    .await;
    clone_claim(&cluster, "copy", "lister", "src").await;
    shell_pod_pending(&cluster, "copy-user", "copy").await;
    let seen = wait_event(&cluster, "copy", "ProvisioningFailed", "source-file", 120).await;
    for never in ["other-team", "vault", "sibling", "other-tenant-secret"] {
        assert!(
            !seen.contains(never),
            "the Job's pod reached {never}: {seen}"
        );
    }
    assert!(
        seen.contains("/default/copy-"),
        "it sees its new directory: {seen}"
    );
}

/// On a real kubelet: the shipped hostpath image snapshots another user's private files with
/// their owners and modes, and a snapshot Job's pod sees only the volume it copies and its
/// snapshot's own directory: never a sibling claim's volume, another namespace's, nor where
/// a link planted in the volume points. The listing comes back on the VolumeSnapshot.
#[tokio::test]
async fn a_snapshot_job_keeps_owners_and_sees_only_its_volume_and_its_copy() {
    common::at_root();
    let cluster = common::provisioning::node_cluster().await;
    assert!(
        cluster.mounts_volumes(),
        "what a Job's pod can reach needs pods with mounted volumes: a real node, or the sandbox run as root"
    );
    if !cluster.serve_snapshots(false).await {
        // The sandbox serves no snapshot API (docs/snapshots.md).
        return;
    }
    let _c = common::provisioning::controller(&cluster);
    let base = hostpath_class(&cluster, "hostpath", SHIPPED_CAPS).await;
    crate::snapshots::snapshot_class(&cluster, "Delete").await;

    plain_claim(&cluster, "owned", "hostpath").await;
    shell_pod(&cluster, "tenant", "owned", TENANT_FILES).await;
    bound(&cluster, "owned", 60).await;
    crate::snapshots::take(&cluster, "owned-snap", "owned").await;
    let taken = crate::snapshots::ready(&cluster, "owned-snap").await;
    let owned = bound(&cluster, "owned", 5).await;
    let owned_dir = storage_dir(&cluster, &volume_of(&cluster, &owned).await);
    let taken_uid = taken.metadata.uid.unwrap();
    let copy = owned_dir
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join(format!(".snapshots/default/{taken_uid}"));
    kept_as_they_were(&copy, &owned_dir, "the snapshot");

    neighbours(&cluster, &base).await;
    // A class whose image lists what its snapshot Job sees (and provisions as hostpath).
    let lister = format!(
        "if [ \"$ACTION\" = snapshot ]; then {}; fi; exec entrypoint \"$@\"",
        listing(&base)
    );
    let lister = serde_json::to_string(&["sh", "-c", &lister, "sh"]).unwrap();
    lister_class(
        &cluster,
        &base,
        &format!("{HOSTPATH_IMAGE}  command: '{lister}'\n"),
    )
    .await;
    planted_source(&cluster, "lister", &base).await;
    crate::snapshots::take(&cluster, "listed", "src").await;
    let snapshots: Api<flex_core::snapshot::VolumeSnapshot> =
        Api::namespaced(cluster.client().unwrap(), "default");
    let seen = eventually(120, "the listing on the VolumeSnapshot", || async {
        let s = snapshots.get("listed").await.ok()?;
        let m = s.status?.error?.message?;
        m.contains("source-file").then_some(m)
    })
    .await;
    // Nor another snapshot's copy.
    let never = [
        "other-team",
        "vault",
        "sibling",
        "other-tenant-secret",
        "owned-",
    ];
    for never in never.into_iter().chain([taken_uid.as_str()]) {
        assert!(
            !seen.contains(never),
            "the snapshot Job's pod reached {never}: {seen}"
        );
    }
    assert!(
        seen.contains("/.snapshots/default/"),
        "it sees its snapshot's directory: {seen}"
    );
}
