//! The expand controller of kube-controller-manager (pkg/controller/volume/expand), in what
//! a resizer outside the control plane sees of it. It looks at a bound claim when it is
//! first seen, and again when its storage request or its status capacity grows; if the
//! request is above the status capacity it hands the claim over:
//!
//! - a volume of an in-tree type migrated to CSI (GCE PD, AWS EBS, Azure Disk and File,
//!   Cinder, vSphere, Portworx): a Normal `ExternalExpanding` event naming the in-tree
//!   plugin, and the claim annotated `volume.kubernetes.io/storage-resizer: <CSI driver>`;
//! - any other volume (CSI, hostPath, local, NFS...): no plugin of the controller can expand
//!   it, so a Warning `ExternalExpanding` event "waiting for an external controller to expand
//!   this PVC", and no annotation: the resizer recognises its claims by itself (a CSI
//!   resizer by the volume's `spec.csi.driver`).
//!
//! Events are recorded as component `volume_expand`. A claim whose volume is missing or not
//! bound back to it is tried again on the next resync, as the real controller requeues it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Feed, Throttle, name_of, ns_of, rid, uid_of};
use crate::api::Api;
use crate::store::EventType;
use kube_rules::quantity::parse_bytes;

const COMPONENT: &str = "volume_expand";
const REASON: &str = "ExternalExpanding";
const RESIZER_ANNOTATION: &str = "volume.kubernetes.io/storage-resizer";
/// Set on volumes by in-tree expansion, which no longer runs; its presence alone makes the
/// real controller look at the claim.
const PRE_RESIZE_ANNOTATION: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";

/// In-tree volume types migrated to CSI: (PV source field, in-tree plugin, CSI driver).
const MIGRATED: [(&str, &str, &str); 7] = [
    (
        "gcePersistentDisk",
        "kubernetes.io/gce-pd",
        "pd.csi.storage.gke.io",
    ),
    (
        "awsElasticBlockStore",
        "kubernetes.io/aws-ebs",
        "ebs.csi.aws.com",
    ),
    ("cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org"),
    (
        "azureDisk",
        "kubernetes.io/azure-disk",
        "disk.csi.azure.com",
    ),
    (
        "azureFile",
        "kubernetes.io/azure-file",
        "file.csi.azure.com",
    ),
    (
        "vsphereVolume",
        "kubernetes.io/vsphere-volume",
        "csi.vsphere.vmware.com",
    ),
    (
        "portworxVolume",
        "kubernetes.io/portworx-volume",
        "pxd.portworx.com",
    ),
];

