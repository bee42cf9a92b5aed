//! A populated cluster without provisioning each volume: claims and PVs of ours written
//! straight into the sandbox's store, and bound by its PV controller. Shared by the restart
//! tests and benchmarks.

use kube_sandbox::{Sandbox, WriteCtx, resources};
use serde_json::json;

/// `n` claims of `class` in `default` named `<class>-<i>`, pending: (name, uid) of each.
/// With `volumes_for`, they are bound by the sandbox's PV controller, as in a cluster:
/// each claim gets its volumeName and the controller's annotations, both go Bound;
/// `bound_count` tells when it has.
pub fn pending_claims(sb: &Sandbox, class: &str, n: usize) -> Vec<(String, String)> {
    let ctx = WriteCtx::manager("test");
    let claims = resources::find("", "v1", "persistentvolumeclaims").unwrap();
    let mut made = Vec::with_capacity(n);
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
        let name = c["metadata"]["name"].as_str().unwrap().to_owned();
        made.push((name, c["metadata"]["uid"].as_str().unwrap().to_owned()));
    }
    made
}

/// A PV of ours for each of `claims` (name, uid), as the provisioner makes it once the
/// claim's Job succeeded (after `finished_jobs`, when the claims have Jobs: a volume older
/// than every Job of its claim is not one the provisioner made).
pub fn volumes_for(sb: &Sandbox, class: &str, claims: &[(String, String)]) {
    let ctx = WriteCtx::manager("test");
    let pvs = resources::find("", "v1", "persistentvolumes").unwrap();
    for (name, uid) in claims {
        let pv = format!("pvc-{uid}");
        sb.api
            .create(
                pvs,
                "",
                json!({"metadata": {"name": pv,
                         "labels": {"app.kubernetes.io/managed-by": "flex-provisioner",
                                    "flex-provisioner.io/claim-uid": uid},
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
        // The API server drops the status of what is created (as Kubernetes does): it is
        // written through the status subresource, as the Job controller and kubelet write it,
        // as a merge patch (the sandbox's Job controller may have written it meanwhile).
        let job_name = format!("provision-{uid}");
        let job = sb
            .api
            .create(
                jobs,
                ns,
                json!({"metadata": {"name": job_name, "labels": labels, "annotations": annotations},
                       "spec": {"ttlSecondsAfterFinished": 3600, "backoffLimit": 0,
                                "template": {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never",
                                    "containers": [{"name": "provisioner", "image": "bench-image"}]}}}}),
                &ctx,
            )
            .unwrap();
        let finished = json!({"status": {"succeeded": 1, "active": null, "ready": null,
            "startTime": now, "completionTime": now,
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                           {"type": "Complete", "status": "True"}]}});
        status_patch(sb, jobs, ns, &job_name, &finished);
        let job_uid = job["metadata"]["uid"].as_str().unwrap();
        let pod_name = format!("provision-{uid}-x");
        sb.api
            .create(
                pods,
                ns,
                json!({"metadata": {"name": pod_name, "labels": labels, "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name,
                                              "uid": job_uid, "controller": true}]},
                       "spec": {"restartPolicy": "Never", "nodeName": "retired-node",
                                "containers": [{"name": "provisioner", "image": "bench-image"}]}}),
                &ctx,
            )
            .unwrap();
        let succeeded = json!({"status": {"phase": "Succeeded", "containerStatuses": [{"name": "provisioner",
            "ready": false, "restartCount": 0, "image": "bench-image", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "message": format!("{{\"hostPath\":{{\"path\":\"/volumes/{pv}\"}}}}")}}}]}});
        status_patch(sb, pods, ns, &pod_name, &succeeded);
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

/// Writes `patch` (a merge patch of `status`) through the status subresource.
fn status_patch(
    sb: &Sandbox,
    rid: resources::Rid,
    ns: &str,
    name: &str,
    patch: &serde_json::Value,
) {
    let ctx = WriteCtx::manager("test");
    let body = serde_json::to_vec(patch).unwrap();
    sb.api
        .patch(
            rid,
            ns,
            name,
            "application/merge-patch+json",
            &body,
            Some("status"),
            &ctx,
        )
        .unwrap();
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
