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

/// A client for `config` whose requests carry `USER_AGENT` and which never sends a request
/// again by itself. kube's own retry (of 429, 503 and 504 answers, after a backoff) happens
/// below `fence::FencedService`: a write re-sent from there after a long `Retry-After`
/// would skip the write fence. The reconcile that gets the error retries it instead
/// (`controller::retry`), through the rate limit and the fence again.
pub fn client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An API server that answers every request with 429 and `Retry-After: 0`, counting them.
    async fn overloaded_server() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut held = Vec::new();
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        held.extend_from_slice(&buf[..n]);
                        // One answer per request head (bodies here are small and sent with it).
                        while let Some(end) = held.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&held[..end]).to_lowercase();
                            let body = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            if held.len() < end + 4 + body {
                                break;
                            }
                            held.drain(..end + 4 + body);
                            counted.fetch_add(1, Ordering::SeqCst);
                            let answer = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\n\
                                          content-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (url, seen)
    }

    /// A write answered 429 is not sent again from inside the client (where the write fence
    /// would not see it): the caller gets the error, and one request reached the server.
    #[tokio::test]
    async fn the_client_never_sends_a_write_again_by_itself() {
        let (url, seen) = overloaded_server().await;
        let client = client(kube::Config::new(url.parse().unwrap())).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            api.create(&Default::default(), &Default::default()),
        )
        .await
        .expect("the 429 comes back to the caller, not retried for minutes");
        assert!(answer.is_err(), "{answer:?}");
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "requests that reached the server"
        );
    }

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
