//! Authentication by bearer token and authorization by RBAC (`SandboxOptions::auth`).
//!
//! Through kube-rs clients; kubectl over HTTPS (`auth can-i`, impersonation, tokens) is
//! in `sandbox_https.rs`.

use crate::common;

use common::sandbox::{eventually, start_with_auth};
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_sandbox::Sandbox;
use serde_json::{Value, json};

/// Test images of this file: `<name>` -> shell script body.
const IMAGES: &[(&str, &str)] = &[(
    "show-kubeconfig",
    "cat \"$KUBECONFIG\" > \"$SANDBOX_STATE/kubeconfig-$HOSTNAME.tmp\"\nmv \"$SANDBOX_STATE/kubeconfig-$HOSTNAME.tmp\" \"$SANDBOX_STATE/kubeconfig-$HOSTNAME\"\nexit 0",
)];

async fn start() -> Sandbox {
    start_with_auth(IMAGES).await
}

/// A client sending `token` (or no credentials).
fn client_with(sb: &Sandbox, token: Option<&str>) -> kube::Client {
    let mut config = kube::Config::new(sb.url().parse().unwrap());
    config.default_namespace = "default".into();
    if let Some(t) = token {
        config.auth_info = serde_json::from_value(json!({ "token": t })).unwrap();
    }
    kube::Client::try_from(config).unwrap()
}

/// One plain HTTP request: (status code, body).
async fn raw(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: sandbox\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (code, body)
}

/// `(code, reason, message, details)` of an API error.
fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

async fn service_account(sb: &Sandbox, ns: &str, name: &str, extra: Value) -> String {
    let admin = sb.client().unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(admin, ns);
    let mut body = json!({"metadata": {"name": name}});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    sas.create(&PostParams::default(), &obj(body))
        .await
        .unwrap();
    token_for(sb, ns, name).await
}

/// A token by the TokenRequest subresource, as `kubectl create token` asks for it.
async fn token_for(sb: &Sandbox, ns: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(sb.client().unwrap(), ns);
    let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600}});
    let answer: Value = sas
        .create_subresource("token", name, &PostParams::default(), &req)
        .await
        .unwrap();
    assert_eq!(answer["kind"], "TokenRequest");
    assert_eq!(answer["apiVersion"], "authentication.k8s.io/v1");
    assert!(
        answer["status"]["expirationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{answer}"
    );
    answer["status"]["token"].as_str().unwrap().to_owned()
}

/// A Role allowing `get,list` configmaps in `ns`, bound to the ServiceAccount `sa`.
async fn configmap_reader(sb: &Sandbox, ns: &str, sa: &str) {
    let admin = sb.client().unwrap();
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "cm-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin, ns)
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "cm-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})),
        )
        .await
        .unwrap();
}

fn pv(name: &str) -> PersistentVolume {
    obj(json!({"metadata": {"name": name}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": "/tmp/pv"}}}))
}

#[tokio::test]
async fn requests_without_a_valid_token_are_unauthorized() {
    let sb = start().await;
    let unauthorized = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
    for path in ["/api/v1/namespaces/default/configmaps", "/version", "/api"] {
        let (code, body) = raw(sb.addr, "GET", path, None).await;
        assert_eq!(code, 401, "{path}");
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), unauthorized);
        let (code, _) = raw(sb.addr, "GET", path, Some("not-a-token")).await;
        assert_eq!(code, 401, "{path} with a bad token");
    }
    let (code, ..) = status_of(
        Api::<ConfigMap>::namespaced(client_with(&sb, None), "default")
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(code, 401);

    // The kubeconfig (and `Sandbox::client`) carries the admin token: allowed everything.
    let kubeconfig = std::fs::read_to_string(&sb.kubeconfig).unwrap();
    let token = sb.auth.as_ref().unwrap().admin_token().to_owned();
    assert!(
        kubeconfig.contains(&format!("token: {token}")),
        "{kubeconfig}"
    );
    let (code, _) = raw(sb.addr, "GET", "/api/v1/persistentvolumes", Some(&token)).await;
    assert_eq!(code, 200);
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    pvs.create(&PostParams::default(), &pv("admin-pv"))
        .await
        .unwrap();
    pvs.delete("admin-pv", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_role_allows_reading_configmaps_and_nothing_else() {
    let sb = start().await;
    let token = service_account(&sb, "default", "reader", json!({})).await;
    configmap_reader(&sb, "default", "reader").await;
    let admin_cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "default");
    admin_cms
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "settings"}, "data": {"a": "1"}})),
        )
        .await
        .unwrap();

    let client = client_with(&sb, Some(&token));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let list = cms.list(&ListParams::default()).await.unwrap();
    assert!(
        list.items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("settings"))
    );
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["a"], "1");
    // Discovery is open to any authenticated user.
    let (code, _) = raw(sb.addr, "GET", "/apis", Some(&token)).await;
    assert_eq!(code, 200);

    let user = "system:serviceaccount:default:reader";
    assert_eq!(
        status_of(
            cms.create(
                &PostParams::default(),
                &obj(json!({"metadata": {"name": "mine"}}))
            )
            .await
        ),
        (
            403,
            "Forbidden".into(),
            format!(
                "configmaps is forbidden: User \"{user}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
            )
        )
    );
    assert_eq!(
        status_of(cms.delete("settings", &DeleteParams::default()).await),
        (
            403,
            "Forbidden".into(),
            format!(
                "configmaps \"settings\" is forbidden: User \"{user}\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\""
            )
        )
    );
    // Not in another namespace, and not cluster-scoped resources.
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    assert_eq!(
        status_of(other.list(&ListParams::default()).await),
        (
            403,
            "Forbidden".into(),
            format!(
                "configmaps is forbidden: User \"{user}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"kube-system\""
            )
        )
    );
    let pvs: Api<PersistentVolume> = Api::all(client);
    assert_eq!(
        status_of(pvs.create(&PostParams::default(), &pv("pv1")).await),
        (
            403,
            "Forbidden".into(),
            format!(
                "persistentvolumes is forbidden: User \"{user}\" cannot create resource \"persistentvolumes\" in API group \"\" at the cluster scope"
            )
        )
    );
    // The Status body: details name the group, resource and object.
    let (code, body) = raw(
        sb.addr,
        "DELETE",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/cm-reader",
        Some(&token),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("roles.rbac.authorization.k8s.io \"cm-reader\" is forbidden: User \"{user}\" cannot delete resource \"roles\" in API group \"rbac.authorization.k8s.io\" in the namespace \"default\""),
            "reason": "Forbidden",
            "details": {"name": "cm-reader", "group": "rbac.authorization.k8s.io", "kind": "roles"},
            "code": 403})
    );
}

