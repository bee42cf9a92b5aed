//! The PV controller, in what provisioners rely on: it marks claims of external
//! provisioners with `volume.kubernetes.io/storage-provisioner` (after a node is selected
//! for WaitForFirstConsumer), binds claims to pre-bound or matching volumes, marks volumes
//! Released when their claim goes, fails manual Delete volumes, and removes the
//! pvc/pv-protection finalizers when nothing uses the object any more.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{is_deleting, name_of, ns_of, record_event, rid, uid_of};
use crate::api::Api;
use crate::store::Write;
use crate::wellknown::{
    ANN_PROVISIONED_BY, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER_BETA,
};
use kube_rules::quantity::parse_bytes;

const COMPONENT: &str = "persistentvolume-controller";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

struct Pv {
    claims: usize,
    volumes: usize,
    classes: usize,
    pods: usize,
    /// (claim uid, reason) of events already sent, so each is said once.
    said: HashSet<(String, &'static str)>,
}

fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or_default()
}

fn annotation<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v["metadata"]["annotations"][k].as_str()
}

impl Pv {
    fn emit(&mut self, api: &Api, claim: &Value, type_: &str, reason: &'static str, message: &str) {
        if self.said.insert((uid_of(claim).to_owned(), reason)) {
            record_event(api, claim, type_, reason, message, COMPONENT);
        }
    }

