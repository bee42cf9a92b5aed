//! Leader election on a coordination.k8s.io Lease: only the holder runs the controllers, so
//! a second replica waits instead of acting twice; a holder that stops renewing is replaced
//! once the lease expires.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

#[derive(Debug, Clone)]
pub struct LeaderOptions {
    pub namespace: String,
    pub lease_name: String,
    /// This instance (the pod name in a cluster).
    pub identity: String,
    pub lease_duration: Duration,
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// Whether the lease is free for `me`: absent holder, ours, or not renewed in time.
fn available(spec: &LeaseSpec, me: &str) -> bool {
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == me {
        return true;
    }
    let duration = spec.lease_duration_seconds.unwrap_or(15).max(1) as i64;
    spec.renew_time
        .as_ref()
        .is_none_or(|t| jiff::Timestamp::now().duration_since(t.0).as_secs() > duration)
}

/// One attempt to take or renew the lease; `Ok(true)` when we hold it afterwards.
async fn try_hold(api: &Api<Lease>, o: &LeaderOptions) -> Result<bool, kube::Error> {
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
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if !available(spec, &o.identity) {
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
            match api
                .replace(&o.lease_name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Waits until this instance holds the lease.
pub async fn acquire(client: &Client, o: &LeaderOptions) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &o.namespace);
    loop {
        match try_hold(&api, o).await {
            Ok(true) => {
                tracing::info!(identity = %o.identity, "acquired leadership");
                return;
            }
            Ok(false) => tracing::debug!("another instance leads; waiting"),
            Err(e) => tracing::warn!(error = %e, "cannot read the leader lease"),
        }
        tokio::time::sleep(o.lease_duration / 3).await;
    }
}

/// Renews the lease until it cannot; returns when leadership is lost (the caller must stop
/// acting at once: another instance may take over after the lease duration).
pub async fn hold(client: &Client, o: &LeaderOptions) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &o.namespace);
    let mut last_renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(o.lease_duration / 3).await;
        match try_hold(&api, o).await {
            Ok(true) => last_renewed = tokio::time::Instant::now(),
            Ok(false) => {
                tracing::error!("leadership lost to another instance");
                return;
            }
            // A failed renewal is tolerated until the lease would have expired.
            Err(e) if last_renewed.elapsed() < o.lease_duration => {
                tracing::warn!(error = %e, "cannot renew the leader lease")
            }
            Err(e) => {
                tracing::error!(error = %e, "leader lease expired without renewal");
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

    fn spec(holder: &str, renewed_secs_ago: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                jiff::Timestamp::now() - jiff::SignedDuration::from_secs(renewed_secs_ago),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_available_when_free_ours_or_expired() {
        assert!(available(&LeaseSpec::default(), "me"));
        assert!(available(&spec("me", 1), "me"));
        assert!(
            !available(&spec("other", 1), "me"),
            "a live holder keeps it"
        );
        assert!(!available(&spec("other", 14), "me"));
        assert!(
            available(&spec("other", 30), "me"),
            "an expired holder is replaced"
        );
    }
}
