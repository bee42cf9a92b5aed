//! End to end on the sandbox: after provisioning, a failure, and deprovisioning, the
//! `controller_*` and `flex_provisioner_*` metrics scraped from `/metrics` count exactly
//! what happened.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::Api;
use serde_json::json;

/// The value of one sample line, e.g. `metric{class="fast"}`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_count_what_happened() {
    let sb = sandbox().await;
    let (_c, addr) = controller_serving(&sb);
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    class(&sb, "broken", "Immediate", "perm", json!({})).await;
    class(
        &sb,
        "typo",
        "Immediate",
        "make-pv",
        json!({"retries": "many"}),
    )
    .await;
    for name in ["a", "b", "c"] {
        claim(&sb, name, "fast").await;
    }
    claim(&sb, "never", "broken").await;
    claim(&sb, "blocked", "typo").await;
    for name in ["a", "b", "c"] {
        bound(&sb, name, 30).await;
    }
    wait_event(&sb, "never", "ProvisioningFailed", "permanent", 30).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    for name in ["a", "b"] {
        claims.delete(name, &Default::default()).await.unwrap();
    }
    let scrape = || async { http_get(addr, "/metrics").await.unwrap_or_default() };
    let m = eventually(30, "two deprovisions counted", || async {
        let m = scrape().await;
        (sample(
            &m,
            "controller_persistentvolume_delete_total{class=\"fast\"}",
        ) == Some(2.0))
        .then_some(m)
    })
    .await;
    let value = |series: &str| sample(&m, series);
    assert_eq!(
        value("controller_persistentvolumeclaim_provision_total{class=\"fast\"}"),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        value("controller_persistentvolumeclaim_provision_duration_seconds_count{class=\"fast\"}"),
        Some(3.0)
    );
    assert_eq!(
        value("controller_persistentvolumeclaim_provision_failed_total{class=\"broken\"}"),
        Some(1.0),
        "one failed attempt, not retried (permanent)"
    );
    assert_eq!(
        value("controller_persistentvolume_delete_duration_seconds_count{class=\"fast\"}"),
        Some(2.0)
    );
    assert_eq!(
        value("controller_persistentvolume_delete_failed_total{class=\"fast\"}"),
        None,
        "no failed deprovision"
    );
    assert!(
        value("flex_provisioner_config_errors_total{class=\"typo\"}").is_some_and(|v| v >= 1.0),
        "{m}"
    );
    assert_eq!(
        value("controller_persistentvolumeclaim_provision_total{class=\"typo\"}"),
        None
    );
}
