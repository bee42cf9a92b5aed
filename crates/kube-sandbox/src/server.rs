//! The HTTP front end: Kubernetes REST paths, query parameters, content types and status
//! codes, over the API verbs. Plain HTTP on 127.0.0.1; no authentication unless
//! `SandboxOptions::auth` (bearer tokens, impersonation and RBAC, see `auth`,
//! `impersonation` and `rbac`), which also brings HTTPS on the same port (see `tls`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::api::{Api, DeleteOpts, ListOpts, WriteCtx};
use super::faults::{Fault, Faults};
use super::kubelet::PodLogs;
use super::protobuf;
use super::resources::{self, Rid};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult};
use super::tables;
use super::watch::{self, WatchParams};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What request handlers share.
pub struct Shared {
    pub api: Arc<Api>,
    pub faults: Arc<Faults>,
    pub logs: Arc<PodLogs>,
    /// Authentication and RBAC, when on.
    pub auth: Option<Arc<super::auth::Authenticator>>,
    /// Every request served, by client, verb and resource.
    pub requests: Arc<super::requests::RequestCounter>,
}

/// Serves connections until the listener's task is dropped. With an acceptor, a
/// connection whose first byte starts a TLS handshake is served over TLS.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, tls: Option<TlsAcceptor>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let mut first = [0u8; 1];
            let handshake =
                matches!(stream.peek(&mut first).await, Ok(1)) && first[0] == super::tls::HANDSHAKE;
            match tls {
                Some(acceptor) if handshake => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        serve_connection(stream, shared).await;
                    }
                }
                _ => serve_connection(stream, shared).await,
            }
        });
    }
}

async fn serve_connection<I>(io: I, shared: Arc<Shared>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(shared, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

fn full(code: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).boxed_unsync());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("application/json")),
    );
    resp
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    full(code, "application/json", v.to_string())
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(secs) = e.retry_after {
        resp.headers_mut()
            .insert("Retry-After", HeaderValue::from(secs));
    }
    resp
}

enum Route {
    Version,
    Health,
    Api,
    Apis,
    GroupVersion(String),
    Group(String),
    OpenApi(String),
    Resource {
        rid: Rid,
        ns: Option<String>,
        name: Option<String>,
        sub: Option<String>,
    },
}

fn resource_route(group: &str, rest: &[&str]) -> Option<Route> {
    let find = |plural: &str| resources::find(group, "v1", plural);
    let item = |rid, ns: Option<&str>, name: Option<&&str>, sub: Option<&&str>| Route::Resource {
        rid,
        ns: ns.map(str::to_owned),
        name: name.map(|s| s.to_string()),
        sub: sub.map(|s| s.to_string()),
    };
    match rest {
        ["namespaces", ns, plural, tail @ ..] if group.is_empty() || *plural != "status" => {
            if group.is_empty() && tail.is_empty() && (*plural == "status" || *plural == "finalize")
            {
                return Some(item(find("namespaces")?, None, Some(ns), Some(plural)));
            }
            let rid = find(plural)?;
            if !resources::get(rid).namespaced || tail.len() > 2 {
                return None;
            }
            Some(item(rid, Some(ns), tail.first(), tail.get(1)))
        }
        [plural, tail @ ..] if tail.len() <= 2 => {
            let rid = find(plural)?;
            if resources::get(rid).namespaced && !tail.is_empty() {
                return None;
            }
            Some(item(rid, None, tail.first(), tail.get(1)))
        }
        _ => None,
    }
}

fn route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["version"] => Some(Route::Version),
        ["healthz"] | ["readyz"] | ["livez"] => Some(Route::Health),
        ["api"] => Some(Route::Api),
        ["apis"] => Some(Route::Apis),
        ["api", "v1"] => Some(Route::GroupVersion(String::new())),
        ["api", "v1", rest @ ..] => resource_route("", rest),
        ["apis", g] => Some(Route::Group(g.to_string())),
        ["apis", g, "v1"] => Some(Route::GroupVersion(g.to_string())),
        ["apis", g, "v1", rest @ ..] => resource_route(g, rest),
        ["openapi", rest @ ..] => Some(Route::OpenApi(rest.join("/"))),
        _ => None,
    }
}

