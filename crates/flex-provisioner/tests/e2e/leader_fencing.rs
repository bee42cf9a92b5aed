//! End to end, on the sandbox and on a real control plane: the leader's runtime stalled on
//! purpose. Its Lease is renewed from a thread of its own, so a stall alone costs nothing;
//! and once another instance holds the Lease, nothing the stalled instance had in hand
//! reaches the API server when it resumes.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::provisioning::*;
use common::sandbox::eventually;
use flex_controller::controller::Options;
use flex_controller::leader::LeaderOptions;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::json;

const LEASE: &str = "flex-provisioner";

/// An election's timing: (lease duration, renew deadline, retry period).
type Timing = (Duration, Duration, Duration);

/// Short, so a takeover comes quickly.
const SHORT: Timing = (
    Duration::from_secs(2),
    Duration::from_millis(1500),
    Duration::from_millis(500),
);

/// For the instance that must keep its Lease: a renewal has three seconds, six tries, to
/// go through, so a busy machine (a slow write, a late thread) costs no renewal, while a
/// stall of three lease durations still outlasts any renewal the runtime could have made.
const STEADY: Timing = (
    Duration::from_secs(4),
    Duration::from_secs(3),
    Duration::from_millis(500),
);

fn leader_options(identity: &str, (lease, renew, retry): Timing) -> LeaderOptions {
    LeaderOptions {
        lease_duration: lease,
        renew_deadline: renew,
        retry_period: retry,
        ..LeaderOptions::new(CONTROLLER_NS, LEASE, identity)
    }
}

/// Writes the instance's controllers sent to the API server, and when.
type Sent = Arc<Mutex<Vec<(http::Method, String, Instant)>>>;

/// The instance under test: the controller on a runtime of its own (two workers), with a
/// client that notes every write it actually sends (the controller's fence sits in front
/// of it, so a refused write is never noted).
fn instance(
    config: kube::Config,
    lease_connection: Option<kube::Config>,
    timing: Timing,
) -> (tokio::runtime::Handle, Sent) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let sent: Sent = Arc::default();
    let noted = sent.clone();
    handle.spawn(async move {
        // As `throttle::client` builds the binary's: nothing re-sent below the fence.
        let mut config = config;
        config.default_retry = false;
        let note =
            tower::util::MapRequestLayer::new(move |r: http::Request<kube::client::Body>| {
                // The Lease's own requests are its compare-and-swap, not the controllers' writes.
                if r.method() != http::Method::GET && !r.uri().path().contains("/leases") {
                    noted.lock().unwrap().push((
                        r.method().clone(),
                        r.uri().path().to_owned(),
                        Instant::now(),
                    ));
                }
                r
            });
        let client = kube::client::ClientBuilder::try_from(config)
            .unwrap()
            .with_layer(&note)
            .build();
        let leader = LeaderOptions {
            connection: lease_connection,
            ..leader_options("stalled", timing)
        };
        let result = flex_controller::controller::run(
            client,
            Options {
                leader: Some(leader),
                ..options()
            },
        )
        .await;
        tracing::info!(?result, "the stalled instance stopped");
    });
    // The runtime lives on (its block_on thread runs none of its tasks).
    std::thread::spawn(move || runtime.block_on(std::future::pending::<()>()));
    (handle, sent)
}

/// Pins both workers of the instance's runtime for `d`, as a reconcile doing long CPU work
/// on an async worker would.
fn stall(handle: &tokio::runtime::Handle, d: Duration) {
    for _ in 0..2 {
        handle.spawn(async move { std::thread::sleep(d) });
    }
}

async fn lease(sb: &common::cluster::Cluster) -> Lease {
    Api::<Lease>::namespaced(sb.client().unwrap(), CONTROLLER_NS)
        .get_opt(LEASE)
        .await
        .unwrap()
        .unwrap_or_default()
}

