//! A burst of claims with the sandbox's controllers behind kube-controller-manager's client
//! rate limit (20 writes/s, burst 30): everything still binds, with one Job per claim and no
//! claim wrongly told its Job made no PersistentVolume.

use crate::common;

use std::time::Instant;

use common::provisioning::*;

const CLAIMS: usize = 100;

#[tokio::test]
async fn hundred_claims_bind_under_the_controller_manager_rate_limit() {
    let sb = sandbox_with(|o| kube_sandbox::SandboxOptions {
        controller_qps: Some((20.0, 30)),
        ..o
    })
    .await;
    let _c = controller(&sb);
    class(&sb, "bulk", "Immediate", "make-pv", serde_json::json!({})).await;
    let start = Instant::now();
    burst(&sb, "c", CLAIMS, "bulk").await;
    all_bound(&sb, CLAIMS, 120).await;
    eprintln!("{CLAIMS} claims bound in {:?}", start.elapsed());

    let by_claim = provision_jobs_by_claim(&sb).await;
    assert_eq!(by_claim.len(), CLAIMS, "a provision Job for every claim");
    let extra: Vec<(&String, usize)> = by_claim
        .iter()
        .filter(|(_, j)| j.len() != 1)
        .map(|(c, j)| (c, j.len()))
        .collect();
    assert!(extra.is_empty(), "exactly one Job per claim: {extra:?}");
    assert_eq!(volumes(&sb).await.len(), CLAIMS, "exactly one PV per claim");

    let wrong = events_saying(&sb, "created no PersistentVolume").await;
    assert!(wrong.is_empty(), "{wrong:?}");
}
