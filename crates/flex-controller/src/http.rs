//! The controller's HTTP endpoints: `/healthz` (the process serves), `/readyz` (the leader's
//! caches have synced, or a standby can reach the API and waits for the Lease) and
//! `/metrics`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::metrics::Metrics;

#[derive(Default)]
pub struct Health {
    /// This instance leads and its caches have synced.
    pub ready: AtomicBool,
    /// This instance passed its start checks and waits for the leader Lease. A standby is
    /// ready in Kubernetes' sense: were it not, a two-replica Deployment could never roll
    /// out (a new standby would never become available).
    pub standby: AtomicBool,
}

fn respond(code: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn route(path: &str, health: &Health, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (code, body) = match path {
        "/metrics" => {
            let text = "text/plain; version=0.0.4";
            return respond(StatusCode::OK, text, metrics.render());
        }
        "/healthz" | "/livez" => (StatusCode::OK, "ok"),
        "/readyz" if health.ready.load(Ordering::Relaxed) => (StatusCode::OK, "ok"),
        "/readyz" if health.standby.load(Ordering::Relaxed) => {
            (StatusCode::OK, "ok: standby, waiting for the leader Lease")
        }
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet"),
        _ => (StatusCode::NOT_FOUND, "not found"),
    };
    respond(code, "text/plain", body.into())
}

/// Serves until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (health, metrics) = (health.clone(), metrics.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let resp = route(req.uri().path(), &health, &metrics);
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
