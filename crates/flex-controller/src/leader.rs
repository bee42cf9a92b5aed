//! Leader election on a coordination.k8s.io Lease, timed as client-go's: only the holder
//! runs the controllers; it renews every retry period and stops acting when it could not
//! renew within the renew deadline (well before the lease duration, so it has stopped before
//! anyone may take over); a standby judges expiry by its own clock, counting the lease
//! duration from when it last saw the record change, never from the holder's timestamps.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

use crate::fence::Fence;

/// client-go's defaults (and kube-controller-manager's).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct LeaderOptions {
    pub namespace: String,
    pub lease_name: String,
    /// This instance (the pod name in a cluster).
    pub identity: String,
    /// How long a standby waits after the record last changed before taking over.
    pub lease_duration: Duration,
    /// How long the holder keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the holder renews and a standby tries.
    pub retry_period: Duration,
    /// How the renewing thread reaches the API server: a connection of its own, on its own
    /// thread and runtime, so that no amount of work on the controller's runtime delays a
    /// renewal. `None`: the controller's client (whose connection lives on the controller's
    /// runtime; the write fence still holds, but a pinned runtime then costs the lease).
    pub connection: Option<kube::Config>,
}

impl LeaderOptions {
    /// client-go's timings for this instance.
    pub fn new(namespace: &str, lease_name: &str, identity: &str) -> Self {
        LeaderOptions {
            namespace: namespace.into(),
            lease_name: lease_name.into(),
            identity: identity.into(),
            lease_duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
            connection: None,
        }
    }

    /// The timings must leave the margins client-go insists on: the holder gives up
    /// (renew deadline) before a standby may take over (lease duration), and retries several
    /// times within the deadline.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err("the lease duration must be longer than the renew deadline".into());
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err("the renew deadline must be longer than 1.2 x the retry period".into());
        }
        Ok(())
    }
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// What a standby last saw of the lease record, and when by its own clock.
#[derive(Debug, Default)]
pub struct Observer {
    last: Option<(String, Instant)>,
}

/// The parts of the record that change on every renewal or hand-over.
fn fingerprint(spec: &LeaseSpec) -> String {
    format!(
        "{}|{:?}|{:?}|{:?}",
        spec.holder_identity.as_deref().unwrap_or_default(),
        spec.renew_time.as_ref().map(|t| t.0),
        spec.acquire_time.as_ref().map(|t| t.0),
        spec.lease_transitions
    )
}

impl Observer {
    /// Notes the record as read at `at`; returns whether `me` may take the lease now: it is
    /// free, ours, or its record has not changed for the lease duration it states.
    pub fn may_take(&mut self, spec: &LeaseSpec, me: &str, at: Instant) -> bool {
        let print = fingerprint(spec);
        let seen_at = match &self.last {
            Some((p, t)) if *p == print => *t,
            _ => {
                self.last = Some((print, at));
                at
            }
        };
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        if holder.is_empty() || holder == me {
            return true;
        }
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
        at.duration_since(seen_at) >= duration
    }
}

