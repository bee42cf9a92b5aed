//! The PV controller, in what provisioners rely on: it marks claims of external
//! provisioners with `volume.kubernetes.io/storage-provisioner` (after a node is selected
//! for WaitForFirstConsumer), binds claims to pre-bound or matching volumes, releases
//! volumes whose claim is gone and applies their reclaim policy, and removes the
//! pvc/pv-protection finalizers when nothing uses the object any more.
//!
//! As in Kubernetes' `syncVolume`, a volume whose `claimRef` names a claim (with a uid) that
//! does not exist, or exists with another uid, is Released at once, bound before or not; a
//! `claimRef` without a uid (pre-bound by name) waits for its claim, Available. Events about
//! pending claims repeat on every sync, as the real controller's do, aggregated into one
//! Event whose `count` grows, as client-go's event recorder does.
//!
//! With `SandboxOptions::controller_qps`, its writes go through a client rate limit of
//! its own (each kube-controller-manager controller has its own client). The loop is
//! synchronous, so a write the limit holds back is not waited for in place: it is skipped,
//! and the loop syncs everything again once a token is due, as the real controller's
//! requeue reaches the object again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    FREE_VOLUME, Feed, PODS_BY_CLAIM, Throttle, VOLUMES_BY_CLAIM, VOLUMES_BY_CLAIM_UID,
    is_deleting, name_of, ns_of, record_event, rid, uid_of,
};
use crate::api::{Api, DeleteOpts};
use crate::store::Write;
use crate::wellknown::{
    ANN_PROVISIONED_BY, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER_BETA,
};
use kube_rules::quantity::parse_bytes;

const COMPONENT: &str = "persistentvolume-controller";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// The real controller's resync period (`--pvclaimbinder-sync-period`): how often an
/// unchanged pending claim is synced again, and so how often its event repeats.
const RESYNC: Duration = Duration::from_secs(15);

struct Pv {
    claims: usize,
    volumes: usize,
    classes: usize,
    pods: usize,
    /// Per pending claim (uid): when it last had a sync that emits events, and the claim's
    /// resourceVersion then. This loop resyncs every tick; the real one every 15 s or on a
    /// change to the claim, which is when an event is due again.
    synced: HashMap<String, (Instant, String)>,
    throttle: Throttle,
    /// A write was held back by the rate limit: sync again when a token is due.
    deferred: std::cell::Cell<bool>,
    /// When every volume was last passed over. The real controller resyncs every 15 s;
    /// passing over tens of thousands of volumes on every 2 s tick held the store long
    /// enough to slow every client's lists.
    last_volume_pass: Option<Instant>,
    /// The next full sync passes over every volume (it retries writes held back).
    pass_volumes: bool,
}

/// What the Delete reclaim policy does with a released volume.
enum Deleter {
    /// An external provisioner deletes it (the controller leaves it Released).
    External,
    /// The in-tree deleter removes the storage; then the PV object goes.
    Deletes,
    /// No deleter can: Failed, with this message.
    Fails(String),
}

fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or_default()
}

fn annotation<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v["metadata"]["annotations"][k].as_str()
}

/// How Kubernetes' `findDeletablePlugin` and the in-tree deleters treat a volume.
fn deleter(pv: &Value) -> Deleter {
    let spec = &pv["spec"];
    let host_path = |path: &str| {
        // The hostPath deleter accepts what the regexp `/tmp/.+` finds, anywhere in the path.
        if path.find("/tmp/").is_some_and(|i| path.len() > i + 5) {
            Deleter::Deletes
        } else {
            Deleter::Fails(format!(
                "host_path deleter only supports /tmp/.+ but received provided {path}"
            ))
        }
    };
    match annotation(pv, ANN_PROVISIONED_BY) {
        Some(p) if !p.is_empty() && !p.starts_with("kubernetes.io/") => return Deleter::External,
        Some("kubernetes.io/host-path") => {
            return host_path(spec["hostPath"]["path"].as_str().unwrap_or_default());
        }
        Some(p) if !p.is_empty() => {
            return Deleter::Fails(format!("no volume plugin matched name: {p}"));
        }
        _ => {}
    }
    if annotation(pv, MIGRATED_TO).is_some() || spec.get("csi").is_some_and(|c| !c.is_null()) {
        return Deleter::External;
    }
    if let Some(path) = spec["hostPath"]["path"].as_str() {
        return host_path(path);
    }
    Deleter::Fails(format!(
        "error getting deleter volume plugin for volume \"{}\": no deletable volume plugin matched",
        name_of(pv)
    ))
}

