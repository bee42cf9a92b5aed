//! End to end on the sandbox: released volumes of Delete classes are deprovisioned exactly
//! once with what was recorded on them; Retain keeps the storage; nothing leaks.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams};
use serde_json::json;

/// A hostpath class: a directory per claim under /srv/volumes on the node.
async fn hostpath_class(sb: &common::cluster::Cluster, name: &str, reclaim: &str) {
    // Its Jobs mount a node directory, which the config namespace must allow.
    common::provisioning::allow_privileged_jobs(sb).await;
    let client = sb.client().unwrap();
    let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
        "provisioner": "flex-provisioner.io/job", "reclaimPolicy": reclaim, "volumeBindingMode": "WaitForFirstConsumer"});
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(&Default::default(), &serde_json::from_value(sc).unwrap())
        .await
        .unwrap();
    let cm = json!({"metadata": {"name": format!("{name}-config"), "labels": {"type": "provisioner-config", "storage-class": name}},
        "data": {"image": "ghcr.io/flex-provisioner/hostpath:0.1.0", "node-local": "true", "retries": "0", "volume-sources": "local",
                 "base-path": "/srv/volumes", "directory": "{{claim.namespace}}/{{claim.name}}-{{claim.uid}}",
                 "allow-privileged": "true",
                 // The image works in the node's base, mounted where the node has it.
                 "pod-template": "spec:\n  volumes:\n  - name: base\n    hostPath: {path: /srv/volumes, type: DirectoryOrCreate}\n  containers:\n  - volumeMounts:\n    - {name: base, mountPath: /srv/volumes}\n"}});
    Api::<ConfigMap>::namespaced(client, NS)
        .create(&Default::default(), &serde_json::from_value(cm).unwrap())
        .await
        .unwrap();
}

/// Creates a claim and a pod using it, so the WaitForFirstConsumer class gets a node.
async fn used_claim(
    sb: &common::cluster::Cluster,
    name: &str,
    class: &str,
) -> PersistentVolumeClaim {
    claim(sb, name, class).await;
    create_pod(
        sb,
        json!({"metadata": {"name": format!("{name}-user")},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "no-pv"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": name}}]}}),
    )
    .await;
    bound(sb, name, 30).await
}

/// A used claim's PV, once bound, and its directory on the node.
async fn used_volume(
    sb: &common::cluster::Cluster,
    name: &str,
    class: &str,
) -> (String, std::path::PathBuf) {
    let c = used_claim(sb, name, class).await;
    let pv_name = c.spec.unwrap().volume_name.unwrap();
    let pvs = Api::<PersistentVolume>::all(sb.client().unwrap());
    let dir = storage_dir(sb, &pvs.get(&pv_name).await.unwrap());
    (pv_name, dir)
}

async fn delete_claim_and_pod(sb: &common::cluster::Cluster, name: &str) {
    let c = sb.client().unwrap();
    let _ = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(c.clone(), "default")
        .delete(
            &format!("{name}-user"),
            &DeleteParams::default().grace_period(0),
        )
        .await;
    Api::<PersistentVolumeClaim>::namespaced(c, "default")
        .delete(name, &Default::default())
        .await
        .unwrap();
}

async fn gone(sb: &common::cluster::Cluster, pv: &str, secs: u64) {
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if pvs.get_opt(pv).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let state = pvs.get_opt(pv).await.unwrap();
    let jobs: Vec<(Option<String>, Option<Vec<String>>)> = jobs(sb)
        .await
        .into_iter()
        .map(|j| {
            (
                j.metadata.name,
                j.status
                    .and_then(|s| s.conditions)
                    .map(|c| c.into_iter().map(|c| c.type_).collect()),
            )
        })
        .collect();
    panic!(
        "PV {pv} still there after {secs}s: {}\njobs: {jobs:?}",
        serde_json::to_string(&state).unwrap()
    );
}

fn deprovision_jobs(
    jobs: &[k8s_openapi::api::batch::v1::Job],
) -> Vec<&k8s_openapi::api::batch::v1::Job> {
    jobs.iter()
        .filter(|j| {
            j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/action"] == "deprovision"
        })
        .collect()
}

#[tokio::test]
async fn delete_class_removes_the_storage_and_the_pv() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    hostpath_class(&sb, "local", "Delete").await;
    let (pv_name, dir) = used_volume(&sb, "data", "local").await;
    assert!(dir.is_dir(), "the image created {}", dir.display());
    std::fs::write(dir.join("data.txt"), "user data").unwrap();
    delete_claim_and_pod(&sb, "data").await;
    gone(&sb, &pv_name, 30).await;
    assert!(!dir.exists(), "the storage is gone: {}", dir.display());
    let jobs = jobs(&sb).await;
    let dep = deprovision_jobs(&jobs);
    assert_eq!(dep.len(), 1);
    let env = common::envs(dep[0]);
    assert_eq!(env["ACTION"], "deprovision");
    assert!(
        env["DIRECTORY"].starts_with("default/data-"),
        "the recorded parameters: {env:?}"
    );
    assert!(env.contains_key("PV_JSON"));
}

#[tokio::test]
async fn retain_keeps_the_storage_and_runs_nothing() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    hostpath_class(&sb, "kept", "Retain").await;
    let (pv_name, dir) = used_volume(&sb, "data", "kept").await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    delete_claim_and_pod(&sb, "data").await;
    eventually(15, "the PV to be Released", || async {
        (pvs.get(&pv_name).await.ok()?.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    // Deleting a Retain PV runs nothing either; our finalizer lets it go: the sign that the
    // controller judged the released volume, and then the deleted one.
    pvs.delete(&pv_name, &Default::default()).await.unwrap();
    gone(&sb, &pv_name, 15).await;
    assert!(dir.is_dir(), "Retain keeps the storage");
    assert!(
        deprovision_jobs(&jobs(&sb).await).is_empty(),
        "no Job for Retain"
    );
}

#[tokio::test]
async fn failing_deprovisioning_is_reported_retried_and_keeps_the_pv_until_done() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "sticky",
        "Immediate",
        "fail-delete",
        json!({"node-selector": "kubernetes.io/hostname=node-a"}),
    )
    .await;
    claim(&sb, "data", "sticky").await;
    let pv_name = bound(&sb, "data", 30)
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .delete("data", &Default::default())
        .await
        .unwrap();
    gone(&sb, &pv_name, 60).await;
    let events =
        Api::<k8s_openapi::api::core::v1::Event>::namespaced(sb.client().unwrap(), "default")
            .list(
                &kube::api::ListParams::default().fields(&format!("involvedObject.name={pv_name}")),
            )
            .await
            .unwrap();
    let failed: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("VolumeFailedDelete"))
        .map(|e| e.message.clone().unwrap_or_default())
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(
        failed
            .iter()
            .any(|m| m.contains("backend refuses to delete (try 0)")),
        "{failed:?}"
    );
    assert_eq!(
        deprovision_jobs(&jobs(&sb).await).len(),
        3,
        "the PV went after the third Job"
    );
}