#[tokio::test]
async fn a_cluster_role_binding_allows_creating_persistent_volumes() {
    let sb = start().await;
    let token = service_account(&sb, "default", "provisioner", json!({})).await;
    let admin = sb.client().unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "pv-maker"},
                "rules": [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["create", "get"]},
                          {"apiGroups": [""], "resources": ["persistentvolumes/status"], "verbs": ["*"], "resourceNames": ["only-this"]}]})),
        )
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin)
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "pv-maker"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pv-maker"},
                "subjects": [{"kind": "ServiceAccount", "name": "provisioner", "namespace": "default"}]})),
        )
        .await
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client_with(&sb, Some(&token)));
    pvs.create(&PostParams::default(), &pv("pv1"))
        .await
        .unwrap();
    pvs.get("pv1").await.unwrap();
    let user = "system:serviceaccount:default:provisioner";
    assert_eq!(
        status_of(pvs.delete("pv1", &DeleteParams::default()).await),
        (
            403,
            "Forbidden".into(),
            format!(
                "persistentvolumes \"pv1\" is forbidden: User \"{user}\" cannot delete resource \"persistentvolumes\" in API group \"\" at the cluster scope"
            )
        )
    );
    assert_eq!(status_of(pvs.list(&ListParams::default()).await).0, 403);
    // resourceNames restrict a rule; subresources are named `resource/subresource`.
    let (code, body) = raw(
        sb.addr,
        "PUT",
        "/api/v1/persistentvolumes/pv1/status",
        Some(&token),
    )
    .await;
    assert_eq!(code, 403);
    assert!(body.contains(&format!("persistentvolumes \\\"pv1\\\" is forbidden: User \\\"{user}\\\" cannot update resource \\\"persistentvolumes/status\\\" in API group \\\"\\\" at the cluster scope")), "{body}");
}

/// Asks a SelfSubjectAccessReview with `client`'s credentials.
async fn can_i(client: &kube::Client, attrs: Value) -> Value {
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs}});
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = reviews
        .create(&PostParams::default(), &obj(body))
        .await
        .unwrap();
    let answer = serde_json::to_value(answer).unwrap();
    assert_eq!(answer["kind"], "SelfSubjectAccessReview");
    answer["status"].clone()
}

#[tokio::test]
async fn self_subject_access_reviews_answer_for_the_caller() {
    let sb = start().await;
    let token = service_account(&sb, "default", "reader", json!({})).await;
    configmap_reader(&sb, "default", "reader").await;
    let sa = client_with(&sb, Some(&token));
    let allowed = can_i(
        &sa,
        json!({"namespace": "default", "verb": "list", "resource": "configmaps"}),
    )
    .await;
    assert_eq!(allowed["allowed"], true, "{allowed}");
    assert_eq!(
        allowed["reason"],
        "RBAC: allowed by RoleBinding \"cm-reader/default\" of Role \"cm-reader\" to ServiceAccount \"reader/default\""
    );
    for attrs in [
        json!({"namespace": "default", "verb": "create", "resource": "configmaps"}),
        json!({"namespace": "kube-system", "verb": "list", "resource": "configmaps"}),
        json!({"verb": "create", "resource": "persistentvolumes"}),
    ] {
        assert_eq!(can_i(&sa, attrs.clone()).await["allowed"], false, "{attrs}");
    }
    // The admin may do anything.
    let admin = sb.client().unwrap();
    assert_eq!(
        can_i(
            &admin,
            json!({"verb": "create", "resource": "persistentvolumes"})
        )
        .await["allowed"],
        true
    );
}