/// One attempt to take or renew the lease; `Ok(true)` when we hold it afterwards.
async fn try_hold(
    api: &Api<Lease>,
    o: &LeaderOptions,
    observer: &mut Observer,
) -> Result<bool, kube::Error> {
    let seconds = o.lease_duration.as_secs().max(1) as i32;
    match api.get_opt(&o.lease_name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(o.lease_name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(o.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            taken(api.create(&PostParams::default(), &lease).await)
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if !observer.may_take(spec, &o.identity, Instant::now()) {
                return Ok(false);
            }
            if spec.holder_identity.as_deref() != Some(o.identity.as_str()) {
                spec.holder_identity = Some(o.identity.clone());
                spec.acquire_time = Some(now());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.renew_time = Some(now());
            spec.lease_duration_seconds = Some(seconds);
            // The resourceVersion makes this a compare-and-swap: a rival's write wins cleanly.
            taken(
                api.replace(&o.lease_name, &PostParams::default(), &lease)
                    .await,
            )
        }
    }
}

/// Whether the write took the Lease: a rival's write that came first (409) is no error.
fn taken(answer: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match answer {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The retry period stretched by up to 20%, as client-go's jitter, so that standbys do not
/// all ask at the same instant.
fn jittered(period: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    period + period.mul_f64(0.2 * (nanos % 1000) as f64 / 1000.0)
}

/// Fails at start when the Lease's namespace does not exist (a controller run outside a
/// pod with the default `--namespace`), or the controller may not create its Lease there:
/// otherwise it would stand by forever, warning every retry period. A dry-run create asks the API server without writing anything; only a
/// create checks the namespace (a read of a Lease in a missing namespace is a plain 404).
pub async fn check_namespace(client: &Client, o: &LeaderOptions) -> crate::Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &o.namespace);
    let probe = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(o.lease_name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&dry_run, &probe).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s))
            if s.code == 404 && s.details.as_ref().is_some_and(|d| d.kind == "namespaces") =>
        {
            Err(crate::Error::LeaseNamespaceMissing {
                namespace: o.namespace.clone(),
            })
        }
        // RBAC is checked before the namespace: without rights there (or with no namespace
        // at all, which nobody can grant rights in) nothing could ever be led.
        Err(kube::Error::Api(s)) if s.code == 403 => Err(crate::Error::LeaseForbidden {
            namespace: o.namespace.clone(),
            message: s.message.lines().next().unwrap_or_default().to_owned(),
        }),
        // It exists (409), or the answer says nothing about the namespace: `acquire`
        // reports what goes wrong from here on.
        Err(_) => Ok(()),
    }
}

/// Waits until this instance holds the lease; returns when the winning request was sent
/// (the renew deadline counts from there: the API server wrote the record later).
pub async fn acquire(client: &Client, o: &LeaderOptions) -> std::time::Instant {
    let api: Api<Lease> = Api::namespaced(client.clone(), &o.namespace);
    let mut observer = Observer::default();
    loop {
        let sent = std::time::Instant::now();
        match try_hold(&api, o, &mut observer).await {
            Ok(true) => {
                tracing::info!(identity = %o.identity, "acquired leadership");
                return sent;
            }
            Ok(false) => tracing::debug!("another instance leads; waiting"),
            Err(e) => tracing::warn!(error = %e, "cannot read the leader lease"),
        }
        tokio::time::sleep(jittered(o.retry_period)).await;
    }
}

/// The lease, renewed on a thread of its own while the controllers act.
pub struct Holder {
    lost: tokio::sync::oneshot::Receiver<()>,
    /// Dropped with the holder: the thread stops renewing.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Holder {
    /// Starts renewing every retry period on a new thread with its own runtime (and, with
    /// `o.connection`, its own connection), moving `fence` on after every renewal and
    /// closing it when leadership is lost.
    pub fn start(client: &Client, o: &LeaderOptions, fence: Arc<Fence>) -> std::io::Result<Self> {
        let (lost_tx, lost) = tokio::sync::oneshot::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (client, o) = (client.clone(), o.clone());
        std::thread::Builder::new()
            .name("leader-lease".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start the lease thread's runtime");
                        fence.close();
                        let _ = lost_tx.send(());
                        return;
                    }
                };
                runtime.block_on(async move {
                    let client = match o.connection.clone().map(crate::throttle::client) {
                        Some(Ok(own)) => own,
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "cannot connect the lease thread; it shares the controller's client");
                            client
                        }
                        None => client,
                    };
                    tokio::select! {
                        _ = hold(&client, &o, &fence) => {
                            fence.close();
                            let _ = lost_tx.send(());
                        }
                        _ = stop_rx => {}
                    }
                });
            })?;
        Ok(Holder { lost, _stop: stop })
    }

    /// Completes when leadership is lost (the fence is closed by then).
    pub async fn lost(&mut self) {
        let _ = (&mut self.lost).await;
    }
}

