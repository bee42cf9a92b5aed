//! Authorization (`SandboxOptions::auth`): `system:masters` may do everything; everyone
//! else by the RBAC objects (Roles, ClusterRoles, RoleBindings, ClusterRoleBindings) in the
//! store, plus the bootstrap defaults every cluster has: any authenticated user may read
//! the discovery and health paths (system:discovery, system:public-info-viewer) and create
//! self reviews (system:basic-user).

use serde_json::{Value, json};

use super::api::{Api, ListOpts};
use super::auth::UserInfo;
use super::resources;
use super::status::ApiError;

/// What a request does, as the authorizer sees it (Kubernetes' `authorizer.Attributes`).
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub namespace: String,
    /// For non-resource requests.
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

const DEFAULT_PATHS: &[&str] = &[
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/readyz",
    "/version",
    "/version/",
    "/openapi",
    "/openapi/*",
];

fn list(api: &Api, plural: &str, ns: Option<&str>) -> Vec<Value> {
    let Some(rid) = resources::find("rbac.authorization.k8s.io", "v1", plural) else {
        return Vec::new();
    };
    api.list(rid, ns, &ListOpts::default())
        .ok()
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn has(list: &[&str], want: &str) -> bool {
    list.iter().any(|x| *x == "*" || *x == want)
}

fn path_matches(rules: &[&str], path: &str) -> bool {
    rules.iter().any(|r| {
        *r == "*"
            || *r == path
            || r.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

/// Whether one PolicyRule allows the request (Kubernetes' `RuleAllows`).
pub fn rule_allows(a: &Attributes, rule: &Value) -> bool {
    let verbs = strs(&rule["verbs"]);
    if !has(&verbs, &a.verb) {
        return false;
    }
    if !a.resource_request {
        return path_matches(&strs(&rule["nonResourceURLs"]), &a.path);
    }
    let groups = strs(&rule["apiGroups"]);
    if !has(&groups, &a.api_group) {
        return false;
    }
    let res = strs(&rule["resources"]);
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let res_ok = res.iter().any(|r| {
        *r == "*"
            || *r == combined
            || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
    });
    if !res_ok {
        return false;
    }
    let names = strs(&rule["resourceNames"]);
    names.is_empty() || names.contains(&a.name.as_str())
}

fn subject_matches(user: &UserInfo, s: &Value, binding_ns: &str) -> bool {
    let name = s["name"].as_str().unwrap_or_default();
    match s["kind"].as_str().unwrap_or_default() {
        "User" => user.name == name,
        "Group" => user.in_group(name),
        "ServiceAccount" => {
            let ns = s["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

fn describe_subject(s: &Value, binding_ns: &str) -> String {
    let kind = s["kind"].as_str().unwrap_or_default();
    let name = s["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let ns = s["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_ns);
        return format!("{kind} \"{name}/{ns}\"");
    }
    format!("{kind} \"{name}\"")
}

/// The rules a binding's roleRef names, or the error RBAC reports for a missing role.
fn role_rules(api: &Api, binding: &Value, binding_ns: &str) -> Result<Vec<Value>, String> {
    let kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
    let name = binding["roleRef"]["name"].as_str().unwrap_or_default();
    let (plural, ns, singular) = match kind {
        "Role" => ("roles", binding_ns, "role"),
        _ => ("clusterroles", "", "clusterrole"),
    };
    let rid = resources::find("rbac.authorization.k8s.io", "v1", plural).unwrap_or_default();
    match api.get(rid, ns, name) {
        Ok(role) => Ok(role["rules"].as_array().cloned().unwrap_or_default()),
        Err(_) => Err(format!(
            "{singular}.rbac.authorization.k8s.io \"{name}\" not found"
        )),
    }
}

/// Decides whether `user` may do `a`.
pub fn authorize(api: &Api, user: &UserInfo, a: &Attributes) -> Decision {
    if user.in_group("system:masters") {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let authenticated = user.in_group("system:authenticated");
    if authenticated {
        let default_ok = if a.resource_request {
            a.verb == "create"
                && matches!(
                    (a.api_group.as_str(), a.resource.as_str()),
                    (
                        "authorization.k8s.io",
                        "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
                    ) | ("authentication.k8s.io", "selfsubjectreviews")
                )
        } else {
            a.verb == "get" && path_matches(DEFAULT_PATHS, &a.path)
        };
        if default_ok {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
    }
    let mut errors: Vec<String> = Vec::new();
    for b in list(api, "clusterrolebindings", None) {
        let Some(subject) = b["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| subject_matches(user, s, ""))
        else {
            continue;
        };
        match role_rules(api, &b, "") {
            Ok(rules) => {
                if rules.iter().any(|r| rule_allows(a, r)) {
                    return Decision {
                        allowed: true,
                        reason: format!(
                            "RBAC: allowed by ClusterRoleBinding \"{}\" of {} \"{}\" to {}",
                            b["metadata"]["name"].as_str().unwrap_or_default(),
                            b["roleRef"]["kind"].as_str().unwrap_or_default(),
                            b["roleRef"]["name"].as_str().unwrap_or_default(),
                            describe_subject(subject, "")
                        ),
                    };
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if !a.namespace.is_empty() {
        for b in list(api, "rolebindings", Some(&a.namespace)) {
            let Some(subject) = b["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| subject_matches(user, s, &a.namespace))
            else {
                continue;
            };
            match role_rules(api, &b, &a.namespace) {
                Ok(rules) => {
                    if rules.iter().any(|r| rule_allows(a, r)) {
                        return Decision {
                            allowed: true,
                            reason: format!(
                                "RBAC: allowed by RoleBinding \"{}/{}\" of {} \"{}\" to {}",
                                b["metadata"]["name"].as_str().unwrap_or_default(),
                                a.namespace,
                                b["roleRef"]["kind"].as_str().unwrap_or_default(),
                                b["roleRef"]["name"].as_str().unwrap_or_default(),
                                describe_subject(subject, &a.namespace)
                            ),
                        };
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
    let reason = match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    };
    Decision {
        allowed: false,
        reason,
    }
}

/// Kubernetes' `forbiddenMessage`.
fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    let username = &user.name;
    if !a.resource_request {
        return format!("User \"{username}\" cannot {} path \"{}\"", a.verb, a.path);
    }
    let mut resource = a.resource.clone();
    if !a.subresource.is_empty() {
        resource = format!("{resource}/{}", a.subresource);
    }
    if !a.namespace.is_empty() {
        return format!(
            "User \"{username}\" cannot {} resource \"{resource}\" in API group \"{}\" in the namespace \"{}\"",
            a.verb, a.api_group, a.namespace
        );
    }
    format!(
        "User \"{username}\" cannot {} resource \"{resource}\" in API group \"{}\" at the cluster scope",
        a.verb, a.api_group
    )
}

/// The 403 a denied request gets (`responsewriters.Forbidden` with `NewForbidden`).
pub fn forbidden(user: &UserInfo, a: &Attributes, reason: &str) -> ApiError {
    let mut msg = forbidden_message(user, a);
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    let qualified = if a.api_group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.api_group)
    };
    let message = if qualified.is_empty() {
        format!("forbidden: {msg}")
    } else if a.name.is_empty() {
        format!("{qualified} is forbidden: {msg}")
    } else {
        format!("{qualified} \"{}\" is forbidden: {msg}", a.name)
    };
    let mut details = serde_json::Map::new();
    if !a.name.is_empty() {
        details.insert("name".into(), json!(a.name));
    }
    if !a.api_group.is_empty() {
        details.insert("group".into(), json!(a.api_group));
    }
    if !a.resource.is_empty() {
        details.insert("kind".into(), json!(a.resource));
    }
    ApiError::new(403, Some("Forbidden"), message).with_details(Value::Object(details))
}

/// Answers a SelfSubjectAccessReview for `user`.
pub fn self_subject_access_review(api: &Api, user: &UserInfo, review: &Value) -> Value {
    let spec = &review["spec"];
    let a = if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        let s = |k: &str| ra[k].as_str().unwrap_or_default().to_owned();
        Attributes {
            verb: s("verb"),
            resource_request: true,
            api_group: s("group"),
            resource: s("resource"),
            subresource: s("subresource"),
            name: s("name"),
            namespace: s("namespace"),
            path: String::new(),
        }
    } else {
        let nra = &spec["nonResourceAttributes"];
        Attributes {
            verb: nra["verb"].as_str().unwrap_or_default().to_owned(),
            path: nra["path"].as_str().unwrap_or_default().to_owned(),
            ..Default::default()
        }
    };
    let d = authorize(api, user, &a);
    let mut status = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        status["reason"] = json!(d.reason);
    }
    let mut metadata = review["metadata"].clone();
    if !metadata.is_object() {
        metadata = json!({});
    }
    metadata["creationTimestamp"] = Value::Null;
    json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": metadata, "spec": spec, "status": status})
}

/// The authorizer's view of an HTTP request (Kubernetes' `RequestInfoFactory`).
pub fn request_attributes(method: &str, path: &str, query: Option<&str>) -> Attributes {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let non_resource = || Attributes {
        verb: method.to_ascii_lowercase(),
        path: path.to_owned(),
        ..Default::default()
    };
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return non_resource();
    }
    let mut a = Attributes {
        resource_request: true,
        path: path.to_owned(),
        ..Default::default()
    };
    let mut rest = &parts[1..];
    if parts[0] == "apis" {
        if rest.len() < 3 {
            return non_resource();
        }
        a.api_group = rest[0].to_owned();
        rest = &rest[1..];
    }
    rest = &rest[1..];
    a.verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
    .to_owned();
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        a.namespace = rest[1].to_owned();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    if let Some(r) = rest.first() {
        a.resource = (*r).to_owned();
    }
    if let Some(n) = rest.get(1) {
        a.name = (*n).to_owned();
    }
    if let Some(s) = rest.get(2) {
        a.subresource = (*s).to_owned();
    }
    let q: Vec<(String, String)> = query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let param = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    if a.name.is_empty() && a.verb == "get" {
        a.verb = if matches!(param("watch"), Some("true" | "1")) {
            "watch"
        } else {
            "list"
        }
        .to_owned();
        if let Some(fs) = param("fieldSelector") {
            let terms: Vec<&str> = fs.split(',').collect();
            if terms.len() == 1
                && let Some(n) = terms[0]
                    .strip_prefix("metadata.name==")
                    .or_else(|| terms[0].strip_prefix("metadata.name="))
                && !n.is_empty()
                && !n.contains('/')
            {
                a.name = n.to_owned();
            }
        }
    }
    if a.name.is_empty() && a.verb == "delete" {
        a.verb = "deletecollection".into();
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(
        method: &str,
        path: &str,
        query: Option<&str>,
    ) -> (String, String, String, String, String, String) {
        let a = request_attributes(method, path, query);
        (
            a.verb,
            a.api_group,
            a.resource,
            a.subresource,
            a.name,
            a.namespace,
        )
    }

    fn t(v: [&str; 6]) -> (String, String, String, String, String, String) {
        let [a, b, c, d, e, f] = v.map(str::to_owned);
        (a, b, c, d, e, f)
    }

    #[test]
    fn request_attributes_follow_request_info() {
        assert_eq!(
            attrs("GET", "/api/v1/namespaces/ns/configmaps", None),
            t(["list", "", "configmaps", "", "", "ns"])
        );
        assert_eq!(
            attrs(
                "GET",
                "/api/v1/namespaces/ns/configmaps",
                Some("watch=true")
            ),
            t(["watch", "", "configmaps", "", "", "ns"])
        );
        assert_eq!(
            attrs(
                "GET",
                "/api/v1/namespaces/ns/configmaps",
                Some("fieldSelector=metadata.name%3Dx&watch=1")
            ),
            t(["watch", "", "configmaps", "", "x", "ns"])
        );
        assert_eq!(
            attrs("DELETE", "/api/v1/persistentvolumes", None),
            t(["deletecollection", "", "persistentvolumes", "", "", ""])
        );
        assert_eq!(
            attrs("PUT", "/api/v1/persistentvolumes/pv/status", None),
            t(["update", "", "persistentvolumes", "status", "pv", ""])
        );
        assert_eq!(
            attrs("GET", "/api/v1/namespaces/ns", None),
            t(["get", "", "namespaces", "", "ns", "ns"])
        );
        assert_eq!(
            attrs("PUT", "/api/v1/namespaces/ns/finalize", None),
            t(["update", "", "namespaces", "finalize", "ns", "ns"])
        );
        assert_eq!(
            attrs(
                "POST",
                "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles",
                None
            ),
            t(["create", "rbac.authorization.k8s.io", "roles", "", "", "ns"])
        );
        let a = request_attributes("GET", "/apis/storage.k8s.io/v1", None);
        assert!(!a.resource_request);
        assert_eq!(
            (a.verb.as_str(), a.path.as_str()),
            ("get", "/apis/storage.k8s.io/v1")
        );
    }

    #[test]
    fn rules_match_verbs_groups_resources_and_names() {
        let rule = json!({"apiGroups": [""], "resources": ["configmaps", "pods/log"], "verbs": ["get"], "resourceNames": ["a"]});
        let a = |verb: &str, res: &str, sub: &str, name: &str| Attributes {
            verb: verb.into(),
            resource_request: true,
            resource: res.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Default::default()
        };
        assert!(rule_allows(&a("get", "configmaps", "", "a"), &rule));
        assert!(!rule_allows(&a("get", "configmaps", "", "b"), &rule));
        assert!(!rule_allows(&a("list", "configmaps", "", ""), &rule));
        assert!(rule_allows(&a("get", "pods", "log", "a"), &rule));
        assert!(!rule_allows(&a("get", "pods", "", "a"), &rule));
        let all = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(rule_allows(&a("delete", "pods", "status", "x"), &all));
        let paths = json!({"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]});
        let p = |path: &str| Attributes {
            verb: "get".into(),
            path: path.into(),
            ..Default::default()
        };
        assert!(rule_allows(&p("/healthz"), &paths));
        assert!(rule_allows(&p("/apis/batch"), &paths));
        assert!(!rule_allows(&p("/metrics"), &paths));
    }

    #[test]
    fn forbidden_messages_are_kubernetes_own() {
        let user = UserInfo::service_account("ns", "sa", "");
        let e = forbidden(
            &user,
            &request_attributes("GET", "/api/v1/namespaces/ns/configmaps/c", None),
            "",
        );
        assert_eq!(
            e.message,
            "configmaps \"c\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"ns\""
        );
        assert_eq!(e.details, Some(json!({"name": "c", "kind": "configmaps"})));
        let e = forbidden(&user, &request_attributes("GET", "/metrics", None), "");
        assert_eq!(
            e.message,
            "forbidden: User \"system:serviceaccount:ns:sa\" cannot get path \"/metrics\""
        );
        let e = forbidden(
            &user,
            &request_attributes("POST", "/apis/storage.k8s.io/v1/storageclasses", None),
            "RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found",
        );
        assert_eq!(
            e.message,
            "storageclasses.storage.k8s.io is forbidden: User \"system:serviceaccount:ns:sa\" cannot create resource \"storageclasses\" in API group \"storage.k8s.io\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found"
        );
    }
}
