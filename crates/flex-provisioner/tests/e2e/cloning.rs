//! End to end on the sandbox: which data sources a class serves, and what its Job gets.

use crate::common;

use common::provisioning::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};
use serde_json::json;

async fn claim_from(
    sb: &common::cluster::Cluster,
    name: &str,
    class: &str,
    source: serde_json::Value,
) {
    let mut c = claim_object(name, class);
    c.spec.as_mut().unwrap().data_source_ref = Some(serde_json::from_value(source).unwrap());
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(&PostParams::default(), &c)
        .await
        .unwrap();
}

fn env(job: &Job, name: &str) -> Option<String> {
    job.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

async fn job_of(sb: &common::cluster::Cluster, claim: &str) -> Option<Job> {
    let uid = Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .get(claim)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    jobs_of(sb, "provision")
        .await
        .into_iter()
        .find(|j| j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/claim-uid"] == uid)
}

#[tokio::test]
async fn a_clone_from_a_class_that_does_not_opt_in_is_refused_with_no_job() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "plain", "Immediate", "make-pv", json!({})).await;
    claim(&sb, "data", "plain").await;
    bound(&sb, "data", 60).await;
    claim_from(
        &sb,
        "copy",
        "plain",
        json!({"kind": "PersistentVolumeClaim", "name": "data"}),
    )
    .await;
    let m = wait_event(&sb, "copy", "ProvisioningFailed", "data-sources", 60).await;
    assert!(
        m.contains("asks for data from PersistentVolumeClaim data")
            && m.contains("lists no `PersistentVolumeClaim` in data-sources"),
        "{m}"
    );
    assert!(
        job_of(&sb, "copy").await.is_none(),
        "no Job for a refused clone"
    );
}

#[tokio::test]
async fn a_clone_waits_for_its_source_and_gets_it() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(
        &sb,
        "clones",
        "Immediate",
        "make-pv",
        json!({"data-sources": "PersistentVolumeClaim"}),
    )
    .await;
    // The source does not exist yet: told, no Job; once it is bound, the clone starts.
    claim_from(
        &sb,
        "copy",
        "clones",
        json!({"kind": "PersistentVolumeClaim", "name": "data"}),
    )
    .await;
    let m = wait_event(&sb, "copy", "ProvisioningFailed", "does not exist", 60).await;
    assert!(
        m.contains("the source claim default/data does not exist"),
        "{m}"
    );
    assert!(job_of(&sb, "copy").await.is_none());
    claim(&sb, "data", "clones").await;
    let source = bound(&sb, "data", 60).await;
    bound(&sb, "copy", 120).await;
    let job = job_of(&sb, "copy").await.unwrap();
    let pv: serde_json::Value =
        serde_json::from_str(&env(&job, "SOURCE_PV_JSON").unwrap()).unwrap();
    assert_eq!(
        pv["metadata"]["name"],
        source.spec.unwrap().volume_name.unwrap()
    );
    assert!(env(&job, "SOURCE_PARAMETERS").is_some());
    assert!(env(&job, "DATA_SOURCE_JSON").is_none());
}

/// Class `restores`, whose claims may name Leases (standing in for an admin's backup
/// objects) as their data source.
async fn restores_from_leases(sb: &common::cluster::Cluster) {
    let listed = json!({"data-sources": "coordination.k8s.io/Lease"});
    class(sb, "restores", "Immediate", "make-pv", listed).await;
}

/// An admin's own kind (here a Lease stands in for a backup object): the Job gets the
/// object, once the admin lets the controller read that kind.
#[tokio::test]
async fn an_admins_kind_listed_by_the_class_reaches_the_job_as_json() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    restores_from_leases(&sb).await;
    let admin = sb.client().unwrap();
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "backup-7", "namespace": "default"}, "spec": {"holderIdentity": "nightly"}});
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(lease).unwrap(),
        )
        .await
        .unwrap();
    claim_from(
        &sb,
        "restored",
        "restores",
        json!({"apiGroup": "coordination.k8s.io", "kind": "Lease", "name": "backup-7"}),
    )
    .await;
    // deploy/ grants the controller nothing on Leases outside its namespace: told, no Job.
    let m = wait_event(&sb, "restored", "ProvisioningFailed", "may not read it", 60).await;
    assert!(
        m.contains("grants it get on coordination.k8s.io/Lease"),
        "{m}"
    );
    let grant = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-backups", "namespace": "default"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read-backups", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-backups"},
        "subjects": [{"kind": "ServiceAccount", "name": "flex-provisioner", "namespace": CONTROLLER_NS}]});
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(grant).unwrap(),
        )
        .await
        .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin, "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding).unwrap(),
        )
        .await
        .unwrap();
    bound(&sb, "restored", 120).await;
    let job = job_of(&sb, "restored").await.unwrap();
    let object: serde_json::Value =
        serde_json::from_str(&env(&job, "DATA_SOURCE_JSON").unwrap()).unwrap();
    assert_eq!(object["spec"]["holderIdentity"], "nightly");
    assert_eq!(object["metadata"]["name"], "backup-7");
    assert!(env(&job, "SOURCE_PV_JSON").is_none());
}