#[tokio::test]
async fn deleting_a_bound_pv_cleans_the_storage_before_it_disappears() {
    let sb = sandbox().await;
    let (_c, addr) = controller_serving(&sb);
    hostpath_class(&sb, "local", "Delete").await;
    let (pv_name, dir) = used_volume(&sb, "data", "local").await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let before = reconciles(addr, "volume").await;
    pvs.delete(&pv_name, &Default::default()).await.unwrap();
    // The only PV: the next reconcile of a volume is this one's, marked for deletion.
    reconciled_past(addr, "volume", before).await;
    assert!(
        pvs.get_opt(&pv_name).await.unwrap().is_some(),
        "a bound PV stays while its claim uses it"
    );
    assert!(dir.is_dir(), "storage in use is not touched");
    delete_claim_and_pod(&sb, "data").await;
    // Our finalizer holds the PV until its storage is gone.
    gone(&sb, &pv_name, 30).await;
    assert!(!dir.exists());
}

#[tokio::test]
async fn deprovisioning_works_after_the_config_map_is_deleted() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    hostpath_class(&sb, "local", "Delete").await;
    let (pv_name, dir) = used_volume(&sb, "data", "local").await;
    Api::<ConfigMap>::namespaced(sb.client().unwrap(), NS)
        .delete("local-config", &Default::default())
        .await
        .unwrap();
    delete_claim_and_pod(&sb, "data").await;
    gone(&sb, &pv_name, 30).await;
    assert!(!dir.exists());
}

