//! Command-line interface definitions (clap). `main.rs` dispatches on these.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use flex_core::names::DEFAULT_PROVISIONER_NAME;

/// A Kubernetes dynamic volume provisioner that runs each provisioning step as a Job.
#[derive(Debug, Parser)]
#[command(name = "flex-provisioner", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the provisioning controller against the cluster (KUBECONFIG or in-cluster).
    ///
    /// Watches pending claims of the classes whose StorageClass names this provisioner and
    /// whose ConfigMap is in one of the --config-namespace namespaces, and provisions them with
    /// Jobs in those namespaces.
    Run(RunArgs),
    /// Helpers for provisioner images.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Print the Job (and the PV template) that a claim would produce, without a cluster.
    ///
    /// Reads a provisioner ConfigMap, its StorageClass and a PersistentVolumeClaim from YAML
    /// files. A claim without metadata.uid gets a stable made-up one, so the output can be
    /// compared between runs; a claim without storageClassName gets the class given, as
    /// the cluster's default class would apply. Exits 2 when the claim cannot be rendered.
    Render(RenderArgs),
    /// Validate provisioner ConfigMaps offline; exits 1 when any has an error.
    ///
    /// Prints one line per problem: file, ConfigMap, key, what is wrong and how to fix it.
    /// StorageClasses in the same files (or given with --class) enable the checks that need
    /// both, such as `node-local` on a class that binds Immediately.
    Check(CheckArgs),
    /// Run a local Kubernetes API server with simulated control-plane loops and a pod runner.
    ///
    /// Prints the kubeconfig path and how to use kubectl with it, then runs until
    /// interrupted. Pods run as local processes: an image maps to
    /// `<images>/<image name>/entrypoint` (image name without registry and tag), or to what
    /// `--image-map` says.
    #[cfg(feature = "sandbox")]
    Sandbox(SandboxArgs),
}

#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Create the objects in these YAML files once the sandbox is up.
    #[arg(long, value_name = "FILE")]
    pub apply: Vec<PathBuf>,
    /// Where to write the kubeconfig (default: a file in the sandbox's work directory).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Directory of provisioner images: `<dir>/<image name>/entrypoint`.
    #[arg(long, value_name = "DIR", default_value = "provisioner-images")]
    pub images: PathBuf,
    /// Map an image (full reference or bare name) to a local executable.
    #[arg(long = "image-map", value_name = "IMAGE=PATH")]
    pub image_map: Vec<String>,
    /// Names of the nodes to simulate.
    #[arg(long = "node", value_name = "NAME", default_values_t = vec!["sandbox-node-1".to_string()])]
    pub nodes: Vec<String>,
    /// Port to listen on, on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Delay before the Job controller replaces a failed pod (doubles each time), in seconds.
    #[arg(long, default_value_t = 10)]
    pub pod_backoff_seconds: u64,
    /// Apply the built-in demo: the hostpath example class, a claim and a pod writing to it.
    #[arg(long)]
    pub demo: bool,
    /// Do not run the provisioning controller inside the sandbox.
    #[arg(long)]
    pub no_controller: bool,
    /// Tokens, RBAC and HTTPS as in a cluster: the kubeconfig carries an admin token and
    /// the sandbox's CA, pods get their ServiceAccount's token, and `kubectl auth can-i`
    /// and `kubectl create token` answer as a cluster with deploy/'s RBAC would.
    #[arg(long)]
    pub auth: bool,
    /// Namespace of provisioner ConfigMaps for the in-sandbox controller (repeatable).
    #[arg(long = "config-namespace", value_name = "NS", default_values_t = vec![flex_core::config::DEFAULT_CONFIG_NAMESPACE.to_string()])]
    pub config_namespaces: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Namespace holding provisioner ConfigMaps; Jobs run there (repeatable).
    #[arg(
        long = "config-namespace",
        value_name = "NS",
        env = "FLEX_CONFIG_NAMESPACE",
        value_delimiter = ',',
        required = true
    )]
    pub config_namespaces: Vec<String>,
    /// The controller's own namespace: its leader Lease lives here.
    #[arg(long, env = "POD_NAMESPACE", default_value = flex_core::config::DEFAULT_CONTROLLER_NAMESPACE)]
    pub namespace: String,
    /// The controller's own service account: a ConfigMap naming it is refused.
    #[arg(long, env = "POD_SERVICE_ACCOUNT", default_value = flex_core::config::DEFAULT_CONTROLLER_SERVICE_ACCOUNT)]
    pub service_account: String,
    /// Seconds a finished Job is kept so its logs can be read.
    #[arg(long, default_value_t = flex_core::job::DEFAULT_JOB_TTL_SECONDS)]
    pub job_ttl: i32,
    /// Seconds before the second attempt after a failed one; doubles up to 10 minutes.
    #[arg(long, default_value_t = 10)]
    pub retry_base_seconds: u64,
    /// Name reported in events (the pod name in a cluster).
    #[arg(long, env = "POD_NAME", default_value = "flex-provisioner")]
    pub instance: String,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: std::net::SocketAddr,
    /// Act at once, without taking the leader Lease (only when one instance can run).
    #[arg(long)]
    pub no_leader_elect: bool,
    /// Seconds a leader's Lease lasts without renewal before another instance takes over.
    #[arg(long, default_value_t = 15)]
    pub lease_seconds: u64,
    /// Seconds the leader keeps acting without a successful renewal (less than the lease).
    #[arg(long, default_value_t = 10)]
    pub renew_deadline_seconds: u64,
    /// Seconds between the leader's renewals and a standby's attempts.
    #[arg(long, default_value_t = 2)]
    pub retry_period_seconds: u64,
    /// Requests per second to the API server, on average (client-side limit; watches count
    /// once, when opened).
    #[arg(long, default_value_t = flex_controller::throttle::Limits::default().qps)]
    pub kube_api_qps: std::num::NonZeroU32,
    /// Requests that may go at once, above the average, after a quiet spell.
    #[arg(long, default_value_t = flex_controller::throttle::Limits::default().burst)]
    pub kube_api_burst: std::num::NonZeroU32,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create the PersistentVolume for the current claim from PV_TEMPLATE plus a volume source.
    ///
    /// With PV_CREATOR=controller (set by the controller for such classes) it only checks the
    /// source and writes it to $TERMINATION_LOG: the controller creates the PV. Exits 0 when
    /// the PV was created, reported, or already exists for this claim, 2 when it can never
    /// work as given (bad JSON, a PV of another claim), 1 on transient errors. The reason is
    /// also written to $TERMINATION_LOG.
    Create(VolumeCreateArgs),
    /// Print one field of a clone's source volume (SOURCE_PV_JSON): its path, nfs server or
    /// node. Exits 2 (with the reason in $TERMINATION_LOG) when the volume has no such field.
    Source(VolumeSourceArgs),
}

