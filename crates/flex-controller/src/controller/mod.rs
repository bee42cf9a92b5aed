//! The provisioning controller: its options, the checks before it starts, and `run`, which
//! serves the HTTP endpoints while `wiring` leads, watches (`watches`) and runs the claim
//! controller (`reconcile`), the volume controller (`volumes`) and the orphan check
//! (`orphans`). Decisions are made in flex-core's `plan`; this module fetches and applies.

mod apply;
mod caches;
mod compact;
mod configs;
mod context;
mod discovered;
mod drive;
mod expansion;
mod expected;
mod fan_out;
mod index;
mod orphans;
mod readiness;
mod reads;
mod reconcile;
mod retry;
mod seen;
mod slim;
mod snapshots;
mod sources;
mod triggers;
mod volumes;
mod watches;
mod wiring;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, ListParams};

pub use context::{Caches, Context};

/// How the controller runs (the `run` command's flags).
#[derive(Debug, Clone)]
pub struct Options {
    pub provisioner_name: String,
    /// Namespaces whose provisioner ConfigMaps are read; Jobs run there too.
    pub config_namespaces: Vec<String>,
    /// The controller's own namespace and service account: no Job may run as it.
    pub controller_namespace: String,
    pub controller_service_account: String,
    pub job_ttl_seconds: i32,
    /// Delay before the second attempt; doubles per attempt up to 10 minutes.
    pub retry_base: Duration,
    /// Who reports events (the pod name in a cluster).
    pub instance: String,
    /// Where `/healthz`, `/readyz` and `/metrics` are served (`None`: not served).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Leader election: only the lease holder acts (`None`: act at once, alone).
    pub leader: Option<crate::leader::LeaderOptions>,
    /// Client-side rate limit of the controllers' requests (`--kube-api-qps`,
    /// `--kube-api-burst`; `None`: unlimited).
    pub api_limits: Option<crate::throttle::Limits>,
    /// How often the snapshot API is looked for again while it is not served
    /// ([`SNAPSHOT_API_RECHECK`]).
    pub snapshot_api_recheck: Duration,
}

/// How often the controller looks again for the snapshot API while it is not served, so
/// that snapshot CRDs installed after it started are watched without a restart: one small
/// discovery request, as rare as a watch's renewal.
pub const SNAPSHOT_API_RECHECK: Duration = Duration::from_secs(300);

impl Options {
    /// How ConfigMaps are judged: for this provisioner, never as the controller's account.
    pub fn parse_options(&self) -> flex_core::config::ParseOptions {
        flex_core::config::ParseOptions {
            provisioner_name: self.provisioner_name.clone(),
            controller_namespace: self.controller_namespace.clone(),
            controller_service_account: self.controller_service_account.clone(),
        }
    }
}

/// [`preflight`], with a busy or unreachable API server (429, 5xx, no answer) waited out
/// for about two minutes: the client re-sends nothing by itself (`throttle::client`), and a
/// start-up that fails on a moment's overload would only be restarted by its Deployment.
async fn preflight_patiently(client: &Client, opts: &Options) -> crate::Result<()> {
    use backon::{ExponentialBuilder, Retryable};
    let patience = ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_secs(1))
        .with_max_delay(std::time::Duration::from_secs(30))
        .with_max_times(8);
    (|| preflight(client, opts))
        .retry(patience)
        .when(crate::Error::is_transient)
        .notify(|error, wait| {
            tracing::warn!(%error, ?wait, "the API server did not answer a start check; trying again")
        })
        .await
}

/// Fails fast, with the permission or object that is missing, before anything starts.
async fn preflight(client: &Client, opts: &Options) -> crate::Result<()> {
    let one = ListParams::default().limit(1);
    let check = |what: &str| {
        let what = what.to_owned();
        move |source| crate::Error::Preflight { what, source }
    };
    Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&one)
        .await
        .map_err(check("listing claims"))?;
    Api::<PersistentVolume>::all(client.clone())
        .list(&one)
        .await
        .map_err(check("listing PersistentVolumes"))?;
    Api::<StorageClass>::all(client.clone())
        .list(&one)
        .await
        .map_err(check("listing StorageClasses"))?;
    for ns in &opts.config_namespaces {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .list(&one)
            .await
            .map_err(check(&format!("listing ConfigMaps in {ns}")))?;
        Api::<Job>::namespaced(client.clone(), ns)
            .list(&one)
            .await
            .map_err(check(&format!("listing Jobs in {ns}")))?;
    }
    if let Some(l) = &opts.leader {
        crate::leader::check_namespace(client, l).await?;
    }
    Ok(())
}

/// Runs until `shutdown` completes, then stops acting and gives the leader Lease up, so that
/// a standby takes over at once rather than after the lease duration.
pub async fn run_until(
    client: Client,
    opts: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> crate::Result<()> {
    let leader = opts.leader.clone();
    let lease_client = client.clone();
    tokio::select! {
        result = run(client, opts) => result,
        _ = shutdown => {
            // `run` and every reconcile in it were dropped above: nothing acts any more.
            if let Some(l) = &leader {
                crate::leader::release(&lease_client, l).await;
            }
            Ok(())
        }
    }
}

/// Runs until the process is stopped. `/healthz` and `/metrics` are served from the start,
/// also while a standby waits for the Lease (a liveness probe must not restart it);
/// `/readyz` answers 200 once this instance leads and its caches have synced, or while it
/// stands by for the Lease after passing its start checks.
pub async fn run(client: Client, opts: Options) -> crate::Result<()> {
    let opts_addr = opts.metrics_addr;
    let metrics = Arc::new(crate::metrics::Metrics::new(&opts.provisioner_name));
    let health = Arc::new(crate::http::Health::default());
    let serving = {
        let (health, metrics) = (health.clone(), metrics.clone());
        async move {
            if let Some(addr) = opts_addr
                && let Err(e) = crate::http::serve(addr, health, metrics).await
            {
                tracing::error!(error = %e, %addr, "cannot serve /healthz, /readyz and /metrics");
            }
            std::future::pending::<()>().await
        }
    };
    tokio::select! {
        _ = serving => Ok(()),
        result = wiring::act(client, opts, metrics, health) => result,
    }
}
