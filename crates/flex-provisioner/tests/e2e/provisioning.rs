//! End to end on the sandbox: pending claim -> Job -> PV -> Bound, with failures, restarts
//! and a misbehaving API server.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use flex_controller::controller::Options;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};

#[tokio::test]
async fn an_immediate_claim_binds_with_one_job_and_one_pv() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "fast",
        "Immediate",
        "make-pv",
        serde_json::json!({"export": "/exports/{{claim.name}}"}),
    )
    .await;
    let created = claim(&sb, "data", "fast").await;
    let uid = created.metadata.uid.unwrap();
    let c = bound(&sb, "data", 30).await;
    assert_eq!(c.spec.unwrap().volume_name, Some(format!("pvc-{uid}")));
    let jobs = jobs(&sb).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].metadata.name, Some(format!("provision-{uid}")));
    let vols = volumes(&sb).await;
    assert_eq!(vols.len(), 1);
    let ann = vols[0].metadata.annotations.clone().unwrap();
    assert_eq!(
        ann["pv.kubernetes.io/provisioned-by"],
        "flex-provisioner.io/job"
    );
    // What deprovisioning runs is in the controller's record, bound to the PV's uid.
    let record = eventually(10, "the volume's record", || async {
        kube::api::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
            sb.client().unwrap(),
            NS,
        )
        .get_opt(&format!(
            "flex-record-{}",
            vols[0].metadata.uid.as_deref().unwrap()
        ))
        .await
        .ok()?
    })
    .await;
    assert_eq!(
        record.data.unwrap()["parameters"],
        "{\"export\":\"/exports/data\"}"
    );
    assert_eq!(
        vols[0]
            .spec
            .as_ref()
            .unwrap()
            .host_path
            .as_ref()
            .unwrap()
            .path,
        format!("/volumes/pvc-{uid}")
    );
    let events = claim_events(&sb, "data").await;
    let reasons: Vec<&str> = events.iter().map(|(r, _)| r.as_str()).collect();
    assert!(
        reasons.contains(&"Provisioning") && reasons.contains(&"ProvisioningSucceeded"),
        "{events:?}"
    );
}

#[tokio::test]
async fn two_hundred_claims_at_once_bind_with_one_job_and_pv_each() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "bulk", "Immediate", "make-pv", serde_json::json!({})).await;
    burst(&sb, "c", 200, "bulk").await;
    all_bound(&sb, 200, 240).await;
    let jobs = jobs(&sb).await;
    assert_eq!(jobs.len(), 200, "exactly one Job per claim");
    let mut claim_uids: Vec<String> = jobs
        .iter()
        .map(|j| j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/claim-uid"].clone())
        .collect();
    claim_uids.sort();
    claim_uids.dedup();
    assert_eq!(claim_uids.len(), 200);
    assert_eq!(volumes(&sb).await.len(), 200, "exactly one PV per claim");
    // Every claim bound after one attempt, so none may have been told its Job made no PV
    // (a judgement from a PV cache that had not caught up).
    let wrong = events_saying(&sb, "created no PersistentVolume").await;
    assert!(wrong.is_empty(), "{wrong:?}");
}

#[tokio::test]
async fn wait_for_first_consumer_node_local_runs_on_the_selected_node() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    node_local_class(&sb, "local").await;
    claim(&sb, "data", "local").await;
    pod_on_node(&sb, "app", "data", "node-b").await;
    assert_eq!(
        bound_volume_nodes(&sb, "data", 30).await,
        Some(vec!["node-b".to_string()])
    );
    let pods: Vec<_> =
        kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(sb.client().unwrap(), NS)
            .list(&Default::default())
            .await
            .unwrap()
            .items;
    assert_eq!(pods.len(), 1);
    assert_eq!(
        pods[0].spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-b"),
        "the Job ran on the selected node"
    );
    let env = pods[0].spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "NODE" && e.value.as_deref() == Some("node-b"))
    );
}

