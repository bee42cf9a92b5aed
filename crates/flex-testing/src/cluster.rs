//! Where the end-to-end tests run: the sandbox (the default), or a real Kubernetes control
//! plane when `FLEX_E2E_K8S` names a directory holding its `start` and `stop` scripts and
//! `fake-kubelet.py` (CI points it at a Kubernetes 1.36 control plane with simulated nodes).
//! The test code is the same on both: it sees a `Cluster`.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube_sandbox::Sandbox;

/// The environment variable that selects a real control plane.
pub const ENV: &str = "FLEX_E2E_K8S";
/// The nodes every test cluster has.
pub const NODES: [&str; 2] = ["node-a", "node-b"];

/// The environment variable that selects a real node for the tests of the shipped images:
/// the directory of their image tars (`scripts/build-images --base-tar ... --out DIR`).
/// With it, those tests start the control plane of `FLEX_E2E_K8S` with `--real-node`.
pub const REAL_NODE_ENV: &str = "FLEX_E2E_REAL_NODE";

/// The real node's control-plane scripts and image tars, when the image tests are to run
/// on a real kubelet.
pub fn real_node_target() -> Option<(PathBuf, PathBuf)> {
    let images = std::env::var_os(REAL_NODE_ENV).filter(|v| !v.is_empty())?;
    let images = super::root().join(images);
    let scripts = real_target()
        .unwrap_or_else(|| panic!("{REAL_NODE_ENV} is set: set {ENV} to the control plane too"));
    let tars: Vec<PathBuf> = std::fs::read_dir(&images)
        .unwrap_or_else(|e| panic!("{REAL_NODE_ENV}={}: {e}", images.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tar"))
        .collect();
    assert!(
        !tars.is_empty(),
        "{REAL_NODE_ENV}={} holds no image tar: run scripts/build-images first",
        images.display()
    );
    Some((scripts, images))
}

/// The real control plane's directory of scripts, when the tests are to run there.
pub fn real_target() -> Option<PathBuf> {
    let dir = std::env::var_os(ENV).filter(|v| !v.is_empty())?;
    let dir = PathBuf::from(dir);
    let dir = if dir.is_relative() {
        super::root().join(dir)
    } else {
        dir
    };
    assert!(
        dir.join("start").is_file() && dir.join("fake-kubelet.py").is_file(),
        "{ENV}={} does not hold a control plane's start script and fake-kubelet.py",
        dir.display()
    );
    Some(dir)
}

/// A cluster a test runs against.
pub struct Cluster {
    /// An admin's kubeconfig (kubectl works with it).
    pub kubeconfig: PathBuf,
    config: kube::Config,
    backend: Backend,
    /// Files the test wrote for this cluster (its images), removed after the backend
    /// (declared after it, so dropped after its pods are stopped).
    scratch: Vec<Scratch>,
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

enum Backend {
    Sandbox(Sandbox),
    Real(RealCluster),
    /// A real control plane whose one node is a real kubelet with containerd.
    RealNode(RealCluster),
}

impl Cluster {
    pub async fn from_sandbox(sb: Sandbox) -> Cluster {
        let config = config_of(&sb.kubeconfig).await;
        Cluster {
            kubeconfig: sb.kubeconfig.clone(),
            config,
            backend: Backend::Sandbox(sb),
            scratch: Vec::new(),
        }
    }

    /// Removes `dir` when the cluster is dropped, once its pods are stopped.
    pub fn owning(mut self, dir: PathBuf) -> Cluster {
        self.scratch.push(Scratch(dir));
        self
    }

    /// Serves the snapshot API on a real control plane: the VolumeSnapshot CRDs, and with
    /// `controller` the standard snapshot-controller too (the control plane's
    /// `addons/snapshots`); `false` on the sandbox, which does not serve it. Call it before
    /// the controller starts: the controller looks for the API once, at start.
    pub async fn serve_snapshots(&self, controller: bool) -> bool {
        let (Backend::Real(r) | Backend::RealNode(r)) = &self.backend else {
            return false;
        };
        let addon = r.scripts.join("addons/snapshots");
        let (dir, kubeconfig) = (r.dir.clone(), self.kubeconfig.clone());
        let run = move || {
            if controller {
                let out = Command::new(addon.join("start-snapshots"))
                    .arg(&dir)
                    .output();
                return vec![out.expect("start-snapshots runs")];
            }
            let crds = addon.join("crds").display().to_string();
            let apply = ["apply", "--server-side", "-f", &crds].map(String::from);
            let wait = [
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                "volumesnapshots.snapshot.storage.k8s.io",
                "volumesnapshotcontents.snapshot.storage.k8s.io",
                "volumesnapshotclasses.snapshot.storage.k8s.io",
            ]
            .map(String::from);
            vec![kubectl(&kubeconfig, &apply), kubectl(&kubeconfig, &wait)]
        };
        for out in tokio::task::spawn_blocking(run).await.unwrap() {
            assert!(
                out.status.success(),
                "serving the snapshot API failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        true
    }

    /// An admin's client.
    pub fn client(&self) -> Result<kube::Client, kube::Error> {
        kube::Client::try_from(self.config.clone())
    }

    /// An admin's client configuration (server, CA, credentials).
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// The directory standing for a node's filesystem root: pods on that node see it as
    /// `$SANDBOX_ROOT`.
    pub fn node_root(&self, node: &str) -> PathBuf {
        match &self.backend {
            Backend::Sandbox(sb) => sb.node_root(node),
            Backend::Real(r) => r.dir.join("nodes").join(node),
            // The kubelet mounts the host's own paths.
            Backend::RealNode(_) => PathBuf::from("/"),
        }
    }

    /// Whether pods get their volumes mounted (a real kubelet, or the sandbox run as root)
    /// rather than linked (the sandbox otherwise, the simulated node of a real control plane).
    pub fn mounts_volumes(&self) -> bool {
        match &self.backend {
            Backend::Sandbox(sb) => sb.mounts_volumes(),
            Backend::Real(_) => false,
            Backend::RealNode(_) => true,
        }
    }

    /// The directory the pods of a node share as `$SANDBOX_STATE`, where test images keep
    /// what a storage backend would (counters, probes).
    pub fn state_dir(&self, node: &str) -> PathBuf {
        match &self.backend {
            Backend::Sandbox(sb) => sb.state_dir(node),
            Backend::Real(r) => r.dir.join("state").join(node),
            Backend::RealNode(_) => {
                panic!("pods of the real node run real images, which keep no test state")
            }
        }
    }

    /// Where the files of NFS export `server:path` live (what a pod mounting it sees).
    pub fn nfs_dir(&self, server: &str, path: &str) -> PathBuf {
        let base = match &self.backend {
            Backend::Sandbox(sb) => sb.work_dir.join("nfs"),
            Backend::Real(r) | Backend::RealNode(r) => r.dir.join("nfs"),
        };
        base.join(server).join(path.trim_start_matches('/'))
    }

    /// The sandbox, for what only a simulation offers (fault injection, its store).
    pub fn sandbox(&self) -> Option<&Sandbox> {
        match &self.backend {
            Backend::Sandbox(sb) => Some(sb),
            Backend::Real(_) | Backend::RealNode(_) => None,
        }
    }

    /// The sandbox, for a test of what only a simulation can do (`what`); on a real control
    /// plane `None`, and the test says it did not run there.
    pub fn simulation(&self, what: &str) -> Option<&Sandbox> {
        let sb = self.sandbox();
        if sb.is_none() {
            eprintln!("{what} needs the sandbox: this test does not run on a real control plane");
        }
        sb
    }

    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real(_) | Backend::RealNode(_))
    }

    /// Whether pods run as real containers on a real kubelet.
    pub fn is_real_node(&self) -> bool {
        matches!(self.backend, Backend::RealNode(_))
    }

    /// Where a real control plane keeps its files (logs, pods), for messages.
    pub fn real_dir(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Real(r) | Backend::RealNode(r) => Some(&r.dir),
            Backend::Sandbox(_) => None,
        }
    }

    /// Creates the objects in `files` as `kubectl apply` would, one line per object
    /// (`kind/name created`, or why not).
    pub fn apply_files(&self, files: &[PathBuf]) -> Vec<String> {
        match &self.backend {
            Backend::Sandbox(sb) => {
                flex_provisioner::sandbox_cmd::apply_files(sb, files).expect("the files apply")
            }
            Backend::Real(_) | Backend::RealNode(_) => {
                let mut args = vec!["apply".to_string()];
                for f in files {
                    args.push("-f".into());
                    args.push(f.display().to_string());
                }
                let out = kubectl(&self.kubeconfig, &args);
                assert!(
                    out.status.success(),
                    "kubectl apply failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            }
        }
    }
}

/// Runs kubectl with `kubeconfig`; kubectl must be installed (the tests that need it fail
/// loudly without it).
pub fn kubectl(kubeconfig: &Path, args: &[String]) -> std::process::Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl is installed (CI installs Debian's kubernetes-client)")
}

async fn config_of(kubeconfig: &Path) -> kube::Config {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("a readable kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("a usable kubeconfig");
    config.default_namespace = "default".into();
    config
}

/// A real control plane started for one test, stopped (and its files removed) when the
/// test's cluster is dropped; kept for reading when the test failed.
struct RealCluster {
    scripts: PathBuf,
    dir: PathBuf,
    /// The second node's simulated kubelet, reaped once `stop` ended it.
    second_node: Option<std::process::Child>,
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        let _ = Command::new(self.scripts.join("stop"))
            .arg(&self.dir)
            .output();
        if let Some(mut c) = self.second_node.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "the failed test's control plane is kept in {} (logs/, pods/)",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A wrapper that runs `script` as a pod on `node` would in the sandbox: with the node's
/// directory as `$SANDBOX_ROOT`, the pod's volumes linked under it at their mount paths
/// (`mount.py`), and `extra_path` first on the PATH.
fn wrapper(script: &Path, dir: &Path, node: &str, extra_path: &[PathBuf]) -> String {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let path: Vec<String> = extra_path.iter().map(|p| quote(p)).collect();
    format!(
        "#!/bin/sh\nSANDBOX_ROOT={root}\nSANDBOX_STATE={state}\nSANDBOX_NODE={node}\nPATH={path}:\"$PATH\"\nexport SANDBOX_ROOT SANDBOX_STATE SANDBOX_NODE PATH\nmkdir -p \"$SANDBOX_ROOT\" \"$SANDBOX_STATE\"\npython3 {mount} {kubeconfig} \"$SANDBOX_ROOT\" {nfs} >&2 || echo 'cannot link the pod volumes' >&2\nexec {script} \"$@\"\n",
        root = quote(&dir.join("nodes").join(node)),
        state = quote(&dir.join("state").join(node)),
        path = path.join(":"),
        mount = quote(&dir.join("mount.py")),
        kubeconfig = quote(&dir.join("kubeconfig")),
        nfs = quote(&dir.join("nfs")),
        script = quote(script),
    )
}

/// What the sandbox's node does for a pod's volumes (crates/kube-sandbox/src/kubelet.rs),
/// for the simulated node of a real control plane, which mounts nothing: each volume's
/// backing directory (a hostPath or a claim's hostPath/local volume under the node's root,
/// an NFS export under the cluster's `nfs/`) is linked at `$SANDBOX_ROOT/<mountPath>`; a
/// `subPath` is made, and linked as the sandbox's kubelet links it.
const MOUNT_PY: &str = r#"import json, os, subprocess, sys
kubeconfig, root, nfs_root = sys.argv[1:4]
ns = os.path.basename(os.environ.get("HOME", "").rstrip("/")).split("_")[0]
pod_name = os.environ.get("HOSTNAME", "")
def get(*args):
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "-o", "json", *args],
                         capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None
def under(base, p):
    return os.path.join(base, p.lstrip("/"))
pod = get("pod", pod_name, "-n", ns)
if pod is None:
    sys.exit(0)
spec = pod.get("spec", {})
volumes = {v.get("name"): v for v in spec.get("volumes", [])}
def backing(v):
    if "hostPath" in v:
        return under(root, v["hostPath"].get("path", ""))
    if "nfs" in v:
        return under(os.path.join(nfs_root, v["nfs"].get("server", "")), v["nfs"].get("path", ""))
    claim = v.get("persistentVolumeClaim", {}).get("claimName")
    if not claim:
        return None
    pvc = get("pvc", claim, "-n", ns)
    name = (pvc or {}).get("spec", {}).get("volumeName")
    pv = get("pv", name) if name else None
    if pv is None:
        return None
    s = pv.get("spec", {})
    for kind in ("hostPath", "local"):
        if kind in s:
            return under(root, s[kind].get("path", ""))
    if "nfs" in s:
        return under(os.path.join(nfs_root, s["nfs"].get("server", "")), s["nfs"].get("path", ""))
    return None
for c in spec.get("initContainers", []) + spec.get("containers", []):
    for m in c.get("volumeMounts", []):
        v = volumes.get(m.get("name"))
        b = backing(v) if v else None
        if b is None:
            continue
        mount_path = m.get("mountPath", "")
        sub = m.get("subPath")
        if sub:
            os.makedirs(os.path.join(b, sub), exist_ok=True)
            if mount_path.endswith("/" + sub):
                mount_path = mount_path[: -len(sub) - 1]
            else:
                b = os.path.join(b, sub)
        os.makedirs(b, exist_ok=True)
        target = under(root, mount_path)
        if os.path.abspath(target) == os.path.abspath(b) or os.path.lexists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(b, target)
"#;

fn write_executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn start(scripts: &Path, dir: &Path) -> std::process::Output {
    Command::new(scripts.join("start"))
        .arg(dir)
        .args(["--node", NODES[0]])
        .output()
        .expect("the control plane's start script runs")
}

/// A stopped, empty control plane that every test's starts as a copy of: a restart of one
/// takes 5 s where a first start takes 11 s (most of it the controller-manager making the
/// default ServiceAccounts). Made once per machine and version of the scripts, under a
/// lock, so parallel tests and test binaries share it.
fn template(scripts: &Path) -> PathBuf {
    let mut key = Vec::new();
    for f in ["start", "stop", "fake-kubelet.py"] {
        key.extend(std::fs::read(scripts.join(f)).unwrap_or_default());
    }
    let key = flex_core::names::fnv1a32(&key);
    let dir = std::env::temp_dir().join(format!("flex-e2e-k8s-template-{key:08x}"));
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    lock.lock().expect("the template's lock");
    if !dir.join("made").exists() {
        let _ = std::fs::remove_dir_all(&dir);
        let out = start(scripts, &dir);
        assert!(
            out.status.success(),
            "the control plane did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = Command::new(scripts.join("stop")).arg(&dir).output();
        std::fs::write(dir.join("made"), "").unwrap();
    }
    dir
}

/// `template`'s files into `dir` (which holds the test's images already).
fn copy_template(template: &Path, dir: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", template.display()))
        .arg(dir)
        .output()
        .expect("cp runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(dir.join("made"));
}

/// Starts a real control plane from `scripts` with the two test nodes, each running
/// `images` (name -> entrypoint script) as the sandbox would.
pub async fn start_real(
    scripts: PathBuf,
    images: Vec<(String, PathBuf)>,
    extra_path: Vec<PathBuf>,
) -> Cluster {
    let dir = std::env::temp_dir().join(format!(
        "flex-e2e-k8s-{}-{}",
        std::process::id(),
        kube_sandbox::ids::name_suffix()
    ));
    for (i, node) in NODES.iter().enumerate() {
        let images_dir = if i == 0 {
            dir.join("images")
        } else {
            dir.join(format!("images-{node}"))
        };
        std::fs::create_dir_all(dir.join("nodes").join(node)).unwrap();
        for (name, script) in &images {
            write_executable(
                &images_dir.join(name).join("entrypoint"),
                &wrapper(script, &dir, node, &extra_path),
            );
        }
    }
    std::fs::write(dir.join("mount.py"), MOUNT_PY).unwrap();
    let mut real = RealCluster {
        scripts: scripts.clone(),
        dir: dir.clone(),
        second_node: None,
    };
    let started = {
        let (scripts, dir) = (scripts.clone(), dir.clone());
        tokio::task::spawn_blocking(move || {
            copy_template(&template(&scripts), &dir);
            start(&scripts, &dir)
        })
        .await
        .unwrap()
    };
    assert!(
        started.status.success(),
        "the control plane did not start: {}",
        String::from_utf8_lossy(&started.stderr)
    );
    let kubeconfig = dir.join("kubeconfig");
    // The second node: another simulated kubelet of the same control plane, stopped with
    // it (`stop` ends every process named in pids/).
    let server = std::fs::read_to_string(dir.join("env"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.trim_start_matches("export ")
                .strip_prefix("K8S_SERVER=")
                .map(|v| v.trim_matches(|c| c == '"' || c == '\'').to_owned())
        })
        .expect("K8S_SERVER in the control plane's env file");
    let log = std::fs::File::create(
        dir.join("logs")
            .join(format!("fake-kubelet-{}.log", NODES[1])),
    )
    .unwrap();
    let mut second = Command::new("python3");
    second
        .arg("-u")
        .arg(scripts.join("fake-kubelet.py"))
        .args(["--server", &server])
        .arg("--ca")
        .arg(dir.join("pki/ca.crt"))
        .arg("--token-file")
        .arg(dir.join("pki/fake-kubelet.token"))
        .args(["--node", NODES[1]])
        .arg("--images")
        .arg(dir.join(format!("images-{}", NODES[1])))
        .arg("--workdir")
        .arg(dir.join("pods"))
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    {
        use std::os::unix::process::CommandExt;
        second.process_group(0);
    }
    let child = second
        .spawn()
        .expect("python3 runs the second simulated node");
    std::fs::write(
        dir.join("pids")
            .join(format!("fake-kubelet-{}.pid", NODES[1])),
        child.id().to_string(),
    )
    .unwrap();
    real.second_node = Some(child);
    let config = config_of(&kubeconfig).await;
    let cluster = Cluster {
        kubeconfig,
        config,
        backend: Backend::Real(real),
        scratch: Vec::new(),
    };
    let nodes: Api<Node> = Api::all(cluster.client().unwrap());
    super::sandbox::eventually(60, "both simulated nodes to be Ready", || async {
        for n in NODES {
            let node = nodes.get_opt(n).await.ok()??;
            let ready = node
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if !ready {
                return None;
            }
        }
        Some(())
    })
    .await;
    cluster
}

/// Starts a real control plane from `scripts` whose one node, [`NODES`]`[0]`, is a real
/// kubelet with containerd, runc and a CNI bridge (root only), with the image tars of
/// `images` imported. Pods there are real containers: the kubelet mounts their volumes,
/// applies their securityContext and takes their termination messages.
pub async fn start_real_node(scripts: PathBuf, images: PathBuf) -> Cluster {
    // Unix sockets live under the directory: it must stay short.
    let dir = PathBuf::from(format!(
        "/tmp/flex-rn-{}-{}",
        std::process::id(),
        kube_sandbox::ids::name_suffix()
    ));
    std::fs::create_dir_all(dir.join("images")).unwrap();
    for entry in std::fs::read_dir(&images).unwrap() {
        let tar = entry.unwrap().path();
        if tar.extension().is_some_and(|x| x == "tar") {
            let to = dir.join("images").join(tar.file_name().unwrap());
            if std::fs::hard_link(&tar, &to).is_err() {
                std::fs::copy(&tar, &to).unwrap();
            }
        }
    }
    let real = RealCluster {
        scripts: scripts.clone(),
        dir: dir.clone(),
        second_node: None,
    };
    let started = tokio::task::spawn_blocking(move || {
        Command::new(scripts.join("start"))
            .arg(&dir)
            .args(["--real-node", "--node", NODES[0]])
            .output()
            .expect("the control plane's start script runs")
    })
    .await
    .unwrap();
    assert!(
        started.status.success(),
        "the control plane with a real node did not start (it needs root and Debian's \
         containerd, runc and containernetworking-plugins): {}",
        String::from_utf8_lossy(&started.stderr)
    );
    let kubeconfig = real.dir.join("kubeconfig");
    let config = config_of(&kubeconfig).await;
    Cluster {
        kubeconfig,
        config,
        backend: Backend::RealNode(real),
        scratch: Vec::new(),
    }
}
