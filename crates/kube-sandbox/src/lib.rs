//! kube-sandbox: a local Kubernetes on one machine. An in-process API server on 127.0.0.1
//! speaking the real REST protocol, simulated control-plane loops (namespaces, garbage
//! collector, PV controller, Job controller, scheduler) and a pod runner that maps images
//! to local executables. Used for quick starts, for trying provisioner images, and by test
//! suites through `Sandbox::start`.
//!
//! It is generic: it must not depend on, or know the names and types of, any product that
//! runs in it. Where it differs from Kubernetes in a way a client could notice, that is a
//! defect of the sandbox.
#![forbid(unsafe_code)]

pub mod admission;
pub mod api;
pub mod auth;
mod claim_resize;
pub(crate) mod controllers;
pub mod events;
pub mod faults;
pub mod ids;
mod impersonation;
pub mod kubelet;
pub mod managed;
mod openapi;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod requests;
pub mod resources;
pub mod selector;
mod server;
pub mod status;
pub mod store;
mod tables;
pub mod testing;
pub mod tls;
mod validation;
pub mod watch;
pub mod wellknown;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

pub use api::{Api, DeleteOpts, ListOpts, WriteCtx};
pub use faults::{Fault, Faults};
pub use requests::{RequestCounter, RequestCounts};

/// How to start a sandbox. `Default` gives one node, images from `provisioner-images/`, and
/// the Job controller's real pod backoff (10 s, doubling).
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// Node names; each gets a directory under the work dir standing for its filesystem.
    pub nodes: Vec<String>,
    /// Where `<image name>/entrypoint` executables are looked up.
    pub images_dir: PathBuf,
    /// Explicit image -> executable mappings (full image reference or bare name).
    pub image_map: BTreeMap<String, PathBuf>,
    /// How many changes the watch history keeps; older versions get 410 Gone.
    pub history_window: usize,
    /// The Job controller's delay before replacing a failed pod (doubling each time).
    pub pod_backoff: Duration,
    /// Where to write the kubeconfig (default: in the work dir).
    pub kubeconfig: Option<PathBuf>,
    /// Scratch space for logs, termination messages and node filesystems (default: a new
    /// directory under the system temp dir, removed when the sandbox is dropped).
    pub work_dir: Option<PathBuf>,
    /// Directories put first on the PATH of every pod (e.g. helper binaries images call).
    pub extra_path: Vec<PathBuf>,
    /// Port to listen on (0: any free port).
    pub port: u16,
    /// Authentication by bearer token and authorization by RBAC (off: anyone may do
    /// anything). On, the kubeconfig carries an admin token (user `admin` in
    /// `system:masters`) and pods get a token for their ServiceAccount, and the server
    /// speaks HTTPS (kubectl sends tokens only over TLS) with a CA made at start, which
    /// the kubeconfigs carry; plain HTTP keeps working on the same port.
    pub auth: bool,
    /// A client rate limit (QPS, burst) shared by the Job controller, scheduler and garbage
    /// collector, as kube-controller-manager's client has (20, 30). None: unlimited.
    pub controller_qps: Option<(f64, u32)>,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            nodes: vec!["sandbox-node-1".into()],
            images_dir: PathBuf::from("images"),
            image_map: BTreeMap::new(),
            history_window: 50_000,
            pod_backoff: Duration::from_secs(10),
            kubeconfig: None,
            work_dir: None,
            extra_path: Vec::new(),
            port: 0,
            auth: false,
            controller_qps: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Listen { port: u16, source: std::io::Error },
    #[error("cannot prepare {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot build a client for the sandbox: {0}")]
    Client(String),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// A running sandbox. Dropping it stops the server, the loops and every pod process.
