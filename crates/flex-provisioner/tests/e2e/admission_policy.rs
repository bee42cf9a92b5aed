//! Image mode (`pv-creator: image`) against deploy/'s admission policy and the controller's
//! verification: what the image accounts may create, the original proposal's PVs without
//! our annotation, and a wrong image PV that Kubernetes bound before it was judged.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

/// A PV of claim `claim` as an image would write it, with `spec_extra` and `meta_extra`
/// merged in.
fn image_pv(claim: &PersistentVolumeClaim, source: Value, meta_extra: Value) -> PersistentVolume {
    let uid = claim.metadata.uid.clone().unwrap();
    let mut pv = json!({"metadata": {"name": format!("pvc-{uid}")},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "fast", "persistentVolumeReclaimPolicy": "Delete",
                 "claimRef": {"namespace": "default", "name": claim.metadata.name.clone().unwrap(), "uid": uid}}});
    json_patch::merge(&mut pv["spec"], &source);
    json_patch::merge(&mut pv["metadata"], &meta_extra);
    serde_json::from_value(pv).unwrap()
}

/// The policy, evaluated by a real API server: the image account may create only its
/// claim's PV, of an allowed source type under an allowed directory, with nothing of the
/// controller's and no other provisioner's name; an admin may still do anything.
#[tokio::test]
async fn the_policy_lets_an_image_account_create_only_its_claims_volume() {
    let sb = sandbox().await;
    if !sb.is_real() {
        eprintln!(
            "the sandbox does not evaluate the policy's CEL: this test runs on a real control plane (FLEX_E2E_K8S)"
        );
        return;
    }
    let admin = sb.client().unwrap();
    let image = client_as(sb.config(), NS, IMAGE_ACCOUNT).await;
    let pvs: Api<PersistentVolume> = Api::all(image.clone());
    let refused = |r: Result<PersistentVolume, kube::Error>| match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Ok(pv) => panic!("created {:?}", pv.metadata.name),
        Err(e) => panic!("{e}"),
    };
    let mut n = 0;
    let mut fresh_claim = || {
        n += 1;
        let admin = admin.clone();
        async move {
            Api::<PersistentVolumeClaim>::namespaced(admin, "default")
                .create(
                    &PostParams::default(),
                    &claim_object(&format!("c{n}"), "fast"),
                )
                .await
                .unwrap()
        }
    };
    let inside = json!({"hostPath": {"path": "/var/lib/flex-provisioner/volumes/x"}});
    let cases: Vec<(Value, Value, &str)> = vec![
        (
            json!({"hostPath": {"path": "/"}}),
            json!({}),
            "is not below an allowed directory",
        ),
        (
            json!({"hostPath": {"path": "/etc"}}),
            json!({}),
            "is not below an allowed directory",
        ),
        (
            json!({"nfs": {"server": "10.0.0.9", "path": "/exports/k8s/x"}}),
            json!({}),
            "NFS server 10.0.0.9 is not allowed",
        ),
        (
            json!({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}),
            json!({}),
            "volume source csi is not allowed",
        ),
        (
            inside.clone(),
            json!({"finalizers": ["flex-provisioner.io/deprovision"]}),
            "may not carry the provisioner's finalizer",
        ),
        (
            inside.clone(),
            json!({"annotations": {"flex-provisioner.io/deprovision-spec": "{}"}}),
            "may not carry flex-provisioner.io annotations",
        ),
        (
            inside.clone(),
            json!({"annotations": {"pv.kubernetes.io/provisioned-by": "example.com/other"}}),
            "must be this provisioner's name",
        ),
    ];
    for (source, meta, message) in cases {
        let claim = fresh_claim().await;
        let (code, text) = refused(
            pvs.create(&PostParams::default(), &image_pv(&claim, source, meta))
                .await,
        );
        assert_eq!(code, 403, "{text}");
        assert!(text.contains(message), "want {message:?} in {text}");
    }
    // Another claim's name for the volume.
    let claim = fresh_claim().await;
    let mut misnamed = image_pv(&claim, inside.clone(), json!({}));
    misnamed.metadata.name = Some("pvc-someone-else".into());
    let (_, text) = refused(pvs.create(&PostParams::default(), &misnamed).await);
    assert!(
        text.contains("must be named pvc-<spec.claimRef.uid>"),
        "{text}"
    );

    // The original proposal's PV, with no provisioned-by, and one with ours: created.
    let seed = fresh_claim().await;
    let made = pvs
        .create(
            &PostParams::default(),
            &image_pv(&seed, inside.clone(), json!({})),
        )
        .await
        .expect("a seed-style PV without provisioned-by is created");
    let ours = fresh_claim().await;
    pvs.create(
        &PostParams::default(),
        &image_pv(
            &ours,
            json!({"hostPath": {"path": "/var/lib/flex-provisioner/volumes/y"}}),
            json!({"annotations": {"pv.kubernetes.io/provisioned-by": "flex-provisioner.io/job"}}),
        ),
    )
    .await
    .expect("a PV with our provisioned-by is created");
    // Never a change or a removal.
    let name = made.metadata.name.clone().unwrap();
    assert!(
        pvs.delete(&name, &DeleteParams::default()).await.is_err(),
        "the image account deletes no PV"
    );
    // The admin is not bound by it.
    let root_pv = image_pv(
        &fresh_claim().await,
        json!({"hostPath": {"path": "/"}}),
        json!({}),
    );
    Api::<PersistentVolume>::all(admin.clone())
        .create(&PostParams::default(), &root_pv)
        .await
        .expect("an admin's PV is not the policy's business");
    // Its parameters are what the admin edits: a prefix added there is allowed at once.
    Api::<ConfigMap>::namespaced(admin.clone(), NS)
        .patch(
            "flex-provisioner-image-volumes",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"path-prefixes": "/srv/volumes"}})),
        )
        .await
        .unwrap();
    let claim = fresh_claim().await;
    eventually(30, "the new prefix to be allowed", || async {
        pvs.create(
            &PostParams::default(),
            &image_pv(
                &claim,
                json!({"hostPath": {"path": "/srv/volumes/z"}}),
                json!({}),
            ),
        )
        .await
        .ok()
    })
    .await;
}

