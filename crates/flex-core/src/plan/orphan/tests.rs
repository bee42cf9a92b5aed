//! The orphaned-report planner: when storage made for a deleted claim gets a PV, and when not.
use super::*;
use crate::names::LABEL_ACTION;
use serde_json::{Value, json};

fn decide(job: &Job, pods: &[&Pod], traces: Confirmed) -> OrphanStep {
    let read = OrphanRead {
        traces: Some(traces),
        ..OrphanRead::default()
    };
    plan_orphan(job, pods, &read).expect("decided from what was read")
}

const CONFIRMED: Confirmed = Confirmed {
    claim_leaving: true,
    pv_exists: false,
    deprovisioned: false,
    recorded: false,
};

fn job(creator: &str, reclaim: &str, sources: Option<&str>) -> Job {
    let template = json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pvc-u1", "finalizers": ["flex-provisioner.io/deprovision"]},
        "spec": {"claimRef": {"namespace": "a", "name": "data", "uid": "u1"}, "capacity": {"storage": "1Gi"},
                 "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": reclaim}});
    let mut annotations = json!({});
    if let Some(s) = sources {
        annotations[ANN_VOLUME_SOURCES] = json!(s);
        annotations[ANN_ALLOWED_VOLUMES] = json!(
            json!({"nfsServers": ["10.0.0.5"], "nfsPaths": ["/exports"], "secretNamespace": "cfg"})
                .to_string()
        );
    }
    serde_json::from_value(json!({
        "metadata": {"name": "provision-u1", "namespace": "cfg", "uid": "j1",
                     "labels": {LABEL_ACTION: "provision"}, "annotations": annotations},
        "spec": {"template": {"spec": {"containers": [{"name": "provisioner", "env": [
            {"name": "PV_CREATOR", "value": creator},
            {"name": "PV_TEMPLATE", "value": template.to_string()}]}]}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]}}))
    .unwrap()
}

fn pod(message: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "provision-u1", "uid": "j1"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "provisioner", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "message": message}}}]}}))
    .unwrap()
}

const NFS: &str = r#"{"nfs":{"server":"10.0.0.5","path":"/exports/pvc-u1"}}"#;

#[test]
fn a_report_for_a_deleted_claim_becomes_a_pv_to_deprovision() {
    let j = job("controller", "Delete", Some("nfs"));
    let p = pod(NFS);
    let OrphanStep::CreatePv(pv) = decide(&j, &[&p], CONFIRMED) else {
        panic!("a PV for the orphaned storage")
    };
    let v: Value = serde_json::to_value(&pv).unwrap();
    assert_eq!(v["metadata"]["name"], "pvc-u1");
    assert_eq!(v["spec"]["claimRef"]["uid"], "u1");
    assert_eq!(v["spec"]["nfs"]["path"], "/exports/pvc-u1");
    assert_eq!(
        v["metadata"]["finalizers"][0],
        "flex-provisioner.io/deprovision"
    );
}

#[test]
fn nothing_is_made_unless_the_api_server_confirmed_it_is_needed() {
    let j = job("controller", "Delete", Some("nfs"));
    let p = pod(NFS);
    for confirmed in [
        Confirmed {
            claim_leaving: false,
            ..CONFIRMED
        },
        Confirmed {
            pv_exists: true,
            ..CONFIRMED
        },
        Confirmed {
            deprovisioned: true,
            ..CONFIRMED
        },
        // A record made from this Job outlives the PV while the Job exists: the volume was
        // made (and perhaps retained and let go since), so it is never made again.
        Confirmed {
            recorded: true,
            ..CONFIRMED
        },
    ] {
        assert_eq!(
            decide(&j, &[&p], confirmed),
            OrphanStep::Nothing,
            "{confirmed:?}"
        );
    }
}

#[test]
fn only_succeeded_controller_mode_delete_jobs_are_candidates() {
    let p = pod(NFS);
    assert!(is_candidate(&job("controller", "Delete", Some("nfs"))));
    assert!(!is_candidate(&job("image", "Delete", Some("nfs"))));
    assert!(!is_candidate(&job("controller", "Retain", Some("nfs"))));
    let mut running = job("controller", "Delete", Some("nfs"));
    running.status = None;
    assert!(!is_candidate(&running));
    let mut deprovision = job("controller", "Delete", Some("nfs"));
    deprovision
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_ACTION.into(), "deprovision".into());
    assert!(!is_candidate(&deprovision));
    // Its PV was created once (and perhaps retained and deleted since): never again.
    let mut created = job("controller", "Delete", Some("nfs"));
    created
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::names::ANN_PV_CREATED.into(), "true".into());
    assert!(!is_candidate(&created));
    assert_eq!(decide(&created, &[&p], CONFIRMED), OrphanStep::Nothing);
}

