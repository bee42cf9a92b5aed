//! End to end on the sandbox, `pv-creator: controller` (the default): the image reports its
//! volume source in its termination message and the controller creates the PV. The pod has
//! no API credentials; a report with two sources, a type the class does not allow, or bad
//! JSON fails the attempt with an event and makes no PV.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn the_pod_has_no_token_and_the_controller_makes_the_pv() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "plain", "Immediate", "api-probe", json!({})).await;
    let c = claim(&sb, "data", "plain").await;
    let bound = bound(&sb, "data", 30).await;
    let uid = c.metadata.uid.unwrap();
    let name = bound.spec.unwrap().volume_name.unwrap();
    assert_eq!(name, format!("pvc-{uid}"));
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&name)
        .await
        .unwrap();
    // Made by the controller from the report: our finalizer from the start, the source the
    // image reported, and nothing else of the image's.
    assert!(
        pv.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "flex-provisioner.io/deprovision")
    );
    let spec = pv.spec.unwrap();
    assert_eq!(
        spec.host_path.unwrap().path,
        format!("/volumes/{name}"),
        "the reported source"
    );
    // The pod: no token mounted, so its kubectl reached the API as nobody and was refused.
    let pods: Vec<Pod> = Api::<Pod>::namespaced(sb.client().unwrap(), NS)
        .list(&ListParams::default().labels(&format!("flex-provisioner.io/claim-uid={uid}")))
        .await
        .unwrap()
        .items;
    assert!(!pods.is_empty());
    for p in &pods {
        assert_eq!(
            p.spec.as_ref().unwrap().automount_service_account_token,
            Some(false)
        );
    }
    let probe = std::fs::read_to_string(sb.state_dir("node-a").join(format!("probe-{uid}")))
        .or_else(|_| std::fs::read_to_string(sb.state_dir("node-b").join(format!("probe-{uid}"))))
        .expect("the probe ran");
    assert!(probe.trim_end().ends_with("REFUSED"), "{probe}");
    assert!(
        Api::<PersistentVolume>::all(sb.client().unwrap())
            .get_opt("planted")
            .await
            .unwrap()
            .is_none()
    );
    // And the pod's service account itself (the namespace's default) may not create PVs.
    let as_pod = client_as(sb.config(), NS, "default").await;
    let planted: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "planted"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/"}}}))
    .unwrap();
    match Api::<PersistentVolume>::all(as_pod)
        .create(&PostParams::default(), &planted)
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("a PV create by the pod's account must be refused: {other:?}"),
    }
}

#[tokio::test]
async fn bad_reports_fail_the_attempt_and_make_no_pv() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "two", "Immediate", "two-sources", json!({})).await;
    class(&sb, "broken", "Immediate", "bad-json", json!({})).await;
    // make-pv reports hostPath; this class allows nfs only.
    class(
        &sb,
        "strict",
        "Immediate",
        "make-pv",
        json!({"volume-sources": "nfs"}),
    )
    .await;
    for (name, class) in [("two", "two"), ("broken", "broken"), ("strict", "strict")] {
        claim(&sb, name, class).await;
    }
    for (name, says) in [
        ("two", "its report holds 2 keys"),
        ("broken", "its report is not JSON"),
        (
            "strict",
            "`hostPath` volume, which this class does not allow (volume-sources: nfs)",
        ),
    ] {
        let m = wait_event(&sb, name, "ProvisioningFailed", says, 30).await;
        assert!(m.contains("no PersistentVolume is created"), "{m}");
        assert!(
            m.contains("not retried until the claim or the configuration changes"),
            "{m}"
        );
    }
    // Given up for good: one Job each, and no PV at all.
    for name in ["two", "broken", "strict"] {
        given_up(&sb, name, 30).await;
    }
    let by_claim = provision_jobs_by_claim(&sb).await;
    assert_eq!(by_claim.len(), 3, "{by_claim:?}");
    assert!(by_claim.values().all(|j| j.len() == 1), "{by_claim:?}");
    assert!(volumes(&sb).await.is_empty());
    // An admin who allows the type fixes the class: the claim is provisioned.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(sb.client().unwrap(), NS);
    cms.patch(
        "strict-config",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"data": {"volume-sources": "nfs,hostPath"}})),
    )
    .await
    .unwrap();
    bound(&sb, "strict", 30).await;
    eventually(5, "still no PV for the bad reports", || async {
        (volumes(&sb).await.len() == 1).then_some(())
    })
    .await;
}
