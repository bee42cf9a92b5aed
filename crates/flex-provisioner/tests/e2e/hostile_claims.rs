//! End to end, on the sandbox and on a real control plane: what any user can write into
//! their own claims (annotations naming this provisioner, 250 KB of metadata, an attempt
//! number of four billion, a finalizer of their own) neither makes a claim ours, nor holds
//! up other users' claims, nor lets a second instance act. How much they slow others is
//! measured in `benches/availability.rs`.

use crate::common;

use common::hostile::{
    create_claim, four_billion_beside_a_standby, jobs_for, our_events_about, twenty_held_mid_job,
};
use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;

const OURS: &str = flex_core::names::DEFAULT_PROVISIONER_NAME;

/// A claim's author names this provisioner in their claim's annotations, in a class that
/// does not exist (so Kubernetes never overwrites it) or with no class at all: the claim is
/// not ours, so nothing runs and nothing is said about it, while a claim of a class of ours
/// binds beside it.
#[tokio::test]
async fn a_claim_naming_this_provisioner_itself_is_not_ours() {
    let sb = sandbox().await;
    let (_c, addr) = controller_serving(&sb);
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    let mut hostile = Vec::new();
    for (name, class) in [("self-named", "no-such-class"), ("classless", "")] {
        let c = create_claim(
            &sb,
            json!({"metadata": {"name": name, "annotations": {
                        "volume.kubernetes.io/storage-provisioner": OURS,
                        "volume.beta.kubernetes.io/storage-provisioner": OURS}},
                   "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        hostile.push((name, c.uid().unwrap()));
    }
    // The two are the only claims, and nothing but their creation brings either back (no
    // Job, PV, class or ConfigMap names them): two reconciles of claims are one look at
    // each.
    reconciled_past(addr, "claim", 1).await;
    claim(&sb, "good", "fast").await;
    bound(&sb, "good", 60).await;
    for (name, uid) in hostile {
        assert!(jobs_for(&sb, &uid).await.is_empty(), "{name}: a Job ran");
        let said = our_events_about(&sb, name).await;
        assert!(said.is_empty(), "{name}: the controller spoke: {said:?}");
    }
}

/// A claim of ours with 200 KB of annotations is cached as a bounded record; its Job is
/// still made from every label and annotation it has (read whole from the API server).
#[tokio::test]
async fn an_oversized_claim_of_ours_is_provisioned_from_all_it_holds() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "fast",
        "Immediate",
        "make-pv",
        json!({"team": "{{dnslabel claim.labels.team}}", "dir": "{{dnslabel claim.annotations.dir}}"}),
    )
    .await;
    let c = create_claim(
        &sb,
        json!({"metadata": {"name": "heavy", "labels": {"team": "alpha"},
                            "annotations": {"dir": "d1", "example.com/filler": "x".repeat(200 * 1024)}},
               "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    bound(&sb, "heavy", 60).await;
    let jobs = jobs_for(&sb, &c.uid().unwrap()).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(common::env(&jobs[0], "TEAM").as_deref(), Some("alpha"));
    assert_eq!(common::env(&jobs[0], "DIR").as_deref(), Some("d1"));
}

/// Twenty claims held mid-Job by their authors' finalizers hold up neither eighty other
/// claims nor a plain orphan (`common::hostile::twenty_held_mid_job`); the times are
/// printed here and compared in `benches/availability.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_claims_held_mid_job_hold_up_neither_others_nor_an_orphan() {
    let sb = sandbox().await;
    let times = twenty_held_mid_job(&sb).await;
    println!("alone: {}\nbeside: {}", times.alone, times.beside);
}

/// An attempt of four billion on failing claims is ignored, with a warning, healthy claims
/// bind beside them and the leader keeps its lease with a standby waiting
/// (`common::hostile::four_billion_beside_a_standby`); the times are compared in
/// `benches/availability.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_of_four_billion_is_ignored_and_takes_no_lease() {
    let sb = sandbox().await;
    let times = four_billion_beside_a_standby(&sb).await;
    println!("alone: {}\nbeside: {}", times.alone, times.beside);
}

/// A claim's author writes a node that does not exist into the claim's selected-node
/// annotation (as the scheduler would have, for a node deleted since): no Job is made for
/// it, the selection is removed with a warning naming the node, and once a pod uses the
/// claim, the node the scheduler picks gets the volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selected_node_that_does_not_exist_goes_back_to_the_scheduler() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    node_local_class(&sb, "local").await;
    let selected = "volume.kubernetes.io/selected-node";
    let astray = create_claim(
        &sb,
        json!({"metadata": {"name": "astray", "annotations": {selected: "no-such-node"}},
               "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    wait_event(
        &sb,
        "astray",
        "ProvisioningFailed",
        "\"no-such-node\" selected for this claim does not exist",
        60,
    )
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(30, "the selection removed from the claim", || async {
        let c = claims.get("astray").await.ok()?;
        (!c.annotations().contains_key(selected)).then_some(())
    })
    .await;
    let uid = astray.uid().unwrap();
    assert!(
        jobs_for(&sb, &uid).await.is_empty(),
        "no Job for a node that does not exist"
    );
    pod_on_node(&sb, "app", "astray", "node-b").await;
    assert_eq!(
        bound_volume_nodes(&sb, "astray", 60).await,
        Some(vec!["node-b".to_string()]),
        "made on the node the scheduler picked"
    );
    let said = our_events_about(&sb, "astray").await;
    assert_eq!(
        said.iter().filter(|m| m.contains("no-such-node")).count(),
        1,
        "told once: {said:?}"
    );
}