/// The controller's client with every list and watch of nodes narrowed to those without
/// `label`: a node carrying it exists for the API server but never reaches the node cache,
/// as a node that joined a moment ago.
async fn controller_blind_to_nodes_labelled(
    sb: &common::cluster::Cluster,
    label: &'static str,
) -> tokio::task::JoinHandle<()> {
    let config = config_as(sb.config(), CONTROLLER_NS, "flex-provisioner").await;
    let narrow =
        tower::util::MapRequestLayer::new(move |mut r: http::Request<kube::client::Body>| {
            if r.uri().path() == "/api/v1/nodes" {
                let mut query: Vec<String> = r
                    .uri()
                    .query()
                    .unwrap_or_default()
                    .split('&')
                    .filter(|p| !p.is_empty() && !p.starts_with("labelSelector="))
                    .map(str::to_owned)
                    .collect();
                query.push(format!("labelSelector=%21{}", label.replace('/', "%2F")));
                *r.uri_mut() = format!("/api/v1/nodes?{}", query.join("&"))
                    .parse()
                    .unwrap();
            }
            r
        });
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&narrow)
        .build();
    controller_on(client, options())
}

/// The scheduler selects a node the controller's node cache does not show (it joined a
/// moment ago): the controller asks the API server for it and provisions on it at once, its
/// name rendered into the Job, instead of waiting or blocking the claim.
#[tokio::test]
async fn a_selected_node_the_cache_lacks_is_read_and_used() {
    let sb = sandbox().await;
    let hidden = "flex-test.io/not-cached";
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(sb.client().unwrap());
    let label = serde_json::json!({"metadata": {"labels": {hidden: "true"}}});
    nodes
        .patch(
            "node-b",
            &Default::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .unwrap();
    let _c = controller_blind_to_nodes_labelled(&sb, hidden).await;
    node_local_class(&sb, "local").await;
    claim(&sb, "data", "local").await;
    pod_on_node(&sb, "app", "data", "node-b").await;
    assert_eq!(
        bound_volume_nodes(&sb, "data", 60).await,
        Some(vec!["node-b".to_string()])
    );
    let job = jobs(&sb)
        .await
        .into_iter()
        .next()
        .expect("the provisioning Job");
    assert_eq!(
        common::env(&job, "NODE").as_deref(),
        Some("node-b"),
        "the node read from the API server is rendered"
    );
    let warned = events_saying(&sb, "does not exist").await;
    assert!(
        warned.is_empty(),
        "a node that exists is never said to be missing: {warned:?}"
    );
}

#[tokio::test]
async fn transient_failures_are_retried_with_growing_delays_and_reported() {
    let sb = sandbox().await;
    // Delays long enough to see in one-second timestamps: 2 s, then 4 s.
    let _c = controller_with(
        &sb,
        Options {
            retry_base: std::time::Duration::from_secs(2),
            ..options()
        },
    );
    // The image counts its tries on the node's filesystem: keep every attempt on one node.
    class(
        &sb,
        "shaky",
        "Immediate",
        "flaky",
        serde_json::json!({"node-selector": "kubernetes.io/hostname=node-a"}),
    )
    .await;
    claim(&sb, "data", "shaky").await;
    bound(&sb, "data", 60).await;
    let mut jobs = jobs(&sb).await;
    jobs.sort_by_key(|j| {
        j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/attempt"]
            .parse::<u32>()
            .unwrap()
    });
    let attempts: Vec<String> = jobs
        .iter()
        .map(|j| j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/attempt"].clone())
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    let created: Vec<jiff::Timestamp> = jobs
        .iter()
        .map(|j| j.metadata.creation_timestamp.clone().unwrap().0)
        .collect();
    let first_gap = created[1].duration_since(created[0]);
    let second_gap = created[2].duration_since(created[1]);
    assert!(
        second_gap > first_gap,
        "delays grow: {first_gap:?} then {second_gap:?}"
    );
    let failed = wait_event(
        &sb,
        "data",
        "ProvisioningFailed",
        "flaky: backend busy (try 0)",
        5,
    )
    .await;
    assert!(failed.contains("attempt 1"), "{failed}");
    wait_event(
        &sb,
        "data",
        "ProvisioningFailed",
        "attempt 2 starts in 2s",
        5,
    )
    .await;
    wait_event(
        &sb,
        "data",
        "ProvisioningFailed",
        "attempt 3 starts in 4s",
        5,
    )
    .await;
    wait_event(
        &sb,
        "data",
        "ProvisioningSucceeded",
        "Successfully provisioned",
        5,
    )
    .await;
}

#[tokio::test]
async fn a_permanent_exit_code_stops_retries_and_shows_the_pod_message() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "gold", "Immediate", "perm", serde_json::json!({})).await;
    claim(&sb, "data", "gold").await;
    let message = wait_event(&sb, "data", "ProvisioningFailed", "not retried", 30).await;
    assert!(
        message.contains("perm: pool gold does not exist"),
        "{message}"
    );
    given_up(&sb, "data", 30).await;
    assert_eq!(
        jobs(&sb).await.len(),
        1,
        "no retry after a permanent exit code"
    );
    let c = kube::Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        sb.client().unwrap(),
        "default",
    )
    .get("data")
    .await
    .unwrap();
    assert_eq!(c.status.unwrap().phase.as_deref(), Some("Pending"));
    assert!(
        c.metadata
            .annotations
            .unwrap()
            .contains_key("flex-provisioner.io/gave-up")
    );
}