/// Records are read from a watch of the config namespaces: one an admin removed (with the
/// provisioning Job it could be written again from) is gone from what the controller reads
/// too, and the volume is kept with a warning rather than deprovisioned from a stale copy.
#[tokio::test]
async fn a_removed_record_runs_nothing_and_keeps_the_volume() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    hostpath_class(&sb, "local", "Delete").await;
    let (pv_name, dir) = used_volume(&sb, "data", "local").await;
    let pvs = Api::<PersistentVolume>::all(sb.client().unwrap());
    let pv = pvs.get(&pv_name).await.unwrap();
    let record = flex_core::record::record_name(pv.metadata.uid.as_deref().unwrap());
    let (client, background) = (sb.client().unwrap(), DeleteParams::background());
    eventually(30, "the record to be written", || async {
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .get_opt(&record)
            .await
            .unwrap()
    })
    .await;
    for job in jobs_of(&sb, "provision").await {
        Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), NS)
            .delete(&job.metadata.name.unwrap(), &background)
            .await
            .expect("the provisioning Job deleted");
    }
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .delete(&record, &Default::default())
        .await
        .expect("the record deleted");
    eventually(30, "the provisioning Job gone", || async {
        jobs_of(&sb, "provision").await.is_empty().then_some(())
    })
    .await;
    delete_claim_and_pod(&sb, "data").await;
    let warning = eventually(60, "a VolumeFailedDelete warning on the PV", || async {
        events_about(&sb, &pv_name)
            .await
            .into_iter()
            .find(|(r, _)| r == "VolumeFailedDelete")
            .map(|(_, m)| m)
    })
    .await;
    assert!(warning.contains(&record), "{warning}");
    assert!(jobs_of(&sb, "deprovision").await.is_empty());
    assert!(
        pvs.get_opt(&pv_name).await.unwrap().is_some(),
        "the PV is kept"
    );
    assert!(dir.is_dir(), "the storage is kept: {}", dir.display());
}

#[tokio::test]
async fn a_claim_deleted_while_its_job_runs_leaves_nothing_behind() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "steady", "Immediate", "slow", json!({})).await;
    let created = claim(&sb, "hasty", "steady").await;
    eventually(30, "the provisioning Job", || async {
        (!jobs(&sb).await.is_empty()).then_some(())
    })
    .await;
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .delete("hasty", &Default::default())
        .await
        .unwrap();
    let pv_name = format!("pvc-{}", created.metadata.uid.unwrap());
    // The PV its pod makes late may come and go between two looks: wait for the outcome.
    provisioning_complete(&sb, 60).await;
    gone(&sb, &pv_name, 30).await;
    eventually(30, "one deprovision Job", || async {
        (deprovision_jobs(&jobs(&sb).await).len() == 1).then_some(())
    })
    .await;
    let dep = deprovision_jobs(&jobs(&sb).await).len();
    assert_eq!(dep, 1, "the late PV was deprovisioned exactly once");
}

/// A user holds their claim's deletion with a finalizer of their own, past its Job's life
/// (the Job's TTL removes the Job and, with its pod, the image's report): the storage the
/// Job made is still named by a PV, bound to the leaving claim, and is deprovisioned once
/// the claim is let go. Before, the controller waited a minute for the claim to go, gave
/// up, and nothing named the storage any more.
#[tokio::test]
async fn a_claim_held_past_its_jobs_life_has_its_storage_reclaimed_when_let_go() {
    let sb = sandbox().await;
    let _c = controller_with(
        &sb,
        flex_controller::controller::Options {
            job_ttl_seconds: 3,
            ..options()
        },
    );
    class(&sb, "steady", "Immediate", "slow", json!({})).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let mut held = claim_object("held", "steady");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let held = claims
        .create(&kube::api::PostParams::default(), &held)
        .await
        .unwrap();
    let uid = held.metadata.uid.unwrap();
    let pv_name = format!("pvc-{uid}");
    eventually(60, "the provisioning Job", || async {
        (!jobs_of(&sb, "provision").await.is_empty()).then_some(())
    })
    .await;
    claims
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    eventually(
        60,
        "a PV to name the storage of the leaving claim",
        || async { pvs.get_opt(&pv_name).await.unwrap().map(|_| ()) },
    )
    .await;
    eventually(60, "the Job to be removed by its TTL", || async {
        jobs_of(&sb, "provision").await.is_empty().then_some(())
    })
    .await;
    let still = claims.get("held").await.unwrap();
    assert!(
        still.metadata.deletion_timestamp.is_some(),
        "the claim is still held"
    );
    assert!(
        pvs.get_opt(&pv_name).await.unwrap().is_some(),
        "and its PV kept"
    );
    let theirs: Vec<String> = still
        .metadata
        .finalizers
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != "example.com/hold")
        .collect();
    claims
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": theirs}})),
        )
        .await
        .unwrap();
    gone(&sb, &pv_name, 60).await;
}

