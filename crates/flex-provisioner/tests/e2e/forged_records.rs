//! End to end on the sandbox: what a deprovision Job runs comes only from the record the
//! controller wrote in the config namespace, bound to the PV's uid. A decoy PV carrying
//! every annotation, label and finalizer of a real one gets no Job and a Warning; a recipe
//! rewritten on a real PV is ignored.

use crate::common;

use common::provisioning::*;
use common::sandbox::eventually;
use k8s_openapi::api::core::v1::{Event, PersistentVolume};
use kube::api::{Api, ListParams, Patch, PostParams};
use serde_json::json;

const DECOY: &str = "pvc-00000000-0000-0000-0000-000000000000";

#[tokio::test]
async fn a_decoy_pv_with_copied_records_never_gets_a_job() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    claim(&sb, "data", "fast").await;
    let bound = bound(&sb, "data", 30).await;
    let real_name = bound.spec.unwrap().volume_name.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    // Wait for the bookkeeping, so the copy carries everything a real volume of ours has.
    let real = eventually(10, "the real PV's finalizer", || async {
        let pv = pvs.get(&real_name).await.ok()?;
        pv.metadata
            .finalizers
            .as_ref()?
            .iter()
            .any(|f| f == "flex-provisioner.io/deprovision")
            .then_some(pv)
    })
    .await;
    let mut spec = real.spec.clone().unwrap();
    spec.claim_ref = Some(k8s_openapi::api::core::v1::ObjectReference {
        namespace: Some("default".into()),
        name: Some("nobody".into()),
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
        ..Default::default()
    });
    let decoy = PersistentVolume {
        metadata: kube::api::ObjectMeta {
            // Named after its claimRef's uid, as volumes of ours are: only the missing
            // record stops it.
            name: Some(DECOY.into()),
            annotations: real.metadata.annotations.clone(),
            labels: real.metadata.labels.clone(),
            finalizers: real.metadata.finalizers.clone(),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    pvs.create(&PostParams::default(), &decoy).await.unwrap();
    let events: Api<Event> = Api::all(sb.client().unwrap());
    let warning = eventually(20, "a Warning on the decoy", || async {
        events
            .list(&ListParams::default().fields(&format!("involvedObject.name={DECOY}")))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.type_.as_deref() == Some("Warning"))
            .and_then(|e| e.message)
    })
    .await;
    assert!(warning.contains("no deprovision record"), "{warning}");
    assert!(jobs_of(&sb, "deprovision").await.is_empty(), "nothing ran");
    assert!(pvs.get_opt(&real_name).await.unwrap().is_some());
}

