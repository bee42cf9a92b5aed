//! What every reconcile shares: the client, the stores, the configuration, the applier
//! (every write, and every event) and each object's run of failures.

use kube::Client;
use kube::runtime::events::Reporter;

use super::Options;
use super::apply::Applier;
pub use super::caches::Caches;
use super::configs::Configs;
use super::readiness::{Readiness, synced};
use super::retry::{Failures, Retry, retry_for};
use flex_core::plan::notices;

pub struct Context {
    pub client: Client,
    pub opts: Options,
    pub caches: Caches,
    pub configs: Configs,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Open once every store has had its first full list.
    pub readiness: Readiness,
    /// The one writer: every write of the reconcilers, and what it created that the caches
    /// do not show yet.
    pub apply: Applier,
    /// Consecutive reconcile failures per object, for the backoff.
    pub failures: Failures,
    /// Which resource serves each kind of data source the classes list.
    pub discovered: super::discovered::Discovered,
}

impl Context {
    pub fn new(
        client: Client,
        opts: Options,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
        said: std::sync::Arc<super::seen::Seen>,
        caches: Caches,
    ) -> Self {
        let reporter = Reporter {
            controller: "flex-provisioner".into(),
            instance: Some(opts.instance.clone()),
        };
        Context {
            apply: Applier::new(client.clone(), reporter, metrics.clone(), said),
            client,
            opts,
            caches,
            configs: Configs::default(),
            readiness: Readiness::default(),
            failures: Failures::default(),
            discovered: Default::default(),
            metrics,
        }
    }

    /// The one future that waits on the stores themselves and opens `readiness`.
    pub async fn open_when_synced(&self) {
        let c = &self.caches;
        let mut stores = vec![
            synced(c.claims.store.clone()),
            synced(c.classes.clone()),
            synced(c.volumes.clone()),
            synced(c.nodes.clone()),
        ];
        stores.extend(c.config_maps.iter().cloned().map(synced));
        stores.extend(c.jobs.iter().map(|i| synced(i.store.clone())));
        stores.extend(c.pods.iter().map(|i| synced(i.store.clone())));
        stores.extend(c.failed_creates.iter().cloned().map(synced));
        // Not the records': one the cache lacks is read from the API server (`reads::record`).
        self.readiness.open_when_synced(stores).await;
    }

    /// The class's configuration; a ConfigMap's problems are told (on it, and counted) the
    /// first time its version is read.
    pub async fn config_of(&self, class: &str) -> super::configs::Resolved {
        let (resolved, report) = self.configs.resolve(
            class,
            &self.opts.parse_options(),
            &self.caches.classes,
            &self.caches.config_maps,
            &self.opts.config_namespaces,
        );
        if let Some(r) = report {
            self.apply.tell_config_problems(class, &r).await;
        }
        resolved
    }

    /// What both controllers do with a failed reconcile, by kind of error (see `retry`): a
    /// conflict re-plans at once; a missing permission or object is said on the object and
    /// retried after minutes; server trouble backs off exponentially per object, and so
    /// does a fault of the controller itself (a render that ended without an answer),
    /// which is also said on the object.
    pub fn error_policy<K>(
        object: std::sync::Arc<K>,
        error: &crate::Error,
        ctx: std::sync::Arc<Context>,
    ) -> kube::runtime::controller::Action
    where
        K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
    {
        use kube::runtime::controller::Action;
        let key = object.meta().uid.clone().unwrap_or_default();
        let failures = ctx.failures.record(&key);
        let (wait, notice) = match retry_for(error, failures) {
            Retry::Replan(wait) => {
                tracing::debug!(error = %error, "write conflicted with a newer version; re-planning");
                return Action::requeue(wait);
            }
            Retry::Blocked(wait) => {
                let key = format!("{key}/{}", error.category());
                (wait, Some(notices::blocked(&key, &error.to_string(), wait)))
            }
            // A fault of the controller itself: the claim's author should hear of it too.
            Retry::Backoff(wait) => match error {
                crate::Error::Prepare { message, .. } => {
                    (wait, Some(notices::not_prepared(&key, message)))
                }
                _ => (wait, None),
            },
        };
        if let Some(notice) = notice {
            let on = object.object_ref(&());
            let ctx = ctx.clone();
            tokio::spawn(async move { ctx.apply.tell(&on, "", &[notice], None).await });
        }
        ctx.metrics.count_reconcile_error(error.category());
        tracing::warn!(category = error.category(), error = %error, retry_in = ?wait, "reconcile failed");
        Action::requeue(wait)
    }
}
