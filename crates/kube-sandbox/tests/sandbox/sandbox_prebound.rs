//! Binding a volume pre-bound to a claim (its claimRef names the claim): as the real PV
//! controller's volume index, the volume must still be big enough and have the claim's
//! access and volume modes, or the claim is not bound to it (kube-controller-manager 1.36,
//! pkg/controller/volume/persistentvolume/index.go: size, volume mode and deletion are
//! checked before the pre-bound match is returned; the access modes select the index).

use crate::common;

use std::time::Duration;

use common::sandbox::{eventually, options};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};
use kube_sandbox::Sandbox;
use serde_json::json;

async fn claim_and_volume(
    sb: &Sandbox,
    name: &str,
    size: &str,
    modes: &[&str],
) -> (Api<PersistentVolumeClaim>, Api<PersistentVolume>) {
    let client = sb.client().unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let c = claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": name}, "spec": {"storageClassName": "",
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client);
    pvs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": format!("pv-{name}")}, "spec": {
            "capacity": {"storage": size}, "accessModes": modes, "storageClassName": "",
            "hostPath": {"path": "/x"},
            "claimRef": {"namespace": "default", "name": name, "uid": c.metadata.uid}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    (claims, pvs)
}

#[tokio::test]
async fn a_pre_bound_volume_too_small_or_lacking_a_mode_is_not_bound() {
    let sb = Sandbox::start(options()).await.unwrap();
    let (claims, pvs) = claim_and_volume(&sb, "fits", "1Gi", &["ReadWriteOnce"]).await;
    eventually(10, "the fitting pre-bound volume to bind", || async {
        let c = claims.get("fits").await.ok()?;
        (c.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;
    claim_and_volume(&sb, "small", "1Mi", &["ReadWriteOnce"]).await;
    claim_and_volume(&sb, "modes", "1Gi", &["ReadOnlyMany"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in ["small", "modes"] {
        let c = claims.get(name).await.unwrap();
        assert_eq!(
            c.status.unwrap().phase.as_deref(),
            Some("Pending"),
            "{name}"
        );
        assert_eq!(c.spec.unwrap().volume_name, None, "{name}");
        let pv = pvs.get(&format!("pv-{name}")).await.unwrap();
        assert_ne!(
            pv.status.unwrap().phase.as_deref(),
            Some("Bound"),
            "{name}: the volume stays unbound"
        );
    }
}

/// WaitForFirstConsumer: the PV controller never binds a free volume to a claim whose
/// binding is delayed (the index skips free volumes when no node is known); the claim waits.
#[tokio::test]
async fn a_delayed_binding_claim_is_not_bound_to_a_free_volume() {
    let sb = Sandbox::start(options()).await.unwrap();
    let client = sb.client().unwrap();
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "late"}, "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer"}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "free"}, "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "late",
                "hostPath": {"path": "/x"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "waits"}, "spec": {"storageClassName": "late",
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c = claims.get("waits").await.unwrap();
    assert_eq!(c.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(c.spec.unwrap().volume_name, None);
}
