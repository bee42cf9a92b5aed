//! Client-side rate limiting of requests to the API server (`--kube-api-qps`,
//! `--kube-api-burst`), as client-go's token bucket does for Kubernetes' own controllers:
//! a burst of claims must not turn into a burst of requests that everyone else's share of
//! the API server pays for.

use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// Requests per second on average, and how many may go at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub qps: NonZeroU32,
    pub burst: NonZeroU32,
}

impl Default for Limits {
    /// Enough for about ten volumes a second at five requests each (faster than Kubernetes'
    /// Job controller starts pods), far below what an API server serves.
    fn default() -> Self {
        Limits {
            qps: NonZeroU32::new(50).expect("non-zero"),
            burst: NonZeroU32::new(100).expect("non-zero"),
        }
    }
}

/// The token bucket every request of the controllers waits on (in `fence::FencedService`,
/// just before the write fence is checked). A watch is one request (when it is opened),
/// as in client-go.
#[derive(Clone)]
pub struct Limiter {
    bucket: Arc<DefaultDirectRateLimiter>,
    /// Whose turn it is to wait for the next token (first come, first served).
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Limiter {
    pub fn new(limits: Limits) -> Self {
        Limiter {
            bucket: Arc::new(RateLimiter::direct(
                Quota::per_second(limits.qps).allow_burst(limits.burst),
            )),
            turn: Arc::default(),
        }
    }

    /// Waits for a token. One request at a time waits on the bucket, the others in line
    /// behind it: thousands of requests each polling the bucket would all wake for every
    /// token (a restart among 5,000 volumes kept a core busy for the ten minutes its
    /// requests took to drain).
    pub async fn until_ready(&self) {
        let _turn = self.turn.lock().await;
        self.bucket.until_ready().await
    }
}

/// What the controller's requests say they come from (the API server's audit log and
/// per-client metrics read it).
pub const USER_AGENT: &str = concat!("flex-provisioner/", env!("CARGO_PKG_VERSION"));

/// A client for `config` whose requests carry `USER_AGENT`.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let name = tower::util::MapRequestLayer::new(|mut r: http::Request<kube::client::Body>| {
        r.headers_mut().insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        );
        r
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&name)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let limiter = Limiter::new(Limits {
            qps: NonZeroU32::new(20).unwrap(),
            burst: NonZeroU32::new(5).unwrap(),
        });
        let start = Instant::now();
        for _ in 0..5 {
            limiter.until_ready().await;
        }
        let burst = start.elapsed();
        for _ in 0..10 {
            limiter.until_ready().await;
        }
        // Ten more at 20 per second need at least about half a second: a lower bound only
        // (a loaded machine may be slower, never faster).
        assert!(
            start.elapsed() >= Duration::from_millis(400),
            "15 requests with a burst of 5 at 20/s took {:?} (burst {burst:?})",
            start.elapsed()
        );
    }
}
