//! Conformance: with auth on, kubectl reaches the sandbox over HTTPS with the kubeconfig's
//! token and CA (client-go sends a bearer token only over TLS), `kubectl auth can-i`
//! answers truthfully for a token's account and for an impersonated one (`--as`),
//! impersonation itself needs the `impersonate` verb, and pods' kubeconfigs carry the CA.
//!
//! Expected messages are Kubernetes' own formats (`authorization.forbiddenMessage`,
//! `responsewriters.Forbidden`, kubectl's `Error from server (Forbidden): ...`); the
//! conformance records hold no auth probe.

use crate::common;

use std::path::{Path, PathBuf};

use common::kubectl::{kubectl, ok};
use common::sandbox::{eventually, start_with_auth};
use kube_sandbox::Sandbox;

const IMAGES: &[(&str, &str)] = &[(
    "kubectl-in-pod",
    "kubectl get configmaps -n default -o name > \"$SANDBOX_STATE/out-$HOSTNAME.tmp\" 2>&1\necho \"rc=$?\" >> \"$SANDBOX_STATE/out-$HOSTNAME.tmp\"\nmv \"$SANDBOX_STATE/out-$HOSTNAME.tmp\" \"$SANDBOX_STATE/out-$HOSTNAME\"\nexit 0",
)];

async fn start() -> Sandbox {
    start_with_auth(IMAGES).await
}

/// A kubeconfig like the sandbox's, with another user's token.
fn kubeconfig_with_token(sb: &Sandbox, token: &str, name: &str) -> PathBuf {
    let admin = std::fs::read_to_string(&sb.kubeconfig).unwrap();
    let admin_token = sb.auth.as_ref().unwrap().admin_token();
    let path = sb.work_dir.join(format!("kubeconfig-{name}"));
    std::fs::write(&path, admin.replace(admin_token, token)).unwrap();
    path
}

/// An account `team-a/reader` that may read configmaps in `team-a` and `default`.
async fn reader(kc: &Path) {
    ok(kc, "create namespace team-a", None).await;
    ok(kc, "create serviceaccount reader -n team-a", None).await;
    ok(kc, "create serviceaccount reader -n default", None).await;
    ok(
        kc,
        "create role cm-reader -n team-a --verb=get,list --resource=configmaps",
        None,
    )
    .await;
    ok(
        kc,
        "create rolebinding cm-reader -n team-a --role=cm-reader --serviceaccount=team-a:reader",
        None,
    )
    .await;
    ok(
        kc,
        "create role cm-reader -n default --verb=get,list --resource=configmaps",
        None,
    )
    .await;
    ok(
        kc,
        "create rolebinding cm-reader -n default --role=cm-reader --serviceaccount=team-a:reader --serviceaccount=default:reader",
        None,
    )
    .await;
}

#[tokio::test]
async fn kubectl_uses_https_with_the_admin_token() {
    let sb = start().await;
    let kc = sb.kubeconfig.clone();
    let text = std::fs::read_to_string(&kc).unwrap();
    assert!(
        text.contains(&format!("server: https://{}", sb.addr)),
        "{text}"
    );
    assert!(text.contains("certificate-authority-data: "), "{text}");
    assert!(!text.contains("insecure-skip-tls-verify"), "{text}");

    let out = ok(&kc, "get namespaces -o name", None).await;
    assert!(out.lines().any(|l| l == "namespace/default"), "{out}");
    // kubectl's own identity check: the admin is in system:masters.
    let out = ok(
        &kc,
        "auth whoami -o jsonpath={.status.userInfo.username}",
        None,
    )
    .await;
    assert_eq!(out, "admin");
    let out = ok(&kc, "auth can-i * *", None).await;
    assert_eq!(out.trim(), "yes");

    // Without a token: 401, as kube-apiserver answers an anonymous request when anonymous
    // auth is off.
    let anonymous = kubeconfig_with_token(&sb, "not-a-token", "nobody");
    let r = kubectl(&anonymous, "get configmaps", None).await;
    assert_eq!(r.rc, 1);
    assert!(
        r.err
            .contains("error: You must be logged in to the server (Unauthorized)"),
        "{}",
        r.err
    );

    // kube-rs over HTTPS trusting the sandbox's CA (`Sandbox::client`)...
    assert!(sb.server_url().starts_with("https://"));
    let v = sb.client().unwrap().apiserver_version().await.unwrap();
    assert_eq!(v.git_version, "v1.36.2-kube-sandbox");
    // ...and plain HTTP on the same port, for test clients without the CA.
    assert!(sb.url().starts_with("http://"));
    let mut config = kube::Config::new(sb.url().parse().unwrap());
    config.auth_info.token = Some(sb.auth.as_ref().unwrap().admin_token().to_owned().into());
    let plain = kube::Client::try_from(config).unwrap();
    let v = plain.apiserver_version().await.unwrap();
    assert_eq!(v.git_version, "v1.36.2-kube-sandbox");
}