/// The original proposal's image writes its PV with no pv.kubernetes.io/provisioned-by:
/// the claim binds, and the controller verifies the PV and adds its own bookkeeping.
#[tokio::test]
async fn a_seed_style_image_pv_binds_and_gets_the_controllers_bookkeeping() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "seed", "Immediate", "seed-pv", json!({})).await;
    claim(&sb, "data", "seed").await;
    let bound = bound(&sb, "data", 60).await;
    let name = bound.spec.unwrap().volume_name.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let pv = eventually(
        30,
        "the controller's bookkeeping on the image's PV",
        || async {
            let pv = pvs.get(&name).await.ok()?;
            let done = pv
                .metadata
                .finalizers
                .as_ref()?
                .contains(&"flex-provisioner.io/deprovision".to_string())
                && pv
                    .metadata
                    .annotations
                    .as_ref()?
                    .get("pv.kubernetes.io/provisioned-by")
                    == Some(&"flex-provisioner.io/job".to_string());
            done.then_some(pv)
        },
    )
    .await;
    let record = format!("flex-record-{}", pv.metadata.uid.unwrap());
    eventually(30, "the volume's record", || async {
        Api::<ConfigMap>::namespaced(sb.client().unwrap(), NS)
            .get_opt(&record)
            .await
            .ok()?
    })
    .await;
    wait_event(&sb, "data", "ProvisioningSucceeded", &name, 30).await;
}

/// A wrong image PV that Kubernetes bound before the controller judged it (a real PV
/// controller binds a pre-bound PV at once; this image waits for it to make sure): the
/// claim and the PV get a Warning, the failure is counted, and the PV gets no finalizer and
/// no record, so nothing is ever run on its word.
#[tokio::test]
async fn a_wrong_image_pv_that_got_bound_is_reported_loudly() {
    let sb = sandbox().await;
    let (_c, addr) = controller_serving(&sb);
    class(
        &sb,
        "strict",
        "Immediate",
        "bound-wrong",
        json!({"volume-sources": "nfs"}),
    )
    .await;
    claim(&sb, "data", "strict").await;
    let name = bound(&sb, "data", 60)
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let m = wait_event(&sb, "data", "ProvisioningFailed", "did not verify", 60).await;
    assert!(m.contains("hostPath") && m.contains(&name), "{m}");
    let on_pv = eventually(30, "the warning on the PV", || async {
        events_about(&sb, &name)
            .await
            .into_iter()
            .find(|(r, m)| r == "ProvisioningFailed" && m.contains("did not verify"))
    })
    .await;
    assert!(
        on_pv.1.contains("an admin should inspect it"),
        "{}",
        on_pv.1
    );
    let metrics = http_get(addr, "/metrics").await.unwrap();
    assert!(
        metrics.contains(
            "controller_persistentvolumeclaim_provision_failed_total{class=\"strict\"} 1"
        ),
        "{metrics}"
    );
    let pv = Api::<PersistentVolume>::all(sb.client().unwrap())
        .get(&name)
        .await
        .unwrap();
    assert!(
        !pv.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"flex-provisioner.io/deprovision".to_string()),
        "no finalizer of ours on an unverified PV"
    );
    let records = Api::<ConfigMap>::namespaced(sb.client().unwrap(), NS)
        .get_opt(&format!("flex-record-{}", pv.metadata.uid.unwrap()))
        .await
        .unwrap();
    assert!(records.is_none(), "no record for an unverified PV");
    assert_eq!(
        jobs_of(&sb, "provision").await.len(),
        1,
        "no second attempt"
    );
}
