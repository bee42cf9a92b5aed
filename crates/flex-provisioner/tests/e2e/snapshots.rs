//! End to end: VolumeSnapshots of our volumes with the standard snapshot API. On a real
//! control plane the CRDs and the standard snapshot-controller are installed
//! (`Cluster::serve_snapshots`); the sandbox serves no snapshot API, and there a restore
//! from a VolumeSnapshot is refused in words.

use crate::common;

use common::cluster::Cluster;
use common::provisioning::{
    NS, bound, claim, claim_object, class, create_pod, jobs_of, local_path, sandbox, storage_dir,
    wait_event, with_examples_on,
};
use common::sandbox::eventually;
use flex_core::snapshot::{VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotContent};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::path::PathBuf;

const SNAPSHOT_CLASS: &str = "flex-snapshots";

pub(crate) async fn snapshot_class(sb: &Cluster, policy: &str) {
    let class: VolumeSnapshotClass = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
        "metadata": {"name": SNAPSHOT_CLASS},
        "driver": flex_core::names::DEFAULT_PROVISIONER_NAME, "deletionPolicy": policy
    }))
    .unwrap();
    Api::<VolumeSnapshotClass>::all(sb.client().unwrap())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

pub(crate) async fn take(sb: &Cluster, name: &str, claim: &str) {
    let s: VolumeSnapshot = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": name},
        "spec": {"volumeSnapshotClassName": SNAPSHOT_CLASS,
                 "source": {"persistentVolumeClaimName": claim}}
    }))
    .unwrap();
    Api::<VolumeSnapshot>::namespaced(sb.client().unwrap(), "default")
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// A claim restored from snapshot `from`, with a pod (on `node`, where the copy is) that
/// waits for it to bind.
async fn restore(sb: &Cluster, name: &str, class: &str, from: &str, node: Option<&str>) {
    let mut c = claim_object(name, class);
    c.spec.as_mut().unwrap().data_source = Some(
        serde_json::from_value(json!({"apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot", "name": from}))
        .unwrap(),
    );
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(&PostParams::default(), &c)
        .await
        .unwrap();
    create_pod(
        sb,
        json!({"metadata": {"name": format!("{name}-user")}, "spec": {"restartPolicy": "Never",
        "nodeSelector": node.map(|n| json!({"kubernetes.io/hostname": n})),
        "containers": [{"name": "w", "image": "demo-writer", "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": name}}]}}),
    )
    .await;
}

/// A claim of `class` on `node` with hello.txt written into it; the bound claim and its PV.
async fn written(
    sb: &Cluster,
    name: &str,
    class: &str,
) -> (PersistentVolumeClaim, PersistentVolume) {
    common::provisioning::claim_with_pod(sb, name, class, &format!("{name}-writer")).await;
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    let claim = bound(sb, name, 180).await;
    eventually(60, "the writer to finish", || async {
        let p = pods.get(&format!("{name}-writer")).await.ok()?;
        (p.status?.phase.as_deref() == Some("Succeeded")).then_some(())
    })
    .await;
    let pv_name = claim.spec.clone().unwrap().volume_name.unwrap();
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&pv_name)
        .await
        .unwrap();
    (claim, pv)
}

/// The node a volume is pinned to, if any.
fn node_of(pv: &PersistentVolume) -> Option<String> {
    let terms = pv.spec.as_ref()?.node_affinity.as_ref()?;
    let term = &terms.required.as_ref().unwrap().node_selector_terms[0];
    let values = term.match_expressions.as_ref()?[0].values.as_ref()?;
    values.first().cloned()
}

/// Where a volume's directory and the copy of its snapshot `uid` are, as the test sees the
/// node's or the export's files.
fn dirs(sb: &Cluster, pv: &PersistentVolume, uid: &str) -> (PathBuf, PathBuf) {
    let copy = format!(".snapshots/default/{uid}");
    if let Some(nfs) = &pv.spec.as_ref().unwrap().nfs {
        let export = sb.nfs_dir(&nfs.server, "/exports/k8s");
        let volume = export.join(nfs.path.strip_prefix("/exports/k8s/").unwrap());
        return (volume, export.join(copy));
    }
    let volume = storage_dir(sb, pv);
    let base = volume.parent().unwrap().parent().unwrap().to_owned();
    (volume, base.join(copy))
}