impl Pv {
    /// An event of a claim sync: due on the claim's first sync, after a change to it, and
    /// once per resync period (see `synced`).
    fn emit(&mut self, api: &Api, claim: &Value, type_: &str, reason: &str, message: &str) {
        let rv = claim["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        let due = match self.synced.get(uid_of(claim)) {
            Some((at, seen)) => seen != rv || at.elapsed() >= RESYNC,
            None => true,
        };
        if due && self.may_write() {
            self.synced
                .insert(uid_of(claim).to_owned(), (Instant::now(), rv.to_owned()));
            // record_event folds a repeat into the existing Event (its count grows).
            record_event(api, claim, type_, reason, message, COMPONENT);
        }
    }

    /// Whether one write may go now under the rate limit; when not, the loop syncs again
    /// once a token is due.
    fn may_write(&self) -> bool {
        let ok = self.throttle.try_take();
        if !ok {
            self.deferred.set(true);
        }
        ok
    }

    /// Forgets what it keeps about claims that are no longer pending.
    fn forget_except(&mut self, pending: &HashSet<&str>) {
        self.synced.retain(|uid, _| pending.contains(uid.as_str()));
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
        let _ = api.store.write_shared(rid, ns, name, |cur, _| {
            let Some(cur) = cur else {
                return Ok(Write::Unchanged(Value::Null));
            };
            let mut next = cur.clone();
            if f(&mut next) && next != *cur && self.may_write() {
                if is_deleting(&next)
                    && next["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(|a| a.is_empty())
                {
                    return Ok(Write::Delete(cur.clone()));
                }
                Ok(Write::Put(next))
            } else {
                // What the store answers is not read: no copy of the object for it.
                Ok(Write::Unchanged(Value::Null))
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
        let class = crate::claim_resize::claim_class(claim).to_owned();
        // Only the candidates, found by index: volumes pre-bound to this claim, and free
        // ones (a populated cluster holds tens of thousands of bound volumes).
        let volumes = api.store.indexed(
            self.volumes,
            VOLUMES_BY_CLAIM,
            &[FREE_VOLUME, &format!("{ns}/{name}")],
            |_| true,
        );
        // As the real index does, even a volume pre-bound to the claim must be big enough
        // and have its access and volume modes (its class is not checked).
        let prebound = volumes.iter().find(|pv| {
            pv["spec"]["claimRef"]["name"].as_str() == Some(&name)
                && pv["spec"]["claimRef"]["namespace"].as_str() == Some(&ns)
                && pv["spec"]["claimRef"]["uid"]
                    .as_str()
                    .is_none_or(|u| u == uid_of(claim))
                && !is_deleting(pv)
                && satisfies(claim, pv)
        });
        if let Some(pv) = prebound {
            let pv = pv.clone();
            self.bind(api, claim, &pv, false);
            return;
        }
        // WaitForFirstConsumer: free volumes are matched by the scheduler with the pod's
        // node in view, never here (the real index skips them when binding is delayed).
        let delayed = api
            .store
            .get(self.classes, "", &class)
            .is_some_and(|sc| sc["volumeBindingMode"].as_str() == Some("WaitForFirstConsumer"));
        if !delayed && let Some(pv) = best_match(claim, &volumes, &class) {
            self.bind(api, claim, &pv, true);
            return;
        }
        if class.is_empty() {
            self.emit(
                api,
                claim,
                "Normal",
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            );
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
            // Pods that use the claim and wait for the scheduler are named, as the real
            // controller does.
            let unscheduled =
                api.store
                    .indexed(self.pods, PODS_BY_CLAIM, &[&format!("{ns}/{name}")], |p| {
                        p["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
                            && !matches!(phase(p), "Succeeded" | "Failed")
                    });
            let names: Vec<&str> = unscheduled.iter().map(name_of).collect();
            let (reason, message) = match names.as_slice() {
                [] => (
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding".to_owned(),
                ),
                [one] => (
                    "WaitForPodScheduled",
                    format!("waiting for pod {one} to be scheduled"),
                ),
                many => (
                    "WaitForPodScheduled",
                    format!("waiting for pods {} to be scheduled", many.join(",")),
                ),
            };
            self.emit(api, claim, "Normal", reason, &message);
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

    fn claim_in_use(&self, api: &Api, ns: &str, name: &str) -> bool {
        let pods = api
            .store
            .indexed(self.pods, PODS_BY_CLAIM, &[&format!("{ns}/{name}")], |p| {
                !matches!(phase(p), "Succeeded" | "Failed")
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
        // Mostly Bound already (bind has just made it so): looked at in place first.
        if api
            .store
            .peek(self.volumes, "", name_of(pv), |v| phase(v) != "Bound")
            == Some(true)
        {
            self.modify(api, self.volumes, "", name_of(pv), |v| {
                v["status"]["phase"] = json!("Bound");
                true
            });
        }
        self.modify(api, self.claims, ns_of(claim), name_of(claim), |c| {
            c["metadata"]["annotations"][BIND_COMPLETED] = json!("yes");
            c["status"]["phase"] = json!("Bound");
            c["status"]["capacity"] = capacity;
            c["status"]["accessModes"] = modes;
            true
        });
    }

    /// Sets the volume's phase (and message) if it differs; says whether it did.
    fn set_phase(&self, api: &Api, pv: &Value, to: &str, message: &str) -> bool {
        if phase(pv) == to {
            return false;
        }
        let (to, message) = (to.to_owned(), message.to_owned());
        self.modify(api, self.volumes, "", name_of(pv), |v| {
            v["status"]["phase"] = json!(to);
            if message.is_empty() {
                if let Some(st) = v["status"].as_object_mut() {
                    st.remove("message");
                }
            } else {
                v["status"]["message"] = json!(message);
            }
            true
        });
        true
    }

    /// The PV controller's sync of a volume, then the pv-protection controller's: a
    /// deleted volume goes once it is no longer Bound.
    fn sync_volume(&mut self, api: &Api, pv: &Value) {
        let now = self.reconcile_volume(api, pv);
        if is_deleting(pv) && now != "Bound" {
            self.modify(api, self.volumes, "", name_of(pv), |v| {
                remove_finalizer(v, "kubernetes.io/pv-protection")
            });
        }
    }

    /// Kubernetes' `syncVolume`; returns the volume's phase afterwards.
    fn reconcile_volume(&mut self, api: &Api, pv: &Value) -> String {
        let claim_ref = &pv["spec"]["claimRef"];
        // Unused, or pre-bound by name only (the claim's sync binds it): Available.
        let uid = claim_ref["uid"].as_str().unwrap_or_default();
        if claim_ref.is_null() || uid.is_empty() {
            self.set_phase(api, pv, "Available", "");
            return "Available".into();
        }
        let claim = api.store.get(
            self.claims,
            claim_ref["namespace"].as_str().unwrap_or_default(),
            claim_ref["name"].as_str().unwrap_or_default(),
        );
        // A claim of another uid is a new one under the old name: the old one is gone.
        let Some(claim) = claim.filter(|c| uid_of(c) == uid) else {
            return self.release(api, pv);
        };
        let wants = claim["spec"]["volumeName"].as_str().unwrap_or_default();
        if wants.is_empty() {
            // Not bound yet: the claim's sync finishes the binding.
            return phase(pv).to_owned();
        }
        if wants == name_of(pv) {
            self.set_phase(api, pv, "Bound", "");
            return "Bound".into();
        }
        // The claim is bound to another volume.
        let policy = pv["spec"]["persistentVolumeReclaimPolicy"]
            .as_str()
            .unwrap_or_default();
        if annotation(pv, ANN_PROVISIONED_BY).is_some() && policy == "Delete" {
            // Provisioned for this claim and not needed: released, to be deleted.
            return self.release(api, pv);
        }
        // Bound by the controller: made free again; pre-bound by the user: keeps the name
        // and waits for the claim to be free.
        let by_controller = annotation(pv, BOUND_BY_CONTROLLER).is_some();
        self.modify(api, self.volumes, "", name_of(pv), |v| {
            if by_controller {
                v["spec"]["claimRef"] = Value::Null;
                if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
                    a.remove(BOUND_BY_CONTROLLER);
                }
            } else if let Some(r) = v["spec"]["claimRef"].as_object_mut() {
                r.remove("uid");
            }
            true
        });
        if let Some(v) = api.store.get(self.volumes, "", name_of(pv)) {
            self.set_phase(api, &v, "Available", "");
        }
        "Available".into()
    }

    /// A volume whose claim is gone: Released (a Failed one stays Failed), then its reclaim
    /// policy (Kubernetes' `reclaimVolume`).
    fn release(&mut self, api: &Api, pv: &Value) -> String {
        let name = name_of(pv).to_owned();
        let mut now = phase(pv).to_owned();
        if now != "Released" && now != "Failed" {
            self.set_phase(api, pv, "Released", "");
            now = "Released".into();
        }
        let fail = |reason: &str, message: &str| {
            if now == "Failed" {
                return;
            }
            self.set_phase(api, pv, "Failed", message);
            if let Some(v) = api.store.get(self.volumes, "", &name)
                && self.may_write()
            {
                record_event(api, &v, "Warning", reason, message, COMPONENT);
            }
        };
        match pv["spec"]["persistentVolumeReclaimPolicy"]
            .as_str()
            .unwrap_or("Retain")
        {
            // Retain: kept for the administrator. Recycle: no recycler runs here (it is
            // deprecated); the volume stays Released.
            "Retain" | "Recycle" => {}
            // A volume already being deleted is not deleted again.
            "Delete" if is_deleting(pv) => {}
            "Delete" => match deleter(pv) {
                Deleter::External => {}
                Deleter::Fails(message) => {
                    fail("VolumeFailedDelete", &message);
                    return "Failed".into();
                }
                Deleter::Deletes => {
                    // The storage is on the controller-manager's host, no sandbox node:
                    // only the object goes.
                    let opts = DeleteOpts {
                        precondition_uid: Some(uid_of(pv).to_owned()),
                        ..Default::default()
                    };
                    if self.may_write() {
                        let _ = api.delete(self.volumes, "", &name, &opts);
                    }
                }
            },
            _ => {
                fail(
                    "VolumeUnknownReclaimPolicy",
                    "Volume has unrecognized PersistentVolumeReclaimPolicy",
                );
                return "Failed".into();
            }
        }
        now
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

/// Whether a volume has the claim's size, access modes and volume mode.
fn satisfies(claim: &Value, pv: &Value) -> bool {
    let mode = claim["spec"]["volumeMode"].as_str().unwrap_or("Filesystem");
    let have = pv["spec"]["accessModes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let modes_ok = claim["spec"]["accessModes"]
        .as_array()
        .is_none_or(|want| want.iter().all(|m| have.contains(m)));
    let size_ok = pv["spec"]["capacity"]["storage"]
        .as_str()
        .and_then(|s| parse_bytes(s).ok())
        .is_some_and(|b| b.0 >= request_bytes(claim));
    modes_ok && size_ok && pv["spec"]["volumeMode"].as_str().unwrap_or("Filesystem") == mode
}

/// The smallest Available volume of the class that satisfies size, modes and volume mode.
fn best_match(claim: &Value, volumes: &[Value], class: &str) -> Option<Value> {
    let want = request_bytes(claim);
    volumes
        .iter()
        .filter(|pv| {
            phase(pv) == "Available" && pv["spec"]["claimRef"].is_null() && !is_deleting(pv)
        })
        .filter(|pv| pv["spec"]["storageClassName"].as_str().unwrap_or_default() == class)
        .filter(|pv| satisfies(claim, pv))
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

impl Pv {
    /// Syncs what a batch of changes touches; everything for an empty batch.
    fn reconcile(&mut self, api: &Api, changes: &[Arc<crate::store::Change>]) {
        // Pods matter only when they use claims (pvc-protection, consumers).
        let uses_claims = |v: &Value| {
            v["spec"]["volumes"]
                .as_array()
                .is_some_and(|vs| vs.iter().any(|x| x.get("persistentVolumeClaim").is_some()))
        };
        let classes_changed = changes.iter().any(|c| c.rid == self.classes);
        let full = changes.is_empty() || classes_changed;
        if full {
            let volume_pass = classes_changed
                || std::mem::take(&mut self.pass_volumes)
                || self.last_volume_pass.is_none_or(|t| t.elapsed() >= RESYNC);
            // A volume bound to a claim that is bound to it, and Bound, has nothing to sync:
            // it is passed over in place, without a copy of it or its claim (a populated
            // cluster holds tens of thousands, and this runs every resync).
            let (claims, volumes) = (self.claims, self.volumes);
            if volume_pass {
                self.last_volume_pass = Some(Instant::now());
            }
            let unsettled: Vec<String> = if !volume_pass {
                Vec::new()
            } else {
                api.store.read(|objects| {
                    objects
                        .all(volumes)
                        .filter(|pv| {
                            let r = &pv["spec"]["claimRef"];
                            let uid = r["uid"].as_str().unwrap_or_default();
                            let settled = phase(pv) == "Bound"
                                && !uid.is_empty()
                                && objects
                                    .get(
                                        claims,
                                        r["namespace"].as_str().unwrap_or_default(),
                                        r["name"].as_str().unwrap_or_default(),
                                    )
                                    .is_some_and(|c| {
                                        uid_of(c) == uid
                                            && c["spec"]["volumeName"].as_str() == Some(name_of(pv))
                                    });
                            !settled
                        })
                        .map(|pv| name_of(pv).to_owned())
                        .collect()
                })
            };
            for name in &unsettled {
                if let Some(v) = api.store.get(volumes, "", name) {
                    self.sync_volume(api, &v);
                }
            }
            let (claims, _) = api
                .store
                .list(self.claims, None, |c| phase(c) != "Bound" || is_deleting(c));
            for c in &claims {
                self.sync_claim(api, c);
            }
            self.forget_except(&claims.iter().map(uid_of).collect());
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
            if c.rid == self.claims {
                if deleted {
                    // A claim that went away releases the volumes bound to it.
                    let bound =
                        api.store
                            .indexed(self.volumes, VOLUMES_BY_CLAIM_UID, &[uid_of(o)], |_| true);
                    volume_names.extend(bound.iter().map(|v| name_of(v).to_owned()));
                } else {
                    claim_keys.push((ns_of(o).to_owned(), name_of(o).to_owned()));
                }
            } else if c.rid == self.volumes {
                if !deleted {
                    volume_names.push(name_of(o).to_owned());
                }
                let r = &o["spec"]["claimRef"];
                match (r["namespace"].as_str(), r["name"].as_str()) {
                    (Some(ns), Some(name)) => claim_keys.push((ns.to_owned(), name.to_owned())),
                    _ => free_volume = !deleted,
                }
            } else if c.rid == self.pods && uses_claims(o) {
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
            if let Some(v) = api.store.get(self.volumes, "", name) {
                self.sync_volume(api, &v);
            }
        }
        if free_volume {
            // A new free volume may match any unbound claim.
            let (claims, _) = api.store.list(self.claims, None, |c| phase(c) != "Bound");
            claim_keys.extend(
                claims
                    .iter()
                    .map(|c| (ns_of(c).to_owned(), name_of(c).to_owned())),
            );
        }
        claim_keys.sort();
        claim_keys.dedup();
        // Most claims a batch names are bound and settled: they are looked at in place, and
        // only those with work copied.
        let unsettled = |c: &Value| phase(c) != "Bound" || is_deleting(c);
        for (ns, name) in &claim_keys {
            if api.store.peek(self.claims, ns, name, unsettled) == Some(true)
                && let Some(c) = api.store.get(self.claims, ns, name)
                && unsettled(&c)
            {
                self.sync_claim(api, &c);
            }
        }
    }
}

pub async fn run(api: Arc<Api>, throttle: Throttle) {
    let mut pv = Pv {
        claims: rid("", "persistentvolumeclaims"),
        volumes: rid("", "persistentvolumes"),
        classes: rid("storage.k8s.io", "storageclasses"),
        pods: rid("", "pods"),
        synced: HashMap::new(),
        throttle,
        deferred: std::cell::Cell::new(false),
        last_volume_pass: None,
        pass_volumes: false,
    };
    let interests = vec![pv.claims, pv.volumes, pv.classes, pv.pods];
    let mut feed = Feed::new(&api, interests, Duration::from_secs(2));
    loop {
        let batch = feed.next().await;
        pv.reconcile(&api, &batch);
        // Writes the rate limit held back: a full sync once a token is due reaches them.
        while pv.deferred.replace(false) {
            pv.throttle.ready().await;
            pv.pass_volumes = true;
            pv.reconcile(&api, &[]);
        }
    }
}
