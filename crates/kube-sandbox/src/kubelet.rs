//! The pod runner (the sandbox's kubelet): runs the pods bound to sandbox nodes as local
//! processes and reports their lifecycle in pod status.
//!
//! An image maps to an executable: an explicit `--image-map` entry (full reference or bare
//! name), else `<images dir>/<name>/entrypoint` where name is the image without registry and
//! tag. Unknown images fail with ErrImagePull as a real kubelet reports it. The process gets
//! the container's resolved environment plus `KUBECONFIG` (the sandbox API),
//! `TERMINATION_LOG` (a file whose content becomes the termination message),
//! `SANDBOX_ROOT` (the prefix under which the pod's volumes appear at their mount paths:
//! empty when the container has a root of its own, kubelet/mounts.rs) and `SANDBOX_STATE`
//! (a directory the pods of a node share and their volumes never show, where test images
//! keep what a storage backend would). A container's `securityContext` capabilities are
//! applied (kubelet/capabilities.rs).

mod capabilities;
mod mounts;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::SandboxOptions;
use super::api::{Api, DeleteOpts, set_condition};
use super::controllers::{is_deleting, name_of, ns_of, record_event, rid, uid_of};
use super::ids;

const COMPONENT: &str = "kubelet";
/// The shortest time a kubelet gives a container between TERM and KILL (its
/// `minimumGracePeriodInSeconds`), also when the pod was force-deleted.
const MIN_GRACE_SECS: u64 = 2;
/// How much output a failed container's message keeps with FallbackToLogsOnError.
const LOG_TAIL_BYTES: usize = 2048;
/// What the kubelet keeps of a container's termination message file (its
/// `MaxContainerTerminationMessageLength`).
const MAX_TERMINATION_MESSAGE_BYTES: usize = 4096;

/// Makes the directory `sub` inside the volume at `volume`, one component at a time, as a
/// kubelet makes a missing subPath: a component that is a link leading out of the volume
/// is refused, and nothing is made through it.
fn make_sub_path(volume: &Path, sub: &str) -> Result<(), String> {
    let _ = std::fs::create_dir_all(volume);
    let inside = std::fs::canonicalize(volume).unwrap_or_else(|_| volume.to_path_buf());
    let mut p = volume.to_path_buf();
    if sub.starts_with('/') {
        return Err(format!("subpath {sub:?} must be a relative path"));
    }
    for component in sub.split('/').filter(|c| !c.is_empty()) {
        if component == ".." {
            return Err(format!("subpath {sub:?} must not contain '..'"));
        }
        p.push(component);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::canonicalize(&p).unwrap_or_default();
                if !target.starts_with(&inside) {
                    return Err(format!(
                        "subpath {sub:?} not within volume path {:?}",
                        volume.display()
                    ));
                }
            }
            Ok(_) => {}
            Err(_) => std::fs::create_dir(&p).map_err(|e| format!("cannot make {sub:?}: {e}"))?,
        }
    }
    Ok(())
}

/// Output of every container, by pod, for `kubectl logs` and the controller's fallback.
#[derive(Default)]
pub struct PodLogs(Mutex<HashMap<(String, String), String>>);