/// Renews the lease every retry period; returns when leadership is lost, or when no renewal
/// succeeded within the renew deadline (the caller must stop acting at once: a standby may
/// take over once the lease duration has passed since the last renewal it saw). Every
/// renewal moves the fence on to the renew deadline counted from when it was sent.
pub async fn hold(client: &Client, o: &LeaderOptions, fence: &Fence) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &o.namespace);
    let mut observer = Observer::default();
    let mut last_renewed = Instant::now();
    loop {
        tokio::time::sleep(o.retry_period).await;
        let left = o.renew_deadline.saturating_sub(last_renewed.elapsed());
        let sent = Instant::now();
        let attempt = tokio::time::timeout(left, try_hold(&api, o, &mut observer)).await;
        match attempt {
            Ok(Ok(true)) => {
                last_renewed = sent;
                fence.extend_to((sent + o.renew_deadline).into_std());
            }
            Ok(Ok(false)) => {
                tracing::error!("leadership lost to another instance");
                return;
            }
            Ok(Err(e)) if last_renewed.elapsed() < o.renew_deadline => {
                tracing::warn!(error = %e, "cannot renew the leader lease")
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "no renewal of the leader lease within the renew deadline");
                return;
            }
            Err(_) => {
                tracing::error!("no renewal of the leader lease within the renew deadline");
                return;
            }
        }
    }
}

/// Gives the lease up at once (on shutdown), so a standby need not wait out the lease
/// duration: the holder is cleared, under the lease's resourceVersion so that a lease
/// another instance already took is left alone.
pub async fn release(client: &Client, o: &LeaderOptions) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &o.namespace);
    let Ok(Some(mut lease)) = api.get_opt(&o.lease_name).await else {
        return;
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(o.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    match api
        .replace(&o.lease_name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => tracing::info!(identity = %o.identity, "released leadership"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot release the leader lease; it expires on its own")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn expiry_is_judged_by_the_local_clock_from_the_last_change_seen() {
        let t0 = Instant::now();
        let mut o = Observer::default();
        assert!(o.may_take(&LeaseSpec::default(), "me", t0), "a free lease");
        assert!(
            o.may_take(&spec("me", "2026-01-01T00:00:00Z"), "me", t0),
            "ours"
        );
        // The holder's clock says it renewed a day ago: that says nothing about now.
        let stale_looking = spec("other", "2025-01-01T00:00:00Z");
        let mut o = Observer::default();
        assert!(
            !o.may_take(&stale_looking, "me", t0),
            "first sight starts the count"
        );
        assert!(!o.may_take(&stale_looking, "me", t0 + Duration::from_secs(14)));
        assert!(
            o.may_take(&stale_looking, "me", t0 + Duration::from_secs(15)),
            "unchanged for the lease duration: expired"
        );
        // A renewal seen restarts the count.
        let mut o = Observer::default();
        assert!(!o.may_take(&spec("other", "2026-01-01T00:00:00Z"), "me", t0));
        let renewed = spec("other", "2026-01-01T00:00:02Z");
        assert!(!o.may_take(&renewed, "me", t0 + Duration::from_secs(14)));
        assert!(!o.may_take(&renewed, "me", t0 + Duration::from_secs(28)));
        assert!(o.may_take(&renewed, "me", t0 + Duration::from_secs(29)));
    }

    #[test]
    fn timings_keep_client_go_margins() {
        assert!(LeaderOptions::new("ns", "l", "me").validate().is_ok());
        let mut o = LeaderOptions::new("ns", "l", "me");
        o.renew_deadline = o.lease_duration;
        assert!(o.validate().is_err(), "the holder must give up first");
        let mut o = LeaderOptions::new("ns", "l", "me");
        o.retry_period = Duration::from_secs(9);
        assert!(
            o.validate().is_err(),
            "several renewals within the deadline"
        );
    }
}
