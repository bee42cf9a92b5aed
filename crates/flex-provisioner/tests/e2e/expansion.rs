//! End to end on the sandbox: a bound claim that grows gets an expansion Job; failures are
//! reported and retried; success leaves the PV and the claim as the external resizer does.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

async fn allow_expansion(sb: &common::cluster::Cluster, class: &str) {
    Api::<StorageClass>::all(sb.client().unwrap())
        .patch(
            class,
            &PatchParams::default(),
            &Patch::Merge(json!({"allowVolumeExpansion": true})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_failing_expansion_is_reported_retried_and_then_grows_the_volume() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "growing",
        "Immediate",
        "grow-flaky",
        json!({"node-selector": "kubernetes.io/hostname=node-a"}),
    )
    .await;
    allow_expansion(&sb, "growing").await;
    claim(&sb, "data", "growing").await;
    let pv_name = bound(&sb, "data", 60)
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    grow(&sb, "data", "2Gi").await;
    let first = wait_event(&sb, "data", "VolumeResizeFailed", "pool busy (try 0)", 120).await;
    assert!(
        first.contains(&format!("resize volume \"{pv_name}\"")),
        "{first}"
    );
    wait_event(&sb, "data", "VolumeResizeFailed", "pool busy (try 1)", 120).await;
    wait_event(
        &sb,
        "data",
        "VolumeResizeSuccessful",
        "Resize volume succeeded",
        60,
    )
    .await;
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&pv_name)
        .await
        .unwrap();
    assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, "2Gi");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let status = eventually(30, "the claim's status to show 2Gi", || async {
        let s = claims.get("data").await.ok()?.status?;
        (s.capacity.as_ref()?.get("storage")?.0 == "2Gi").then_some(s)
    })
    .await;
    assert_eq!(
        status.allocated_resources.unwrap()["storage"].0,
        "2Gi",
        "allocatedResources stays at the size asked for"
    );
    assert!(
        !status
            .allocated_resource_statuses
            .unwrap_or_default()
            .contains_key("storage"),
        "no resize in progress any more"
    );
    assert!(
        status
            .conditions
            .unwrap_or_default()
            .iter()
            .all(|c| c.type_ != "Resizing" && c.type_ != "ControllerResizeError"),
        "the resize conditions are cleared"
    );
    let expansions = jobs_of(&sb, "expand").await;
    assert_eq!(
        expansions.len(),
        3,
        "two failed attempts and the one that worked"
    );
}

#[tokio::test]
async fn a_class_without_allow_volume_expansion_cannot_grow() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "fixed", "Immediate", "make-pv", json!({})).await;
    claim(&sb, "data", "fixed").await;
    bound(&sb, "data", 60).await;
    let refused = Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("only dynamically provisioned pvc can be resized"),
        "{refused}"
    );
    assert!(jobs_of(&sb, "expand").await.is_empty());
}
