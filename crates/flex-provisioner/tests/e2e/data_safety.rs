//! End to end on the sandbox: a wrong PV an image made is removed without deadlock and
//! without running anything on its word; an invalid configuration blocks its class the same way before and after a
//! restart.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
use kube::api::{Api, Patch};
use serde_json::json;

/// An image (pv-creator: image) whose first attempt makes storage and a PV too small for the
/// claim: the PV is removed (it never got our finalizer or a record, since it did not
/// verify, so no deprovision Job runs on its word and nothing is left Terminating), and the
/// next attempt binds.
#[tokio::test]
async fn a_wrong_pv_of_our_attempt_is_cleaned_removed_and_retried() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    // On one node: the image remembers its first attempt in a file on the node.
    class(
        &sb,
        "small",
        "Immediate",
        "wrong-size",
        json!({"node-selector": "kubernetes.io/hostname=node-a"}),
    )
    .await;
    let c = claim(&sb, "data", "small").await;
    let uid = c.metadata.uid.unwrap();
    let pv_name = format!("pvc-{uid}");
    let m = wait_event(&sb, "data", "ProvisioningFailed", "capacity", 30).await;
    assert!(m.contains("it is removed and provisioning retried"), "{m}");
    assert!(m.contains("not cleaned by a deprovision Job"), "{m}");
    let bound = bound(&sb, "data", 60).await;
    assert_eq!(
        bound.spec.unwrap().volume_name.as_deref(),
        Some(pv_name.as_str())
    );
    let marker = sb.state_dir("node-a").join(format!("storage-{pv_name}"));
    assert!(
        marker.exists(),
        "nothing ran for the unverified PV, so its storage stays: {}",
        marker.display()
    );
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&pv_name)
        .await
        .unwrap();
    assert!(pv.metadata.deletion_timestamp.is_none());
    assert_eq!(
        pv.spec.unwrap().capacity.unwrap()["storage"].0,
        "1Gi",
        "the PV bound is the right one"
    );
    assert_eq!(jobs_of(&sb, "provision").await.len(), 2);
    assert!(
        jobs_of(&sb, "deprovision").await.is_empty(),
        "no deprovision Job for a PV that never verified"
    );
    assert_eq!(
        volumes(&sb).await.len(),
        1,
        "nothing left behind, nothing Terminating"
    );
}

/// A PV planted under the name our attempt would use, before any Job ran, is reported and
/// left alone: we never delete what we did not make.
#[tokio::test]
async fn a_planted_pv_is_reported_and_left_alone() {
    let sb = sandbox().await;
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    let c = claim(&sb, "data", "fast").await;
    let uid = c.metadata.uid.unwrap();
    let planted: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("pvc-{uid}"),
                     "annotations": {"pv.kubernetes.io/provisioned-by": flex_core::names::DEFAULT_PROVISIONER_NAME}},
        "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                 "hostPath": {"path": "/"}, "persistentVolumeReclaimPolicy": "Delete",
                 "claimRef": {"namespace": "default", "name": "data", "uid": uid}}}))
    .unwrap();
    let pvs = Api::<PersistentVolume>::all(sb.client().unwrap());
    pvs.create(&Default::default(), &planted).await.unwrap();
    let _c = controller(&sb);
    let m = wait_event(&sb, "data", "ProvisioningFailed", "left alone", 30).await;
    assert!(m.contains("not made by a provisioning Job"), "{m}");
    // The event is the sign the controller judged the PV: what it decided is there to see.
    let pv = pvs.get(&format!("pvc-{uid}")).await.unwrap();
    assert!(pv.metadata.deletion_timestamp.is_none(), "not deleted");
    assert!(jobs(&sb).await.is_empty(), "nothing ran for it");
}

/// Before and after a restart alike, a class whose ConfigMap became invalid is blocked with
/// the problem on its claims; fixing it unblocks them.
#[tokio::test]
async fn an_invalid_configuration_blocks_the_same_way_across_a_restart() {
    let sb = sandbox().await;
    let first = controller(&sb);
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    claim(&sb, "before", "fast").await;
    bound(&sb, "before", 30).await;
    let cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), NS);
    let broken = json!({"data": {"retries": "many"}});
    cms.patch("fast-config", &Default::default(), &Patch::Merge(&broken))
        .await
        .unwrap();
    claim(&sb, "during", "fast").await;
    let m = wait_event(&sb, "during", "ProvisioningConfigInvalid", "retries", 15).await;
    assert!(m.contains("is invalid"), "{m}");
    kill(first).await;
    let _second = controller(&sb);
    claim(&sb, "after", "fast").await;
    let m = wait_event(&sb, "after", "ProvisioningConfigInvalid", "retries", 15).await;
    assert!(m.contains("is invalid"), "{m}");
    // The event is the sign the new controller planned the claim with the invalid
    // configuration.
    assert_eq!(
        jobs_of(&sb, "provision").await.len(),
        1,
        "no Job from an invalid configuration, before or after the restart"
    );
    let fixed = json!({"data": {"retries": "0"}});
    cms.patch("fast-config", &Default::default(), &Patch::Merge(&fixed))
        .await
        .unwrap();
    bound(&sb, "during", 30).await;
    bound(&sb, "after", 30).await;
    eventually(5, "one Job per claim", || async {
        (jobs_of(&sb, "provision").await.len() == 3).then_some(())
    })
    .await;
}
