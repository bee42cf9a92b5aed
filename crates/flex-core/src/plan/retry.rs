//! The delay before a new provisioning attempt: capped exponential backoff (backon).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

pub const FIRST_RETRY: Duration = Duration::from_secs(10);
pub const MAX_RETRY: Duration = Duration::from_secs(600);

/// How long to wait after attempt `attempt` (1-based) failed: 10 s, 20 s, 40 s ... 10 min.
pub fn delay_after(attempt: u32, first: Duration) -> Duration {
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(MAX_RETRY)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(attempt.saturating_sub(1) as usize)
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
        // backon computes in floating point: compare whole milliseconds.
        assert_eq!(delay_after(2, Duration::from_millis(100)).as_millis(), 200);
    }
}