/// A clone's source is not deprovisioned while the clone's Job copies from it, even when
/// its claim is deleted meanwhile; it is once the copy is done.
#[tokio::test]
async fn a_source_is_not_deprovisioned_while_a_clone_copies_from_it() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "plain", "Immediate", "make-pv", json!({})).await;
    class(
        &sb,
        "slow-clones",
        "Immediate",
        "slow",
        json!({"data-sources": "PersistentVolumeClaim"}),
    )
    .await;
    claim(&sb, "data", "plain").await;
    let source_pv = bound(&sb, "data", 60)
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    claim_from(
        &sb,
        "copy",
        "slow-clones",
        json!({"kind": "PersistentVolumeClaim", "name": "data"}),
    )
    .await;
    let clone_job = common::sandbox::eventually(60, "the clone's Job", || async {
        job_of(&sb, "copy").await
    })
    .await;
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .delete("data", &Default::default())
        .await
        .unwrap();
    let deprovisions_of_source = || async {
        jobs_of(&sb, "deprovision")
            .await
            .into_iter()
            .filter(|j| {
                j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/volume"] == source_pv
            })
            .count()
    };
    // The clone's pod sleeps 2 s before it reports: look while it runs.
    let jobs: Api<Job> = Api::namespaced(sb.client().unwrap(), NS);
    let mut looked_while_running = 0;
    loop {
        let running = !succeeded(
            &jobs
                .get(clone_job.metadata.name.as_deref().unwrap())
                .await
                .unwrap(),
        );
        if !running {
            break;
        }
        assert_eq!(
            deprovisions_of_source().await,
            0,
            "the source was deprovisioned under a running clone"
        );
        looked_while_running += 1;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(looked_while_running > 0, "the clone's Job was seen running");
    bound(&sb, "copy", 60).await;
    common::sandbox::eventually(
        60,
        "the source to be deprovisioned once the copy is done",
        || async { (deprovisions_of_source().await == 1).then_some(()) },
    )
    .await;
}

/// Claims naming objects of a listed kind that never come: each is looked at less and less
/// often, and the kind is discovered once for all of them, so a user's claims cannot spend
/// the controller's request budget on reads (every look at such a claim reads the API
/// server, and the budget is shared by every claim).
#[tokio::test]
async fn claims_naming_objects_that_never_come_are_read_less_and_less_often() {
    const CLAIMS: usize = 10;
    const WATCHED: std::time::Duration = std::time::Duration::from_secs(60);
    let sb = sandbox().await;
    let reads = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let noted = reads.clone();
    let note = tower::util::MapRequestLayer::new(move |r: http::Request<kube::client::Body>| {
        if r.method() == http::Method::GET && r.uri().path().contains("coordination.k8s.io") {
            noted.lock().unwrap().push(r.uri().path().to_owned());
        }
        r
    });
    let mut config = config_as(sb.config(), CONTROLLER_NS, "flex-provisioner").await;
    config.default_retry = false;
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&note)
        .build();
    let _c = controller_on(client, options());
    restores_from_leases(&sb).await;
    for i in 0..CLAIMS {
        claim_from(
            &sb,
            &format!("waits-{i}"),
            "restores",
            json!({"apiGroup": "coordination.k8s.io", "kind": "Lease", "name": format!("never-{i}")}),
        )
        .await;
    }
    let m = wait_event(&sb, "waits-0", "ProvisioningFailed", "cannot provision", 60).await;
    assert!(m.contains("Lease never-0"), "{m}");
    tokio::time::sleep(WATCHED).await;
    let reads = reads.lock().unwrap().clone();
    let discovery = reads.iter().filter(|p| !p.contains("/namespaces/")).count();
    let per_claim: Vec<usize> = (0..CLAIMS)
        .map(|i| {
            let path = format!("/leases/never-{i}");
            reads.iter().filter(|p| p.ends_with(&path)).count()
        })
        .collect();
    // Looked at every 5 s, a claim would be read 12 times or more in this minute; with the
    // recheck growing to half the time waited, at about 0, 5, 10, 15, 22, 34 and 51 s.
    assert!(
        per_claim.iter().all(|n| (1..=9).contains(n)),
        "reads of each claim's source in {WATCHED:?}: {per_claim:?}"
    );
    // The group and its version, once (not again for every look at every claim).
    assert!(
        discovery <= 2,
        "discovery requests: {discovery} ({:?})",
        reads
            .iter()
            .filter(|p| !p.contains("/namespaces/"))
            .collect::<Vec<_>>()
    );
}
