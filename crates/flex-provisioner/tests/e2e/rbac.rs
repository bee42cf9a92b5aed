//! End to end on the sandbox with authentication and RBAC on: the controller runs with a
//! token of its own ServiceAccount holding exactly deploy/'s RBAC, the provisioner pods with
//! theirs, and a claim is provisioned, bound, released and deprovisioned.

use crate::common;

use std::time::Duration;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

async fn client_as(sb: &common::cluster::Cluster, ns: &str, name: &str) -> kube::Client {
    common::provisioning::client_as(sb.config(), ns, name).await
}

/// A sandbox with auth on, deploy/'s namespace, accounts and RBAC, and a class `fast`
/// whose Jobs run as the image account.
async fn deployed() -> common::cluster::Cluster {
    // `sandbox()` has auth on and installs deploy/'s namespaces, accounts, RBAC and policy.
    let sb = sandbox().await;
    let admin = sb.client().unwrap();
    let sc: StorageClass = serde_json::from_value(json!({"metadata": {"name": "fast"},
        "provisioner": flex_core::names::DEFAULT_PROVISIONER_NAME,
        "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}))
    .unwrap();
    Api::<StorageClass>::all(admin.clone())
        .create(&PostParams::default(), &sc)
        .await
        .unwrap();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "fast-config",
        "labels": {"type": "provisioner-config", "storage-class": "fast"}},
        "data": {"image": "make-pv", "retries": "0", "volume-sources": "hostPath",
                 "pv-creator": "image", "service-account-name": IMAGE_ACCOUNT}}))
    .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();

    sb
}

/// The controller as deployed: `client` (its own account's token), its leader Lease in its
/// namespace.
fn deployed_controller(client: kube::Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let result = flex_controller::controller::run(
            client,
            flex_controller::controller::Options {
                leader: Some(flex_controller::leader::LeaderOptions::new(
                    CONTROLLER_NS,
                    "flex-provisioner",
                    "rbac-test",
                )),
                ..options()
            },
        )
        .await;
        if let Err(e) = result {
            panic!("controller stopped: {e}");
        }
    })
}

#[tokio::test]
async fn the_controller_and_images_need_no_more_than_deploys_rbac() {
    let sb = deployed().await;
    let admin = sb.client().unwrap();
    // The controller's own account, with a leader Lease in its namespace as deployed.
    let controller_client = client_as(&sb, CONTROLLER_NS, "flex-provisioner").await;
    // Authorization is really on: what deploy/ does not grant is refused.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(controller_client.clone());
    let refused = secrets.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403 && s.message.contains(
            "User \"system:serviceaccount:flex-provisioner:flex-provisioner\" cannot list resource \"secrets\""
        )),
        "{refused:?}"
    );
    let writer = client_as(&sb, NS, IMAGE_ACCOUNT).await;
    let refused = Api::<ConfigMap>::namespaced(writer, NS)
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused:?}"
    );
    let run = deployed_controller(controller_client);

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), "default");
    claims
        .create(&PostParams::default(), &claim_object("data", "fast"))
        .await
        .unwrap();
    let claim = bound(&sb, "data", 60).await;
    let pv_name = claim.spec.unwrap().volume_name.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    // The image made the PV, which Kubernetes may bind before the controller verified it:
    // its bookkeeping follows.
    eventually(30, "the controller's bookkeeping on the PV", || async {
        pvs.get(&pv_name)
            .await
            .ok()?
            .metadata
            .finalizers?
            .contains(&"flex-provisioner.io/deprovision".to_string())
            .then_some(())
    })
    .await;
    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        60,
        "the released volume to be deprovisioned and removed",
        || async { pvs.get_opt(&pv_name).await.ok()?.is_none().then_some(()) },
    )
    .await;
    assert!(
        !run.is_finished(),
        "the controller is still running: {run:?}"
    );
    run.abort();
}

/// A permission the controller lacks is said on the claim (which permission, and where to
/// grant it), instead of a silent retry loop.
#[tokio::test]
async fn a_missing_permission_is_reported_on_the_claim() {
    let sb = deployed().await;
    let admin = sb.client().unwrap();
    let run = deployed_controller(client_as(&sb, CONTROLLER_NS, "flex-provisioner").await);
    // Wait until it leads and has synced, then take its namespace permissions away.
    eventually(30, "the controller to lead", || async {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(admin.clone(), CONTROLLER_NS);
        leases.get_opt("flex-provisioner").await.ok()?.map(|_| ())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), NS)
        .delete("flex-provisioner", &DeleteParams::default())
        .await
        .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &claim_object("data", "fast"))
        .await
        .unwrap();
    let message = wait_event(&sb, "data", "ProvisionerBlocked", "jobs", 60).await;
    assert!(
        message.contains("cannot create resource \"jobs\" in API group \"batch\" in the namespace \"flex-provisioner-config\""),
        "{message}"
    );
    assert!(message.contains("deploy/rbac.yaml"), "{message}");
    run.abort();
}

/// A controller run outside a pod keeps the default `--namespace` for its Lease; where that
/// namespace does not exist it stops at start with one line naming the flag, instead of
/// standing by forever.
#[tokio::test]
async fn a_missing_lease_namespace_stops_the_controller_at_start() {
    let sb = deployed().await;
    let client = client_as(&sb, CONTROLLER_NS, "flex-provisioner").await;
    let run = flex_controller::controller::run(
        client,
        flex_controller::controller::Options {
            leader: Some(flex_controller::leader::LeaderOptions::new(
                "no-such-namespace",
                "flex-provisioner",
                "lease-test",
            )),
            ..options()
        },
    );
    let err = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the controller stops at start")
        .expect_err("a missing lease namespace is an error");
    let text = err.to_string();
    // With deploy/'s RBAC the account has no Lease rights outside its namespace, and RBAC
    // answers before the namespace is looked up.
    assert!(
        text.contains("\"no-such-namespace\"") && text.contains("--namespace"),
        "{text}"
    );
    assert!(!text.contains('\n'), "one line: {text}");
    // An account that may write Leases everywhere (an admin's kubeconfig, as when the
    // controller is run by hand): the namespace's absence itself is named.
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        flex_controller::controller::run(
            sb.client().unwrap(),
            flex_controller::controller::Options {
                leader: Some(flex_controller::leader::LeaderOptions::new(
                    "no-such-namespace",
                    "flex-provisioner",
                    "lease-test",
                )),
                ..options()
            },
        ),
    )
    .await
    .expect("the controller stops at start")
    .expect_err("a missing lease namespace is an error");
    let text = err.to_string();
    assert!(
        text.contains("\"no-such-namespace\" of the leader Lease does not exist"),
        "{text}"
    );
}
