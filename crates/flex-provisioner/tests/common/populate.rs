//! A populated cluster without provisioning each volume: claims and PVs of ours written
//! straight into the sandbox's store, and bound by its PV controller. Shared by the restart
//! tests and benchmarks.

use kube_sandbox::{Sandbox, WriteCtx, resources};
use serde_json::json;

/// `n` claims of `class` in `default` named `<class>-<i>`, each with a PV of ours named
/// `pvc-<uid>` whose claimRef names it, as the provisioner would have made it. The
/// sandbox's PV controller binds them, as in a cluster: each claim gets its volumeName and
/// the controller's annotations, both go Bound; `bound_count` tells when it has.
pub fn bound_claims(sb: &Sandbox, class: &str, n: usize) -> Vec<(String, String)> {
    let ctx = WriteCtx::manager("test");
    let claims = resources::find("", "v1", "persistentvolumeclaims").unwrap();
    let pvs = resources::find("", "v1", "persistentvolumes").unwrap();
    let mut made = Vec::with_capacity(n);
    // Claims first and volumes after, as provisioning goes: each volume then finds its
    // claim waiting.
    for i in 0..n {
        let c = sb
            .api
            .create(
                claims,
                "default",
                json!({"metadata": {"name": format!("{class}-{i:05}")},
                       "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}}}}),
                &ctx,
            )
            .unwrap();
        made.push(c);
    }
    for c in &made {
        let name = c["metadata"]["name"].as_str().unwrap();
        let uid = c["metadata"]["uid"].as_str().unwrap();
        let pv = format!("pvc-{uid}");
        sb.api
            .create(
                pvs,
                "",
                json!({"metadata": {"name": pv,
                         "annotations": {"pv.kubernetes.io/provisioned-by": flex_core::names::DEFAULT_PROVISIONER_NAME},
                         "finalizers": ["flex-provisioner.io/deprovision"]},
                       "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
                                "hostPath": {"path": format!("/volumes/{pv}")},
                                "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                             "namespace": "default", "name": name, "uid": uid}}}),
                &ctx,
            )
            .unwrap();
    }
    made.iter()
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap().to_owned(),
                c["metadata"]["uid"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// What provisioning `claims` (name, uid) of `class` in `default` left in config namespace
/// `ns` while their Jobs are kept for their TTL: each claim's finished Job, its Succeeded
/// pod and its volume's deprovision record, as the controller and the Job controller make
/// them.
pub fn finished_jobs(sb: &Sandbox, ns: &str, class: &str, claims: &[(String, String)]) {
    let ctx = WriteCtx::manager("test");
    let jobs = resources::find("batch", "v1", "jobs").unwrap();
    let pods = resources::find("", "v1", "pods").unwrap();
    let config_maps = resources::find("", "v1", "configmaps").unwrap();
    // Finished half an hour ago: their TTL (an hour) keeps them, and their success was
    // announced long since.
    let now = (jiff::Timestamp::now() - jiff::SignedDuration::from_mins(30)).to_string();
    for (name, uid) in claims {
        let pv = format!("pvc-{uid}");
        let labels = json!({"app.kubernetes.io/managed-by": "flex-provisioner",
            "flex-provisioner.io/action": "provision", "flex-provisioner.io/claim-uid": uid,
            "flex-provisioner.io/volume": pv, "flex-provisioner.io/attempt": "1"});
        let annotations = json!({"flex-provisioner.io/claim": format!("default/{name}"),
            "flex-provisioner.io/storage-class": class});
        let job = sb
            .api
            .create(
                jobs,
                ns,
                json!({"metadata": {"name": format!("provision-{uid}"), "labels": labels, "annotations": annotations},
                       "spec": {"ttlSecondsAfterFinished": 3600, "backoffLimit": 0,
                                "template": {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never",
                                    "containers": [{"name": "provisioner", "image": "bench-image"}]}}},
                       "status": {"succeeded": 1, "startTime": now, "completionTime": now,
                                  "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                                 {"type": "Complete", "status": "True"}]}}),
                &ctx,
            )
            .unwrap();
        let job_uid = job["metadata"]["uid"].as_str().unwrap();
        sb.api
            .create(
                pods,
                ns,
                json!({"metadata": {"name": format!("provision-{uid}-x"), "labels": labels, "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": format!("provision-{uid}"),
                                              "uid": job_uid, "controller": true}]},
                       "spec": {"restartPolicy": "Never", "nodeName": "retired-node",
                                "containers": [{"name": "provisioner", "image": "bench-image"}]},
                       "status": {"phase": "Succeeded", "containerStatuses": [{"name": "provisioner", "ready": false,
                           "restartCount": 0, "image": "bench-image", "imageID": "",
                           "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                               "message": format!("{{\"hostPath\":{{\"path\":\"/volumes/{pv}\"}}}}")}}}]}}),
                &ctx,
            )
            .unwrap();
        sb.api
            .create(
                config_maps,
                ns,
                json!({"metadata": {"name": format!("flex-record-{uid}"),
                         "labels": {"flex-provisioner.io/record": "true", "flex-provisioner.io/volume": pv}},
                       "data": {"volume": pv, "image": "bench-image", "parameters": "{}"}}),
                &ctx,
            )
            .unwrap();
    }
}

/// How many claims in `default` are bound, read from the store.
pub fn bound_count(sb: &Sandbox) -> usize {
    let claims = resources::find("", "v1", "persistentvolumeclaims").unwrap();
    // Picked, not listed: a list copies every bound claim, and this is polled.
    sb.api
        .store
        .pick(claims, |c| {
            (c["metadata"]["namespace"] == "default" && c["status"]["phase"] == "Bound")
                .then_some(())
        })
        .len()
}
