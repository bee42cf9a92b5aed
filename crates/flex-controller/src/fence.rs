//! The controllers' gate to the API server: every request waits for the client-side rate
//! limit, then every request that changes something passes the leader's write fence, a
//! check of the clock against the last renewal of the leader Lease, as the last step
//! before it is sent (so no time spent waiting for the rate limit can outlast it). A reconcile
//! that was stalled (a pinned runtime, a paused process, a slow network) and resumes after
//! the renew deadline has passed is refused before anything reaches the API server, so it
//! can never write beside a standby that took the Lease over (client-go's guarantee, held
//! here by the client rather than by each caller remembering to check).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Method, Request, Response};
use kube::client::Body;

/// Until when this instance may write.
#[derive(Debug)]
pub struct Fence {
    /// `None`: never closes (no leader election: this instance is the only one).
    until: Mutex<Option<Instant>>,
}

impl Fence {
    /// A fence that lets writes through until `until`, and after that only once
    /// [`Fence::extend_to`] moves it on; `None`: one that always lets them through.
    pub fn until(until: Option<Instant>) -> Arc<Self> {
        let until = Mutex::new(until);
        Arc::new(Fence { until })
    }

    /// A renewal succeeded: writes may go on until `until` (never moved back).
    pub fn extend_to(&self, until: Instant) {
        let mut u = crate::lock(&self.until);
        if let Some(current) = u.as_mut() {
            *current = (*current).max(until);
        }
    }

    /// Leadership is lost: no write from now on.
    pub fn close(&self) {
        let mut u = crate::lock(&self.until);
        // `admits` needs now to be before the deadline: from this instant on, never.
        if u.is_some() {
            *u = Some(Instant::now());
        }
    }

    /// Whether a write may be sent now.
    pub fn admits(&self) -> bool {
        crate::lock(&self.until).is_none_or(|until| Instant::now() < until)
    }
}

/// A write refused by the fence.
#[derive(Debug, thiserror::Error)]
#[error(
    "{method} refused: this instance has not renewed its leader Lease within the renew deadline, so another may lead"
)]
pub struct Fenced {
    pub method: Method,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

/// The controller's client behind the rate limit and the fence: reads (and watches)
/// always pass the fence, writes only while it admits them.
#[derive(Clone)]
pub struct FencedService {
    client: kube::Client,
    fence: Arc<Fence>,
    limiter: Option<crate::throttle::Limiter>,
}

impl tower::Service<Request<Body>> for FencedService {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The inner client queues requests itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (client, fence, limiter) = (
            self.client.clone(),
            self.fence.clone(),
            self.limiter.clone(),
        );
        Box::pin(async move {
            if let Some(l) = limiter {
                l.until_ready().await;
            }
            let write = !matches!(
                *request.method(),
                Method::GET | Method::HEAD | Method::OPTIONS
            );
            if write && !fence.admits() {
                let refused = Fenced {
                    method: request.method().clone(),
                };
                tracing::warn!(error = %refused, uri = %request.uri(), "write refused");
                return Err(kube::Error::Service(Box::new(refused)));
            }
            client.send(request).await
        })
    }
}

/// `client` behind the rate limit `limiter` (none: unlimited) and `fence`.
pub fn fenced(
    client: kube::Client,
    fence: Arc<Fence>,
    limiter: Option<crate::throttle::Limiter>,
) -> kube::Client {
    let namespace = client.default_namespace().to_owned();
    kube::Client::new(
        FencedService {
            client,
            fence,
            limiter,
        },
        namespace,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use std::time::Duration;
    use tower_test::mock;

    fn behind(fence: Arc<Fence>) -> (kube::Client, mock::Handle<Request<Body>, Response<Body>>) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let inner = kube::Client::new(service, "default");
        (fenced(inner, fence, None), handle)
    }

    fn config_map_json() -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}
        }))
        .unwrap()
    }

    /// Answers the next request the mock API server receives, returning its method.
    async fn answer(handle: &mut mock::Handle<Request<Body>, Response<Body>>) -> Method {
        let (request, send) = handle.next_request().await.expect("a request");
        send.send_response(
            Response::builder()
                .body(Body::from(config_map_json()))
                .unwrap(),
        );
        request.method().clone()
    }

    #[tokio::test]
    async fn writes_pass_until_the_deadline_and_reads_always() {
        let fence = Fence::until(Some(Instant::now() + Duration::from_millis(200)));
        let (client, mut handle) = behind(fence.clone());
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let cm: ConfigMap = serde_json::from_slice(&config_map_json()).unwrap();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(2), async {
                Some(answer(&mut handle).await)
            })
            .await
            {
                seen.push(m);
            }
            seen
        });
        api.create(&Default::default(), &cm)
            .await
            .expect("before the deadline");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let refused = api.create(&Default::default(), &cm).await.unwrap_err();
        assert!(refused.to_string().contains("renew deadline"), "{refused}");
        let refused = api
            .delete("c", &Default::default())
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(refused.to_string().contains("refused"), "{refused}");
        api.get("c").await.expect("reads pass");
        fence.extend_to(Instant::now() + Duration::from_secs(5));
        api.create(&Default::default(), &cm).await.expect("renewed");
        fence.close();
        assert!(
            api.create(&Default::default(), &cm).await.is_err(),
            "closed"
        );
        let seen = server.await.unwrap();
        assert_eq!(
            seen,
            [Method::POST, Method::GET, Method::POST],
            "what reached the server"
        );
    }

    #[test]
    fn an_open_fence_never_closes_and_a_deadline_never_moves_back() {
        let open = Fence::until(None);
        open.close();
        assert!(
            open.admits(),
            "without leader election there is no one to fence off"
        );
        let f = Fence::until(Some(Instant::now() + Duration::from_secs(60)));
        f.extend_to(Instant::now());
        assert!(f.admits());
    }
}