#[tokio::test]
async fn restarts_during_deprovisioning_deprovision_exactly_once() {
    let sb = sandbox().await;
    class(&sb, "steady", "Immediate", "make-pv", json!({})).await;
    let _c = controller(&sb);
    let mut names = Vec::new();
    for i in 0..6 {
        claim(&sb, &format!("r{i}"), "steady").await;
    }
    for i in 0..6 {
        names.push(
            bound(&sb, &format!("r{i}"), 30)
                .await
                .spec
                .unwrap()
                .volume_name
                .unwrap(),
        );
    }
    _c.abort();
    for i in 0..6 {
        Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
            .delete(&format!("r{i}"), &Default::default())
            .await
            .unwrap();
    }
    for ms in [100u64, 300, 700, 1200] {
        let c = controller(&sb);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        c.abort();
        let _ = c.await;
    }
    let _c = controller(&sb);
    for n in &names {
        gone(&sb, n, 60).await;
    }
    let jobs = jobs(&sb).await;
    for n in &names {
        let succeeded = deprovision_jobs(&jobs)
            .into_iter()
            .filter(|j| &j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/volume"] == n)
            .filter(|j| j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0)
            .count();
        assert_eq!(succeeded, 1, "exactly one successful deprovision of {n}");
    }
}

/// An admin clears the claimRef of a bound `Delete` volume (to re-use it), then deletes and
/// re-creates the claim under the same name: the volume is merely Available, never
/// Released, so for 30 s nothing is deprovisioned and the data is still there.
#[tokio::test]
async fn a_cleared_claim_ref_and_a_re_created_claim_destroy_nothing() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    hostpath_class(&sb, "reuse", "Delete").await;
    let (pv_name, dir) = used_volume(&sb, "data", "reuse").await;
    let pvs = Api::<PersistentVolume>::all(sb.client().unwrap());
    std::fs::write(dir.join("data.txt"), "user data").unwrap();
    pvs.patch(
        &pv_name,
        &Default::default(),
        &kube::api::Patch::Merge(&json!({"spec": {"claimRef": null}})),
    )
    .await
    .unwrap();
    let untouched = || async {
        let pv = pvs.get(&pv_name).await.unwrap();
        assert!(
            pv.metadata.deletion_timestamp.is_none(),
            "the PV was deleted"
        );
        assert!(
            deprovision_jobs(&jobs(&sb).await).is_empty(),
            "a deprovision Job was started for a volume nobody released"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("data.txt")).unwrap(),
            "user data"
        );
        pv
    };
    // Kubernetes' PV controller binds a volume whose claim still names it back to that
    // claim when it next syncs the claim (every 15 s at most): the claim keeps its volume,
    // and deleting it later is an ordinary release.
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        untouched().await;
    }
    if untouched().await.spec.unwrap().claim_ref.is_some() {
        return;
    }
    delete_claim_and_pod(&sb, "data").await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default");
    eventually(10, "the old claim to be gone", || async {
        claims
            .get_opt("data")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    claim(&sb, "data", "reuse").await;
    let phase = || async {
        pvs.get(&pv_name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase)
            .unwrap_or_default()
    };
    eventually(
        10,
        "the PV controller to make the volume Available",
        || async { (phase().await == "Available").then_some(()) },
    )
    .await;
    for _ in 0..30 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        untouched().await;
    }
}

