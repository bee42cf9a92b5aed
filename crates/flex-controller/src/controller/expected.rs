//! Objects created here that the caches do not show yet: the applier's expectations
//! (`apply/mod.rs` records them; gather reads them). Without them a claim or volume reconciled
//! again before its new Job is cached would create it a second time (a 409, but still a
//! request), and `max-concurrent`, counting only the Jobs the cache shows, would let a
//! burst start far more: so counting a class's Jobs and creating the next one is also one
//! turn per class.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a created Job is counted without the cache showing it; a watch that lags longer
/// than this has failed and restarts with a fresh list anyway.
const UNSEEN_FOR_AT_MOST: Duration = Duration::from_secs(120);

/// How many owners' expectations are kept before the stale ones are looked for.
const FORGET_STALE_ABOVE: usize = 4096;

#[derive(Default)]
pub struct Expected {
    /// Per class: Jobs created here that the cache may not show yet, with when.
    created: Mutex<HashMap<String, Vec<(String, Instant)>>>,
    /// Per class: held from counting the class's active Jobs to creating the next one.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Per owner (a claim uid, a PV uid): the last Job created for it, its attempt, when.
    latest: Mutex<Latest>,
}

#[derive(Default)]
struct Latest {
    by_owner: HashMap<String, (String, u32, Instant)>,
    /// The size at which `by_owner` is next swept for stale owners: twice what a sweep
    /// left, so a burst of live ones is not scanned on every insert.
    sweep_at: usize,
}

impl Expected {
    /// Waits for this class's turn to count and create; the turn ends when the guard drops.
    pub async fn turn(&self, class: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let gate = crate::lock(&self.turns)
            .entry(class.to_owned())
            .or_default()
            .clone();
        gate.lock_owned().await
    }

    /// Remembers a Job just created (or adopted) for the class.
    pub fn record(&self, class: &str, job: &str) {
        crate::lock(&self.created)
            .entry(class.to_owned())
            .or_default()
            .push((job.to_owned(), Instant::now()));
    }

    /// Remembers the Job just created (or adopted) for an owner (a claim or PV uid).
    pub fn record_for(&self, owner: &str, job: &str, attempt: u32) {
        let mut latest = crate::lock(&self.latest);
        // An owner deleted before its Job was cached is never asked about again: what is
        // stale goes once the map is large, so it never grows with such owners.
        if latest.by_owner.len() >= latest.sweep_at.max(FORGET_STALE_ABOVE) {
            latest
                .by_owner
                .retain(|_, (_, _, at)| at.elapsed() < UNSEEN_FOR_AT_MOST);
            latest.sweep_at = latest.by_owner.len() * 2;
        }
        let entry = (job.to_owned(), attempt, Instant::now());
        latest.by_owner.insert(owner.to_owned(), entry);
    }

    /// The attempt of the owner's last created Job while the cache does not show it
    /// (`cached`: whether the cache holds a Job of that name); forgotten once it does.
    pub fn unseen_for(&self, owner: &str, cached: impl Fn(&str) -> bool) -> Option<u32> {
        let mut latest = crate::lock(&self.latest);
        let (job, attempt, at) = latest.by_owner.get(owner)?;
        if cached(job) || at.elapsed() >= UNSEEN_FOR_AT_MOST {
            latest.by_owner.remove(owner);
            return None;
        }
        Some(*attempt)
    }

    /// How many of the class's created Jobs the cache does not show yet (`cached`: the names
    /// of the class's Jobs in the cache); forgets the ones it shows and the stale ones.
    pub fn unseen(&self, class: &str, cached: &HashSet<&str>) -> usize {
        let mut created = crate::lock(&self.created);
        let Some(list) = created.get_mut(class) else {
            return 0;
        };
        list.retain(|(name, at)| {
            !cached.contains(name.as_str()) && at.elapsed() < UNSEEN_FOR_AT_MOST
        });
        let n = list.len();
        if n == 0 {
            created.remove(class);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_jobs_count_until_the_cache_shows_them() {
        let s = Expected::default();
        s.record("gold", "provision-a");
        s.record("gold", "provision-b");
        s.record("silver", "provision-c");
        assert_eq!(s.unseen("gold", &HashSet::new()), 2);
        assert_eq!(s.unseen("gold", &HashSet::from(["provision-a"])), 1);
        assert_eq!(s.unseen("gold", &HashSet::from(["provision-b"])), 0);
        assert_eq!(s.unseen("silver", &HashSet::new()), 1);
        assert_eq!(s.unseen("bronze", &HashSet::new()), 0);
    }

    #[test]
    fn an_owners_job_counts_until_the_cache_shows_it() {
        let s = Expected::default();
        assert_eq!(s.unseen_for("claim-1", |_| false), None);
        s.record_for("claim-1", "provision-1-2", 2);
        assert_eq!(s.unseen_for("claim-1", |_| false), Some(2));
        assert_eq!(s.unseen_for("claim-2", |_| false), None);
        assert_eq!(s.unseen_for("claim-1", |j| j == "provision-1-2"), None);
        assert_eq!(
            s.unseen_for("claim-1", |_| false),
            None,
            "forgotten once seen"
        );
    }

    /// A sweep for stale owners keeps every live one, however many a burst makes.
    #[test]
    fn live_expectations_survive_the_sweep() {
        let s = Expected::default();
        for i in 0..FORGET_STALE_ABOVE * 2 + 1 {
            s.record_for(&format!("claim-{i}"), "provision", 1);
        }
        assert_eq!(s.unseen_for("claim-0", |_| false), Some(1));
        let kept = s.latest.lock().unwrap().by_owner.len();
        assert_eq!(kept, FORGET_STALE_ABOVE * 2 + 1);
    }

    #[tokio::test]
    async fn one_turn_per_class_at_a_time() {
        let s = Arc::new(Expected::default());
        let gold = s.turn("gold").await;
        // Another class is not held up.
        let _silver = s.turn("silver").await;
        let waiting = {
            let s = s.clone();
            tokio::spawn(async move { drop(s.turn("gold").await) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a second turn waits for the first");
        drop(gold);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the turn passes on")
            .unwrap();
    }
}
