//! A populated cluster without provisioning each volume: claims bound to PVs of ours,
//! written straight into the sandbox's store. Shared by the restart tests and benchmarks.

use flex_provisioner::sandbox::{Sandbox, WriteCtx, resources};
use serde_json::json;

/// `n` claims of `class` in `default` named `<class>-<i>`, each bound to a PV of ours named
/// `pvc-<uid>`.
pub fn bound_claims(sb: &Sandbox, class: &str, n: usize) {
    let ctx = WriteCtx::manager("test");
    let claims = resources::find("", "v1", "persistentvolumeclaims").unwrap();
    let pvs = resources::find("", "v1", "persistentvolumes").unwrap();
    let mut made = Vec::with_capacity(n);
    // Claims first and volumes after, so the PV controller never searches thousands of
    // volumes for a match; then each claim names its volume and binds at once.
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
        sb.api
            .patch(
                claims,
                "default",
                name,
                "application/merge-patch+json",
                json!({"spec": {"volumeName": pv}}).to_string().as_bytes(),
                None,
                &ctx,
            )
            .unwrap();
    }
}

/// How many claims in `default` are bound, read from the store.
pub fn bound_count(sb: &Sandbox) -> usize {
    let claims = resources::find("", "v1", "persistentvolumeclaims").unwrap();
    let (items, _, _) = sb
        .api
        .store
        .list_page(claims, Some("default"), None, None, |c| {
            c["status"]["phase"].as_str() == Some("Bound")
        });
    items.len()
}
