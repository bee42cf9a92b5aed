//! A populated cluster without provisioning each volume: claims and PVs of ours written
//! straight into the sandbox's store, and bound by its PV controller. Shared by the restart
//! tests and benchmarks.

use flex_provisioner::sandbox::{Sandbox, WriteCtx, resources};
use serde_json::json;

/// `n` claims of `class` in `default` named `<class>-<i>`, each with a PV of ours named
/// `pvc-<uid>` whose claimRef names it, as the provisioner would have made it. The
/// sandbox's PV controller binds them, as in a cluster: each claim gets its volumeName and
/// the controller's annotations, both go Bound; `bound_count` tells when it has.
pub fn bound_claims(sb: &Sandbox, class: &str, n: usize) {
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
                         "annotations": {"pv.kubernetes.io/provisioned-by": flex_provisioner::names::DEFAULT_PROVISIONER_NAME},
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