/// Storage amounts a claim's request and capacity are compared by (absent: zero).
fn storage(v: &Value) -> u64 {
    match v {
        Value::String(s) => parse_bytes(s).map_or(0, |b| b.0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn request(claim: &Value) -> u64 {
    storage(&claim["spec"]["resources"]["requests"]["storage"])
}

fn capacity(claim: &Value) -> u64 {
    storage(&claim["status"]["capacity"]["storage"])
}

fn bound(claim: &Value) -> bool {
    claim["status"]["phase"].as_str() == Some("Bound")
}

struct Expand {
    claims: usize,
    volumes: usize,
    /// Per claim uid: (request, capacity) when last seen, to tell growth from other changes.
    seen: HashMap<String, (u64, u64)>,
    /// Claims to try again: (namespace, name).
    retry: HashSet<(String, String)>,
    throttle: Throttle,
}

impl Expand {
    /// The informer's handlers: a bound claim is queued when first seen, and when its
    /// request or status capacity grows.
    fn wants(&mut self, claim: &Value) -> bool {
        self.wants_seen(
            uid_of(claim),
            (request(claim), capacity(claim)),
            bound(claim),
        )
    }

    /// `wants` from what it reads of a claim: uid, (request, capacity), and whether bound.
    fn wants_seen(&mut self, uid: &str, now: (u64, u64), bound: bool) -> bool {
        // Updated in place when known: a resync looks at every claim.
        let before = match self.seen.get_mut(uid) {
            Some(seen) => Some(std::mem::replace(seen, now)),
            None => self.seen.insert(uid.to_owned(), now),
        };
        bound
            && match before {
                None => true,
                Some((req, cap)) => now.0 > req || now.1 > cap,
            }
    }

    /// syncHandler; false when the claim is to be tried again.
    async fn sync(&self, api: &Api, claim: &Value) -> bool {
        let volume_name = claim["spec"]["volumeName"].as_str().unwrap_or_default();
        let Some(pv) = api.store.get(self.volumes, "", volume_name) else {
            return false;
        };
        let claim_ref = &pv["spec"]["claimRef"];
        if claim_ref["namespace"].as_str() != Some(ns_of(claim))
            || claim_ref["uid"].as_str() != Some(uid_of(claim))
        {
            return false;
        }
        let pre_resize = pv["metadata"]["annotations"][PRE_RESIZE_ANNOTATION].is_string();
        if request(claim) <= capacity(claim) && !pre_resize {
            return true;
        }
        let migrated = MIGRATED
            .iter()
            .find(|(field, _, _)| pv["spec"].get(*field).is_some_and(|v| !v.is_null()));
        match migrated {
            Some((_, plugin, driver)) => {
                let message = format!(
                    "CSI migration enabled for {plugin}; waiting for external resizer to expand the pvc"
                );
                self.throttle
                    .event(api, claim, "Normal", REASON, &message, COMPONENT)
                    .await;
                let driver = (*driver).to_owned();
                self.throttle
                    .modify(api, self.claims, ns_of(claim), name_of(claim), |c| {
                        if !c["metadata"]["annotations"].is_object() {
                            c["metadata"]["annotations"] = json!({});
                        }
                        c["metadata"]["annotations"][RESIZER_ANNOTATION] = json!(driver);
                    })
                    .await;
            }
            None => {
                self.throttle
                    .event(
                        api,
                        claim,
                        "Warning",
                        REASON,
                        "waiting for an external controller to expand this PVC",
                        COMPONENT,
                    )
                    .await;
            }
        }
        true
    }

    async fn reconcile(&mut self, api: &Api, changes: &[Arc<crate::store::Change>]) {
        // The queue: claims by (namespace, name).
        let mut due: Vec<(String, String)> = Vec::new();
        if changes.is_empty() {
            // A resync (or a lagging feed): growth since the last look still counts. What
            // it reads is picked out of the store, not copied with every claim.
            let claims = api.store.pick(self.claims, |c| {
                Some((
                    ns_of(c).to_owned(),
                    name_of(c).to_owned(),
                    uid_of(c).to_owned(),
                    (request(c), capacity(c)),
                    bound(c),
                ))
            });
            let live: HashSet<&str> = claims.iter().map(|c| c.2.as_str()).collect();
            self.seen.retain(|uid, _| live.contains(uid.as_str()));
            for (ns, name, uid, sizes, bound) in claims {
                if self.wants_seen(&uid, sizes, bound) {
                    due.push((ns, name));
                }
            }
        } else {
            let claims = self.claims;
            for change in changes.iter().filter(|c| c.rid == claims) {
                if change.event == EventType::Deleted {
                    self.seen.remove(uid_of(&change.object));
                    continue;
                }
                if self.wants(&change.object) {
                    due.push((
                        ns_of(&change.object).to_owned(),
                        name_of(&change.object).to_owned(),
                    ));
                }
            }
        }
        // Claims to try again are queued as they are, bound or not: the sync below skips
        // those that are not bound.
        due.extend(std::mem::take(&mut self.retry));
        // A queue holds a key once, however often it was added.
        let mut queued = HashSet::new();
        due.retain(|k| queued.insert(k.clone()));
        for (ns, name) in due {
            // The queue works from the claim as it is now.
            let Some(current) = api.store.get(self.claims, &ns, &name) else {
                continue;
            };
            if !bound(&current) {
                continue;
            }
            if !self.sync(api, &current).await {
                self.retry
                    .insert((ns_of(&current).to_owned(), name_of(&current).to_owned()));
            }
        }
    }
}

pub async fn run(api: Arc<Api>, throttle: Throttle) {
    let mut expand = Expand {
        claims: rid("", "persistentvolumeclaims"),
        volumes: rid("", "persistentvolumes"),
        seen: HashMap::new(),
        retry: HashSet::new(),
        throttle,
    };
    let mut feed = Feed::new(&api, vec![expand.claims], Duration::from_secs(2));
    loop {
        let batch = feed.next().await;
        expand.reconcile(&api, &batch).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_amounts() {
        assert_eq!(storage(&json!("1Gi")), 1 << 30);
        assert_eq!(storage(&json!(null)), 0);
        assert_eq!(storage(&json!("nonsense")), 0);
    }
}
