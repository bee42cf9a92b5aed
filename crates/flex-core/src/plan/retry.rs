//! The delay before a new provisioning attempt: capped exponential backoff (backon).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

pub const FIRST_RETRY: Duration = Duration::from_secs(10);
pub const MAX_RETRY: Duration = Duration::from_secs(600);

/// Doublings after which any first delay of at least a microsecond has reached the cap
/// (2^30 µs is past 10 minutes; `--retry-base-seconds` is at least one second).
const DOUBLINGS_TO_CAP: u32 = 30;

/// How long to wait after attempt `attempt` (1-based) failed: 10 s, 20 s, 40 s ... 10 min.
///
/// In constant time, whatever the attempt number: backon's iterator is stepped at most
/// `DOUBLINGS_TO_CAP` times. Stepped `attempt` times, an attempt number a claim's author
/// wrote (`4000000000`) pinned a worker thread for seconds per plan.
pub fn delay_after(attempt: u32, first: Duration) -> Duration {
    let steps = attempt.saturating_sub(1);
    if steps >= DOUBLINGS_TO_CAP {
        return MAX_RETRY;
    }
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(MAX_RETRY)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(steps as usize)
        .unwrap_or(MAX_RETRY)
}

/// How much longer to wait after attempt `attempt` failed at `failed_at` (zero: start now).
/// A failure time in the future (clock skew) counts as just now.
pub fn wait_remaining(
    attempt: u32,
    first: Duration,
    failed_at: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Duration {
    let wait = delay_after(attempt, first);
    let elapsed = failed_at.map_or(wait, |t| {
        let d = now.duration_since(t);
        if d.is_negative() {
            Duration::ZERO
        } else {
            d.unsigned_abs()
        }
    });
    wait.saturating_sub(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let d: Vec<u64> = (1..=8)
            .map(|a| delay_after(a, FIRST_RETRY).as_secs())
            .collect();
        assert_eq!(d, [10, 20, 40, 80, 160, 320, 600, 600]);
        assert_eq!(delay_after(1000, FIRST_RETRY), MAX_RETRY);
        assert_eq!(delay_after(31, Duration::from_millis(1)), MAX_RETRY);
        assert_eq!(delay_after(30, Duration::from_millis(1)), MAX_RETRY);
        assert_eq!(delay_after(11, Duration::from_millis(1)).as_millis(), 1024);
        // backon computes in floating point: compare whole milliseconds.
        assert_eq!(delay_after(2, Duration::from_millis(100)).as_millis(), 200);
    }

    /// An attempt number near u32::MAX costs no more than the first: the iterator is never
    /// stepped billions of times.
    #[test]
    fn a_huge_attempt_number_is_answered_at_once() {
        let t = std::time::Instant::now();
        for _ in 0..1000 {
            assert_eq!(delay_after(4_000_000_000, FIRST_RETRY), MAX_RETRY);
            assert_eq!(delay_after(u32::MAX, Duration::from_millis(1)), MAX_RETRY);
        }
        // Stepping 4e9 times took about 14 s per call: a thousand calls would take hours.
        assert!(t.elapsed() < std::time::Duration::from_secs(60));
    }
}
