//! Client-side rate limiting of requests to the API server (`--kube-api-qps`,
//! `--kube-api-burst`), as client-go's token bucket does for Kubernetes' own controllers:
//! a burst of claims must not turn into a burst of requests that everyone else's share of
//! the API server pays for.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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

/// A tower layer: every request waits for a token first. A watch is one request (when it
/// is opened), as in client-go.
#[derive(Clone)]
pub struct ThrottleLayer {
    limiter: Arc<DefaultDirectRateLimiter>,
}

impl ThrottleLayer {
    pub fn new(limits: Limits) -> Self {
        ThrottleLayer {
            limiter: Arc::new(RateLimiter::direct(
                Quota::per_second(limits.qps).allow_burst(limits.burst),
            )),
        }
    }
}

impl<S> tower::Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;
    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            limiter: self.limiter.clone(),
            waiting: None,
            permitted: false,
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Holds a token before it reports ready, so the one request `call` sends is paid for.
pub struct Throttle<S> {
    inner: S,
    limiter: Arc<DefaultDirectRateLimiter>,
    waiting: Option<Wait>,
    permitted: bool,
}

impl<S, R> tower::Service<R> for Throttle<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.permitted {
            let limiter = self.limiter.clone();
            let wait = self
                .waiting
                .get_or_insert_with(|| Box::pin(async move { limiter.until_ready().await }));
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.waiting = None;
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.permitted = false;
        self.inner.call(req)
    }
}

/// What the controller's requests say they come from (the API server's audit log and
/// per-client metrics read it).
pub const USER_AGENT: &str = concat!("flex-provisioner/", env!("CARGO_PKG_VERSION"));

/// A client for `config` whose requests are limited to `limits` and carry `USER_AGENT`.
pub fn client(config: kube::Config, limits: Limits) -> Result<kube::Client, kube::Error> {
    let name = tower::util::MapRequestLayer::new(|mut r: http::Request<kube::client::Body>| {
        r.headers_mut().insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        );
        r
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&name)
        .with_layer(&ThrottleLayer::new(limits))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use tower::{Service, ServiceExt};

    #[tokio::test]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let limits = Limits {
            qps: NonZeroU32::new(20).unwrap(),
            burst: NonZeroU32::new(5).unwrap(),
        };
        let mut svc = tower::Layer::layer(
            &ThrottleLayer::new(limits),
            tower::service_fn(|r: u32| async move { Ok::<_, std::convert::Infallible>(r) }),
        );
        let start = Instant::now();
        for i in 0..5 {
            assert_eq!(svc.ready().await.unwrap().call(i).await.unwrap(), i);
        }
        let burst = start.elapsed();
        for i in 0..10 {
            svc.ready().await.unwrap().call(i).await.unwrap();
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
