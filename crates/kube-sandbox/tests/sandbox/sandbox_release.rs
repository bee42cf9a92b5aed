//! What the PV controller does with volumes whose claim is gone (Released at once, then the
//! reclaim policy), events that repeat on every sync of a pending claim (one Event, its
//! count growing), and pods whose object is gone (their processes stop).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::sandbox::{eventually, options};
use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_sandbox::Sandbox;
use serde_json::{Value, json};

/// A scratch directory for this test's images and pid files.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sandbox-release-{tag}-{}-{}",
        std::process::id(),
        kube_sandbox::ids::name_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A sandbox with two more images: `pids` (a shell and its `sleep` child, which write their
/// PIDs to `$SANDBOX_STATE/$PIDFILE` and wait) and `stubborn` (the same, ignoring TERM).
async fn start(dir: &Path) -> Sandbox {
    let record =
        "f=\"$SANDBOX_STATE/$PIDFILE\"; echo \"$$ $!\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"";
    let mut opts = options();
    opts.image_map.insert(
        "pids".into(),
        script(dir, "pids", &format!("sleep 300 &\n{record}\nwait $!")),
    );
    opts.image_map.insert(
        "stubborn".into(),
        script(
            dir,
            "stubborn",
            &format!("trap '' TERM\nsleep 300 &\n{record}\nwhile :; do wait $!; done"),
        ),
    );
    Sandbox::start(opts).await.expect("sandbox starts")
}

/// Whether a process runs (a zombie does not count).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn volume(
    name: &str,
    policy: &str,
    provisioner: Option<&str>,
    claim_ref: Value,
) -> PersistentVolume {
    let mut pv = json!({"metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": policy, "storageClassName": "",
                 "hostPath": {"path": format!("/data/{name}")}, "claimRef": claim_ref}});
    if let Some(p) = provisioner {
        pv["metadata"]["annotations"] = json!({"pv.kubernetes.io/provisioned-by": p});
    }
    serde_json::from_value(pv).unwrap()
}

fn claim_ref(name: &str, uid: Option<&str>) -> Value {
    let mut r = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                       "namespace": "default", "name": name});
    if let Some(uid) = uid {
        r["uid"] = json!(uid);
    }
    r
}

fn claim(name: &str, class: &str) -> PersistentVolumeClaim {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"storageClassName": class,
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .unwrap()
}

async fn phase_of(pvs: &Api<PersistentVolume>, name: &str) -> Option<String> {
    pvs.get(name).await.ok()?.status?.phase
}

async fn wait_phase(pvs: &Api<PersistentVolume>, name: &str, want: &str) {
    eventually(5, &format!("{name} to be {want}"), || async {
        (phase_of(pvs, name).await.as_deref() == Some(want)).then_some(())
    })
    .await;
}