#[tokio::test]
async fn an_unknown_image_is_reported_within_seconds() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "ghost",
        "Immediate",
        // Nothing maps it to an executable in the sandbox, and a real control plane's
        // simulated node never pulls an image under `missing/`.
        "registry.example.com/missing/no-such-image:1.0",
        serde_json::json!({}),
    )
    .await;
    claim(&sb, "data", "ghost").await;
    let t = std::time::Instant::now();
    let message = wait_event(&sb, "data", "ProvisionerPodNotStarting", "ErrImagePull", 15).await;
    assert!(t.elapsed() < std::time::Duration::from_secs(15));
    assert!(
        message.contains("registry.example.com/missing/no-such-image:1.0"),
        "{message}"
    );
}

#[tokio::test]
async fn a_job_without_a_pv_or_with_a_wrong_pv_is_a_failed_attempt() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "lazy",
        "Immediate",
        "no-pv",
        serde_json::json!({"max-attempts": "2"}),
    )
    .await;
    class(
        &sb,
        "confused",
        "Immediate",
        "wrong-ref",
        serde_json::json!({}),
    )
    .await;
    claim(&sb, "lazy", "lazy").await;
    claim(&sb, "confused", "confused").await;
    let m = wait_event(
        &sb,
        "lazy",
        "ProvisioningFailed",
        "created no PersistentVolume",
        30,
    )
    .await;
    assert!(m.contains("attempt 1"), "{m}");
    wait_event(
        &sb,
        "lazy",
        "ProvisioningFailed",
        "max-attempts is reached",
        30,
    )
    .await;
    let lazy_jobs = jobs(&sb)
        .await
        .into_iter()
        .filter(|j| {
            j.metadata.annotations.as_ref().unwrap()["flex-provisioner.io/claim"] == "default/lazy"
        })
        .count();
    assert_eq!(lazy_jobs, 2);
    let m = wait_event(
        &sb,
        "confused",
        "ProvisioningFailed",
        "its claimRef names other/other",
        30,
    )
    .await;
    assert!(m.contains("it is removed and provisioning retried"), "{m}");
    bound(&sb, "confused", 30).await;
}

#[tokio::test]
async fn the_original_proposal_flow_with_kubectl_create() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "silver",
        "Immediate",
        "kubectl-pv",
        serde_json::json!({"use-nfs-server": "10.10.2.4", "zone": "west"}),
    )
    .await;
    claim(&sb, "data", "silver").await;
    bound(&sb, "data", 30).await;
    let pv = volumes(&sb).await.remove(0);
    assert_eq!(
        pv.spec.as_ref().unwrap().host_path.as_ref().unwrap().path,
        "/volumes/kubectl"
    );
    // The image made the PV; the controller adds its finalizer once it verified it, which
    // may be just after the PV controller bound the claim.
    common::sandbox::eventually(30, "our finalizer on the image's PV", || async {
        let pv = volumes(&sb).await.pop()?;
        pv.metadata
            .finalizers?
            .contains(&"flex-provisioner.io/deprovision".to_string())
            .then_some(())
    })
    .await;
}

