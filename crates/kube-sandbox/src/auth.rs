//! Authentication by bearer token (`SandboxOptions::auth`): an admin token (user `admin`
//! in `system:masters`) written into the sandbox's kubeconfig, and ServiceAccount tokens
//! issued by the TokenRequest subresource and by the kubelet for pods. Tokens are opaque
//! random strings kept in memory.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::api::Api;
use super::ids;
use super::resources;
use super::status::ApiError;

/// Who a request is from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
    /// For ServiceAccount users: (namespace, name, uid) of the account.
    pub service_account: Option<(String, String, String)>,
}

impl UserInfo {
    pub fn admin() -> Self {
        UserInfo {
            name: "admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            service_account: None,
        }
    }

    pub fn service_account(ns: &str, name: &str, uid: &str) -> Self {
        UserInfo {
            name: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            service_account: Some((ns.into(), name.into(), uid.into())),
        }
    }

    pub fn in_group(&self, g: &str) -> bool {
        self.groups.iter().any(|x| x == g)
    }
}

struct Issued {
    user: UserInfo,
    /// Unix seconds after which the token is refused (`None`: never).
    expires: Option<i64>,
}

/// The token authenticator.
pub struct Authenticator {
    admin_token: String,
    tokens: Mutex<HashMap<String, Issued>>,
}

fn new_token() -> String {
    format!("sbx.{}{}", ids::uid(), ids::uid()).replace('-', "")
}

fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The 401 every unauthenticated request gets.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, Some("Unauthorized"), "Unauthorized")
}

impl Default for Authenticator {
    fn default() -> Self {
        Self::new()
    }
}

impl Authenticator {
    pub fn new() -> Self {
        let admin_token = new_token();
        let mut tokens = HashMap::new();
        tokens.insert(
            admin_token.clone(),
            Issued {
                user: UserInfo::admin(),
                expires: None,
            },
        );
        Authenticator {
            admin_token,
            tokens: Mutex::new(tokens),
        }
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Issues a token for a ServiceAccount valid for `seconds` (`None`: no expiry).
    /// Returns the token and its expiry as a `metav1.Time` string.
    pub fn issue_service_account(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        seconds: Option<i64>,
    ) -> (String, String) {
        let token = new_token();
        let expires = seconds.map(|s| unix_now() + s);
        let shown = expires.unwrap_or(unix_now() + 100 * 365 * 24 * 3600);
        let stamp = jiff::Timestamp::from_second(shown)
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|_| "2099-01-01T00:00:00Z".into());
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                token.clone(),
                Issued {
                    user: UserInfo::service_account(ns, name, uid),
                    expires,
                },
            );
        (token, stamp)
    }

    /// The user an `Authorization` header value names, if it is a valid bearer token.
    /// ServiceAccount tokens stop working when their account is deleted (or recreated).
    pub fn authenticate(&self, api: &Api, authorization: &str) -> Option<UserInfo> {
        let token = authorization
            .strip_prefix("Bearer ")
            .or_else(|| authorization.strip_prefix("bearer "))?
            .trim();
        let user = {
            let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
            let issued = tokens.get(token)?;
            if issued.expires.is_some_and(|e| e < unix_now()) {
                tokens.remove(token);
                return None;
            }
            issued.user.clone()
        };
        if let Some((ns, name, uid)) = &user.service_account {
            let rid = resources::find("", "v1", "serviceaccounts")?;
            let sa = api.get(rid, ns, name).ok()?;
            if !uid.is_empty() && sa["metadata"]["uid"].as_str() != Some(uid) {
                return None;
            }
        }
        Some(user)
    }

    /// Answers a TokenRequest (`POST .../serviceaccounts/{name}/token`) for `sa`.
    pub fn token_request(&self, ns: &str, sa: &Value, request: &Value) -> Value {
        let name = sa["metadata"]["name"].as_str().unwrap_or_default();
        let uid = sa["metadata"]["uid"].as_str().unwrap_or_default();
        let mut spec = request.get("spec").cloned().unwrap_or(json!({}));
        if !spec.is_object() {
            spec = json!({});
        }
        let seconds = spec["expirationSeconds"].as_i64().unwrap_or(3600).max(600);
        spec["expirationSeconds"] = json!(seconds);
        if spec.get("audiences").is_none_or(Value::is_null) {
            spec["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
        }
        let (token, stamp) = self.issue_service_account(ns, name, uid, Some(seconds));
        json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
            "spec": spec, "status": {"token": token, "expirationTimestamp": stamp}})
    }
}

/// Answers a SelfSubjectReview (`kubectl auth whoami`): who the request is from.
pub fn self_subject_review(user: &UserInfo) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if let Some((_, _, uid)) = user.service_account.as_ref().filter(|s| !s.2.is_empty()) {
        info["uid"] = json!(uid);
    }
    json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null}, "status": {"userInfo": info}})
}

/// Where clients reach the sandbox: its URL and, over HTTPS, the CA to trust (a
/// kubeconfig's `certificate-authority-data`: base64 of the PEM).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub server: String,
    pub ca_data: Option<String>,
}

impl Endpoint {
    /// A kubeconfig for the sandbox, with a bearer token when given.
    pub fn kubeconfig(&self, token: Option<&str>) -> String {
        kubeconfig_yaml(&self.server, self.ca_data.as_deref(), token)
    }
}

/// A kubeconfig for the sandbox at `server`, trusting the CA when given, with a bearer
/// token when given.
pub fn kubeconfig_yaml(server: &str, ca_data: Option<&str>, token: Option<&str>) -> String {
    let user = match token {
        Some(t) => format!("\n    token: {t}\n"),
        None => " {}\n".to_owned(),
    };
    let ca = ca_data
        .map(|c| format!("\n    certificate-authority-data: {c}"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sandbox\n  cluster:\n    server: {server}{ca}\ncontexts:\n- name: kube-sandbox\n  context:\n    cluster: kube-sandbox\n    user: kube-sandbox\n    namespace: default\ncurrent-context: kube-sandbox\nusers:\n- name: kube-sandbox\n  user:{user}"
    )
}

/// The bootstrap policy objects a cluster starts with that bindings commonly name:
/// the `cluster-admin` ClusterRole, bound to `system:masters`.
pub fn bootstrap_policy(api: &Api) {
    let ctx = super::api::WriteCtx::manager("kube-apiserver");
    let labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    let annotations = json!({"rbac.authorization.kubernetes.io/autoupdate": "true"});
    let objects = [
        (
            "clusterroles",
            json!({"metadata": {"name": "cluster-admin", "labels": labels, "annotations": annotations},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                          {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        ),
        (
            "clusterrolebindings",
            json!({"metadata": {"name": "cluster-admin", "labels": labels, "annotations": annotations},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]}),
        ),
    ];
    for (plural, obj) in objects {
        if let Some(rid) = resources::find("rbac.authorization.k8s.io", "v1", plural) {
            let _ = api.create(rid, "", obj, &ctx);
        }
    }
}
