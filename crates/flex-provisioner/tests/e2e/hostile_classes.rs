//! End to end on the sandbox: a class whose ConfigMap is hostile (a self-recursive partial),
//! a class whose templates explode on claims with many annotations, and a healthy class, 20
//! claims each. Every healthy claim binds, the controller keeps running, and the hostile
//! classes' claims and ConfigMap get Warning events.

use crate::common;

use std::collections::BTreeMap;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

/// A claim carrying 200 annotations of 200 bytes: 40 KB, well within the API's limit.
fn loaded_claim(name: &str, class: &str) -> PersistentVolumeClaim {
    let mut c = claim_object(name, class);
    let annotations: BTreeMap<String, String> = (0..200)
        .map(|i| (format!("example.com/note-{i}"), "x".repeat(200)))
        .collect();
    c.metadata.annotations = Some(annotations);
    c
}

async fn warnings_on(sb: &common::cluster::Cluster, ns: &str, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(sb.client().unwrap(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test]
async fn hostile_classes_never_stop_a_healthy_one() {
    let sb = sandbox().await;
    let c = controller(&sb);
    class(&sb, "healthy", "Immediate", "make-pv", json!({})).await;
    class(
        &sb,
        "recursive",
        "Immediate",
        "make-pv",
        json!({"label": "{{#*inline \"loop\"}}{{> loop}}{{/inline}}{{> loop}}"}),
    )
    .await;
    class(
        &sb,
        "explosive",
        "Immediate",
        "make-pv",
        json!({"blob": "{{#each claim.annotations}}{{#each @root.claim.annotations}}{{this}}{{/each}}{{/each}}"}),
    )
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let mut all = Vec::new();
    for i in 0..20 {
        all.push(claim_object(&format!("healthy-{i}"), "healthy"));
        all.push(claim_object(&format!("recursive-{i}"), "recursive"));
        all.push(loaded_claim(&format!("explosive-{i}"), "explosive"));
    }
    futures::future::join_all(all.iter().map(|c| {
        let claims = claims.clone();
        async move { claims.create(&PostParams::default(), c).await.unwrap() }
    }))
    .await;
    for i in 0..20 {
        bound(&sb, &format!("healthy-{i}"), 120).await;
    }
    for i in 0..20 {
        let recursive = format!("recursive-{i}");
        let explosive = format!("explosive-{i}");
        eventually(30, "warnings on the hostile classes' claims", || async {
            let r = warnings_on(&sb, "default", &recursive).await;
            let e = warnings_on(&sb, "default", &explosive).await;
            (r.iter().any(|w| w.starts_with("ProvisioningConfigInvalid"))
                && e.iter()
                    .any(|w| w.starts_with("ProvisioningFailed") && w.contains("blob")))
            .then_some(())
        })
        .await;
    }
    let on_config = warnings_on(&sb, NS, "recursive-config").await;
    assert!(
        on_config.iter().any(|w| w.contains("partial")),
        "the hostile ConfigMap says why: {on_config:?}"
    );
    let hostile_jobs = jobs_of(&sb, "provision")
        .await
        .into_iter()
        .filter(|j| {
            let class =
                &j.metadata.annotations.as_ref().unwrap()["flex-provisioner.io/storage-class"];
            class != "healthy"
        })
        .count();
    assert_eq!(hostile_jobs, 0, "no Job from a hostile class");
    assert!(!c.is_finished(), "the controller never stopped");
}