/// Waits for content `name` to be gone.
async fn content_gone(sb: &Cluster, name: &str) {
    let contents: Api<VolumeSnapshotContent> = Api::all(sb.client().unwrap());
    eventually(120, &format!("content {name} to go"), || async {
        let gone = contents.get_opt(name).await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
}

pub(crate) async fn ready(sb: &Cluster, name: &str) -> VolumeSnapshot {
    let snapshots: Api<VolumeSnapshot> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(120, &format!("snapshot {name} to be ready"), || async {
        let s = snapshots.get(name).await.ok()?;
        (s.status.as_ref()?.ready_to_use == Some(true)).then_some(s)
    })
    .await
}

/// The acceptance flow, with the standard snapshot-controller: a snapshot of a hostpath
/// volume becomes ready; a claim restored from it holds what was written before it and not
/// what was written after; deleting the snapshot removes its copy, its content and itself.
#[tokio::test]
async fn a_hostpath_snapshot_is_taken_restored_and_deleted() {
    taken_restored_and_deleted("configmaps/hostpath.yaml", "local-hostpath", true).await;
}

/// The same with the CRDs alone: the controller writes the snapshot's status and deletes
/// the content of a deleted snapshot itself.
#[tokio::test]
async fn without_the_snapshot_controller_a_snapshot_is_taken_restored_and_deleted() {
    taken_restored_and_deleted("configmaps/hostpath.yaml", "local-hostpath", false).await;
}

/// The same with the shipped nfs-subdir class: the copy is in the export's `.snapshots`.
#[tokio::test]
async fn an_nfs_subdir_snapshot_is_taken_restored_and_deleted() {
    taken_restored_and_deleted("configmaps/nfs-subdir.yaml", "nfs-shared", true).await;
}

async fn taken_restored_and_deleted(example: &str, class: &str, with_snapshot_controller: bool) {
    common::at_root();
    let sb = sandbox().await;
    let served = sb.serve_snapshots(with_snapshot_controller).await;
    let (sb, _c) = with_examples_on(sb, &[example]).await;
    let (_, pv) = written(&sb, "data", class).await;
    let node = node_of(&pv);
    if !served {
        // The sandbox serves no snapshot API: a restore says so and runs nothing.
        restore(&sb, "restored", class, "before", node.as_deref()).await;
        let needle = "serves no kind VolumeSnapshot in group snapshot.storage.k8s.io";
        wait_event(&sb, "restored", "ProvisioningFailed", needle, 60).await;
        let restores = jobs_of(&sb, "provision").await.len();
        assert_eq!(restores, 1, "only the source's Job");
        return;
    }
    snapshot_class(&sb, "Delete").await;
    take(&sb, "before", "data").await;
    let taken = ready(&sb, "before").await;
    let uid = taken.metadata.uid.clone().unwrap();
    let status = taken.status.clone().unwrap();
    assert_eq!(
        status.bound_volume_snapshot_content_name.as_deref(),
        Some(format!("snapcontent-{uid}").as_str())
    );
    assert_eq!(status.restore_size.unwrap().0, "1Gi");
    let (volume, copy) = dirs(&sb, &pv, &uid);
    assert!(copy.join("hello.txt").is_file(), "{}", copy.display());
    // Written after the snapshot: not in it.
    std::fs::write(volume.join("after.txt"), "after").unwrap();

    restore(&sb, "restored", class, "before", node.as_deref()).await;
    let restored = bound(&sb, "restored", 180).await;
    let restored_pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&restored.spec.unwrap().volume_name.unwrap())
        .await
        .unwrap();
    let (dir, _) = dirs(&sb, &restored_pv, &uid);
    let text = std::fs::read_to_string(dir.join("hello.txt")).unwrap();
    assert!(text.starts_with("written by data-writer"), "{text}");
    assert!(
        !dir.join("after.txt").exists(),
        "what was written after the snapshot"
    );

    Api::<VolumeSnapshot>::namespaced(sb.client().unwrap(), "default")
        .delete("before", &DeleteParams::default())
        .await
        .unwrap();
    let contents: Api<VolumeSnapshotContent> = Api::all(sb.client().unwrap());
    let snapshots: Api<VolumeSnapshot> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(
        120,
        "the snapshot, its content and its copy to go",
        || async {
            let gone = snapshots.get_opt("before").await.ok()?.is_none()
                && contents
                    .get_opt(&format!("snapcontent-{uid}"))
                    .await
                    .ok()?
                    .is_none()
                && !copy.exists();
            gone.then_some(())
        },
    )
    .await;
    assert!(
        volume.join("hello.txt").is_file(),
        "the volume itself stays"
    );
}

/// A snapshot whose Job fails for good shows the image's message on the VolumeSnapshot,
/// and no second attempt starts.
#[tokio::test]
async fn a_snapshot_whose_job_fails_shows_the_images_message() {
    let sb = sandbox().await;
    if !sb.serve_snapshots(true).await {
        return;
    }
    let (_c, addr) = common::provisioning::controller_serving(&sb);
    class(
        &sb,
        "snaps",
        "Immediate",
        "snapshot-fails",
        json!({"snapshots": "true"}),
    )
    .await;
    claim(&sb, "data", "snaps").await;
    bound(&sb, "data", 120).await;
    snapshot_class(&sb, "Delete").await;
    take(&sb, "doomed", "data").await;
    let snapshots: Api<VolumeSnapshot> = Api::namespaced(sb.client().unwrap(), "default");
    let message = eventually(120, "the failure on the snapshot", || async {
        let s = snapshots.get("doomed").await.ok()?;
        let m = s.status?.error?.message?;
        m.contains("quota exceeded").then_some(m)
    })
    .await;
    assert!(
        message.contains("exit code 2: quota exceeded on /srv/snapshots"),
        "{message}"
    );
    let told = wait_event(
        &sb,
        "doomed",
        "SnapshotCreationFailed",
        "quota exceeded",
        60,
    )
    .await;
    assert!(told.contains("no new attempt is made"), "{told}");
    // Given up for good: recorded on the content, so no attempt follows, even once the
    // Job expires.
    let uid = snapshots.get("doomed").await.unwrap().metadata.uid.unwrap();
    let content = Api::<VolumeSnapshotContent>::all(sb.client().unwrap())
        .get(&format!("snapcontent-{uid}"))
        .await
        .unwrap();
    let gave_up = content.metadata.annotations.unwrap_or_default();
    assert_eq!(
        gave_up
            .get(flex_core::plan::snapshot::ANN_GAVE_UP)
            .map(String::as_str),
        Some("1")
    );
    let attempts = jobs_of(&sb, "snapshot").await;
    assert_eq!(attempts.len(), 1, "a permanent failure is not retried");
    // Counted once, as the CSI snapshotter counts a CreateSnapshot that failed for good.
    let metrics = common::provisioning::http_get(addr, "/metrics")
        .await
        .unwrap();
    let series = format!(
        "csi_sidecar_operations_seconds_count{{driver_name=\"{}\",grpc_status_code=\"InvalidArgument\",method_name=\"/csi.v1.Controller/CreateSnapshot\"}} 1",
        flex_core::names::DEFAULT_PROVISIONER_NAME
    );
    assert!(metrics.contains(&series), "{series} in:\n{metrics}");

    // Its Job expires (deleted here as the TTL controller would delete it); deleting the
    // snapshot still removes what the attempt may have left, as the record of its attempts
    // written before it says.
    let jobs: Api<Job> = Api::namespaced(sb.client().unwrap(), NS);
    let attempt = attempts[0].metadata.name.clone().unwrap();
    jobs.delete(&attempt, &DeleteParams::background())
        .await
        .unwrap();
    eventually(60, "the attempt's Job to go", || async {
        jobs.get_opt(&attempt).await.ok()?.is_none().then_some(())
    })
    .await;
    snapshots
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    content_gone(&sb, &format!("snapcontent-{uid}")).await;
    let deletes = jobs_of(&sb, "delete-snapshot").await;
    assert_eq!(deletes.len(), 1, "one delete-snapshot Job");
    let env = deletes[0]
        .spec
        .clone()
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap_or_default();
    let directory = env.iter().find(|e| e.name == "VOLUME_DIRECTORY");
    assert_eq!(
        directory.and_then(|e| e.value.clone()),
        Some(format!(".snapshots/default/{uid}")),
        "it removes the directory the attempt was given"
    );
    assert!(
        attempts[0].metadata.namespace.as_deref() == Some(NS),
        "the Job runs in the config namespace"
    );
}

/// A content anyone allowed to create contents could write: pre-provisioned for a
/// VolumeSnapshot of theirs, naming this provisioner as its driver and another tenant's
/// volume as its copy, its status saying it is ready. Restoring from it runs no Job, and
/// deleting it runs none either: the volume it names is untouched.
#[tokio::test]
async fn a_forged_content_restores_nothing_and_deletes_nothing() {
    common::at_root();
    let sb = sandbox().await;
    if !sb.serve_snapshots(true).await {
        return;
    }
    let (sb, _c) = with_examples_on(sb, &["configmaps/hostpath.yaml"]).await;
    let (_, pv) = written(&sb, "victim", "local-hostpath").await;
    let node = node_of(&pv);
    let volume = storage_dir(&sb, &pv);
    snapshot_class(&sb, "Delete").await;
    let contents: Api<VolumeSnapshotContent> = Api::all(sb.client().unwrap());
    let forged: VolumeSnapshotContent = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
        "metadata": {"name": "forged-content"},
        "spec": {"deletionPolicy": "Delete", "driver": flex_core::names::DEFAULT_PROVISIONER_NAME,
                 "source": {"snapshotHandle": local_path(&pv)},
                 "volumeSnapshotClassName": SNAPSHOT_CLASS,
                 "volumeSnapshotRef": {"name": "forged", "namespace": "default"}}
    }))
    .unwrap();
    contents
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    let status = json!({"status": {"readyToUse": true, "snapshotHandle": local_path(&pv),
        "restoreSize": 1_073_741_824_i64, "creationTime": 1_795_900_000_000_000_000_i64}});
    contents
        .patch_status(
            "forged-content",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
    let s: VolumeSnapshot = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": "forged"},
        "spec": {"volumeSnapshotClassName": SNAPSHOT_CLASS,
                 "source": {"volumeSnapshotContentName": "forged-content"}}
    }))
    .unwrap();
    let snapshots: Api<VolumeSnapshot> = Api::namespaced(sb.client().unwrap(), "default");
    snapshots.create(&PostParams::default(), &s).await.unwrap();
    // The snapshot-controller binds it and calls it ready on the content's word.
    ready(&sb, "forged").await;

    restore(&sb, "stolen", "local-hostpath", "forged", node.as_deref()).await;
    let needle = "was not taken by this provisioner (it has no record of it)";
    wait_event(&sb, "stolen", "ProvisioningFailed", needle, 60).await;
    assert_eq!(
        jobs_of(&sb, "provision").await.len(),
        1,
        "only the victim's own Job"
    );

    // The snapshot-controller keeps a snapshot a pending claim restores from.
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .delete("stolen", &DeleteParams::default())
        .await
        .unwrap();
    snapshots
        .delete("forged", &DeleteParams::default())
        .await
        .unwrap();
    content_gone(&sb, "forged-content").await;
    assert!(
        jobs_of(&sb, "delete-snapshot").await.is_empty(),
        "nothing runs for a content this provisioner did not take"
    );
    assert!(
        volume.join("hello.txt").is_file(),
        "the volume the forged content named is untouched"
    );
}