/// The controller killed and restarted at every step of the flow: no duplicate Job, no
/// duplicate or leaked PV, every claim binds.
#[tokio::test]
async fn restarts_at_every_step_neither_duplicate_nor_lose_anything() {
    let sb = sandbox().await;
    class(&sb, "steady", "Immediate", "slow", serde_json::json!({})).await;
    class(
        &sb,
        "shaky",
        "Immediate",
        "flaky",
        serde_json::json!({"node-selector": "kubernetes.io/hostname=node-a"}),
    )
    .await;
    for i in 0..12 {
        claim(
            &sb,
            &format!("s{i:02}"),
            if i % 3 == 0 { "shaky" } else { "steady" },
        )
        .await;
    }
    // Kill the controller after ever longer runs: before any Job, mid-Job, mid-retry...
    for ms in [50u64, 150, 300, 600, 1000, 1500, 2500] {
        let c = controller(&sb);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        c.abort();
        let _ = c.await;
    }
    let _c = controller(&sb);
    for i in 0..12 {
        bound(&sb, &format!("s{i:02}"), 90).await;
    }
    let jobs = jobs(&sb).await;
    let mut names: Vec<String> = jobs
        .iter()
        .map(|j| j.metadata.name.clone().unwrap())
        .collect();
    let total = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), total);
    for j in &jobs {
        let attempt = &j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/attempt"];
        let claim = &j.metadata.annotations.as_ref().unwrap()["flex-provisioner.io/claim"];
        if !claim.contains("/s00")
            && !claim.contains("/s03")
            && !claim.contains("/s06")
            && !claim.contains("/s09")
        {
            assert_eq!(attempt, "1", "a steady claim needs one attempt: {claim}");
        }
    }
    let vols = volumes(&sb).await;
    assert_eq!(vols.len(), 12, "one PV per claim, none leaked");
}

/// Dropped watches, compacted history (410), and 500/429/409 answers: every claim binds.
#[tokio::test]
async fn a_misbehaving_api_server_does_not_stop_provisioning() {
    let sb = sandbox().await;
    // Faults are injected by the sandbox; a real API server fails when it fails.
    let Some(sim) = sb.simulation("fault injection") else {
        return;
    };
    let _c = controller(&sb);
    class(&sb, "steady", "Immediate", "make-pv", serde_json::json!({})).await;
    sim.faults.fail_next(Some("create"), Some("jobs"), 3, 500);
    sim.faults
        .fail_next(Some("patch"), Some("persistentvolumeclaims"), 2, 409);
    sim.faults.fail_next(Some("list"), None, 2, 429);
    sim.faults.fail_next(Some("watch"), Some("jobs"), 2, 500);
    for i in 0..10 {
        claim(&sb, &format!("f{i}"), "steady").await;
        if i % 3 == 0 {
            sim.compact();
            sim.close_watches();
        }
    }
    for i in 0..10 {
        bound(&sb, &format!("f{i}"), 90).await;
    }
    assert_eq!(volumes(&sb).await.len(), 10);
    assert_eq!(
        jobs(&sb).await.len(),
        10,
        "a failed create is retried, never doubled"
    );
}

/// The pod watch falls behind the Job watch for longer than a report is waited for (as on
/// a loaded API server, where 300 claims once went through seven attempts each, every Job
/// succeeded): the report is read from the API server before an attempt is called lost,
/// so the claim binds with its one Job.
#[tokio::test]
async fn a_pod_watch_lagging_behind_its_job_costs_no_attempt() {
    let sb = sandbox().await;
    // Only the sandbox can hold one watch back; a real API server lags when it lags.
    let Some(sim) = sb.simulation("fault injection") else {
        return;
    };
    let _c = controller(&sb);
    class(&sb, "steady", "Immediate", "make-pv", serde_json::json!({})).await;
    sim.faults.delay_next(
        Some("watch"),
        Some("pods"),
        1_000,
        std::time::Duration::from_secs(150),
    );
    sim.close_watches();
    claim(&sb, "lagged", "steady").await;
    bound(&sb, "lagged", 120).await;
    let attempts = jobs(&sb).await.len();
    assert_eq!(attempts, 1, "one Job: its report was there all along");
}