pub struct Sandbox {
    pub addr: SocketAddr,
    pub api: Arc<Api>,
    pub faults: Arc<Faults>,
    pub kubeconfig: PathBuf,
    pub work_dir: PathBuf,
    pub kubelet: Arc<kubelet::Kubelet>,
    /// The token authenticator, when `SandboxOptions::auth` is on.
    pub auth: Option<Arc<auth::Authenticator>>,
    /// The CA and certificate of HTTPS, when `SandboxOptions::auth` is on.
    pub tls: Option<tls::Tls>,
    /// Every request the API server has served, by client, verb and resource.
    pub requests: Arc<RequestCounter>,
    owns_work_dir: bool,
    tasks: Vec<JoinHandle<()>>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Sandbox {
    pub async fn start(opts: SandboxOptions) -> Result<Sandbox, SandboxError> {
        let owns_work_dir = opts.work_dir.is_none();
        let work_dir = opts.work_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!(
                "kube-sandbox-{}-{}",
                std::process::id(),
                ids::name_suffix()
            ))
        });
        std::fs::create_dir_all(&work_dir).map_err(io_err(&work_dir))?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", opts.port))
            .await
            .map_err(|source| SandboxError::Listen {
                port: opts.port,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SandboxError::Listen {
                port: opts.port,
                source,
            })?;
        let kubeconfig = opts
            .kubeconfig
            .clone()
            .unwrap_or_else(|| work_dir.join("kubeconfig"));
        let authn = opts.auth.then(|| Arc::new(auth::Authenticator::new()));
        let tls = if opts.auth {
            Some(tls::Tls::new()?)
        } else {
            None
        };
        let endpoint = auth::Endpoint {
            server: match tls {
                Some(_) => format!("https://{addr}"),
                None => format!("http://{addr}"),
            },
            ca_data: tls.as_ref().map(tls::Tls::ca_data),
        };
        let admin_token = authn.as_ref().map(|a| a.admin_token().to_owned());
        std::fs::write(&kubeconfig, endpoint.kubeconfig(admin_token.as_deref()))
            .map_err(io_err(&kubeconfig))?;

        let api = Arc::new(Api::new(opts.history_window));
        let faults = Arc::new(Faults::default());
        let mut kubelet = kubelet::Kubelet::new(api.clone(), &opts, &work_dir, &kubeconfig);
        kubelet.auth = authn.clone().map(|a| (a, endpoint.clone()));
        let kubelet = Arc::new(kubelet);
        controllers::bootstrap(&api, &opts.nodes);
        if authn.is_some() {
            auth::bootstrap_policy(&api);
        }
        let requests = Arc::new(RequestCounter::default());
        let shared = Arc::new(server::Shared {
            api: api.clone(),
            faults: faults.clone(),
            logs: kubelet.logs.clone(),
            auth: authn.clone(),
            requests: requests.clone(),
        });
        let acceptor = tls.as_ref().map(|t| t.acceptor.clone());
        let mut tasks = vec![tokio::spawn(server::serve(listener, shared, acceptor))];
        tasks.extend(controllers::spawn_all(api.clone(), &opts));
        tasks.push(tokio::spawn(kubelet.clone().run()));
        Ok(Sandbox {
            addr,
            api,
            faults,
            kubeconfig,
            work_dir,
            kubelet,
            auth: authn,
            tls,
            requests,
            owns_work_dir,
            tasks,
        })
    }

    /// Plain HTTP, which the sandbox always answers (also with auth on, for test clients
    /// that send a token without checking the server's certificate).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The URL the kubeconfigs name: HTTPS when auth is on, else plain HTTP.
    pub fn server_url(&self) -> String {
        match self.tls {
            Some(_) => format!("https://{}", self.addr),
            None => self.url(),
        }
    }

    /// A kube client for the sandbox, as a controller outside it would have: over HTTPS
    /// trusting the sandbox's CA, with the admin token, when auth is on.
    pub fn client(&self) -> Result<kube::Client, SandboxError> {
        let uri: hyper::Uri = self
            .server_url()
            .parse()
            .map_err(|e| SandboxError::Client(format!("{e}")))?;
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        config.read_timeout = Some(Duration::from_secs(300));
        if let Some(t) = &self.tls {
            config.root_cert = Some(vec![t.ca_der.clone()]);
        }
        if let Some(a) = &self.auth {
            config.auth_info =
                serde_json::from_value(serde_json::json!({"token": a.admin_token()}))
                    .map_err(|e| SandboxError::Client(e.to_string()))?;
        }
        kube::Client::try_from(config).map_err(|e| SandboxError::Client(e.to_string()))
    }

    /// The requests the API server has served so far, by (User-Agent product, verb,
    /// resource): the verb as RBAC names it (get, list, watch, create, update, patch,
    /// delete; a watch counts once, when opened), the resource as its plural with any
    /// `/subresource`. Requests that fail count too; those that name no resource (discovery,
    /// `/version`) count under their path, with the HTTP method in lower case as verb.
    pub fn request_counts(&self) -> RequestCounts {
        self.requests.snapshot()
    }

    /// Starts counting requests from zero.
    pub fn reset_request_counts(&self) {
        self.requests.reset();
    }

    /// The directory standing for a node's filesystem root.
    pub fn node_root(&self, node: &str) -> PathBuf {
        self.kubelet.node_root(node)
    }

    /// A directory the pods of a node share as `$SANDBOX_STATE`, where test images keep what
    /// a storage backend would (counters, probes); no volume shows it.
    pub fn state_dir(&self, node: &str) -> PathBuf {
        self.kubelet.state_dir(node)
    }

    /// Whether each container gets its volumes mounted in a root of its own (the sandbox
    /// runs as root), rather than linked.
    pub fn mounts_volumes(&self) -> bool {
        self.kubelet.mounts_volumes()
    }

    /// Forgets the watch history: watches from older versions get 410 Gone.
    pub fn compact(&self) {
        self.api.store.compact();
    }

    pub fn close_watches(&self) {
        self.faults.close_watches();
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.kubelet.kill_all();
        if self.owns_work_dir {
            let _ = std::fs::remove_dir_all(&self.work_dir);
        }
    }
}
