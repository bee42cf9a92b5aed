//! The controller-manager's client rate limit (`SandboxOptions::controller_qps`): the Job
//! controller, scheduler and collector share one token bucket, and waiting for it does not
//! hold up the API server.

mod common;

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