fn query(req: &Request<Incoming>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn truthy(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true" | "1"))
}

fn header(req: &Request<Incoming>, name: &str) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The verb a request performs, as fault rules name it.
fn verb_of(method: &Method, q: &BTreeMap<String, String>, has_name: bool) -> &'static str {
    match *method {
        Method::GET if truthy(q.get("watch")) => "watch",
        Method::GET if has_name => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// The verb of a request that names no resource, as Kubernetes names non-resource verbs.
fn non_resource_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        _ => "other",
    }
}

/// Counts a request before anything can turn it away: a refused or failed request is load
/// on the API server too.
fn count(
    shared: &Shared,
    req: &Request<Incoming>,
    route: Option<&Route>,
    q: &BTreeMap<String, String>,
) {
    let agent = req
        .headers()
        .get(hyper::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let agent = agent.split('/').next().unwrap_or_default();
    let (verb, resource) = match route {
        Some(Route::Resource { rid, name, sub, .. }) => {
            let plural = resources::get(*rid).plural;
            let resource = match sub {
                Some(sub) => Cow::Owned(format!("{plural}/{sub}")),
                None => Cow::Borrowed(plural),
            };
            (verb_of(req.method(), q, name.is_some()), resource)
        }
        _ => (
            non_resource_verb(req.method()),
            Cow::Owned(req.uri().path().to_owned()),
        ),
    };
    shared.requests.record(agent, verb, resource);
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let q = query(&req);
    let route = route(&path);
    count(&shared, &req, route.as_ref(), &q);
    let user = match &shared.auth {
        None => None,
        Some(authn) => {
            let Some(user) = authn.authenticate(&shared.api, &header(&req, "authorization")) else {
                return error_response(&super::auth::unauthorized());
            };
            let groups: Vec<String> = req
                .headers()
                .get_all("impersonate-group")
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_owned))
                .collect();
            let impersonated = req
                .headers()
                .get("impersonate-user")
                .and_then(|v| v.to_str().ok());
            let user = match super::impersonation::apply(&shared.api, user, impersonated, &groups) {
                Ok(u) => u,
                Err(e) => return error_response(&e),
            };
            let a =
                super::rbac::request_attributes(req.method().as_str(), &path, req.uri().query());
            let d = super::rbac::authorize(&shared.api, &user, &a);
            if !d.allowed {
                return error_response(&super::rbac::forbidden(&user, &a, &d.reason));
            }
            Some(user)
        }
    };
    let Some(route) = route else {
        return error_response(&ApiError::unknown_resource());
    };
    let accept = header(&req, "accept");
    match route {
        Route::Version => json_response(200, &resources::version()),
        Route::Health => full(200, "text/plain", "ok"),
        Route::Api if accept.contains("apidiscovery.k8s.io") => {
            discovery_response(resources::aggregated(true))
        }
        Route::Apis if accept.contains("apidiscovery.k8s.io") => {
            discovery_response(resources::aggregated(false))
        }
        Route::Api => json_response(200, &resources::api_versions()),
        Route::Apis => json_response(200, &resources::api_group_list()),
        Route::Group(g) => match resources::api_group(&g) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::unknown_resource()),
        },
        Route::GroupVersion(g) => match resources::resource_list(&g) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::unknown_resource()),
        },
        Route::OpenApi(rest) if rest == "v2" && protobuf::openapi_v2::wanted(&accept) => full(
            200,
            protobuf::openapi_v2::CONTENT_TYPE,
            protobuf::openapi_v2::document(
                resources::version()["gitVersion"]
                    .as_str()
                    .unwrap_or_default(),
            ),
        ),
        Route::OpenApi(rest) => match super::openapi::document(&rest) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::unknown_resource()),
        },
        Route::Resource { rid, ns, name, sub } => {
            let r = resources::get(rid);
            let verb = verb_of(req.method(), &q, name.is_some());
            match shared.faults.take(verb, r.plural) {
                Some(Fault::Status { code, retry_after }) => {
                    let mut e = ApiError::new(
                        code,
                        reason_for(code),
                        format!("injected fault: {verb} {}", r.plural),
                    );
                    e.retry_after = retry_after;
                    return error_response(&e);
                }
                Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
                None => {}
            }
            let manager = q.get("fieldManager").cloned().unwrap_or_else(|| {
                let ua = header(&req, "user-agent");
                ua.split('/').next().unwrap_or_default().to_owned()
            });
            let ctx = WriteCtx {
                manager,
                dry_run: q.get("dryRun").is_some_and(|v| v == "All"),
                force: truthy(q.get("force")),
                manager_given: q.contains_key("fieldManager"),
                apply: false,
            };
            let mut content_type = header(&req, "content-type");
            // CBOR is not spoken here; 415 makes client-go fall back to JSON.
            if content_type.contains("cbor") && !r.create_only {
                return error_response(&unsupported_media_type(&format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/apply-patch+yaml, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json; got {content_type}"
                )));
            }
            let method = req.method().clone();
            let mut body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => Bytes::new(),
            };
            // Protobuf bodies become the JSON the rest of the server reads.
            if protobuf::is_protobuf(&content_type) {
                match protobuf::decode(&body) {
                    Ok(v) => {
                        body = Bytes::from(v.to_string());
                        content_type = "application/json".into();
                    }
                    Err(e) => return error_response(&unsupported_media_type(&e.to_string())),
                }
            }
            let ns = ns.unwrap_or_default();
            if method == Method::POST && r.plural == "selfsubjectreviews" {
                // Without auth, everyone may do everything: as the admin would.
                let who = user.clone().unwrap_or_else(super::auth::UserInfo::admin);
                return json_response(201, &super::auth::self_subject_review(&who));
            }
            if let Some(user) = &user
                && method == Method::POST
                && r.plural == "selfsubjectaccessreviews"
            {
                let review = parse_body(&body).unwrap_or(json!({}));
                let answer = super::rbac::self_subject_access_review(&shared.api, user, &review);
                return json_response(201, &answer);
            }
            let result = dispatch(
                &shared,
                &method,
                rid,
                &ns,
                name.as_deref(),
                sub.as_deref(),
                &q,
                &ctx,
                &content_type,
                &body,
                &accept,
            );
            match result {
                Ok(resp) => resp,
                Err(e) => error_response(&e),
            }
        }
    }
}

