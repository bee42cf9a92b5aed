//! The API server's request counts: every request served, by the client's User-Agent
//! product, verb and resource, failed ones included.

use crate::common;

use std::collections::BTreeMap;

use common::sandbox::{start, start_with_auth};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use kube_sandbox::Sandbox;

/// One plain HTTP request with a User-Agent; the status code of the answer.
async fn request(sb: &Sandbox, agent: &str, method: &str, path: &str, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(sb.addr).await.unwrap();
    let content_type = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    s.write_all(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: sandbox\r\nUser-Agent: {agent}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.split(' ').nth(1).unwrap().parse().unwrap()
}

fn counts(pairs: &[(&str, &str, u64)]) -> BTreeMap<(String, String), u64> {
    pairs
        .iter()
        .map(|(verb, resource, n)| (((*verb).to_owned(), (*resource).to_owned()), *n))
        .collect()
}

#[tokio::test]
async fn requests_are_counted_by_agent_verb_and_resource() {
    let sb = start().await;
    let agent = "counting-probe/1.2.3 (linux/amd64) test";
    let cms = "/api/v1/namespaces/default/configmaps";
    let cm = r#"{"metadata": {"name": "c"}, "data": {"k": "v"}}"#;
    assert_eq!(request(&sb, agent, "GET", cms, "").await, 200);
    assert_eq!(
        request(&sb, agent, "GET", &format!("{cms}/c"), "").await,
        404
    );
    assert_eq!(request(&sb, agent, "POST", cms, cm).await, 201);
    assert_eq!(request(&sb, agent, "POST", cms, cm).await, 409);
    let patch = r#"{"data": {"k": "w"}}"#;
    assert_eq!(
        request(&sb, agent, "PATCH", &format!("{cms}/c"), patch).await,
        200
    );
    // A watch counts once, when opened, however many events it then carries.
    let watch = format!("{cms}?watch=1&timeoutSeconds=1");
    assert_eq!(request(&sb, agent, "GET", &watch, "").await, 200);
    let status = "/api/v1/persistentvolumes/nowhere/status";
    assert_eq!(request(&sb, agent, "PUT", status, "{}").await, 404);
    assert_eq!(
        request(&sb, agent, "DELETE", &format!("{cms}/c"), "").await,
        200
    );
    assert_eq!(request(&sb, agent, "GET", "/version", "").await, 200);
    // Another client, and one that names no product: counted apart.
    assert_eq!(request(&sb, "other/1", "GET", cms, "").await, 200);

    let all = sb.request_counts();
    assert_eq!(
        all.by_agent("counting-probe"),
        counts(&[
            ("list", "configmaps", 1),
            ("get", "configmaps", 1),
            ("create", "configmaps", 2),
            ("patch", "configmaps", 1),
            ("watch", "configmaps", 1),
            ("update", "persistentvolumes/status", 1),
            ("delete", "configmaps", 1),
            ("get", "/version", 1),
        ])
    );
    assert_eq!(all.total("counting-probe"), 9);
    assert_eq!(all.get("other", "list", "configmaps"), 1);
    assert_eq!(all.get("counting-probe", "list", "pods"), 0);

    // kube-rs sends no User-Agent unless its Config's headers name one: its requests count
    // under an empty product.
    sb.reset_request_counts();
    assert!(sb.request_counts().0.is_empty());
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    pods.list(&ListParams::default()).await.unwrap();
    assert!(pods.get_opt("missing").await.unwrap().is_none());
    let mut config = kube::Config::new(sb.url().parse().unwrap());
    config.headers.push((
        hyper::header::USER_AGENT,
        hyper::header::HeaderValue::from_static("my-controller/0.3"),
    ));
    let named: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    named.list(&ListParams::default()).await.unwrap();
    let all = sb.request_counts();
    assert_eq!(
        all.by_agent(""),
        counts(&[("list", "pods", 1), ("get", "pods", 1)])
    );
    assert_eq!(
        all.by_agent("my-controller"),
        counts(&[("list", "configmaps", 1)])
    );
    assert_eq!(all.0.len(), 3, "{all:?}");
}

#[tokio::test]
async fn refused_requests_are_counted() {
    let sb = start_with_auth(&[]).await;
    // No token: 401, before any route or authorization.
    let path = "/api/v1/namespaces/default/persistentvolumeclaims";
    assert_eq!(
        request(&sb, "anonymous-probe/1", "GET", path, "").await,
        401
    );
    assert_eq!(
        sb.request_counts().by_agent("anonymous-probe"),
        counts(&[("list", "persistentvolumeclaims", 1)])
    );
}