#[tokio::test]
async fn service_account_tokens_die_with_their_account() {
    let sb = start().await;
    let token = service_account(&sb, "default", "short-lived", json!({})).await;
    let (code, _) = raw(sb.addr, "GET", "/version", Some(&token)).await;
    assert_eq!(code, 200);
    Api::<ServiceAccount>::namespaced(sb.client().unwrap(), "default")
        .delete("short-lived", &DeleteParams::default())
        .await
        .unwrap();
    let (code, _) = raw(sb.addr, "GET", "/version", Some(&token)).await;
    assert_eq!(code, 401);
}

#[tokio::test]
async fn pods_get_their_service_account_token_unless_automount_is_off() {
    let sb = start().await;
    service_account(&sb, "default", "reader", json!({})).await;
    service_account(
        &sb,
        "default",
        "quiet",
        json!({"automountServiceAccountToken": false}),
    )
    .await;
    configmap_reader(&sb, "default", "reader").await;
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    for (name, sa, automount) in [
        ("with-token", "reader", None),
        ("pod-says-no", "reader", Some(false)),
        ("account-says-no", "quiet", None),
        ("pod-overrides-account", "quiet", Some(true)),
    ] {
        let mut spec = json!({"serviceAccountName": sa, "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "show-kubeconfig"}]});
        if let Some(a) = automount {
            spec["automountServiceAccountToken"] = json!(a);
        }
        pods.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await
        .unwrap();
    }
    let read = |name: &'static str| {
        let sb = &sb;
        async move {
            eventually(
                30,
                &format!("pod {name} to write its kubeconfig"),
                || async {
                    ["node-a", "node-b"].iter().find_map(|n| {
                        std::fs::read_to_string(sb.state_dir(n).join(format!("kubeconfig-{name}")))
                            .ok()
                    })
                },
            )
            .await
        }
    };
    let token_in = |kubeconfig: &str| {
        kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: ").map(str::to_owned))
    };
    let with_token = read("with-token").await;
    let token = token_in(&with_token).expect("a token");
    assert_ne!(token, sb.auth.as_ref().unwrap().admin_token());
    assert!(with_token.contains(&format!("server: {}", sb.server_url())));
    assert!(with_token.contains("certificate-authority-data: "));
    // The pod's token is its ServiceAccount's: it may read configmaps, not write them.
    let cms: Api<ConfigMap> = Api::namespaced(client_with(&sb, Some(&token)), "default");
    cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        status_of(
            cms.create(
                &PostParams::default(),
                &obj(json!({"metadata": {"name": "x"}}))
            )
            .await
        )
        .0,
        403
    );
    for name in ["pod-says-no", "account-says-no"] {
        let kubeconfig = read(name).await;
        assert_eq!(token_in(&kubeconfig), None, "{name}: {kubeconfig}");
        assert!(kubeconfig.contains("user: {}"), "{name}: {kubeconfig}");
    }
    assert!(token_in(&read("pod-overrides-account").await).is_some());
}

#[tokio::test]
async fn a_role_binding_grants_a_cluster_role_in_its_namespace_only() {
    let sb = start().await;
    let token = service_account(&sb, "default", "ns-admin", json!({})).await;
    let admin = sb.client().unwrap();
    // The bootstrap `cluster-admin` ClusterRole exists, bound to system:masters.
    let crs: Api<ClusterRole> = Api::all(admin.clone());
    assert!(crs.get("cluster-admin").await.is_ok());
    let rbs: Api<RoleBinding> = Api::namespaced(admin, "default");
    rbs.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "ns-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "ns-admin"}]})),
    )
    .await
    .unwrap();
    rbs.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "dangling"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "missing"},
            "subjects": [{"kind": "ServiceAccount", "name": "lost"}]})),
    )
    .await
    .unwrap();
    let client = client_with(&sb, Some(&token));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "mine"}})),
    )
    .await
    .unwrap();
    cms.delete("mine", &DeleteParams::default()).await.unwrap();
    // Elsewhere nothing.
    let other: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    assert_eq!(
        status_of(other.list(&ListParams::default()).await).2,
        "configmaps is forbidden: User \"system:serviceaccount:default:ns-admin\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"kube-system\""
    );
    // A binding to a missing role is named in the denial, as RBAC reports it.
    let lost = service_account(&sb, "default", "lost", json!({})).await;
    let lost_cms: Api<ConfigMap> = Api::namespaced(client_with(&sb, Some(&lost)), "default");
    assert_eq!(
        status_of(lost_cms.get("x").await).2,
        "configmaps \"x\" is forbidden: User \"system:serviceaccount:default:lost\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": RBAC: role.rbac.authorization.k8s.io \"missing\" not found"
    );
    let (code, body) = raw(
        sb.addr,
        "GET",
        "/api/v1/namespaces/default/serviceaccounts/ns-admin/token",
        Some(&token),
    )
    .await;
    assert_eq!(code, 405, "{body}");
}