#[derive(Debug, Args)]
pub struct VolumeSourceArgs {
    #[arg(long, value_enum)]
    pub field: crate::volume_source::SourceField,
    /// The source volume (default: the SOURCE_PV_JSON environment variable).
    #[arg(
        long,
        env = "SOURCE_PV_JSON",
        value_name = "JSON",
        hide_env_values = true
    )]
    pub volume: String,
}

#[derive(Debug, Args)]
pub struct VolumeCreateArgs {
    /// The volume source as JSON, e.g. '{"nfs":{"server":"10.0.0.1","path":"/exports/a"}}'.
    #[arg(long, value_name = "JSON")]
    pub source: String,
    /// The PV template (default: the PV_TEMPLATE environment variable).
    #[arg(long, env = "PV_TEMPLATE", value_name = "JSON", hide_env_values = true)]
    pub template: String,
    /// `controller`: report the source in the termination log for the controller to create
    /// the PV; `image`: create the PV with the pod's credentials.
    #[arg(long, env = "PV_CREATOR", default_value = "image", value_parser = ["controller", "image"])]
    pub pv_creator: String,
}

#[derive(Debug, Args)]
pub struct Common {
    /// Provisioner name this instance serves (StorageClass `provisioner`, ConfigMap `plugin-name`).
    #[arg(long, env = "FLEX_PROVISIONER_NAME", default_value = DEFAULT_PROVISIONER_NAME)]
    pub provisioner_name: String,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// YAML file holding the provisioner ConfigMap.
    #[arg(long, value_name = "CM.yaml")]
    pub config: PathBuf,
    /// YAML file holding the StorageClass the ConfigMap configures.
    #[arg(long, value_name = "SC.yaml")]
    pub class: PathBuf,
    /// YAML file holding the PersistentVolumeClaim.
    #[arg(long, value_name = "PVC.yaml")]
    pub claim: PathBuf,
    /// YAML file holding the Node the scheduler selected (WaitForFirstConsumer classes).
    #[arg(long, value_name = "NODE.yaml")]
    pub node: Option<PathBuf>,
    /// Attempt number; from 2 on the Job name gets a `-<attempt>` suffix.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: u32,
    /// Seconds a finished Job is kept (ttlSecondsAfterFinished).
    #[arg(long, default_value_t = flex_core::job::DEFAULT_JOB_TTL_SECONDS)]
    pub job_ttl: i32,
    /// Which Job: `provision` (the default), `expand` (needs --size), or a snapshot's:
    /// `snapshot` or `delete-snapshot` (classes with `snapshots: "true"`).
    #[arg(long, value_enum, default_value_t = RenderAction::Provision)]
    pub action: RenderAction,
    /// With --action expand: the size the claim grows to (e.g. 2Gi).
    #[arg(long, value_name = "SIZE", required_if_eq("action", "expand"))]
    pub size: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RenderAction {
    Provision,
    Expand,
    Snapshot,
    DeleteSnapshot,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// YAML files holding ConfigMaps (and optionally their StorageClasses).
    #[arg(required = true, value_name = "CM.yaml")]
    pub files: Vec<PathBuf>,
    /// Extra YAML files holding StorageClasses to check the ConfigMaps against.
    #[arg(long = "class", value_name = "SC.yaml")]
    pub classes: Vec<PathBuf>,
    /// Treat warnings as errors (exit 1 when there is any).
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub common: Common,
}