async fn events_about(c: &kube::Client, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(c.clone(), "default")
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

const MISSING_UID: &str = "0e7a8a3c-3b6f-4a53-9d3c-5f1e2a9b7c11";

#[tokio::test]
async fn a_volume_whose_claim_never_existed_is_released_then_reclaimed() {
    let dir = scratch("missing");
    let sb = start(&dir).await;
    let c = sb.client().unwrap();
    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    let pp = PostParams::default();
    let missing = || claim_ref("never-made", Some(MISSING_UID));
    pvs.create(
        &pp,
        &volume("ext-delete", "Delete", Some("example.com/ext"), missing()),
    )
    .await
    .unwrap();
    pvs.create(&pp, &volume("kept", "Retain", None, missing()))
        .await
        .unwrap();
    pvs.create(&pp, &volume("no-deleter", "Delete", None, missing()))
        .await
        .unwrap();
    // The in-tree hostPath deleter takes paths under /tmp/: the PV object goes.
    let mut scratch_pv = volume("under-tmp", "Delete", None, missing());
    scratch_pv
        .spec
        .as_mut()
        .unwrap()
        .host_path
        .as_mut()
        .unwrap()
        .path = "/tmp/scratch".into();
    pvs.create(&pp, &scratch_pv).await.unwrap();
    // Pre-bound by name only: it waits for its claim.
    pvs.create(
        &pp,
        &volume("by-name", "Delete", None, claim_ref("later", None)),
    )
    .await
    .unwrap();

    wait_phase(&pvs, "ext-delete", "Released").await;
    wait_phase(&pvs, "kept", "Released").await;
    wait_phase(&pvs, "no-deleter", "Failed").await;
    wait_phase(&pvs, "by-name", "Available").await;
    eventually(5, "the /tmp/ volume to be deleted", || async {
        pvs.get_opt("under-tmp")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    let failed = pvs.get("no-deleter").await.unwrap().status.unwrap();
    assert_eq!(
        failed.message.as_deref(),
        Some("host_path deleter only supports /tmp/.+ but received provided /data/no-deleter")
    );
    let warnings = eventually(5, "the VolumeFailedDelete event", || async {
        let e = events_about(&c, "no-deleter", "VolumeFailedDelete").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        warnings[0].source.as_ref().unwrap().component.as_deref(),
        Some("persistentvolume-controller")
    );

    // Several resyncs later nothing has moved: the external provisioner's volume and the
    // retained one stay Released, the pre-bound one Available.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    for (name, want) in [
        ("ext-delete", "Released"),
        ("kept", "Released"),
        ("no-deleter", "Failed"),
        ("by-name", "Available"),
    ] {
        assert_eq!(phase_of(&pvs, name).await.as_deref(), Some(want), "{name}");
    }
    assert_eq!(
        events_about(&c, "no-deleter", "VolumeFailedDelete")
            .await
            .len(),
        1,
        "the warning comes with the phase change, once"
    );
    assert!(
        events_about(&c, "ext-delete", "VolumeFailedDelete")
            .await
            .is_empty()
    );
    drop(sb);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_claim_deleted_and_made_again_under_its_name_releases_the_old_volume() {
    let dir = scratch("recreated");
    let sb = start(&dir).await;
    let c = sb.client().unwrap();
    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();

    // A claim of another uid under the name from the start.
    let other = claims.create(&pp, &claim("taken", "")).await.unwrap();
    assert_ne!(other.metadata.uid.as_deref(), Some(MISSING_UID));
    pvs.create(
        &pp,
        &volume(
            "stale",
            "Retain",
            None,
            claim_ref("taken", Some(MISSING_UID)),
        ),
    )
    .await
    .unwrap();
    wait_phase(&pvs, "stale", "Released").await;

    // A claim bound to its volume, deleted, and made again under the same name.
    claims.create(&pp, &claim("data", "")).await.unwrap();
    pvs.create(&pp, &volume("old", "Retain", None, claim_ref("data", None)))
        .await
        .unwrap();
    wait_phase(&pvs, "old", "Bound").await;
    let first_uid = claims.get("data").await.unwrap().metadata.uid.unwrap();
    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    eventually(5, "the claim to go", || async {
        claims
            .get_opt("data")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let again = claims.create(&pp, &claim("data", "")).await.unwrap();
    assert_ne!(again.metadata.uid.as_deref(), Some(first_uid.as_str()));
    wait_phase(&pvs, "old", "Released").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let old = pvs.get("old").await.unwrap();
    assert_eq!(old.status.unwrap().phase.as_deref(), Some("Released"));
    assert_eq!(
        old.spec.unwrap().claim_ref.unwrap().uid.as_deref(),
        Some(first_uid.as_str()),
        "the volume still names the claim it had"
    );
    let new = claims.get("data").await.unwrap();
    assert_eq!(
        new.status.unwrap().phase.as_deref(),
        Some("Pending"),
        "the new claim does not get the old claim's volume"
    );
    assert!(new.spec.unwrap().volume_name.is_none());
    drop(sb);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn events_of_a_pending_claim_repeat_as_one_event_with_a_growing_count() {
    let dir = scratch("events");
    let sb = start(&dir).await;
    let c = sb.client().unwrap();
    let class: StorageClass = serde_json::from_value(json!({"metadata": {"name": "ext"},
        "provisioner": "example.com/ext", "volumeBindingMode": "Immediate"}))
    .unwrap();
    Api::<StorageClass>::all(c.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &claim("pending", "ext"))
        .await
        .unwrap();
    let count = |min: i32| {
        let c = c.clone();
        async move {
            let e = events_about(&c, "pending", "ExternalProvisioning").await;
            (e.len() == 1 && e[0].count.unwrap_or(0) >= min).then(|| e[0].clone())
        }
    };
    // Synced again when the controller's own annotation changes the claim...
    let second = eventually(30, "ExternalProvisioning with count >= 2", || count(2)).await;
    // ...and on the periodic resync, with nothing changed.
    let third = eventually(60, "ExternalProvisioning with count >= 3", || count(3)).await;
    assert_eq!(
        third.metadata.name, second.metadata.name,
        "one Event, counted"
    );
    assert!(third.last_timestamp.unwrap().0 > third.first_timestamp.unwrap().0);
    assert!(
        third.message.unwrap().contains("'example.com/ext'"),
        "the provisioner is named"
    );
    drop(sb);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Creates a pod running `image` that writes its PIDs to a file, with `grace` as its
/// terminationGracePeriodSeconds; waits for the PIDs.
/// Runs pod `name` of `image` on node-a and returns the PIDs it wrote.
async fn pod_with_pids(
    pods: &Api<Pod>,
    sb: &Sandbox,
    name: &str,
    image: &str,
    grace: i64,
) -> Vec<u32> {
    let file_name = format!("pids-{}-{name}", pods.resource_url().replace('/', "_"));
    let file = sb.state_dir("node-a").join(&file_name);
    let _ = std::fs::remove_file(&file);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": grace, "nodeName": "node-a",
                 "containers": [{"name": "c", "image": image,
                 "env": [{"name": "PIDFILE", "value": file_name}]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let pids: Vec<u32> = eventually(15, &format!("{name} to write its PIDs"), || async {
        let text = std::fs::read_to_string(&file).ok()?;
        let pids: Vec<u32> = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        (pids.len() == 2).then_some(pids)
    })
    .await;
    assert!(pids.iter().all(|p| alive(*p)), "{name} runs: {pids:?}");
    pids
}

async fn all_stop(what: &str, pids: &[u32]) {
    eventually(6, &format!("the processes of {what} to stop"), || async {
        pids.iter().all(|p| !alive(*p)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_force_deleted_pod_stops_running() {
    let dir = scratch("force");
    let sb = start(&dir).await;
    let c = sb.client().unwrap();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let plain = pod_with_pids(&pods, &sb, "plain", "pids", 30).await;
    let stubborn = pod_with_pids(&pods, &sb, "stubborn", "stubborn", 30).await;
    let now = DeleteParams::default().grace_period(0);
    pods.delete("plain", &now).await.unwrap();
    pods.delete("stubborn", &now).await.unwrap();
    assert!(
        pods.get_opt("plain").await.unwrap().is_none(),
        "removed at once"
    );
    // TERM ends the plain one; the one ignoring TERM is killed after the kubelet's
    // minimum grace period.
    all_stop("the force-deleted pod", &plain).await;
    all_stop("the force-deleted pod ignoring TERM", &stubborn).await;
    // A pod made again under the name runs, untouched by the old one's end.
    let next = pod_with_pids(&pods, &sb, "plain", "pids", 30).await;
    assert!(next.iter().all(|p| !plain.contains(p)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = pods.get("plain").await.unwrap();
    assert!(again.metadata.deletion_timestamp.is_none());
    assert_eq!(again.status.unwrap().phase.as_deref(), Some("Running"));
    assert!(next.iter().all(|p| alive(*p)));
    drop(sb);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_pods_of_a_deleted_namespace_stop_running() {
    let dir = scratch("namespace");
    let sb = start(&dir).await;
    let c = sb.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "doomed");
    eventually(5, "the default service account", || async {
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(c.clone(), "doomed")
            .get_opt("default")
            .await
            .ok()
            .flatten()
    })
    .await;
    let plain = pod_with_pids(&pods, &sb, "plain", "pids", 30).await;
    let stubborn = pod_with_pids(&pods, &sb, "stubborn", "stubborn", 3).await;
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    all_stop("the pod of the deleted namespace", &plain).await;
    // Deleted with its own grace period (3 s here): TERM, then KILL at its end.
    eventually(15, "the namespace to go", || async {
        namespaces
            .get_opt("doomed")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    all_stop(
        "the pod ignoring TERM, once its namespace is gone",
        &stubborn,
    )
    .await;
    drop(sb);
    let _ = std::fs::remove_dir_all(&dir);
}