/// A claim deleted while its Job runs: the Job finishes, nothing new starts.
#[tokio::test]
async fn a_claim_deleted_while_its_job_runs_starts_nothing_new() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "steady", "Immediate", "slow", serde_json::json!({})).await;
    claim(&sb, "gone", "steady").await;
    eventually(10, "the Job to start", || async {
        (!jobs(&sb).await.is_empty()).then_some(())
    })
    .await;
    kube::Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        sb.client().unwrap(),
        "default",
    )
    .delete("gone", &Default::default())
    .await
    .unwrap();
    provisioning_complete(&sb, 20).await;
    // The sign that the controller looked at the finished attempt: its volume is taken for
    // deprovisioning.
    eventually(60, "the late volume's deprovision Job", || async {
        (!jobs_of(&sb, "deprovision").await.is_empty()).then_some(())
    })
    .await;
    let provisioning = jobs_of(&sb, "provision").await.len();
    assert_eq!(
        provisioning, 1,
        "no new attempt for a deleted claim (its late PV is deprovisioned instead)"
    );
}

/// Configuration: an invalid ConfigMap produces events and no Job; fixing it takes effect
/// without a restart.
#[tokio::test]
async fn configuration_changes_take_effect_without_a_restart() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "later",
        "Immediate",
        "make-pv",
        serde_json::json!({"service-token": "s3cr3t"}),
    )
    .await;
    claim(&sb, "data", "later").await;
    let m = wait_event(
        &sb,
        "data",
        "ProvisioningConfigInvalid",
        "service-token",
        15,
    )
    .await;
    assert!(m.contains("is invalid"), "{m}");
    let cm_events =
        kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(sb.client().unwrap(), NS)
            .list(&kube::api::ListParams::default().fields("involvedObject.name=later-config"))
            .await
            .unwrap();
    assert!(
        cm_events.items.iter().any(|e| e
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("service-account-name")),
        "the ConfigMap itself carries the problem and the fix"
    );
    assert!(
        jobs(&sb).await.is_empty(),
        "bad configuration never produces a Job"
    );
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(sb.client().unwrap(), NS);
    let patch = serde_json::json!({"data": {"service-token": null}});
    cms.patch(
        "later-config",
        &Default::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    bound(&sb, "data", 30).await;
}

