//! End to end on the sandbox: pending claim -> Job -> PV -> Bound, with failures, restarts
//! and a misbehaving API server.

mod common;

use common::provisioning::*;

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
    assert_eq!(
        ann["flex-provisioner.io/parameters"],
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