#[tokio::test]
async fn auth_can_i_answers_for_tokens_and_impersonated_accounts() {
    let sb = start().await;
    let kc = sb.kubeconfig.clone();
    reader(&kc).await;

    // Impersonation by the admin (`--as`).
    let sa = "--as=system:serviceaccount:team-a:reader";
    for (question, answer) in [
        ("list configmaps -n team-a", "yes"),
        ("get configmaps -n team-a", "yes"),
        ("create configmaps -n team-a", "no"),
        ("list configmaps -n kube-system", "no"),
        ("list secrets -n team-a", "no"),
        ("create persistentvolumes", "no"),
    ] {
        let r = kubectl(&kc, &format!("auth can-i {question} {sa}"), None).await;
        assert_eq!(r.out.trim(), answer, "can-i {question}: {r:?}");
        // kubectl exits 1 for "no".
        assert_eq!(r.rc, i32::from(answer == "no"), "can-i {question}: {r:?}");
    }

    // With the account's own token, from `kubectl create token`.
    let token = ok(&kc, "create token reader -n team-a", None).await;
    let as_reader = kubeconfig_with_token(&sb, token.trim(), "reader");
    let out = ok(&as_reader, "auth can-i list configmaps -n team-a", None).await;
    assert_eq!(out.trim(), "yes");
    let r = kubectl(&as_reader, "auth can-i delete configmaps -n team-a", None).await;
    assert_eq!((r.rc, r.out.trim()), (1, "no"));
    // Every namespace has its kube-root-ca.crt, as kube-controller-manager makes it.
    let out = ok(&as_reader, "get configmaps -n team-a -o name", None).await;
    assert_eq!(out.trim(), "configmap/kube-root-ca.crt");
    let out = ok(
        &as_reader,
        "auth whoami -o jsonpath={.status.userInfo.username}",
        None,
    )
    .await;
    assert_eq!(out, "system:serviceaccount:team-a:reader");

    // A refused request: 403 with Kubernetes' message.
    let r = kubectl(
        &as_reader,
        "create configmap x -n team-a --from-literal=a=b",
        None,
    )
    .await;
    assert_eq!(r.rc, 1);
    assert_eq!(
        r.err.trim(),
        "error: failed to create configmap: configmaps is forbidden: User \"system:serviceaccount:team-a:reader\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"team-a\""
    );
    let r = kubectl(&as_reader, "get secrets -n team-a", None).await;
    assert_eq!(r.rc, 1);
    assert_eq!(
        r.err.trim(),
        "Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:team-a:reader\" cannot list resource \"secrets\" in API group \"\" in the namespace \"team-a\""
    );

    // Impersonating needs the `impersonate` verb: the reader may not.
    let r = kubectl(
        &as_reader,
        "get configmaps -n team-a --as=system:serviceaccount:kube-system:default",
        None,
    )
    .await;
    assert_eq!(r.rc, 1);
    assert_eq!(
        r.err.trim(),
        "Error from server (Forbidden): serviceaccounts \"default\" is forbidden: User \"system:serviceaccount:team-a:reader\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"kube-system\""
    );
    let r = kubectl(&as_reader, "get configmaps -n team-a --as=jane", None).await;
    assert_eq!(r.rc, 1);
    assert_eq!(
        r.err.trim(),
        "Error from server (Forbidden): users \"jane\" is forbidden: User \"system:serviceaccount:team-a:reader\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // An impersonated user in system:masters may do anything.
    let out = ok(
        &kc,
        "auth can-i delete nodes --as=jane --as-group=system:masters",
        None,
    )
    .await;
    assert_eq!(out.trim(), "yes");
    let r = kubectl(&kc, "auth can-i delete nodes --as=jane", None).await;
    assert_eq!((r.rc, r.out.trim()), (1, "no"));
}

#[tokio::test]
async fn kubectl_inside_a_pod_reaches_the_sandbox_over_https() {
    let sb = start().await;
    let kc = sb.kubeconfig.clone();
    reader(&kc).await;
    ok(
        &kc,
        "create configmap seen -n default --from-literal=a=b",
        None,
    )
    .await;
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: in-pod, namespace: default}
spec:
  serviceAccountName: reader
  restartPolicy: Never
  containers: [{name: c, image: kubectl-in-pod}]
"#;
    ok(&kc, "create -f -", Some(pod)).await;
    let out = eventually(60, "the pod's kubectl to finish", || async {
        ["node-a", "node-b"]
            .iter()
            .find_map(|n| std::fs::read_to_string(sb.state_dir(n).join("out-in-pod")).ok())
    })
    .await;
    assert_eq!(out, "configmap/kube-root-ca.crt\nconfigmap/seen\nrc=0\n");
}
