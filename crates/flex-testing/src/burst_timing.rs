//! A burst of claims timed from outside the controller: how long until all are Bound, and
//! the controller's own share of each claim's way there (from the claim's creation until its
//! Job exists, and from the Job's completion until its PV exists).
//!
//! The rest of a claim's way to Bound is Kubernetes' work: pods, the Job controller and the
//! PV controller's binding, all behind kube-controller-manager's one client (20 requests a
//! second, shared by all its controllers). On a shared machine that part varies by tens of
//! seconds between two identical bursts, and whatever else runs in the cluster (another
//! user's Jobs) spends the same budget. The controller's share is what a hostile claim could
//! stall, so that is what the availability tests compare.
//!
//! Everything here runs on a thread and runtime of its own, with a client of its own: on a
//! real control plane a stall of the controller's runtime (the tests run it in-process)
//! delays what it does, not when the test sees it. The sandbox's API server runs on the
//! controller's runtime, so there a stall delays both; the tests compare the whole way to
//! Bound there too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::cluster::Cluster;
use super::provisioning::{NS, burst_in, succeeded};
use super::sandbox::eventually;
use flex_core::names::{LABEL_ACTION, LABEL_CLAIM_UID};
use kube::api::ListParams;

/// What one burst took.
pub struct BurstTimes {
    /// From just before the claims were created until a look at the namespace found every
    /// claim counted Bound (looks are 50 ms apart).
    pub wall: Duration,
    /// The controller's share of each claim's way to Bound.
    pub controller: Vec<Duration>,
}

impl BurstTimes {
    /// The largest share the controller took of any one claim.
    pub fn slowest(&self) -> Duration {
        self.controller.iter().max().copied().unwrap_or_default()
    }
}

impl std::fmt::Display for BurstTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sorted = self.controller.clone();
        sorted.sort();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        write!(
            f,
            "all Bound in {:.1?}; the controller's share of a claim: median {:.1?}, slowest {:.1?}",
            self.wall,
            median,
            self.slowest()
        )
    }
}

/// When the test first saw each claim's steps, by claim uid.
#[derive(Default)]
struct Seen {
    created: HashMap<String, Instant>,
    job: HashMap<String, Instant>,
    /// The names of each claim's provisioning Jobs: the share counts one attempt, so a
    /// claim of the burst with a second one makes the measure void (and the test fail).
    jobs: HashMap<String, std::collections::BTreeSet<String>>,
    complete: HashMap<String, Instant>,
    pv: HashMap<String, Instant>,
}

type Shared = Arc<Mutex<Seen>>;

fn claim_uid_of<K: Resource>(o: &K) -> Option<String> {
    o.meta().labels.as_ref()?.get(LABEL_CLAIM_UID).cloned()
}

/// Follows `api` until cancelled, calling `each` on every object it shows; `ready` is sent
/// once the initial list is in.
async fn follow<K>(
    api: Api<K>,
    labels: String,
    ready: tokio::sync::oneshot::Sender<()>,
    each: impl Fn(&K),
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut ready = Some(ready);
    let mut events =
        std::pin::pin!(watcher(api, watcher::Config::default().labels(&labels)).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => each(&o),
            Ok(watcher::Event::InitDone) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            _ => {}
        }
    }
}