#[tokio::test]
async fn a_recipe_rewritten_on_a_real_pv_is_ignored() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    claim(&sb, "data", "fast").await;
    let bound = bound(&sb, "data", 30).await;
    let pv_name = bound.spec.unwrap().volume_name.unwrap();
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    // The volume's record exists: it was verified and recorded.
    let records: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(sb.client().unwrap(), NS);
    let uid = pvs.get(&pv_name).await.unwrap().metadata.uid.unwrap();
    eventually(10, "the real PV's record", || async {
        records
            .get_opt(&format!("flex-record-{uid}"))
            .await
            .ok()?
            .map(|_| ())
    })
    .await;
    let evil = json!({"namespace": "kube-system", "config": "x/y", "image": "evil:1",
        "serviceAccount": "flex-provisioner", "timeoutSeconds": 60, "retries": 0,
        "permanentExitCodes": []})
    .to_string();
    pvs.patch(
        &pv_name,
        &Default::default(),
        &Patch::Merge(
            &json!({"metadata": {"annotations": {"flex-provisioner.io/deprovision-spec": evil}}}),
        ),
    )
    .await
    .unwrap();
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        sb.client().unwrap(),
        "default",
    )
    .delete("data", &Default::default())
    .await
    .unwrap();
    eventually(30, "the PV to be deprovisioned and removed", || async {
        pvs.get_opt(&pv_name).await.unwrap().is_none().then_some(())
    })
    .await;
    let jobs = jobs_of(&sb, "deprovision").await;
    assert_eq!(jobs.len(), 1);
    let pod = jobs[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("make-pv"),
        "the recorded image"
    );
    assert_ne!(
        pod.service_account_name.as_deref(),
        Some("flex-provisioner")
    );
    assert_eq!(jobs[0].metadata.namespace.as_deref(), Some(NS));
    // The record outlives its PV while the Job that made the volume exists (it tells the
    // orphan check that this Job's volume was made), then goes with it (garbage collection
    // through its owner references, as the Job's TTL would remove the Job).
    let records: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(sb.client().unwrap(), NS);
    let kept = records
        .list(&ListParams::default().labels("flex-provisioner.io/record=true"))
        .await
        .unwrap()
        .items;
    assert_eq!(kept.len(), 1, "kept while its Job exists");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(sb.client().unwrap(), NS);
    jobs.delete_collection(
        &kube::api::DeleteParams::background(),
        &ListParams::default().labels("flex-provisioner.io/action=provision"),
    )
    .await
    .unwrap();
    eventually(
        20,
        "the record to be collected with its PV and Job",
        || async {
            records
                .list(&ListParams::default().labels("flex-provisioner.io/record=true"))
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

/// `flex-provisioner.io/deprovisioned` written on a volume in use by anyone who may update
/// PVs: nothing changes (our finalizer stays), and once the claim is deleted the volume is
/// deprovisioned as any other, by one Job, instead of being let go with its storage.
#[tokio::test]
async fn a_forged_deprovisioned_mark_changes_nothing() {
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    claim(&sb, "data", "fast").await;
    let name = bound(&sb, "data", 30)
        .await
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let has_finalizer = |pv: &PersistentVolume| {
        pv.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "flex-provisioner.io/deprovision")
    };
    eventually(30, "the PV's finalizer", || async {
        has_finalizer(&pvs.get(&name).await.ok()?).then_some(())
    })
    .await;
    pvs.patch(
        &name,
        &Default::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"flex-provisioner.io/deprovisioned": "true"}}}),
        ),
    )
    .await
    .unwrap();
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let pv = pvs.get(&name).await.expect("the PV is kept");
        assert!(has_finalizer(&pv), "our finalizer stays");
        assert!(pv.metadata.deletion_timestamp.is_none());
    }
    kube::api::Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        sb.client().unwrap(),
        "default",
    )
    .delete("data", &Default::default())
    .await
    .unwrap();
    eventually(60, "the volume to be deprovisioned and removed", || async {
        pvs.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(jobs_of(&sb, "deprovision").await.len(), 1);
}

/// Four hundred PVs of 100 KB made with the image account's token, each named as an image
/// names its claim's volume, with this provisioner's name in `provisioned-by` and bound to
/// a claim that does not exist (what deploy/'s admission policy lets that account create):
/// none is verified, so the cache keeps a bounded record of each, and they cost the
/// controller nothing: no event, no Job, no record; a claim of a real class made among
/// them binds.
#[tokio::test]
async fn forged_volumes_of_the_image_account_cost_nothing() {
    use futures::StreamExt;
    const FORGED: usize = 400;
    let sb = sandbox().await;
    let _c = controller(&sb);
    class(&sb, "fast", "Immediate", "make-pv", json!({})).await;
    let writer = if sb.is_real() {
        client_as(sb.config(), NS, IMAGE_ACCOUNT).await
    } else {
        sb.client().unwrap()
    };
    let pvs: Api<PersistentVolume> = Api::all(writer);
    let filler = "f".repeat(100 * 1024);
    let names: Vec<String> = (0..FORGED)
        .map(|i| format!("pvc-00000000-0000-0000-0000-{i:012}"))
        .collect();
    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(16, |(i, name)| {
            let (pvs, filler) = (pvs.clone(), filler.clone());
            async move {
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": name,
                        "annotations": {"pv.kubernetes.io/provisioned-by": flex_core::names::DEFAULT_PROVISIONER_NAME, "filler": filler}},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": "fast", "persistentVolumeReclaimPolicy": "Delete",
                             "hostPath": {"path": format!("/var/lib/flex-provisioner/volumes/f{i}")},
                             "claimRef": {"namespace": "default", "name": format!("nobody-{i}"),
                                          "uid": name.trim_start_matches("pvc-")}}}))
                .unwrap();
                pvs.create(&PostParams::default(), &pv).await.unwrap();
            }
        })
        .await;
    claim(&sb, "real", "fast").await;
    bound(&sb, "real", 120).await;
    // The PV controller releases each forged volume (its claim does not exist): what the
    // controller used to answer with reads and a warning.
    let admin_pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    eventually(120, "the forged volumes to be released", || async {
        let released = admin_pvs
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|pv| names.contains(pv.metadata.name.as_ref().unwrap()))
            .filter(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released"))
            .count();
        (released == FORGED).then_some(())
    })
    .await;
    // Time for the controller to have answered them, had it answered: another claim goes
    // through the same watches after them.
    claim(&sb, "after", "fast").await;
    bound(&sb, "after", 120).await;
    let events: Api<Event> = Api::all(sb.client().unwrap());
    let about_forged: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| names.contains(e.involved_object.name.as_ref().unwrap_or(&String::new())))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        about_forged.is_empty(),
        "{} events about forged volumes, the first: {:?}",
        about_forged.len(),
        about_forged.first()
    );
    assert!(jobs_of(&sb, "deprovision").await.is_empty(), "nothing ran");
}