    /// Applies `f` to the stored object (a spec/metadata write, or a status write).
    fn modify(
        &self,
        api: &Api,
        rid: usize,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value) -> bool,
    ) {
        let _ = api.store.write(rid, ns, name, |cur, _| {
            let Some(cur) = cur else {
                return Ok(Write::Unchanged(Value::Null));
            };
            let mut next = cur.clone();
            if f(&mut next) && next != *cur {
                if is_deleting(&next)
                    && next["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(|a| a.is_empty())
                {
                    return Ok(Write::Delete(cur.clone()));
                }
                Ok(Write::Put(next))
            } else {
                Ok(Write::Unchanged(cur.clone()))
            }
        });
    }

    fn sync_claim(&mut self, api: &Api, claim: &Value) {
        let ns = ns_of(claim).to_owned();
        let name = name_of(claim).to_owned();
        if is_deleting(claim) {
            if !self.claim_in_use(api, &ns, &name) {
                self.modify(api, self.claims, &ns, &name, |c| {
                    remove_finalizer(c, "kubernetes.io/pvc-protection")
                });
            }
            return;
        }
        let volume_name = claim["spec"]["volumeName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !volume_name.is_empty() {
            if phase(claim) != "Bound"
                && let Some(pv) = api.store.get(self.volumes, "", &volume_name)
                && pv["spec"]["claimRef"]["uid"].as_str() == Some(uid_of(claim))
            {
                self.finish_claim(api, claim, &pv);
            }
            return;
        }
        let class = claim["spec"]["storageClassName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // Only the candidates are copied: volumes pre-bound to this claim, and free ones.
        let (volumes, _) = api.store.list(self.volumes, None, |pv| {
            let r = &pv["spec"]["claimRef"];
            r.is_null()
                || (r["name"].as_str() == Some(&name) && r["namespace"].as_str() == Some(&ns))
        });
        let prebound = volumes.iter().find(|pv| {
            pv["spec"]["claimRef"]["name"].as_str() == Some(&name)
                && pv["spec"]["claimRef"]["namespace"].as_str() == Some(&ns)
                && pv["spec"]["claimRef"]["uid"]
                    .as_str()
                    .is_none_or(|u| u == uid_of(claim))
                && !is_deleting(pv)
        });
        if let Some(pv) = prebound {
            let pv = pv.clone();
            self.bind(api, claim, &pv, false);
            return;
        }
        if let Some(pv) = best_match(claim, &volumes, &class) {
            self.bind(api, claim, &pv, true);
            return;
        }
        if class.is_empty() {
            return;
        }
        let Some(sc) = api.store.get(self.classes, "", &class) else {
            self.emit(
                api,
                claim,
                "Warning",
                "ProvisioningFailed",
                &format!("storageclass.storage.k8s.io \"{class}\" not found"),
            );
            return;
        };
        let provisioner = sc["provisioner"].as_str().unwrap_or_default().to_owned();
        let waits = sc["volumeBindingMode"].as_str() == Some("WaitForFirstConsumer");
        if waits && annotation(claim, ANN_SELECTED_NODE).is_none() {
            self.emit(
                api,
                claim,
                "Normal",
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            );
            return;
        }
        if annotation(claim, ANN_STORAGE_PROVISIONER) != Some(provisioner.as_str()) {
            let p = provisioner.clone();
            self.modify(api, self.claims, &ns, &name, move |c| {
                c["metadata"]["annotations"][ANN_STORAGE_PROVISIONER_BETA] = json!(p);
                c["metadata"]["annotations"][ANN_STORAGE_PROVISIONER] = json!(p);
                true
            });
        }
        self.emit(
            api,
            claim,
            "Normal",
            "ExternalProvisioning",
            &format!("Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."),
        );
    }

    fn claim_of(&self, api: &Api, pv: &Value) -> Option<Value> {
        let r = &pv["spec"]["claimRef"];
        api.store.get(
            self.claims,
            r["namespace"].as_str().unwrap_or_default(),
            r["name"].as_str().unwrap_or_default(),
        )
    }

    fn claim_in_use(&self, api: &Api, ns: &str, name: &str) -> bool {
        let (pods, _) = api.store.list(self.pods, Some(ns), |p| {
            !matches!(phase(p), "Succeeded" | "Failed")
                && p["spec"]["volumes"].as_array().is_some_and(|vols| {
                    vols.iter()
                        .any(|v| v["persistentVolumeClaim"]["claimName"].as_str() == Some(name))
                })
        });
        !pods.is_empty()
    }

    /// Binds in the real controller's order: the volume's claimRef, the volume's phase, the
    /// claim's volumeName, the claim's phase.
    fn bind(&mut self, api: &Api, claim: &Value, pv: &Value, by_controller: bool) {
        let pv_name = name_of(pv).to_owned();
        let claim_ref = json!({
            "kind": "PersistentVolumeClaim", "namespace": ns_of(claim), "name": name_of(claim),
            "uid": uid_of(claim), "apiVersion": "v1", "resourceVersion": claim["metadata"]["resourceVersion"],
        });
        if by_controller {
            self.modify(api, self.volumes, "", &pv_name, |v| {
                v["spec"]["claimRef"] = claim_ref;
                v["metadata"]["annotations"][BOUND_BY_CONTROLLER] = json!("yes");
                true
            });
        } else if pv["spec"]["claimRef"]["uid"].is_null() {
            let uid = uid_of(claim).to_owned();
            self.modify(api, self.volumes, "", &pv_name, |v| {
                v["spec"]["claimRef"]["uid"] = json!(uid);
                true
            });
        }
        self.modify(api, self.volumes, "", &pv_name, |v| {
            v["status"]["phase"] = json!("Bound");
            true
        });
        self.modify(api, self.claims, ns_of(claim), name_of(claim), |c| {
            c["spec"]["volumeName"] = json!(pv_name);
            c["metadata"]["annotations"][BIND_COMPLETED] = json!("yes");
            c["metadata"]["annotations"][BOUND_BY_CONTROLLER] = json!("yes");
            true
        });
        if let (Some(c), Some(v)) = (
            api.store.get(self.claims, ns_of(claim), name_of(claim)),
            api.store.get(self.volumes, "", name_of(pv)),
        ) {
            self.finish_claim(api, &c, &v);
        }
    }

    fn finish_claim(&self, api: &Api, claim: &Value, pv: &Value) {
        let capacity = pv["spec"]["capacity"].clone();
        let modes = pv["spec"]["accessModes"].clone();
        self.modify(api, self.volumes, "", name_of(pv), |v| {
            v["status"]["phase"] = json!("Bound");
            true
        });
        self.modify(api, self.claims, ns_of(claim), name_of(claim), |c| {
            c["metadata"]["annotations"][BIND_COMPLETED] = json!("yes");
            c["status"]["phase"] = json!("Bound");
            c["status"]["capacity"] = capacity;
            c["status"]["accessModes"] = modes;
            true
        });
    }

    fn sync_volume(&mut self, api: &Api, pv: &Value) {
        let name = name_of(pv).to_owned();
        // A deleted PV still goes Released when its claim goes; pv-protection lets it
        // go once it is no longer bound.
        if is_deleting(pv) {
            let claim_uid = pv["spec"]["claimRef"]["uid"].as_str().unwrap_or_default();
            let claim_alive = self
                .claim_of(api, pv)
                .is_some_and(|c| uid_of(&c) == claim_uid);
            if phase(pv) == "Bound" && !claim_alive {
                self.modify(api, self.volumes, "", &name, |v| {
                    v["status"]["phase"] = json!("Released");
                    true
                });
            } else if phase(pv) != "Bound" {
                self.modify(api, self.volumes, "", &name, |v| {
                    remove_finalizer(v, "kubernetes.io/pv-protection")
                });
            }
            return;
        }
        let claim_ref = &pv["spec"]["claimRef"];
        if claim_ref.is_null() {
            if phase(pv) != "Available" {
                self.modify(api, self.volumes, "", &name, |v| {
                    v["status"]["phase"] = json!("Available");
                    true
                });
            }
            return;
        }
        let Some(uid) = claim_ref["uid"].as_str() else {
            if phase(pv) == "Pending" {
                self.modify(api, self.volumes, "", &name, |v| {
                    v["status"]["phase"] = json!("Available");
                    true
                });
            }
            return;
        };
        let claim = api.store.get(
            self.claims,
            claim_ref["namespace"].as_str().unwrap_or_default(),
            claim_ref["name"].as_str().unwrap_or_default(),
        );
        let claim_alive = claim.as_ref().is_some_and(|c| uid_of(c) == uid);
        if claim_alive || !matches!(phase(pv), "Bound" | "Released" | "Failed") {
            return;
        }
        if phase(pv) == "Bound" {
            self.modify(api, self.volumes, "", &name, |v| {
                v["status"]["phase"] = json!("Released");
                true
            });
        }
        let policy = pv["spec"]["persistentVolumeReclaimPolicy"]
            .as_str()
            .unwrap_or("Retain");
        if policy == "Delete"
            && annotation(pv, ANN_PROVISIONED_BY).is_none()
            && phase(pv) != "Failed"
        {
            let message = format!(
                "error getting deleter volume plugin for volume \"{name}\": no deletable volume plugin matched"
            );
            self.modify(api, self.volumes, "", &name, |v| {
                v["status"]["phase"] = json!("Failed");
                v["status"]["message"] = json!(message);
                true
            });
            if let Some(v) = api.store.get(self.volumes, "", &name) {
                record_event(
                    api,
                    &v,
                    "Warning",
                    "VolumeFailedDelete",
                    &message,
                    COMPONENT,
                );
            }
        }
    }
}

fn remove_finalizer(v: &mut Value, f: &str) -> bool {
    match v["metadata"]["finalizers"].as_array_mut() {
        Some(list) => {
            let before = list.len();
            list.retain(|x| x != f);
            before != list.len()
        }
        None => false,
    }
}

fn request_bytes(claim: &Value) -> u64 {
    claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(|s| parse_bytes(s).ok())
        .map_or(0, |b| b.0)
}

/// The smallest Available volume of the class that satisfies size, modes and volume mode.
fn best_match(claim: &Value, volumes: &[Value], class: &str) -> Option<Value> {
    let want = request_bytes(claim);
    let modes: Vec<&Value> = claim["spec"]["accessModes"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mode = claim["spec"]["volumeMode"].as_str().unwrap_or("Filesystem");
    volumes
        .iter()
        .filter(|pv| {
            phase(pv) == "Available" && pv["spec"]["claimRef"].is_null() && !is_deleting(pv)
        })
        .filter(|pv| pv["spec"]["storageClassName"].as_str().unwrap_or_default() == class)
        .filter(|pv| pv["spec"]["volumeMode"].as_str().unwrap_or("Filesystem") == mode)
        .filter(|pv| {
            let have = pv["spec"]["accessModes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            modes.iter().all(|m| have.contains(m))
        })
        .filter_map(|pv| {
            let size = pv["spec"]["capacity"]["storage"]
                .as_str()
                .and_then(|s| parse_bytes(s).ok())?
                .0;
            (size >= want).then_some((size, pv))
        })
        .min_by_key(|(size, _)| *size)
        .map(|(_, pv)| pv.clone())
}

pub async fn run(api: Arc<Api>) {
    let mut pv = Pv {
        claims: rid("", "persistentvolumeclaims"),
        volumes: rid("", "persistentvolumes"),
        classes: rid("storage.k8s.io", "storageclasses"),
        pods: rid("", "pods"),
        said: HashSet::new(),
    };
    let interests = vec![pv.claims, pv.volumes, pv.classes, pv.pods];
    super::run_loop(
        api,
        interests,
        Duration::from_secs(2),
        move |api, changes| {
            // Pods matter only when they use claims (pvc-protection, consumers).
            let uses_claims = |v: &Value| {
                v["spec"]["volumes"]
                    .as_array()
                    .is_some_and(|vs| vs.iter().any(|x| x.get("persistentVolumeClaim").is_some()))
            };
            let full = changes.is_empty() || changes.iter().any(|c| c.rid == pv.classes);
            if full {
                let (volumes, _) = api.store.list(pv.volumes, None, |_| true);
                for v in &volumes {
                    pv.sync_volume(api, v);
                }
                let (claims, _) = api
                    .store
                    .list(pv.claims, None, |c| phase(c) != "Bound" || is_deleting(c));
                for c in &claims {
                    pv.sync_claim(api, c);
                }
                return;
            }
            // A batch touches few objects: sync those, and what they name, rather than
            // everything (a populated cluster holds tens of thousands of volumes).
            let mut claim_keys: Vec<(String, String)> = Vec::new();
            let mut volume_names: Vec<String> = Vec::new();
            let mut free_volume = false;
            for c in changes {
                let o = &c.object;
                let deleted = c.event == crate::store::EventType::Deleted;
                if c.rid == pv.claims {
                    if deleted {
                        // A claim that went away releases the volumes bound to it.
                        let (bound, _) = api.store.list(pv.volumes, None, |v| {
                            v["spec"]["claimRef"]["uid"].as_str() == Some(uid_of(o))
                        });
                        volume_names.extend(bound.iter().map(|v| name_of(v).to_owned()));
                    } else {
                        claim_keys.push((ns_of(o).to_owned(), name_of(o).to_owned()));
                    }
                } else if c.rid == pv.volumes {
                    if !deleted {
                        volume_names.push(name_of(o).to_owned());
                    }
                    let r = &o["spec"]["claimRef"];
                    match (r["namespace"].as_str(), r["name"].as_str()) {
                        (Some(ns), Some(name)) => claim_keys.push((ns.to_owned(), name.to_owned())),
                        _ => free_volume = !deleted,
                    }
                } else if c.rid == pv.pods && uses_claims(o) {
                    for v in o["spec"]["volumes"].as_array().into_iter().flatten() {
                        if let Some(name) = v["persistentVolumeClaim"]["claimName"].as_str() {
                            claim_keys.push((ns_of(o).to_owned(), name.to_owned()));
                        }
                    }
                }
            }
            volume_names.sort();
            volume_names.dedup();
            for name in &volume_names {
                if let Some(v) = api.store.get(pv.volumes, "", name) {
                    pv.sync_volume(api, &v);
                }
            }
            if free_volume {
                // A new free volume may match any unbound claim.
                let (claims, _) = api.store.list(pv.claims, None, |c| phase(c) != "Bound");
                claim_keys.extend(
                    claims
                        .iter()
                        .map(|c| (ns_of(c).to_owned(), name_of(c).to_owned())),
                );
            }
            claim_keys.sort();
            claim_keys.dedup();
            for (ns, name) in &claim_keys {
                if let Some(c) = api.store.get(pv.claims, ns, name)
                    && (phase(&c) != "Bound" || is_deleting(&c))
                {
                    pv.sync_claim(api, &c);
                }
            }
        },
    )
    .await;
}