/// Creates `n` claims of `class` named `<prefix>NNN` in `default` and waits until all of
/// them are Bound.
pub async fn timed_burst(sb: &Cluster, prefix: &str, n: usize, class: &str) -> BurstTimes {
    let (config, prefix, class) = (sb.config(), prefix.to_owned(), class.to_owned());
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(observe(config, &prefix, n, &class))
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

async fn observe(config: kube::Config, prefix: &str, n: usize, class: &str) -> BurstTimes {
    let client = kube::Client::try_from(config).unwrap();
    let seen = Shared::default();
    let (jobs_ready, jobs_listed) = tokio::sync::oneshot::channel();
    let (pvs_ready, pvs_listed) = tokio::sync::oneshot::channel();
    let on_job = {
        let seen = seen.clone();
        move |job: &Job| {
            let Some(uid) = claim_uid_of(job) else { return };
            let (now, mut s) = (Instant::now(), seen.lock().unwrap());
            s.job.entry(uid.clone()).or_insert(now);
            s.jobs
                .entry(uid.clone())
                .or_default()
                .insert(job.name_any());
            if succeeded(job) {
                s.complete.entry(uid).or_insert(now);
            }
        }
    };
    let on_pv = {
        let seen = seen.clone();
        move |pv: &PersistentVolume| {
            if let Some(uid) = claim_uid_of(pv) {
                seen.lock()
                    .unwrap()
                    .pv
                    .entry(uid)
                    .or_insert_with(Instant::now);
            }
        }
    };
    let jobs = tokio::spawn(follow(
        Api::<Job>::namespaced(client.clone(), NS),
        format!("{LABEL_ACTION}=provision"),
        jobs_ready,
        on_job,
    ));
    let pvs = tokio::spawn(follow(
        Api::<PersistentVolume>::all(client.clone()),
        LABEL_CLAIM_UID.to_owned(),
        pvs_ready,
        on_pv,
    ));
    tokio::time::timeout(Duration::from_secs(30), async {
        jobs_listed.await.unwrap();
        pvs_listed.await.unwrap();
    })
    .await
    .expect("the test's watches of Jobs and PVs started within 30 s");

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    let start = Instant::now();
    let made = burst_in(&claims, prefix, n, class).await;
    let uids: Vec<String> = {
        let mut s = seen.lock().unwrap();
        made.into_iter()
            .map(|(asked, claim)| {
                let uid = claim.uid().unwrap();
                s.created.insert(uid.clone(), Instant::from_std(asked));
                uid
            })
            .collect()
    };
    // The burst's own claims: others of the test (held by a finalizer, say) may bind or
    // not meanwhile, as the PV controller sees fit.
    eventually(
        300,
        &format!("the {n} claims of burst {prefix} bound"),
        || async {
            let list = claims.list(&ListParams::default()).await.ok()?;
            let bound = list
                .items
                .iter()
                .filter(|c| c.uid().is_some_and(|u| uids.contains(&u)))
                .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
                .count();
            (bound == n).then_some(())
        },
    )
    .await;
    let wall = start.elapsed();
    // A Bound claim's PV exists; the watch may show it a moment after the list does.
    let seen_by = Instant::now() + Duration::from_secs(10);
    let shares = loop {
        let shares = controller_shares(&seen.lock().unwrap(), &uids);
        match shares {
            Ok(shares) => break shares,
            Err(missing) if Instant::now() > seen_by => {
                panic!("the test's watches never showed {missing}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    jobs.abort();
    pvs.abort();
    BurstTimes {
        wall,
        controller: shares,
    }
}

/// For each claim: from its creation to its first Job, plus from its Job's completion to
/// its PV. `Err` names the first step not seen yet.
fn controller_shares(seen: &Seen, uids: &[String]) -> Result<Vec<Duration>, String> {
    uids.iter()
        .map(|uid| {
            let at = |m: &HashMap<String, Instant>, what: &str| {
                m.get(uid)
                    .copied()
                    .ok_or_else(|| format!("the {what} of claim {uid}"))
            };
            let jobs = seen.jobs.get(uid).map_or(0, |j| j.len());
            assert!(
                jobs <= 1,
                "claim {uid} of the burst had {jobs} provisioning Jobs: the burst's images never fail"
            );
            let created = at(&seen.created, "creation")?;
            let job = at(&seen.job, "Job")?;
            let complete = at(&seen.complete, "completed Job")?;
            let pv = at(&seen.pv, "PV")?;
            Ok(job.saturating_duration_since(created) + pv.saturating_duration_since(complete))
        })
        .collect()
}
