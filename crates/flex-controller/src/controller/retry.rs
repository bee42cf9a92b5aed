//! How long to wait before reconciling an object again after an error, by kind of error:
//! a conflict re-plans at once, a missing permission or object waits minutes (nothing
//! changes until an admin acts), and server trouble backs off exponentially.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What an error calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retry {
    /// The cache was behind a write: plan again from fresh state, quietly.
    Replan(Duration),
    /// The controller may not do something it needs (403) or something it needs is missing
    /// (404): say so on the object and wait for an admin.
    Blocked(Duration),
    /// The API server is overloaded or failing (429, 5xx, timeouts): back off.
    Backoff(Duration),
}

const BLOCKED: Duration = Duration::from_secs(300);
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A run of failures ends after this long without one.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The retry for `error` after `failures` failures in a row (counting this one).
pub fn retry_for(error: &crate::Error, failures: u32) -> Retry {
    match error.status_code() {
        Some(409) => Retry::Replan(Duration::from_millis(200)),
        Some(403 | 404) => Retry::Blocked(BLOCKED),
        _ => {
            let shift = failures.saturating_sub(1).min(16);
            Retry::Backoff((BACKOFF_BASE * 2u32.pow(shift)).min(BACKOFF_MAX))
        }
    }
}

/// Consecutive failures per object, forgotten after a quiet while; bounded in size.
#[derive(Default)]
pub struct Failures(Mutex<HashMap<String, (u32, Instant)>>);

impl Failures {
    /// Records a failure of `key` and returns how many in a row it makes.
    pub fn record(&self, key: &str) -> u32 {
        let mut map = crate::lock(&self.0);
        if map.len() > 10_000 {
            map.retain(|_, (_, at)| at.elapsed() < FORGET_AFTER);
        }
        let entry = map.entry(key.to_owned()).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= FORGET_AFTER {
            entry.0 = 0;
        }
        entry.0 += 1;
        entry.1 = Instant::now();
        entry.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> crate::Error {
        crate::Error::write("creating Job ns/j")(kube::Error::Api(
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "message": "m", "reason": "r", "code": code
            }))
            .unwrap(),
        ))
    }

    #[test]
    fn each_kind_of_error_gets_its_own_retry() {
        assert_eq!(
            retry_for(&api(409), 1),
            Retry::Replan(Duration::from_millis(200))
        );
        assert_eq!(retry_for(&api(403), 1), Retry::Blocked(BLOCKED));
        assert_eq!(retry_for(&api(404), 3), Retry::Blocked(BLOCKED));
        assert_eq!(
            retry_for(&api(500), 1),
            Retry::Backoff(Duration::from_secs(1))
        );
        assert_eq!(
            retry_for(&api(429), 2),
            Retry::Backoff(Duration::from_secs(2))
        );
        assert_eq!(
            retry_for(&api(503), 4),
            Retry::Backoff(Duration::from_secs(8))
        );
        assert_eq!(retry_for(&api(500), 40), Retry::Backoff(BACKOFF_MAX));
    }

    #[test]
    fn failures_count_in_a_row_per_object() {
        let f = Failures::default();
        assert_eq!(f.record("a"), 1);
        assert_eq!(f.record("a"), 2);
        assert_eq!(f.record("b"), 1);
    }
}