/// Snapshot CRDs installed after the controller started: it finds the snapshot API when it
/// next looks (every 5 minutes; every 2 seconds here) and watches VolumeSnapshots, without
/// a restart.
#[tokio::test]
async fn snapshot_crds_installed_after_the_start_are_watched_without_a_restart() {
    let sb = sandbox().await;
    let options = flex_controller::controller::Options {
        snapshot_api_recheck: std::time::Duration::from_secs(2),
        ..common::provisioning::options()
    };
    let _c = common::provisioning::controller_with(&sb, options);
    class(
        &sb,
        "snaps",
        "Immediate",
        "snapshot-fails",
        json!({"snapshots": "true"}),
    )
    .await;
    claim(&sb, "data", "snaps").await;
    bound(&sb, "data", 120).await;
    if !sb.serve_snapshots(false).await {
        // The sandbox serves no snapshot API (docs/snapshots.md).
        return;
    }
    snapshot_class(&sb, "Delete").await;
    take(&sb, "late", "data").await;
    let snapshots: Api<VolumeSnapshot> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(120, "the snapshot to be taken (and fail)", || async {
        let s = snapshots.get("late").await.ok()?;
        let m = s.status?.error?.message?;
        m.contains("quota exceeded").then_some(())
    })
    .await;
}