/// A standby waiting for the Lease, on the test's runtime.
fn standby(sb: &common::cluster::Cluster, timing: Timing) -> tokio::task::JoinHandle<()> {
    controller_with(
        sb,
        Options {
            leader: Some(leader_options("standby", timing)),
            ..options()
        },
    )
}

async fn holder(sb: &common::cluster::Cluster) -> Option<String> {
    lease(sb).await.spec?.holder_identity
}

/// Waits until the instance has sent no write for a second: nothing is in flight.
async fn quiet(sent: &Sent) {
    eventually(30, "the instance to be idle", || async {
        let last = sent.lock().unwrap().last().map(|(_, _, at)| *at);
        last.is_none_or(|at| at.elapsed() > Duration::from_secs(1))
            .then_some(())
    })
    .await;
}

/// Three lease durations with every worker of the leader pinned: its Lease is renewed from
/// its own thread and connection, so nobody takes over, and the claim made meanwhile binds
/// once the runtime is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_runtime_does_not_cost_the_lease() {
    let sb = sandbox().await;
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    let config = config_as(sb.config(), CONTROLLER_NS, "flex-provisioner").await;
    let (handle, _) = instance(config.clone(), Some(config), STEADY);
    eventually(20, "the instance to lead", || async {
        (holder(&sb).await.as_deref() == Some("stalled")).then_some(())
    })
    .await;
    let _standby = standby(&sb, STEADY);
    claim(&sb, "before", "fast").await;
    bound(&sb, "before", 60).await;
    let transitions = lease(&sb).await.spec.unwrap().lease_transitions;
    let stalled_for = STEADY.0 * 3;
    stall(&handle, stalled_for);
    claim(&sb, "during-stall", "fast").await;
    let until = Instant::now() + stalled_for;
    while Instant::now() < until {
        let spec = lease(&sb).await.spec.unwrap();
        assert_eq!(
            spec.holder_identity.as_deref(),
            Some("stalled"),
            "the Lease stays with the stalled instance"
        );
        assert_eq!(spec.lease_transitions, transitions);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bound(&sb, "during-stall", 60).await;
    assert_eq!(jobs_of(&sb, "provision").await.len(), 2);
}

/// A leader stalled whole (its renewals too, as when they share its pinned runtime, or the
/// process is paused) past its lease duration: the standby takes over and provisions the
/// claim made meanwhile, and when the old leader resumes, nothing it had in hand reaches
/// the API server: its renew deadline has passed, so its fence refuses every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stalled_past_its_lease_never_writes_beside_the_next() {
    let sb = sandbox().await;
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    let config = config_as(sb.config(), CONTROLLER_NS, "flex-provisioner").await;
    let (handle, sent) = instance(config, None, SHORT);
    eventually(20, "the instance to lead", || async {
        (holder(&sb).await.as_deref() == Some("stalled")).then_some(())
    })
    .await;
    let _standby = standby(&sb, SHORT);
    claim(&sb, "before", "fast").await;
    bound(&sb, "before", 60).await;
    quiet(&sent).await;
    let stalled_at = Instant::now();
    stall(&handle, Duration::from_secs(8));
    eventually(20, "the standby to take over", || async {
        (holder(&sb).await.as_deref() == Some("standby")).then_some(())
    })
    .await;
    claim(&sb, "after-takeover", "fast").await;
    bound(&sb, "after-takeover", 60).await;
    // The old leader resumes (8 s) and has time to act on all it had in hand.
    tokio::time::sleep(
        (stalled_at + Duration::from_secs(12)).saturating_duration_since(Instant::now()),
    )
    .await;
    let late: Vec<_> = sent
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, at)| *at > stalled_at)
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect();
    assert!(late.is_empty(), "written after the stall began: {late:?}");
    assert_eq!(
        jobs_of(&sb, "provision").await.len(),
        2,
        "one Job per claim: the new leader's only"
    );
    assert_eq!(holder(&sb).await.as_deref(), Some("standby"));
}