impl PodLogs {
    pub fn get(&self, ns: &str, name: &str) -> String {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    fn append(&self, ns: &str, name: &str, text: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((ns.to_owned(), name.to_owned()))
            .or_default()
            .push_str(text);
    }
}

pub struct Kubelet {
    api: Arc<Api>,
    pub logs: Arc<PodLogs>,
    images_dir: PathBuf,
    image_map: BTreeMap<String, PathBuf>,
    work_dir: PathBuf,
    kubeconfig: PathBuf,
    extra_path: Vec<PathBuf>,
    nodes: Vec<String>,
    /// How containers get their volumes: mounted in a root of their own, or linked.
    isolation: mounts::Isolation,
    /// Pods (by uid) this kubelet has taken on.
    started: Mutex<HashSet<String>>,
    /// Process groups of running containers, by pod uid, and how to ask them to stop.
    running: Mutex<HashMap<String, Vec<Running>>>,
    /// With `SandboxOptions::auth`: the authenticator and the server URL; pods then get a
    /// kubeconfig of their own carrying their ServiceAccount's token.
    pub auth: Option<(Arc<super::auth::Authenticator>, super::auth::Endpoint)>,
}

/// A running container: its process group, and the signal that it is being stopped.
type Running = (u32, Option<oneshot::Sender<()>>);

/// Why a container could not start, as the kubelet reports it.
struct Waiting {
    reason: &'static str,
    message: String,
}

struct Prepared {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    /// The container's environment.
    env: Vec<(String, String)>,
    /// What the started process gets instead, when it is not the container's program itself
    /// (the set-up of a root of its own, which hands `env` on to the program).
    launch_env: Option<Vec<(String, String)>>,
    fallback_to_logs: bool,
}

/// `registry.example.com:5000/team/nfs-provision:1.4@sha256:...` -> `nfs-provision`.
pub fn image_short_name(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split(':').next().unwrap_or(last)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl Kubelet {
    pub fn new(api: Arc<Api>, opts: &SandboxOptions, work_dir: &Path, kubeconfig: &Path) -> Self {
        Kubelet {
            api,
            logs: Arc::new(PodLogs::default()),
            images_dir: opts.images_dir.clone(),
            image_map: opts.image_map.clone(),
            work_dir: work_dir.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            extra_path: opts.extra_path.clone(),
            nodes: opts.nodes.clone(),
            isolation: mounts::Isolation::of_this_process(),
            started: Mutex::new(HashSet::new()),
            running: Mutex::new(HashMap::new()),
            auth: None,
        }
    }

    pub fn node_root(&self, node: &str) -> PathBuf {
        self.work_dir.join("nodes").join(node)
    }

    /// The directory a pod's containers have as their root (or their volumes linked under):
    /// outside the pod's own directory, which its containers may write.
    fn pod_root(&self, pod: &Value) -> PathBuf {
        self.work_dir.join("roots").join(uid_of(pod))
    }

    /// What the pods of `node` see as `$SANDBOX_STATE`.
    pub fn state_dir(&self, node: &str) -> PathBuf {
        self.work_dir.join("state").join(node)
    }

    /// Whether containers get their volumes in a root and mount namespace of their own.
    pub fn mounts_volumes(&self) -> bool {
        self.isolation == mounts::Isolation::Namespaced
    }

    fn resolve_image(&self, image: &str) -> Option<PathBuf> {
        let short = image_short_name(image);
        if let Some(p) = self
            .image_map
            .get(image)
            .or_else(|| self.image_map.get(short))
        {
            return Some(p.clone());
        }
        let dir = self.images_dir.join(short);
        ["entrypoint", "entrypoint.sh"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| is_executable(p))
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
    }

    /// Stops every process (the sandbox is going away).
    pub fn kill_all(&self) {
        let running = std::mem::take(&mut *self.running.lock().unwrap_or_else(|e| e.into_inner()));
        for pgid in running.values().flatten().map(|(p, _)| *p) {
            signal(pgid, "KILL");
        }
    }

    pub async fn run(self: Arc<Self>) {
        let pods = rid("", "pods");
        let mut rx = self.api.store.subscribe();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            // Changed pods are looked at as they change; every pod on the tick.
            let mut changed: Vec<(String, String)> = Vec::new();
            // Pods removed from the API (force-deleted, or deleted with no grace left).
            let mut gone: Vec<String> = Vec::new();
            let mut full = false;
            let mut note = |c: Result<Arc<super::store::Change>, _>| match c {
                Ok(c) if c.rid == pods => {
                    if c.event == super::store::EventType::Deleted {
                        gone.push(uid_of(&c.object).to_owned());
                    }
                    changed.push((ns_of(&c.object).to_owned(), name_of(&c.object).to_owned()))
                }
                Ok(_) => {}
                Err(_) => full = true,
            };
            let ticked = tokio::select! {
                msg = rx.recv() => {
                    note(msg.map_err(|_| ()));
                    false
                }
                _ = tick.tick() => true,
            };
            loop {
                match rx.try_recv() {
                    Ok(c) => note(Ok(c)),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => note(Err(())),
                    Err(_) => break,
                }
            }
            let full = full || ticked;
            let nodes = self.nodes.clone();
            let on_our_node = |p: &Value| {
                p["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| nodes.iter().any(|x| x == n))
            };
            let mine: Vec<Value> = if full {
                self.api.store.list(pods, None, on_our_node).0
            } else {
                changed.sort();
                changed.dedup();
                changed
                    .iter()
                    .filter_map(|(ns, name)| self.api.store.get(pods, ns, name))
                    .filter(|p| on_our_node(p))
                    .collect()
            };
            if full {
                // Whatever still runs for a pod the API no longer has (a deletion this loop
                // missed, or a container started just as its pod went).
                let live: HashSet<&str> = mine.iter().map(uid_of).collect();
                let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
                gone.extend(
                    running
                        .keys()
                        .filter(|uid| !live.contains(uid.as_str()))
                        .cloned(),
                );
            }
            // A pod whose object is gone stops now: its containers get TERM, and KILL after
            // the kubelet's minimum grace period.
            gone.sort();
            gone.dedup();
            for uid in &gone {
                self.terminate(uid, MIN_GRACE_SECS);
            }
            for pod in mine {
                let uid = uid_of(&pod).to_owned();
                if is_deleting(&pod) {
                    self.stop(&pod);
                    continue;
                }
                let terminal = matches!(
                    pod["status"]["phase"].as_str(),
                    Some("Succeeded" | "Failed")
                );
                if terminal
                    || !self
                        .started
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(uid)
                {
                    continue;
                }
                let me = self.clone();
                tokio::spawn(async move { me.run_pod(pod).await });
            }
        }
    }

    /// A deleted pod: stop its containers; once they are gone, remove the pod.
    fn stop(&self, pod: &Value) {
        let grace = pod["metadata"]["deletionGracePeriodSeconds"]
            .as_u64()
            .unwrap_or(30)
            .min(30);
        if !self.terminate(uid_of(pod), grace) {
            self.remove_pod(pod);
        }
    }

    /// Stops the running containers of a pod (by uid): TERM to each process group, KILL
    /// after `grace` seconds. Says whether the pod has containers (stopping or not).
    fn terminate(&self, uid: &str, grace: u64) -> bool {
        let entries = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(uid)
            .map(|v| {
                v.iter_mut()
                    .map(|(pgid, tx)| (*pgid, tx.take()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        if entries.is_empty() {
            return false;
        }
        // Containers already being stopped have their KILL scheduled.
        for (pgid, tx) in entries {
            if let Some(tx) = tx {
                let _ = tx.send(());
                signal(pgid, "TERM");
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(grace)).await;
                    signal(pgid, "KILL");
                });
            }
        }
        true
    }

    /// Writes to this pod only: not to another made since under the same name.
    fn write_pod(&self, pod: &Value, f: impl FnOnce(&mut Value)) -> Option<Value> {
        let uid = uid_of(pod).to_owned();
        super::controllers::modify(&self.api, rid("", "pods"), ns_of(pod), name_of(pod), |p| {
            if uid_of(p) == uid {
                f(p)
            }
        })
    }

    /// Removes this pod's object (not another's of the same name) once it has stopped.
    fn remove_pod(&self, pod: &Value) {
        let opts = DeleteOpts {
            grace_period: Some(0),
            precondition_uid: Some(uid_of(pod).to_owned()),
            ..Default::default()
        };
        let _ = self
            .api
            .delete(rid("", "pods"), ns_of(pod), name_of(pod), &opts);
    }

    fn lookup(
        &self,
        plural: &str,
        ns: &str,
        name: &str,
        key: &str,
        optional: bool,
    ) -> Result<Option<String>, Waiting> {
        let kind = if plural == "secrets" {
            "secret"
        } else {
            "configmap"
        };
        let Some(obj) = self.api.store.get(rid("", plural), ns, name) else {
            return if optional {
                Ok(None)
            } else {
                Err(Waiting {
                    reason: "CreateContainerConfigError",
                    message: format!("{kind} \"{name}\" not found"),
                })
            };
        };
        let value = if plural == "secrets" {
            obj["data"][key]
                .as_str()
                .and_then(decode_base64)
                .or_else(|| obj["stringData"][key].as_str().map(str::to_owned))
        } else {
            obj["data"][key].as_str().map(str::to_owned)
        };
        match value {
            Some(v) => Ok(Some(v)),
            None if optional => Ok(None),
            None => Err(Waiting {
                reason: "CreateContainerConfigError",
                message: format!("couldn't find key {key} in {kind} {ns}/{name}"),
            }),
        }
    }

    fn resolve_env(&self, pod: &Value, c: &Value) -> Result<Vec<(String, String)>, Waiting> {
        let ns = ns_of(pod);
        let mut env = Vec::new();
        for from in c["envFrom"].as_array().into_iter().flatten() {
            let prefix = from["prefix"].as_str().unwrap_or_default();
            for (plural, key) in [("configmaps", "configMapRef"), ("secrets", "secretRef")] {
                let Some(name) = from[key]["name"].as_str() else {
                    continue;
                };
                let optional = from[key]["optional"] == true;
                match self.api.store.get(rid("", plural), ns, name) {
                    Some(obj) => {
                        for (k, v) in obj["data"].as_object().into_iter().flatten() {
                            let v = v.as_str().unwrap_or_default();
                            let v = if plural == "secrets" {
                                decode_base64(v).unwrap_or_default()
                            } else {
                                v.to_owned()
                            };
                            env.push((format!("{prefix}{k}"), v));
                        }
                    }
                    None if optional => {}
                    None => {
                        let kind = if plural == "secrets" {
                            "secret"
                        } else {
                            "configmap"
                        };
                        return Err(Waiting {
                            reason: "CreateContainerConfigError",
                            message: format!("{kind} \"{name}\" not found"),
                        });
                    }
                }
            }
        }
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or_default().to_owned();
            let value = if let Some(v) = e["value"].as_str() {
                Some(v.to_owned())
            } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some(match path {
                    "metadata.name" => name_of(pod).to_owned(),
                    "metadata.namespace" => ns.to_owned(),
                    "metadata.uid" => uid_of(pod).to_owned(),
                    "spec.nodeName" => pod["spec"]["nodeName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    "spec.serviceAccountName" => pod["spec"]["serviceAccountName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
                    other => {
                        let key = other
                            .trim_start_matches("metadata.labels['")
                            .trim_start_matches("metadata.annotations['")
                            .trim_end_matches("']");
                        if other.starts_with("metadata.labels") {
                            pod["metadata"]["labels"][key]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned()
                        } else {
                            pod["metadata"]["annotations"][key]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned()
                        }
                    }
                })
            } else if let Some(r) = e["valueFrom"]["secretKeyRef"].as_object() {
                self.lookup(
                    "secrets",
                    ns,
                    r["name"].as_str().unwrap_or_default(),
                    r["key"].as_str().unwrap_or_default(),
                    r.get("optional") == Some(&json!(true)),
                )?
            } else if let Some(r) = e["valueFrom"]["configMapKeyRef"].as_object() {
                self.lookup(
                    "configmaps",
                    ns,
                    r["name"].as_str().unwrap_or_default(),
                    r["key"].as_str().unwrap_or_default(),
                    r.get("optional") == Some(&json!(true)),
                )?
            } else {
                Some(String::new())
            };
            if let Some(v) = value {
                env.push((name, v));
            }
        }
        Ok(env)
    }

    fn prepare(
        &self,
        pod: &Value,
        c: &Value,
        pod_dir: &Path,
        node: &str,
        volumes: &[mounts::Mount],
    ) -> Result<Prepared, Waiting> {
        let image = c["image"].as_str().unwrap_or_default();
        let Some(entrypoint) = self.resolve_image(image) else {
            return Err(Waiting {
                reason: "ErrImagePull",
                message: format!(
                    "failed to pull and unpack image \"{image}\": the sandbox maps no executable to it (looked for {}/{}/entrypoint; use --image-map {image}=PATH)",
                    self.images_dir.display(),
                    image_short_name(image)
                ),
            });
        };
        let mut env = self.resolve_env(pod, c)?;
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        let extra: Vec<String> = self
            .extra_path
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let full_path = if extra.is_empty() {
            path
        } else {
            format!("{}:{path}", extra.join(":"))
        };
        let name = c["name"].as_str().unwrap_or_default().to_owned();
        let term = pod_dir.join(format!("{name}.termination-log"));
        let kubeconfig = self.pod_kubeconfig(pod, pod_dir);
        let pod_root = self.pod_root(pod);
        let sandbox_root = match self.isolation {
            mounts::Isolation::Namespaced => String::new(),
            mounts::Isolation::Linked => pod_root.display().to_string(),
        };
        let state = self.state_dir(node);
        for (k, v) in [
            ("PATH", full_path),
            ("HOME", pod_dir.display().to_string()),
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("TERMINATION_LOG", term.display().to_string()),
            ("SANDBOX_ROOT", sandbox_root),
            ("SANDBOX_STATE", state.display().to_string()),
            ("SANDBOX_NODE", node.to_owned()),
            ("HOSTNAME", name_of(pod).to_owned()),
        ] {
            env.retain(|(n, _)| n != k);
            env.push((k.to_owned(), v));
        }
        let command: Vec<String> = c["command"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect();
        let args: Vec<String> = c["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect();
        // An image's own programs live beside its entrypoint; a `command` naming one of
        // them (by path inside the image) runs that file.
        let (program, args) = match command.split_first() {
            None => (entrypoint, args),
            Some((first, rest)) => {
                let beside = entrypoint
                    .parent()
                    .map(|d| d.join(Path::new(first).file_name().unwrap_or_default()));
                let program = beside
                    .filter(|p| is_executable(p))
                    .unwrap_or_else(|| PathBuf::from(first));
                (program, rest.iter().cloned().chain(args).collect())
            }
        };
        let image_dir = program.parent().map(Path::to_path_buf);
        let (mut program, mut args) = capabilities::confine(c, program, args, &env)?;
        let mut launch_env = None;
        if self.isolation == mounts::Isolation::Namespaced {
            let same_place = |p: &Path, read_only| mounts::Mount {
                source: p.to_path_buf(),
                target: p.display().to_string(),
                read_only,
            };
            // The image's files (and the scripts' shared library beside them), the tools
            // put on the PATH, the pod's own directory (home, termination log, kubeconfig)
            // and the node's state appear where the host has them.
            let mut all: Vec<mounts::Mount> = image_dir
                .iter()
                .flat_map(|d| [d.clone(), d.with_file_name("lib")])
                .chain(self.extra_path.iter().cloned())
                .filter(|p| p.is_dir() && p.parent().is_some())
                .map(|p| same_place(&p, true))
                .collect();
            all.push(same_place(pod_dir, false));
            if !kubeconfig.starts_with(pod_dir) {
                all.push(same_place(&kubeconfig, true));
            }
            all.push(same_place(&state, false));
            all.push(mounts::Mount {
                source: pod_dir.join("tmp"),
                target: "/tmp".into(),
                read_only: false,
            });
            let _ = std::fs::create_dir_all(pod_dir.join("tmp"));
            let _ = std::fs::create_dir_all(&pod_root);
            all.extend(volumes.iter().cloned());
            (program, args) = mounts::namespaced(&pod_root, pod_dir, all, &program, &args, &env);
            launch_env = Some(
                mounts::setup_env()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .into(),
            );
        }
        Ok(Prepared {
            name,
            program,
            args,
            env,
            launch_env,
            fallback_to_logs: c["terminationMessagePolicy"] == "FallbackToLogsOnError",
        })
    }

    /// The kubeconfig a pod's containers get: the sandbox's, or with auth on one of the
    /// pod's own with a token for its ServiceAccount (none when the pod or its account
    /// says `automountServiceAccountToken: false`).
    fn pod_kubeconfig(&self, pod: &Value, pod_dir: &Path) -> PathBuf {
        let Some((authn, endpoint)) = &self.auth else {
            return self.kubeconfig.clone();
        };
        let path = pod_dir.join("kubeconfig");
        if path.exists() {
            return path;
        }
        let ns = ns_of(pod);
        let sa_name = pod["spec"]["serviceAccountName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        let sa = self
            .api
            .get(rid("", "serviceaccounts"), ns, sa_name)
            .unwrap_or(Value::Null);
        let automount = pod["spec"]["automountServiceAccountToken"]
            .as_bool()
            .or_else(|| sa["automountServiceAccountToken"].as_bool())
            .unwrap_or(true);
        let token = (automount && sa.is_object()).then(|| {
            let uid = sa["metadata"]["uid"].as_str().unwrap_or_default();
            authn.issue_service_account(ns, sa_name, uid, None).0
        });
        let _ = std::fs::write(&path, endpoint.kubeconfig(token.as_deref()));
        path
    }

    /// Each mounted volume (or its `subPath`) with where the pod's containers see it. A
    /// `subPath` that leaves its volume through a link fails the pod as a kubelet fails it
    /// (CreateContainerConfigError), before any container starts.
    fn volume_mounts(
        &self,
        pod: &Value,
        pod_dir: &Path,
        node: &str,
    ) -> Result<Vec<mounts::Mount>, Waiting> {
        let root = self.node_root(node);
        let volumes: BTreeMap<String, Value> = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (v["name"].as_str().unwrap_or_default().to_owned(), v.clone()))
            .collect();
        let containers = pod["spec"]["containers"].as_array().into_iter().flatten();
        let init = pod["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten();
        let mut found = Vec::new();
        for m in containers
            .chain(init)
            .flat_map(|c| c["volumeMounts"].as_array().cloned().unwrap_or_default())
        {
            let Some(v) = volumes.get(m["name"].as_str().unwrap_or_default()) else {
                continue;
            };
            let Some(mut source) = self.backing_dir(v, pod, pod_dir, &root) else {
                continue;
            };
            // The API server refuses such paths; the sandbox does not validate pods, so its
            // kubelet refuses any that would reach past the node's, the exports' or the pod's
            // own directories.
            let inside = [&root, &self.work_dir.join("nfs"), &pod_dir.to_path_buf()]
                .iter()
                .any(|base| source.starts_with(base));
            if !inside
                || source
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                return Err(Waiting {
                    reason: "CreateContainerConfigError",
                    message: format!(
                        "volume \"{}\" must not name a path with '..' or outside its place",
                        v["name"].as_str().unwrap_or_default()
                    ),
                });
            }
            let mut target = m["mountPath"].as_str().unwrap_or_default().to_owned();
            // A subPath is a directory inside the volume, made when missing, as a kubelet
            // makes it.
            if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
                make_sub_path(&source, sub).map_err(|why| Waiting {
                    reason: "CreateContainerConfigError",
                    message: format!(
                        "failed to prepare subPath for volumeMount \"{}\": {why}",
                        m["name"].as_str().unwrap_or_default()
                    ),
                })?;
                // Linked at the path it has below the volume's own mount (as
                // flex-provisioner's per-volume mounts are), the whole volume goes there
                // instead: a link cannot stand for a mount inside a directory, and a link in
                // the way would be refused by the images' scripts
                // (docs/sandbox-known-differences.md).
                match target.strip_suffix(&format!("/{sub}")) {
                    Some(volume_path) if self.isolation == mounts::Isolation::Linked => {
                        target = volume_path.to_owned()
                    }
                    _ => source = source.join(sub),
                }
            }
            if !source.exists() {
                let _ = std::fs::create_dir_all(&source);
            }
            found.push(mounts::Mount {
                source,
                target,
                read_only: m["readOnly"] == Value::Bool(true)
                    || v["persistentVolumeClaim"]["readOnly"] == Value::Bool(true),
            });
        }
        Ok(found)
    }

    fn backing_dir(&self, v: &Value, pod: &Value, pod_dir: &Path, root: &Path) -> Option<PathBuf> {
        let under_root = |p: &str| root.join(p.trim_start_matches('/'));
        let nfs = |server: &str, path: &str| {
            self.work_dir
                .join("nfs")
                .join(server)
                .join(path.trim_start_matches('/'))
        };
        if let Some(p) = v["hostPath"]["path"].as_str() {
            return Some(under_root(p));
        }
        if let Some(server) = v["nfs"]["server"].as_str() {
            return Some(nfs(server, v["nfs"]["path"].as_str().unwrap_or_default()));
        }
        if v.get("emptyDir").is_some() {
            return Some(
                pod_dir
                    .join("volumes")
                    .join(v["name"].as_str().unwrap_or_default()),
            );
        }
        let claim = v["persistentVolumeClaim"]["claimName"].as_str()?;
        let pvc = self
            .api
            .store
            .get(rid("", "persistentvolumeclaims"), ns_of(pod), claim)?;
        let pv = self.api.store.get(
            rid("", "persistentvolumes"),
            "",
            pvc["spec"]["volumeName"].as_str()?,
        )?;
        let spec = &pv["spec"];
        spec["hostPath"]["path"]
            .as_str()
            .or_else(|| spec["local"]["path"].as_str())
            .map(under_root)
            .or_else(|| {
                spec["nfs"]["server"]
                    .as_str()
                    .map(|s| nfs(s, spec["nfs"]["path"].as_str().unwrap_or_default()))
            })
    }

    async fn run_pod(self: Arc<Self>, pod: Value) {
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let pod_dir = self.work_dir.join("pods").join(uid_of(&pod));
        let _ = std::fs::create_dir_all(&pod_dir);
        let _ = std::fs::create_dir_all(self.node_root(&node));
        let _ = std::fs::create_dir_all(self.state_dir(&node));
        let mounted = self.volume_mounts(&pod, &pod_dir, &node);
        let containers: Vec<Value> = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let volumes = match (mounted, containers.first()) {
            (Err(w), Some(c)) => return self.cannot_start(&pod, c, w).await,
            (mounted, _) => mounted.unwrap_or_default(),
        };
        if self.isolation == mounts::Isolation::Linked {
            mounts::link(&self.pod_root(&pod), &volumes);
        }
        let mut prepared = Vec::new();
        for c in &containers {
            match self.prepare(&pod, c, &pod_dir, &node, &volumes) {
                Ok(p) => prepared.push(p),
                Err(w) => return self.cannot_start(&pod, c, w).await,
            }
        }
        let image_of = |name: &str| {
            containers
                .iter()
                .find(|c| c["name"] == name)
                .map(|c| c["image"].clone())
                .unwrap_or(Value::Null)
        };
        let started_at = ids::now();
        let statuses: Vec<Value> = prepared
            .iter()
            .map(|p| json!({"name": p.name, "image": image_of(&p.name), "imageID": "", "containerID": format!("sandbox://{}", ids::uid()),
                "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": started_at}}}))
            .collect();
        self.write_pod(&pod, |p| {
            p["status"]["phase"] = json!("Running");
            p["status"]["startTime"] = json!(started_at);
            p["status"]["podIP"] = json!("127.0.0.1");
            p["status"]["hostIP"] = json!("127.0.0.1");
            p["status"]["containerStatuses"] = json!(statuses);
            for t in [
                "PodReadyToStartContainers",
                "Initialized",
                "ContainersReady",
                "Ready",
            ] {
                set_condition(p, t, "True", None, None);
            }
        });
        let restart = pod["spec"]["restartPolicy"]
            .as_str()
            .unwrap_or("Always")
            .to_owned();
        let runs = prepared.into_iter().map(|p| {
            let me = self.clone();
            let pod = pod.clone();
            let restart = restart.clone();
            async move {
                let mut restarts = 0;
                loop {
                    let (code, message) = me.run_container(&pod, &p).await;
                    let again = !me.is_stopping(&pod)
                        && (restart == "Always" || (restart == "OnFailure" && code != 0));
                    if !again {
                        return (p.name.clone(), code, message, restarts);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    // Deleted while waiting to restart: nothing starts again.
                    if me.is_stopping(&pod) {
                        return (p.name.clone(), code, message, restarts);
                    }
                    restarts += 1;
                }
            }
        });
        let results = futures::future::join_all(runs).await;
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid_of(&pod));
        let finished_at = ids::now();
        let all_ok = results.iter().all(|(_, code, _, _)| *code == 0);
        let statuses: Vec<Value> = results
            .iter()
            .map(|(name, code, message, restarts)| {
                let mut term = json!({"exitCode": code, "reason": if *code == 0 { "Completed" } else { "Error" },
                    "startedAt": started_at, "finishedAt": finished_at, "containerID": format!("sandbox://{}", ids::uid())});
                if !message.is_empty() {
                    term["message"] = json!(message);
                }
                json!({"name": name, "image": image_of(name), "imageID": "", "containerID": term["containerID"],
                    "ready": false, "started": false, "restartCount": restarts, "state": {"terminated": term}})
            })
            .collect();
        let phase = if all_ok { "Succeeded" } else { "Failed" };
        let reason = if all_ok { "PodCompleted" } else { "PodFailed" };
        let stopping = self.is_stopping(&pod);
        self.write_pod(&pod, |p| {
            p["status"]["phase"] = json!(phase);
            p["status"]["containerStatuses"] = json!(statuses);
            for t in ["ContainersReady", "Ready"] {
                set_condition(p, t, "False", Some(reason), None);
            }
            set_condition(p, "PodReadyToStartContainers", "False", None, None);
        });
        if stopping {
            self.remove_pod(&pod);
        }
    }

    fn is_stopping(&self, pod: &Value) -> bool {
        self.api
            .store
            .get(rid("", "pods"), ns_of(pod), name_of(pod))
            .is_none_or(|p| is_deleting(&p) || uid_of(&p) != uid_of(pod))
    }

    async fn run_container(&self, pod: &Value, p: &Prepared) -> (i64, String) {
        use std::os::unix::process::CommandExt as _;
        let term_path = p
            .env
            .iter()
            .find(|(k, _)| k == "TERMINATION_LOG")
            .map(|(_, v)| PathBuf::from(v))
            .unwrap_or_default();
        let _ = std::fs::remove_file(&term_path);
        // One pipe for stdout and stderr keeps the output in the order it was written, as a
        // container runtime's log does.
        let (reader, writer) = match std::io::pipe() {
            Ok(pair) => pair,
            Err(e) => {
                return (
                    128,
                    format!("cannot create a pipe for container \"{}\": {e}", p.name),
                );
            }
        };
        let writer_err = match writer.try_clone() {
            Ok(w) => w,
            Err(e) => {
                return (
                    128,
                    format!("cannot create a pipe for container \"{}\": {e}", p.name),
                );
            }
        };
        let mut cmd = std::process::Command::new(&p.program);
        cmd.args(&p.args)
            .env_clear()
            .envs(
                p.launch_env
                    .as_ref()
                    .unwrap_or(&p.env)
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .current_dir(term_path.parent().unwrap_or(Path::new("/")))
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(writer_err)
            .process_group(0);
        let spawned = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let message = format!(
                    "failed to start container \"{}\": {}: {e}",
                    p.name,
                    p.program.display()
                );
                self.logs
                    .append(ns_of(pod), name_of(pod), &format!("{message}\n"));
                return (128, message);
            }
        };
        let pgid = child.id().unwrap_or_default();
        let (tx, rx) = oneshot::channel::<()>();
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(uid_of(pod).to_owned())
            .or_default()
            .push((pgid, Some(tx)));
        let logs = self.logs.clone();
        let (ns, name) = (ns_of(pod).to_owned(), name_of(pod).to_owned());
        let pump = tokio::task::spawn_blocking(move || {
            use std::io::Read as _;
            let mut reader = reader;
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                logs.append(&ns, &name, &String::from_utf8_lossy(&buf[..n]));
                out.extend_from_slice(&buf[..n]);
            }
            out
        });
        let pump = async move { pump.await.unwrap_or_default() };
        let (output, status) = tokio::join!(pump, child.wait());
        drop(rx);
        let code = match status {
            Ok(s) => s.code().map(i64::from).unwrap_or_else(|| {
                use std::os::unix::process::ExitStatusExt as _;
                128 + i64::from(s.signal().unwrap_or(9))
            }),
            Err(_) => 128,
        };
        // The kubelet keeps at most 4096 bytes of a termination message file.
        // Only a file the container wrote: never a link it left there for the host to follow.
        let written = std::fs::symlink_metadata(&term_path).is_ok_and(|m| m.is_file());
        let read = if written {
            std::fs::read(&term_path)
        } else {
            Err(std::io::ErrorKind::NotFound.into())
        };
        let mut message = read
            .map(|mut b| {
                b.truncate(MAX_TERMINATION_MESSAGE_BYTES);
                String::from_utf8_lossy(&b).into_owned()
            })
            .unwrap_or_default();
        if message.is_empty() && code != 0 && p.fallback_to_logs {
            let start = output.len().saturating_sub(LOG_TAIL_BYTES);
            message = String::from_utf8_lossy(&output[start..]).into_owned();
        }
        (code, message)
    }

    async fn cannot_start(&self, pod: &Value, c: &Value, w: Waiting) {
        let image = c["image"].clone();
        let name = c["name"].clone();
        let Waiting { reason, message } = w;
        let status = json!([{"name": name, "image": image, "imageID": "", "ready": false, "started": false,
            "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]);
        self.write_pod(pod, |p| {
            p["status"]["containerStatuses"] = status;
            set_condition(p, "Initialized", "True", None, None);
            set_condition(
                p,
                "ContainersReady",
                "False",
                Some("ContainersNotReady"),
                Some(&format!(
                    "containers with unready status: [{}]",
                    name.as_str().unwrap_or_default()
                )),
            );
            set_condition(p, "Ready", "False", Some("ContainersNotReady"), None);
        });
        let event = if reason == "ErrImagePull" {
            format!("Failed to pull image {image}: {message}")
        } else {
            format!("Error: {message}")
        };
        record_event(&self.api, pod, "Warning", "Failed", &event, COMPONENT);
        if reason == "ErrImagePull" {
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.write_pod(pod, |p| {
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] =
                    json!("ImagePullBackOff");
                p["status"]["containerStatuses"][0]["state"]["waiting"]["message"] =
                    json!(format!("Back-off pulling image {image}"));
            });
            record_event(
                &self.api,
                pod,
                "Normal",
                "BackOff",
                &format!("Back-off pulling image {image}"),
                COMPONENT,
            );
        }
        // A config error can be fixed (the secret created): try again later.
        if reason == "CreateContainerConfigError" {
            tokio::time::sleep(Duration::from_secs(2)).await;
            self.started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(uid_of(pod));
        }
    }
}

fn signal(pgid: u32, sig: &str) {
    if pgid == 0 {
        return;
    }
    // `--` so that the negative pid (the whole process group) is not read as an option.
    let _ = std::process::Command::new("kill")
        .args(["-s", sig, "--"])
        .arg(format!("-{pgid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn decode_base64(s: &str) -> Option<String> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
}