#[test]
fn a_missing_report_is_awaited_and_a_bad_one_refused() {
    let j = job("controller", "Delete", Some("nfs"));
    assert_eq!(decide(&j, &[], CONFIRMED), OrphanStep::AwaitReport);
    // Nothing is decided before the API server said what names the storage; past the wait
    // the pods are read from it, and only its answer calls the report gone.
    let mut read = OrphanRead::default();
    assert_eq!(plan_orphan(&j, &[], &read), Err(Ask::Traces));
    read.traces = Some(CONFIRMED);
    read.report_wait_over = true;
    let namespace = j.metadata.namespace.clone().unwrap_or_default();
    assert_eq!(plan_orphan(&j, &[], &read), Err(Ask::Pods { namespace }));
    read.pods_confirmed = true;
    let Ok(OrphanStep::BadReport(why)) = plan_orphan(&j, &[], &read) else {
        panic!("the API server shows no report either")
    };
    assert!(why.contains("report is gone"), "{why}");
    let hostpath = pod(r#"{"hostPath":{"path":"/"}}"#);
    let OrphanStep::BadReport(why) = decide(&j, &[&hostpath], CONFIRMED) else {
        panic!("a source type the class did not allow")
    };
    assert!(why.contains("does not allow"), "{why}");
    // A Job that does not say what its class allowed allows nothing.
    let bare = job("controller", "Delete", None);
    let p = pod(NFS);
    assert!(matches!(
        decide(&bare, &[&p], CONFIRMED),
        OrphanStep::BadReport(_)
    ));
}

/// The orphan's PV is deprovisioned: made from a report outside what the class declared
/// when the Job was made (`local: /`, another server), it would hand the deprovision image a
/// volume that is not the class's. Refused, as a report of a live claim is.
#[test]
fn an_orphans_report_must_lie_inside_what_the_job_declared() {
    let j = job("controller", "Delete", Some("nfs,local"));
    for (report, says) in [
        (r#"{"local":{"path":"/"}}"#, "declares no allowed-paths"),
        (
            r#"{"nfs":{"server":"10.9.9.9","path":"/exports/pvc-u1"}}"#,
            "which is not in allowed-nfs-servers (10.0.0.5)",
        ),
        (
            r#"{"nfs":{"server":"10.0.0.5","path":"/exports/../etc"}}"#,
            "which is not below allowed-nfs-paths (/exports)",
        ),
    ] {
        let OrphanStep::BadReport(why) = decide(&j, &[&pod(report)], CONFIRMED) else {
            panic!("{report} is outside the declaration")
        };
        assert!(why.contains(says), "{why}");
        assert!(why.contains("remove what the image made by hand"), "{why}");
    }
    // A Job made before declarations existed declares nothing: its nfs report is refused.
    let mut older = job("controller", "Delete", Some("nfs"));
    older
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(ANN_ALLOWED_VOLUMES);
    let OrphanStep::BadReport(why) = decide(&older, &[&pod(NFS)], CONFIRMED) else {
        panic!("nothing declared")
    };
    assert!(why.contains("declares no allowed-nfs-servers"), "{why}");
    // Secret references must name the Job's own namespace, whatever the annotation says.
    let mut j = job("controller", "Delete", Some("csi"));
    j.metadata.annotations.as_mut().unwrap().insert(
        ANN_ALLOWED_VOLUMES.into(),
        json!({"csiDrivers": ["d.example.com"], "secretNamespace": "kube-system"}).to_string(),
    );
    let csi = |ns: &str| {
        pod(
            &json!({"csi": {"driver": "d.example.com", "volumeHandle": "v",
            "nodePublishSecretRef": {"name": "s", "namespace": ns}}})
            .to_string(),
        )
    };
    assert!(matches!(
        decide(&j, &[&csi("kube-system")], CONFIRMED),
        OrphanStep::BadReport(why) if why.contains("must name the config namespace cfg")
    ));
    assert!(matches!(
        decide(&j, &[&csi("cfg")], CONFIRMED),
        OrphanStep::CreatePv(_)
    ));
}
