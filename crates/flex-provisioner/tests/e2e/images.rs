//! The shipped provisioner images' real entrypoints, driven by the shipped example
//! ConfigMaps through the sandbox: provision -> bind -> write -> deprovision.

use crate::common;

use common::cluster::Cluster;
use common::provisioning::{
    NS, bound, claim_with_pod, local_path, storage_dir, wait_event, with_examples,
};
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use serde_json::json;

/// A claim of `class` and a pod that writes hello.txt into it; returns the bound claim.
async fn claim_and_write(sb: &Cluster, name: &str, class: &str) -> PersistentVolumeClaim {
    claim_with_pod(sb, name, class, &format!("{name}-writer")).await;
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    let claim = bound(sb, name, 180).await;
    eventually(30, "the writer to finish", || async {
        let p = pods.get(&format!("{name}-writer")).await.ok()?;
        (p.status?.phase.as_deref() == Some("Succeeded")).then_some(())
    })
    .await;
    pods.delete(&format!("{name}-writer"), &DeleteParams::default())
        .await
        .unwrap();
    claim
}

async fn delete_and_wait(sb: &Cluster, name: &str, pv: &str) {
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .delete(name, &Default::default())
        .await
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    eventually(60, "the PV to be deprovisioned and removed", || async {
        pvs.get_opt(pv).await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn hostpath_provisions_binds_writes_and_removes_the_directory() {
    common::at_root();
    let (sb, _c) = with_examples(&["configmaps/hostpath.yaml"]).await;
    let claim = claim_and_write(&sb, "data", "local-hostpath").await;
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&pv_name)
        .await
        .unwrap();
    let path = local_path(&pv);
    let uid = claim.metadata.uid.unwrap();
    assert_eq!(
        path,
        format!("/var/lib/flex-provisioner/volumes/default/data-{uid}")
    );
    let dir = storage_dir(&sb, &pv);
    let written = std::fs::read_to_string(dir.join("hello.txt")).unwrap();
    assert!(written.starts_with("written by data-writer"), "{written}");
    delete_and_wait(&sb, "data", &pv_name).await;
    assert!(!dir.exists(), "the directory is gone");
}

/// The shipped hostpath class allows expansion; its image treats a directory (no quota) as
/// grown, and the PV and claim end at the new size with the data in place.
#[tokio::test]
async fn hostpath_grows_a_bound_claim_from_1gi_to_2gi() {
    common::at_root();
    let (sb, _c) = with_examples(&["configmaps/hostpath.yaml"]).await;
    let claim = claim_and_write(&sb, "data", "local-hostpath").await;
    assert_eq!(claim.status.unwrap().capacity.unwrap()["storage"].0, "1Gi");
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    common::provisioning::grow(&sb, "data", "2Gi").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    wait_event(
        &sb,
        "data",
        "VolumeResizeSuccessful",
        "Resize volume succeeded",
        60,
    )
    .await;
    eventually(30, "the claim's status to show 2Gi", || async {
        let s = claims.get("data").await.ok()?.status?;
        (s.capacity?.get("storage")?.0 == "2Gi").then_some(())
    })
    .await;
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&pv_name)
        .await
        .unwrap();
    assert_eq!(
        pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
        "2Gi"
    );
    let written = std::fs::read_to_string(storage_dir(&sb, &pv).join("hello.txt")).unwrap();
    assert!(written.starts_with("written by data-writer"), "{written}");
}

#[tokio::test]
async fn hostpath_refuses_a_path_that_escapes_its_base() {
    common::at_root();
    let (sb, _c) = with_examples(&["configmaps/hostpath.yaml"]).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(sb.client().unwrap(), NS);
    let patch = json!({"data": {"volume-directory": "../../etc/{{claim.name}}"}});
    cms.patch(
        "hostpath-provisioner",
        &Default::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    claim_with_pod(&sb, "evil", "local-hostpath", "evil-writer").await;
    // The controller refuses the rendered directory before any Job could mount it (the
    // image refuses such a parameter too: image_hardening.rs).
    let m = wait_event(&sb, "evil", "ProvisioningFailed", "volume-directory", 30).await;
    assert!(m.contains("`..` segment"), "{m}");
    assert!(m.contains("../../etc/evil"), "{m}");
    let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(sb.client().unwrap(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(
        jobs.items.len(),
        0,
        "no Job mounts a directory outside the base"
    );
}

#[tokio::test]
async fn nfs_subdir_provisions_binds_writes_and_archives() {
    common::at_root();
    let (sb, _c) = with_examples(&["configmaps/nfs-subdir.yaml"]).await;
    let claim = claim_and_write(&sb, "data", "nfs-shared").await;
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&pv_name)
        .await
        .unwrap();
    let nfs = pv.spec.unwrap().nfs.unwrap();
    assert_eq!(nfs.server, "nfs.storage.example.com");
    let subdir = format!("default/shared-data-{pv_name}");
    assert_eq!(nfs.path, format!("/exports/k8s/{subdir}"));
    // The sandbox keeps an NFS export's files under its work dir.
    let export = sb.nfs_dir("nfs.storage.example.com", "/exports/k8s");
    assert!(
        export.join(&subdir).join("hello.txt").is_file(),
        "the consumer wrote through the NFS volume"
    );
    delete_and_wait(&sb, "data", &pv_name).await;
    assert!(!export.join(&subdir).exists());
    let archived = export.join(format!("default/archived-shared-data-{pv_name}"));
    assert!(
        archived.join("hello.txt").is_file(),
        "on-delete: archive keeps the data: {}",
        archived.display()
    );
}

/// A clone of the nfs-subdir claim (dataSourceRef to it) binds to a volume holding a copy
/// of the source's file; the clone's Job had the source volume and its parameters.
#[tokio::test]
async fn nfs_subdir_clones_a_claim_with_its_data() {
    common::at_root();
    let (sb, _c) = with_examples(&["configmaps/nfs-subdir.yaml"]).await;
    claim_and_write(&sb, "data", "nfs-shared").await;
    let mut copy = common::provisioning::claim_object("copy", "nfs-shared");
    copy.spec.as_mut().unwrap().data_source_ref = Some(
        serde_json::from_value(json!({"kind": "PersistentVolumeClaim", "name": "data"})).unwrap(),
    );
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(&Default::default(), &copy)
        .await
        .unwrap();
    let copy = bound(&sb, "copy", 60).await;
    let pv_name = copy.spec.unwrap().volume_name.unwrap();
    let export = sb.nfs_dir("nfs.storage.example.com", "/exports/k8s");
    let copied = export.join(format!("default/shared-copy-{pv_name}/hello.txt"));
    let text =
        std::fs::read_to_string(&copied).unwrap_or_else(|e| panic!("{}: {e}", copied.display()));
    assert!(text.starts_with("written by data-writer"), "{text}");
    let job = common::provisioning::jobs_of(&sb, "provision")
        .await
        .into_iter()
        .find(|j| {
            j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/claim-uid"]
                == copy.metadata.uid.clone().unwrap()
        })
        .unwrap();
    let env = job.spec.clone().unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let var = |n: &str| {
        env.iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value.clone())
    };
    let source: serde_json::Value = serde_json::from_str(&var("SOURCE_PV_JSON").unwrap()).unwrap();
    assert_eq!(source["spec"]["claimRef"]["name"], "data");
    let parameters: serde_json::Value =
        serde_json::from_str(&var("SOURCE_PARAMETERS").unwrap()).unwrap();
    assert_eq!(parameters["on-delete"], "archive", "{parameters}");
    // The source's directory, from its record, mounted read-only at its place in the export.
    let mounts = job.spec.unwrap().template.spec.unwrap().containers[0]
        .volume_mounts
        .clone()
        .unwrap();
    let source_dir = mounts
        .iter()
        .find(|m| m.read_only == Some(true))
        .expect("the source is mounted read-only");
    let sub = source_dir.sub_path.clone().unwrap();
    assert!(sub.starts_with("default/shared-data-"), "{sub}");
    assert_eq!(source_dir.mount_path, format!("/export/{sub}"));
    assert_eq!(
        job.metadata.annotations.unwrap()["flex-provisioner.io/source-volume"],
        source["metadata"]["name"].as_str().unwrap()
    );
}
