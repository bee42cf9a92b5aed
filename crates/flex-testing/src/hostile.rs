//! What users can do to their own claims to slow others' (hold them mid-Job with a
//! finalizer of their own, write an attempt of four billion on claims whose image fails),
//! played out beside a burst of healthy claims timed against the same burst alone. The
//! end-to-end tests check what must happen (every claim binds, the hostile claims stay
//! hostile, nobody takes over); how long it took is compared in `benches/availability.rs`,
//! where a noisy machine cannot fail the suite.

use flex_controller::controller::Options;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::burst_timing::{BurstTimes, timed_burst};
use super::cluster::Cluster;
use super::provisioning::*;
use super::sandbox::eventually;

const CLAIM_UID: &str = flex_core::names::LABEL_CLAIM_UID;

/// A burst alone, and the same burst beside hostile claims.
pub struct Comparison {
    pub alone: BurstTimes,
    pub beside: BurstTimes,
}

pub async fn create_claim(sb: &Cluster, body: serde_json::Value) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap()
}

/// Events our controller reported about an object.
pub async fn our_events_about(sb: &Cluster, name: &str) -> Vec<String> {
    let api = Api::namespaced(sb.client().unwrap(), "default");
    (crate::provisioning::events_in(api, &ListParams::default())
        .await
        .into_iter())
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

pub async fn jobs_for(sb: &Cluster, uid: &str) -> Vec<Job> {
    Api::<Job>::namespaced(sb.client().unwrap(), NS)
        .list(&ListParams::default().labels(&format!("flex-provisioner.io/claim-uid={uid}")))
        .await
        .unwrap()
        .items
}

/// The controller as the binary runs it, with its client's request budget
/// (`--kube-api-qps`, `--kube-api-burst` at their defaults): hostile claims that spent it
/// would slow everyone.
pub fn as_deployed() -> Options {
    Options {
        api_limits: Some(flex_controller::throttle::Limits::default()),
        ..options()
    }
}

/// A claim of the `long` class deleted while its Job runs, with no finalizer but
/// Kubernetes' own: once the Job succeeds, its volume is taken for deprovisioning within
/// a minute (a few seconds when nothing queues it: `benches/availability.rs` times it).
async fn a_plain_orphan_is_taken_at_once(sb: &Cluster) {
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
        60,
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
/// claims, made meanwhile, bind (as fast as eighty did before: `benches/availability.rs`
/// compares), and a plain orphan (a claim deleted mid-Job, no finalizer) whose Job
/// ends during it is taken for deprovisioning at once, not after the held claims' waits.
pub async fn twenty_held_mid_job(sb: &Cluster) -> Comparison {
    let _c = controller_with(sb, as_deployed());
    class(sb, "fast", "Immediate", "make-pv", json!({})).await;
    class(sb, "long", "Immediate", "long", json!({})).await;
    let alone = timed_burst(sb, "a", 80, "fast").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let mut held = std::collections::BTreeSet::new();
    for i in 0..20 {
        let c = create_claim(
            sb,
            json!({"metadata": {"name": format!("held-{i:02}"), "finalizers": ["example.com/hold"]},
                   "spec": {"storageClassName": "long", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        held.insert(c.uid().unwrap());
    }
    // How many held claims have a Job (that has succeeded, with `done`).
    let held_jobs = |done: bool| {
        let (sb, held) = (sb, &held);
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
    let (beside, ()) = tokio::join!(
        timed_burst(sb, "b", 80, "fast"),
        a_plain_orphan_is_taken_at_once(sb)
    );
    for i in 0..20 {
        let held = claims.get(&format!("held-{i:02}")).await.unwrap();
        assert!(
            held.metadata.deletion_timestamp.is_some(),
            "still held by its finalizer"
        );
    }
    Comparison { alone, beside }
}

/// Claims' authors write attempt 4,000,000,000 on claims whose image always fails, one
/// claim per worker of the controller's runtime, with a standby instance waiting for the
/// lease: the number is ignored (with a warning), the failing claims' retries cost nothing
/// that slows twenty healthy claims (`benches/availability.rs` compares), and the leader keeps its lease
/// throughout (a standby that took over would be a second writer). Both instances are set
/// up as the binary sets them up: client-go's timings, the lease renewed over a connection
/// of its own, and the client's request budget.
pub async fn four_billion_beside_a_standby(sb: &Cluster) -> Comparison {
    use flex_controller::leader::LeaderOptions;
    let lease_connection = config_as(sb.config(), CONTROLLER_NS, "flex-provisioner").await;
    let leader = |id: &str| LeaderOptions {
        connection: Some(lease_connection.clone()),
        ..LeaderOptions::new(CONTROLLER_NS, "flex-provisioner", id)
    };
    let leases: Api<Lease> = Api::namespaced(sb.client().unwrap(), CONTROLLER_NS);
    let first = controller_with(
        sb,
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
        sb,
        Options {
            leader: Some(leader("second")),
            ..as_deployed()
        },
    );
    class(sb, "fast", "Immediate", "make-pv", json!({})).await;
    class(sb, "broken", "Immediate", "fails", json!({})).await;
    let alone = timed_burst(sb, "a", 20, "fast").await;
    // One per worker of the runtime the controller runs on (the test's or the benchmark's):
    // together they could pin every worker if a plan's work grew with the number.
    let mut hostile = Vec::new();
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    for i in 0..workers {
        let name = format!("four-billion-{i}");
        let c = create_claim(
            sb,
            json!({"metadata": {"name": name,
                                "annotations": {"flex-provisioner.io/attempt": "4000000000"}},
                   "spec": {"storageClassName": "broken", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        hostile.push((name, c.uid().unwrap()));
    }
    for (name, _) in &hostile {
        wait_event(sb, name, "ProvisioningFailed", "backend unreachable", 60).await;
    }
    let beside = timed_burst(sb, "b", 20, "fast").await;
    for (name, uid) in &hostile {
        let attempts: Vec<u64> = jobs_for(sb, uid)
            .await
            .iter()
            .filter_map(|j| j.labels().get("flex-provisioner.io/attempt")?.parse().ok())
            .collect();
        assert!(
            !attempts.is_empty() && attempts.iter().all(|a| *a < 100),
            "{name}'s attempts counted from the controller's own record: {attempts:?}"
        );
        let said = our_events_about(sb, name).await;
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
    Comparison { alone, beside }
}
