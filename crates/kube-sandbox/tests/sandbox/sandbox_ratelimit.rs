//! The controller-manager's client rate limit (`SandboxOptions::controller_qps`): the Job
//! controller, scheduler and collector share one token bucket, and waiting for it does not
//! hold up the API server.

use crate::common;

use std::time::{Duration, Instant};

use common::sandbox::{eventually, options};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::json;

const JOBS: usize = 6;

async fn run_jobs(opts: SandboxOptions) -> (Duration, Sandbox) {
    let sb = Sandbox::start(opts).await.expect("sandbox starts");
    let client = sb.client().unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    for i in 0..JOBS {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": format!("j{i}")},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "ok"}]}}},
        }))
        .unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
    }
    eventually(120, "all jobs to complete", || async {
        // The API answers promptly while the controllers wait for tokens.
        let asked = Instant::now();
        let list = jobs.list(&ListParams::default()).await.ok()?;
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "API server held up"
        );
        let done = list
            .items
            .iter()
            .filter(|j| {
                j.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Complete" && c.status == "True")
                    })
            })
            .count();
        (done == JOBS).then_some(())
    })
    .await;
    (start.elapsed(), sb)
}

#[tokio::test]
async fn controller_writes_wait_for_the_shared_bucket() {
    // Each Job needs at least a pod create, a bind, two completion writes and their events,
    // so 6 Jobs at 10 writes/s with a burst of 1 take well over 2 s.
    let (limited, sb) = run_jobs(SandboxOptions {
        controller_qps: Some((10.0, 1)),
        ..options()
    })
    .await;
    assert!(limited >= Duration::from_secs(2), "took only {limited:?}");

    // Every job's events are still recorded (the last ones may still wait for tokens).
    let events: Api<Event> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(30, "every job's events", || async {
        let reasons: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        ["SuccessfulCreate", "Scheduled", "Completed"]
            .iter()
            .all(|reason| reasons.iter().filter(|r| r == reason).count() == JOBS)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn no_limit_by_default() {
    assert_eq!(SandboxOptions::default().controller_qps, None);
    let (unlimited, _sb) = run_jobs(options()).await;
    assert!(unlimited < Duration::from_secs(30), "took {unlimited:?}");
}

const CLAIMS: usize = 8;

/// Binds CLAIMS claims to as many matching volumes (no provisioner: the PV controller
/// alone does the work); returns how long until every claim is Bound.
async fn bind_claims(opts: SandboxOptions) -> Duration {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let sb = Sandbox::start(opts).await.expect("sandbox starts");
    let client = sb.client().unwrap();
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    let start = Instant::now();
    for i in 0..CLAIMS {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": format!("pv{i}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": "manual", "hostPath": {"path": format!("/tmp/pv{i}")}},
        }))
        .unwrap();
        volumes.create(&PostParams::default(), &pv).await.unwrap();
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": format!("c{i}")},
            "spec": {"storageClassName": "manual", "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap();
        claims.create(&PostParams::default(), &claim).await.unwrap();
    }
    eventually(120, "every claim to bind", || async {
        let asked = Instant::now();
        let list = claims.list(&ListParams::default()).await.ok()?;
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "API server held up"
        );
        let bound = list
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
        (bound == CLAIMS).then_some(())
    })
    .await;
    start.elapsed()
}

#[tokio::test]
async fn the_pv_controller_waits_for_its_own_bucket() {
    // Each binding takes at least four writes (the volume's claimRef and phase, the claim's
    // volumeName and phase): 8 bindings at 10 writes/s with a burst of 1 take over 3 s.
    let limited = bind_claims(SandboxOptions {
        controller_qps: Some((10.0, 1)),
        ..options()
    })
    .await;
    assert!(limited >= Duration::from_secs(3), "took only {limited:?}");
    let unlimited = bind_claims(options()).await;
    assert!(
        unlimited < Duration::from_secs(2),
        "without a limit the same bindings took {unlimited:?}"
    );
}