fn unsupported_media_type(message: &str) -> ApiError {
    ApiError::new(415, Some("UnsupportedMediaType"), message).with_details(json!({}))
}

fn discovery_response(v: Value) -> Response<Body> {
    full(
        200,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        v.to_string(),
    )
}

fn reason_for(code: u16) -> Option<&'static str> {
    Some(match code {
        400 => "BadRequest",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => return None,
    })
}

fn parse_body(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml_ng::from_slice(body))
        .map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format: {e}"
            ))
        })
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    shared: &Shared,
    method: &Method,
    rid: Rid,
    ns: &str,
    name: Option<&str>,
    sub: Option<&str>,
    q: &BTreeMap<String, String>,
    ctx: &WriteCtx,
    content_type: &str,
    body: &[u8],
    accept: &str,
) -> ApiResult<Response<Body>> {
    let api = &shared.api;
    let r = resources::get(rid);
    let namespace = (!ns.is_empty()).then_some(ns);
    match (method, name, sub) {
        (&Method::GET, None, None) if truthy(q.get("watch")) => {
            let params = WatchParams {
                rid,
                namespace: namespace.map(str::to_owned),
                labels: LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))?,
                fields: FieldSelector::parse(q.get("fieldSelector").map_or("", String::as_str), r)?,
                resource_version: q.get("resourceVersion").cloned(),
                send_initial_events: truthy(q.get("sendInitialEvents")),
                bookmarks: truthy(q.get("allowWatchBookmarks")),
                timeout: q
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .map(Duration::from_secs),
            };
            let rx = watch::start(api.clone(), shared.faults.watch_closer(), params)?;
            let stream = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
            });
            let mut resp = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream.boxed())));
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Ok(resp)
        }
        (&Method::GET, None, None) => {
            let opts = ListOpts {
                label_selector: q.get("labelSelector").cloned(),
                field_selector: q.get("fieldSelector").cloned(),
                resource_version: q.get("resourceVersion").cloned(),
                resource_version_match: q.get("resourceVersionMatch").cloned(),
                limit: q.get("limit").and_then(|l| l.parse().ok()),
                continue_token: q.get("continue").cloned(),
            };
            let list = api.list(rid, namespace, &opts)?;
            if accept.contains("as=Table") {
                return Ok(json_response(200, &tables::table_for_list(r, &list)));
            }
            Ok(json_response(200, &list))
        }
        (&Method::GET, Some(name), Some("log")) if r.plural == "pods" => {
            api.get(rid, ns, name)?;
            Ok(full(200, "text/plain", shared.logs.get(ns, name)))
        }
        (&Method::GET, Some(name), None | Some("status")) => {
            let obj = api.get(rid, ns, name)?;
            if accept.contains("as=Table") {
                return Ok(json_response(200, &tables::table_for_object(r, &obj)));
            }
            Ok(json_response(200, &obj))
        }
        (&Method::POST, None, None) => {
            // Reviews are answered whatever they ask (and in whatever encoding they ask it).
            let request = if r.create_only {
                parse_body(body).unwrap_or(json!({}))
            } else {
                parse_body(body)?
            };
            let obj = api.create(rid, ns, request, ctx)?;
            Ok(json_response(201, &obj))
        }
        (&Method::POST, Some(name), Some("binding")) if r.plural == "pods" => {
            let binding = parse_body(body)?;
            let node = binding
                .pointer("/target/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            api.bind_pod(ns, name, node)?;
            Ok(json_response(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        (&Method::POST, Some(name), Some("eviction")) if r.plural == "pods" => {
            api.delete(rid, ns, name, &DeleteOpts::default())?;
            Ok(json_response(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        (&Method::POST, Some(name), Some("token")) if r.plural == "serviceaccounts" => {
            let sa = api.get(rid, ns, name)?;
            let req = parse_body(body).unwrap_or(json!({}));
            if let Some(authn) = &shared.auth {
                return Ok(json_response(201, &authn.token_request(ns, &sa, &req)));
            }
            Ok(json_response(
                201,
                &json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": ns}, "spec": req.get("spec").cloned().unwrap_or(json!({})),
                "status": {"token": format!("sandbox-token-{ns}-{name}"), "expirationTimestamp": "2099-01-01T00:00:00Z"}}),
            ))
        }
        (&Method::PUT, Some(name), None | Some("status") | Some("finalize")) => {
            let sub = sub.filter(|s| *s == "status");
            let obj = api.update(rid, ns, name, parse_body(body)?, sub, ctx)?;
            Ok(json_response(200, &obj))
        }
        (&Method::PATCH, Some(name), None | Some("status")) => {
            let (code, obj) = api.patch(rid, ns, name, content_type, body, sub, ctx)?;
            Ok(json_response(code, &obj))
        }
        (&Method::DELETE, Some(name), None) => {
            let opts = delete_opts(q, body)?;
            let deleted = api.delete(rid, ns, name, &opts)?;
            let mut resp = json_response(200, &deleted.body);
            for w in deleted.warnings {
                if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{w}\"")) {
                    resp.headers_mut().append("Warning", v);
                }
            }
            Ok(resp)
        }
        (&Method::DELETE, None, None) => {
            let opts = delete_opts(q, body)?;
            let list = api.list(
                rid,
                namespace,
                &ListOpts {
                    label_selector: q.get("labelSelector").cloned(),
                    field_selector: q.get("fieldSelector").cloned(),
                    ..Default::default()
                },
            )?;
            let mut items = Vec::new();
            for item in list["items"].as_array().into_iter().flatten() {
                let item_ns = item["metadata"]["namespace"].as_str().unwrap_or(ns);
                let item_name = item["metadata"]["name"].as_str().unwrap_or_default();
                if let Ok(d) = api.delete(rid, item_ns, item_name, &opts) {
                    // The list holds objects, as Kubernetes' does: a delete that answered
                    // with a Status (the object went at once) lists the object as it was.
                    if d.body["kind"] == "Status" {
                        items.push(item.clone());
                    } else {
                        items.push(d.body);
                    }
                }
            }
            Ok(json_response(
                200,
                &json!({"kind": r.list_kind(), "apiVersion": r.api_version(), "metadata": {}, "items": items}),
            ))
        }
        _ => Err(ApiError::new(
            405,
            Some("MethodNotAllowed"),
            "the server does not allow this method on the requested resource",
        )),
    }
}

fn delete_opts(q: &BTreeMap<String, String>, body: &[u8]) -> ApiResult<DeleteOpts> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(body)?
    };
    Ok(DeleteOpts {
        propagation: b["propagationPolicy"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| q.get("propagationPolicy").cloned()),
        orphan_dependents: b["orphanDependents"]
            .as_bool()
            .or_else(|| q.get("orphanDependents").map(|v| v == "true")),
        precondition_uid: b
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_owned),
        precondition_rv: b
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned),
        grace_period: b["gracePeriodSeconds"]
            .as_i64()
            .or_else(|| q.get("gracePeriodSeconds").and_then(|g| g.parse().ok())),
        dry_run: q.get("dryRun").is_some_and(|v| v == "All")
            || b["dryRun"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "All")),
    })
}
