//! End to end, on the sandbox and on a real control plane: what any user can write into
//! their own claims (annotations naming this provisioner, 250 KB of metadata, an attempt
//! number of four billion, a finalizer of their own) neither makes a claim ours, nor slows
//! other users' claims, nor lets a second instance act.

use crate::common;

use std::time::Duration;

use common::burst_timing::{BurstTimes, timed_burst};
use common::provisioning::*;
use common::sandbox::eventually;
use flex_controller::controller::Options;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const OURS: &str = flex_core::names::DEFAULT_PROVISIONER_NAME;
const CLAIM_UID: &str = flex_core::names::LABEL_CLAIM_UID;

async fn create_claim(
    sb: &common::cluster::Cluster,
    body: serde_json::Value,
) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap()
}

/// Events our controller reported about an object.
async fn our_events_about(sb: &common::cluster::Cluster, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(sb.client().unwrap(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter(|e| {
            e.reporting_component.as_deref() == Some("flex-provisioner")
                || e.source
                    .as_ref()
                    .and_then(|s| s.component.as_deref())
                    .is_some_and(|c| c == "flex-provisioner")
        })
        .filter_map(|e| e.message)
        .collect()
}

async fn jobs_for(sb: &common::cluster::Cluster, uid: &str) -> Vec<Job> {
    Api::<Job>::namespaced(sb.client().unwrap(), NS)
        .list(&ListParams::default().labels(&format!("flex-provisioner.io/claim-uid={uid}")))
        .await
        .unwrap()
        .items
}

/// A claim's author names this provisioner in their claim's annotations, in a class that
/// does not exist (so Kubernetes never overwrites it) or with no class at all: the claim is
/// not ours, so nothing runs and nothing is said about it, while a claim of a class of ours
/// binds beside it.
#[tokio::test]
async fn a_claim_naming_this_provisioner_itself_is_not_ours() {
    let sb = sandbox().await;
    let _c = controller(&sb);
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
    claim(&sb, "good", "fast").await;
    bound(&sb, "good", 60).await;
    // Long enough for every watch event about them to have been reconciled.
    tokio::time::sleep(Duration::from_secs(5)).await;
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
    let env = jobs[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(value("TEAM").as_deref(), Some("alpha"));
    assert_eq!(value("DIR").as_deref(), Some("d1"));
}

/// Whether a burst beside hostile claims went as fast as the same burst alone: the
/// controller's share of every claim within the slowest share alone, plus 10 s for a noisy
/// machine. On the sandbox, where Kubernetes' part is simulated and costs next to nothing,
/// the whole way to Bound is held to the same bound. On a real control plane the hostile
/// claims' own Jobs spend kube-controller-manager's shared request budget as any user's
/// Jobs do (see `common::burst_timing`), so the whole way is only kept from growing out of
/// proportion (twice the time alone, plus 30 s): a flood of the hostile claims' Jobs would
/// break that.
fn assert_as_fast(
    sb: &common::cluster::Cluster,
    alone: &BurstTimes,
    beside: &BurstTimes,
    what: &str,
) {
    println!("alone: {alone}\nbeside {what}: {beside}");
    let slack = Duration::from_secs(10);
    assert!(
        beside.slowest() <= alone.slowest() + slack,
        "beside {what}, the controller took up to {:?} of a claim's way to Bound; alone, {:?}",
        beside.slowest(),
        alone.slowest()
    );
    let whole = if sb.is_real() {
        alone.wall * 2 + Duration::from_secs(30)
    } else {
        alone.wall + slack
    };
    assert!(
        beside.wall <= whole,
        "beside {what}, the claims took {:?} to bind; alone, {:?}",
        beside.wall,
        alone.wall
    );
}

/// The controller as the binary runs it, with its client's request budget
/// (`--kube-api-qps`, `--kube-api-burst` at their defaults): hostile claims that spent it
/// would slow everyone.
fn as_deployed() -> Options {
    Options {
        api_limits: Some(flex_controller::throttle::Limits::default()),
        ..options()
    }
}

/// A claim of the `long` class deleted while its Job runs, with no finalizer but
/// Kubernetes' own: once the Job succeeds, its volume is taken for deprovisioning within
/// 20 s (a few seconds when nothing queues it).
async fn a_plain_orphan_is_taken_at_once(sb: &common::cluster::Cluster) {
    let plain = claim(sb, "plain", "long").await;
    let uid = plain.uid().unwrap();
    eventually(60, "the plain claim's Job to run", || async {
        (!jobs_for(sb, &uid).await.is_empty()).then_some(())
    })
    .await;
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    eventually(120, "the plain claim's Job to succeed", || async {
        jobs_for(sb, &uid).await.iter().any(succeeded).then_some(())
    })
    .await;
    eventually(
        20,
        "the plain orphan's volume to be taken for deprovisioning, not queued behind the held claims",
        || async {
            jobs_of(sb, "deprovision")
                .await
                .iter()
                .any(|j| j.labels().get(CLAIM_UID) == Some(&uid))
                .then_some(())
        },
    )
    .await;
}

/// Twenty users put their own finalizer on claims and delete them while their Jobs run.
/// Once those Jobs have succeeded, the controller makes their volumes' PVs and records (to
/// be deprovisioned when the claims go): that work holds nothing for long, so eighty other
/// claims, made meanwhile, bind as fast as eighty did before
/// (`assert_as_fast`), and a plain orphan (a claim deleted mid-Job, no finalizer) whose Job
/// ends during it is taken for deprovisioning at once, not after the held claims' waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_claims_held_mid_job_do_not_slow_eighty_others() {
    let sb = sandbox().await;
    let _c = controller_with(&sb, as_deployed());
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    class(&sb, "long", "Immediate", "long", json!({})).await;
    let alone = timed_burst(&sb, "a", 80, "fast").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let mut held = std::collections::BTreeSet::new();
    for i in 0..20 {
        let c = create_claim(
            &sb,
            json!({"metadata": {"name": format!("held-{i:02}"), "finalizers": ["example.com/hold"]},
                   "spec": {"storageClassName": "long", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        held.insert(c.uid().unwrap());
    }
    // How many held claims have a Job (that has succeeded, with `done`).
    let held_jobs = |done: bool| {
        let (sb, held) = (&sb, &held);
        async move {
            jobs_of(sb, "provision")
                .await
                .into_iter()
                .filter(|j| !done || succeeded(j))
                .filter_map(|j| j.labels().get(CLAIM_UID).cloned())
                .filter(|uid| held.contains(uid))
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        }
    };
    eventually(60, "the held claims' Jobs to run", || async {
        (held_jobs(false).await == held.len()).then_some(())
    })
    .await;
    for i in 0..20 {
        claims
            .delete(&format!("held-{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually(180, "the held claims' Jobs to succeed", || async {
        (held_jobs(true).await == held.len()).then_some(())
    })
    .await;
    let (beside_held, ()) = tokio::join!(
        timed_burst(&sb, "b", 80, "fast"),
        a_plain_orphan_is_taken_at_once(&sb)
    );
    assert_as_fast(&sb, &alone, &beside_held, "20 claims held mid-Job");
    for i in 0..20 {
        let held = claims.get(&format!("held-{i:02}")).await.unwrap();
        assert!(
            held.metadata.deletion_timestamp.is_some(),
            "still held by its finalizer"
        );
    }
}

/// Claims' authors write attempt 4,000,000,000 on claims whose image always fails, one
/// claim per worker of the controller's runtime, with a standby instance waiting for the
/// lease: the number is ignored (with a warning), the failing claims' retries cost nothing
/// that slows twenty healthy claims (`assert_as_fast`), and the leader keeps its lease
/// throughout (a standby that took over would be a second writer). Both instances are set
/// up as the binary sets them up: client-go's timings, the lease renewed over a connection
/// of its own, and the client's request budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_of_four_billion_and_a_failing_image_slow_nothing() {
    const WORKERS: usize = 4;
    use flex_controller::leader::LeaderOptions;
    let sb = sandbox().await;
    let lease_connection = config_as(sb.config(), CONTROLLER_NS, "flex-provisioner").await;
    let leader = |id: &str| LeaderOptions {
        connection: Some(lease_connection.clone()),
        ..LeaderOptions::new(CONTROLLER_NS, "flex-provisioner", id)
    };
    let leases: Api<Lease> = Api::namespaced(sb.client().unwrap(), CONTROLLER_NS);
    let first = controller_with(
        &sb,
        Options {
            leader: Some(leader("first")),
            ..as_deployed()
        },
    );
    let lease = eventually(20, "the first instance to lead", || async {
        let l = leases.get_opt("flex-provisioner").await.ok()??;
        (l.spec.as_ref()?.holder_identity.as_deref() == Some("first")).then_some(l)
    })
    .await;
    let transitions = lease.spec.unwrap().lease_transitions;
    let second = controller_with(
        &sb,
        Options {
            leader: Some(leader("second")),
            ..as_deployed()
        },
    );
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    class(&sb, "broken", "Immediate", "fails", json!({})).await;
    let alone = timed_burst(&sb, "a", 20, "fast").await;
    // One per worker of this test's runtime (the controller's): together they could pin
    // every worker if a plan's work grew with the number.
    let mut hostile = Vec::new();
    for i in 0..WORKERS {
        let name = format!("four-billion-{i}");
        let c = create_claim(
            &sb,
            json!({"metadata": {"name": name,
                                "annotations": {"flex-provisioner.io/attempt": "4000000000"}},
                   "spec": {"storageClassName": "broken", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        hostile.push((name, c.uid().unwrap()));
    }
    for (name, _) in &hostile {
        wait_event(&sb, name, "ProvisioningFailed", "backend unreachable", 60).await;
    }
    let beside_hostile = timed_burst(&sb, "b", 20, "fast").await;
    assert_as_fast(&sb, &alone, &beside_hostile, "the hostile claims");
    for (name, uid) in &hostile {
        let attempts: Vec<u64> = jobs_for(&sb, uid)
            .await
            .iter()
            .filter_map(|j| j.labels().get("flex-provisioner.io/attempt")?.parse().ok())
            .collect();
        assert!(
            !attempts.is_empty() && attempts.iter().all(|a| *a < 100),
            "{name}'s attempts counted from the controller's own record: {attempts:?}"
        );
        let said = our_events_about(&sb, name).await;
        assert!(
            said.iter().any(|m| m.contains("is ignored")),
            "{name}'s author is told the number is ignored: {said:?}"
        );
    }
    let now = leases.get("flex-provisioner").await.unwrap().spec.unwrap();
    assert_eq!(now.holder_identity.as_deref(), Some("first"), "no takeover");
    assert_eq!(now.lease_transitions, transitions, "no second leader");
    // Stopped before the control plane is: a leader that outlives it loses its lease, and
    // says so with a panic of its task, which would read as a failure in the output.
    first.abort();
    second.abort();
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