/// A bound volume's claimRef re-pointed to another claim (its name and uid), or given a
/// uid of zeros: Kubernetes releases it, and the controller keeps the PV, its storage and
/// its finalizer, runs nothing for a minute, and warns on the PV. (A re-point that keeps
/// the old uid is undone by Kubernetes' own PV controller at its next sync of the claim,
/// which still names the volume: on a real control plane the volume is Released for a
/// few seconds only, so it is not a state this test can wait for.)
#[tokio::test]
async fn a_re_pointed_or_zeroed_claim_ref_destroys_nothing() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    hostpath_class(&sb, "kept", "Delete").await;
    let pvs = Api::<PersistentVolume>::all(sb.client().unwrap());
    let mut volumes = Vec::new();
    for (claim, new_ref) in [
        (
            "repointed",
            json!({"namespace": "default", "name": "someone-else",
                   "uid": "5e1f0000-0000-4000-8000-000000000001"}),
        ),
        (
            "zeroed",
            json!({"uid": "00000000-0000-0000-0000-000000000000"}),
        ),
    ] {
        let (pv_name, dir) = used_volume(&sb, claim, "kept").await;
        std::fs::write(dir.join("data.txt"), "user data").unwrap();
        pvs.patch(
            &pv_name,
            &Default::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"claimRef": new_ref}})),
        )
        .await
        .unwrap();
        volumes.push((pv_name, dir));
    }
    for (pv_name, _) in &volumes {
        eventually(60, "Kubernetes to release the volume", || async {
            let phase = pvs.get(pv_name).await.ok()?.status?.phase?;
            (phase == "Released").then_some(())
        })
        .await;
    }
    for (pv_name, _) in &volumes {
        let m = eventually(30, "the hand-over warning on the PV", || async {
            events_about(&sb, pv_name)
                .await
                .into_iter()
                .find(|(_, m)| m.contains("hand-over"))
        })
        .await;
        assert_eq!(m.0, "VolumeFailedDelete", "{m:?}");
    }
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(
            deprovision_jobs(&jobs(&sb).await).is_empty(),
            "a deprovision Job was started for a volume handed over"
        );
        for (pv_name, dir) in &volumes {
            let pv = pvs.get(pv_name).await.expect("the PV is kept");
            assert!(
                pv.metadata.deletion_timestamp.is_none(),
                "{pv_name} deleted"
            );
            assert!(
                pv.metadata
                    .finalizers
                    .unwrap_or_default()
                    .contains(&"flex-provisioner.io/deprovision".to_string())
            );
            assert_eq!(
                std::fs::read_to_string(dir.join("data.txt")).unwrap(),
                "user data"
            );
        }
    }
}

/// The claim's volume name, once bound.
async fn bound_volume(sb: &common::cluster::Cluster, claim: &str) -> String {
    bound(sb, claim, 60)
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap()
}

/// `kubectl replace --force` of a bound claim: the claim is deleted and made again under its
/// name (a new uid) naming its volume. The user meant to keep the data: the volume is kept
/// as a hand-over, with a warning, never deprovisioned. The controller is down meanwhile,
/// so nothing can take the volume between the deletion and the new claim.
#[tokio::test]
async fn a_claim_replaced_under_its_name_naming_its_volume_keeps_the_storage() {
    let sb = sandbox().await;
    class(&sb, "steady", "Immediate", "make-pv", json!({})).await;
    let first = controller(&sb);
    claim(&sb, "kept", "steady").await;
    let pv_name = bound_volume(&sb, "kept").await;
    kill(first).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let old = claims.get("kept").await.unwrap();
    claims
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the claim to be gone", || async {
        claims
            .get_opt("kept")
            .await
            .unwrap()
            .filter(|c| c.metadata.uid == old.metadata.uid)
            .is_none()
            .then_some(())
    })
    .await;
    let mut again = claim_object("kept", "steady");
    again.spec.as_mut().unwrap().volume_name = Some(pv_name.clone());
    claims
        .create(&kube::api::PostParams::default(), &again)
        .await
        .unwrap();
    let _c = controller(&sb);
    let said = eventually(60, "the hand-over warning on the volume", || async {
        events_about(&sb, &pv_name)
            .await
            .into_iter()
            .find(|(_, m)| m.contains("a claim still names it"))
    })
    .await;
    assert_eq!(said.0, "VolumeFailedDelete", "{said:?}");
    assert!(
        deprovision_jobs(&jobs(&sb).await).is_empty(),
        "nothing is deprovisioned"
    );
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&pv_name)
        .await
        .unwrap();
    assert!(
        pv.metadata.deletion_timestamp.is_none(),
        "the volume is kept"
    );
}

/// Any user may name any volume in a pending claim's `spec.volumeName`. Kubernetes never
/// binds such a claim to a volume whose claimRef names another claim, so it holds nothing:
/// the volume is deprovisioned when its own claim goes.
#[tokio::test]
async fn a_pending_claim_naming_another_users_volume_blocks_nothing() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "steady", "Immediate", "make-pv", json!({})).await;
    claim(&sb, "theirs", "steady").await;
    let pv_name = bound_volume(&sb, "theirs").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let mut squatter = claim_object("squatter", "other");
    squatter.spec.as_mut().unwrap().volume_name = Some(pv_name.clone());
    claims
        .create(&kube::api::PostParams::default(), &squatter)
        .await
        .unwrap();
    claims
        .delete("theirs", &DeleteParams::default())
        .await
        .unwrap();
    gone(&sb, &pv_name, 60).await;
    let squatter = claims.get("squatter").await.unwrap();
    assert_ne!(
        squatter.status.and_then(|s| s.phase).as_deref(),
        Some("Bound"),
        "the squatting claim never got the volume"
    );
}