/// /healthz, /readyz and /metrics with the sig-storage library's metric names.
#[tokio::test]
async fn health_readiness_and_metrics_are_served() {
    let sb = sandbox().await;
    let (_c, addr) = controller_serving(&sb);
    class(&sb, "fast", "Immediate", "make-pv", serde_json::json!({})).await;
    claim(&sb, "data", "fast").await;
    bound(&sb, "data", 30).await;
    let get = |path: &'static str| http_get(addr, path);
    assert!(get("/healthz").await.unwrap().starts_with("HTTP/1.1 200"));
    let ready = eventually(10, "readiness", || async {
        get("/readyz")
            .await
            .filter(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    assert!(ready.ends_with("ok"));
    let metrics = eventually(10, "the provision counter", || async {
        get("/metrics").await.filter(|m| {
            m.contains("controller_persistentvolumeclaim_provision_total{class=\"fast\"} 1")
        })
    })
    .await;
    assert!(
        metrics.contains(
            "controller_persistentvolumeclaim_provision_duration_seconds_count{class=\"fast\"} 1"
        ),
        "{metrics}"
    );
}

/// A Job whose pod cannot even be created (its service account is missing) is reported
/// within seconds, from the Job controller's FailedCreate event.
#[tokio::test]
async fn a_missing_service_account_is_reported_within_seconds() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "nosa",
        "Immediate",
        "make-pv",
        serde_json::json!({"service-account-name": "absent-sa"}),
    )
    .await;
    claim(&sb, "data", "nosa").await;
    let m = wait_event(
        &sb,
        "data",
        "ProvisionerPodNotStarting",
        "cannot create its pod",
        20,
    )
    .await;
    assert!(m.contains("serviceaccount \"absent-sa\" not found"), "{m}");
}

/// Two controllers: only the Lease holder acts; when it dies, the other takes over once the
/// Lease expires, and nothing is done twice.
#[tokio::test]
async fn leader_election_lets_one_controller_act_and_fails_over() {
    use flex_controller::leader::LeaderOptions;
    use k8s_openapi::api::coordination::v1::Lease;
    let sb = sandbox().await;
    let leader = |id: &str| LeaderOptions {
        namespace: CONTROLLER_NS.into(),
        lease_name: "flex-provisioner".into(),
        identity: id.into(),
        // Long enough that a renewal on a machine running other control planes beside this
        // one (CI's lanes, 2 cores) is not late.
        lease_duration: std::time::Duration::from_secs(4),
        renew_deadline: std::time::Duration::from_millis(3000),
        retry_period: std::time::Duration::from_millis(500),
        connection: None,
    };
    let holder = |sb: &common::cluster::Cluster| {
        let leases: kube::Api<Lease> = kube::Api::namespaced(sb.client().unwrap(), CONTROLLER_NS);
        async move {
            leases
                .get_opt("flex-provisioner")
                .await
                .ok()??
                .spec?
                .holder_identity
        }
    };
    let first = controller_with(
        &sb,
        Options {
            leader: Some(leader("first")),
            ..options()
        },
    );
    eventually(10, "the first controller to lead", || async {
        (holder(&sb).await.as_deref() == Some("first")).then_some(())
    })
    .await;
    let standby_addr = free_addr();
    let _second = controller_with(
        &sb,
        Options {
            leader: Some(leader("second")),
            metrics_addr: Some(standby_addr),
            ..options()
        },
    );
    // A standby is alive (a liveness probe must not restart it) and, once its start checks
    // passed, ready as a standby (so a two-replica Deployment can roll out).
    let health = eventually(10, "the standby's /healthz", || async {
        http_get(standby_addr, "/healthz").await
    })
    .await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let readiness = eventually(10, "the standby's /readyz", || async {
        http_get(standby_addr, "/readyz")
            .await
            .filter(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    assert!(readiness.contains("standby"), "{readiness}");
    // ... and stays alive throughout: waiting, taking over, leading.
    let probes = tokio::spawn(async move {
        let mut answers = Vec::new();
        for _ in 0..60 {
            answers.push(http_get(standby_addr, "/healthz").await.unwrap_or_default());
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        answers
    });
    class(&sb, "fast", "Immediate", "make-pv", serde_json::json!({})).await;
    claim(&sb, "one", "fast").await;
    bound(&sb, "one", 30).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        holder(&sb).await.as_deref(),
        Some("first"),
        "the leader keeps its lease while it renews"
    );
    // A killed leader releases nothing: the standby takes over once the record it last saw
    // is a lease duration old, within one retry period (plus margin for a busy machine).
    first.abort();
    let _ = first.await;
    let killed = std::time::Instant::now();
    eventually(20, "the second controller to take over", || async {
        (holder(&sb).await.as_deref() == Some("second")).then_some(())
    })
    .await;
    assert!(
        killed.elapsed() < std::time::Duration::from_millis(4000 + 600 + 5000),
        "took over {:?} after the kill",
        killed.elapsed()
    );
    let answers = probes.await.unwrap();
    assert!(
        answers.iter().all(|a| a.starts_with("HTTP/1.1 200")),
        "the standby's /healthz failed: {:?}",
        answers.iter().find(|a| !a.starts_with("HTTP/1.1 200"))
    );
    claim(&sb, "two", "fast").await;
    bound(&sb, "two", 30).await;
    assert_eq!(
        jobs_of(&sb, "provision").await.len(),
        2,
        "one Job per claim, whoever led"
    );
}

/// SIGTERM to the leading process (what a rollout or drain sends): it stops acting,
/// releases the Lease and exits, and the standby leads well within the lease duration.
#[tokio::test]
async fn sigterm_hands_the_lease_to_the_standby_at_once() {
    use k8s_openapi::api::coordination::v1::Lease;
    let sb = sandbox().await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(sb.client().unwrap(), CONTROLLER_NS);
    let holder = || async {
        leases
            .get_opt("flex-provisioner")
            .await
            .ok()??
            .spec?
            .holder_identity
    };
    let first = std::process::Command::new(env!("CARGO_BIN_EXE_flex-provisioner"))
        .args([
            "run",
            &format!("--config-namespace={NS}"),
            &format!("--metrics-addr={}", free_addr()),
            "--lease-seconds=15",
            "--instance=first",
        ])
        .env("KUBECONFIG", &sb.kubeconfig)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    eventually(20, "the first process to lead", || async {
        holder()
            .await
            .is_some_and(|h| h.starts_with("first_"))
            .then_some(())
    })
    .await;
    let _second = controller_with(
        &sb,
        Options {
            leader: Some(flex_controller::leader::LeaderOptions::new(
                CONTROLLER_NS,
                "flex-provisioner",
                "second",
            )),
            ..options()
        },
    );
    // The standby has tried and found the lease taken: it now waits for it.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let first_identity = holder().await.unwrap_or_default();
    assert!(
        first_identity.starts_with("first_") && first_identity.len() > "first_".len(),
        "the process's identity is its instance name plus a unique suffix: {first_identity}"
    );
    let signalled = std::time::Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let first = std::sync::Mutex::new(first);
    let status = eventually(10, "the first process to exit", || {
        let exited = first.lock().unwrap().try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert!(status.success(), "a clean exit on SIGTERM: {status}");
    eventually(10, "the standby to lead", || async {
        (holder().await.as_deref() == Some("second")).then_some(())
    })
    .await;
    assert!(
        signalled.elapsed() < std::time::Duration::from_secs(15),
        "handed over in {:?}, before the 15 s lease could have expired",
        signalled.elapsed()
    );
    class(&sb, "fast", "Immediate", "make-pv", serde_json::json!({})).await;
    claim(&sb, "after", "fast").await;
    bound(&sb, "after", 30).await;
}

/// `max-concurrent: "2"` with 20 claims at once: a watch on Jobs for the whole run never
/// sees more than 2 of the class's Jobs active, and every claim binds.
#[tokio::test]
async fn max_concurrent_is_strict_even_before_the_cache_sees_new_jobs() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "few",
        "Immediate",
        "slow",
        serde_json::json!({"max-concurrent": "2"}),
    )
    .await;
    let jobs_api: kube::Api<k8s_openapi::api::batch::v1::Job> =
        kube::Api::namespaced(sb.client().unwrap(), NS);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watching = {
        let peak = peak.clone();
        tokio::spawn(async move {
            let mut active = std::collections::BTreeMap::new();
            let mut events =
                std::pin::pin!(watcher(jobs_api, Default::default()).applied_objects());
            while let Some(Ok(job)) = events.next().await {
                let done = job.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().flatten().any(|c| {
                        (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"
                    })
                });
                active.insert(job.metadata.name.clone().unwrap(), !done);
                let now = active.values().filter(|a| **a).count();
                peak.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    burst(&sb, "m", 20, "few").await;
    all_bound(&sb, 20, 120).await;

    watching.abort();
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    assert!(peak <= 2, "{peak} Jobs of the class were active at once");
    assert_eq!(jobs_of(&sb, "provision").await.len(), 20);
}

/// The beta class annotation is read as Kubernetes reads it (quota and the PV controller
/// alike): before `spec.storageClassName`. A claim that names its class only there is
/// served, and one whose annotation and field disagree is provisioned from the
/// annotation's class, never the field's.
#[tokio::test]
async fn the_beta_class_annotation_is_read_before_the_field() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "fast", "Immediate", "make-pv", serde_json::json!({})).await;
    class(&sb, "never", "Immediate", "perm", serde_json::json!({})).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let mut only = claim_object("beta-only", "fast");
    only.spec.as_mut().unwrap().storage_class_name = None;
    let mut both = claim_object("both", "never");
    for c in [&mut only, &mut both] {
        c.metadata.annotations = Some(
            [(
                "volume.beta.kubernetes.io/storage-class".to_string(),
                "fast".to_string(),
            )]
            .into(),
        );
        claims.create(&PostParams::default(), c).await.unwrap();
    }
    for name in ["beta-only", "both"] {
        let c = bound(&sb, name, 60).await;
        let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
            .get(&c.spec.unwrap().volume_name.unwrap())
            .await
            .unwrap();
        assert_eq!(pv.spec.unwrap().storage_class_name.as_deref(), Some("fast"));
    }
    let jobs = jobs(&sb).await;
    assert_eq!(jobs.len(), 2);
    assert!(
        jobs.iter().all(
            |j| j.metadata.annotations.as_ref().unwrap()["flex-provisioner.io/storage-class"]
                == "fast"
        ),
        "every Job is the annotation's class's"
    );
}

/// Every field of `expected` is in `actual` with the same value (objects key by key, lists
/// element by element and of the same length); `actual` may hold more (what the API server
/// and the Job controller add). Returns the first path that differs.
fn contains(
    actual: &serde_json::Value,
    expected: &serde_json::Value,
    path: &str,
) -> Result<(), String> {
    use serde_json::Value;
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e.iter().try_for_each(|(k, v)| match a.get(k) {
            Some(av) => contains(av, v, &format!("{path}.{k}")),
            // The API server writes an empty string as no field at all (an env value).
            None if *v == Value::String(String::new()) => Ok(()),
            None => Err(format!("{path}.{k}: missing, expected {v}")),
        }),
        (Value::Array(a), Value::Array(e)) if a.len() == e.len() => a
            .iter()
            .zip(e)
            .enumerate()
            .try_for_each(|(i, (av, ev))| contains(av, ev, &format!("{path}[{i}]"))),
        _ if actual == expected => Ok(()),
        _ => Err(format!("{path}: {actual} where render prints {expected}")),
    }
}

/// What `render` prints for a claim is the Job the controller creates for it: the same
/// objects in, every field `render` shows is in the created Job with the same value, and
/// the two carry exactly the same annotations (the digest of the inputs among them).
#[tokio::test]
async fn render_prints_the_job_the_controller_creates() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::storage::v1::StorageClass;
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "fast",
        "Immediate",
        "make-pv",
        serde_json::json!({"dir": "/volumes/{{claim.namespace}}-{{claim.name}}", "team": "{{dnslabel claim.labels.team}}"}),
    )
    .await;
    let client = sb.client().unwrap();
    let mut object = claim_object("data", "fast");
    object.metadata.labels = Some([("team".to_owned(), "alpha".to_owned())].into());
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    bound(&sb, "data", 60).await;
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .get("data")
        .await
        .unwrap();
    let created = jobs_of(&sb, "provision").await;
    assert_eq!(created.len(), 1);
    let cm = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get("fast-config")
        .await
        .unwrap();
    let sc = Api::<StorageClass>::all(client.clone())
        .get("fast")
        .await
        .unwrap();
    let (rendered, _) = flex_provisioner::offline::render_objects(
        &cm,
        &sc,
        claim,
        None,
        flex_core::names::DEFAULT_PROVISIONER_NAME,
        1,
        options().job_ttl_seconds,
    )
    .unwrap();
    let expected = serde_json::to_value(&rendered).unwrap();
    let actual = serde_json::to_value::<&Job>(&created[0]).unwrap();
    if let Err(path) = contains(&actual, &expected, "job") {
        panic!("the created Job differs from render's: {path}");
    }
    assert_eq!(
        created[0].metadata.annotations, rendered.metadata.annotations,
        "the same annotations, the inputs' digest among them"
    );
}
