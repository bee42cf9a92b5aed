//! kubectl against the sandbox's kubeconfig: discovery, create/get/apply/delete, printing.
//! kubectl is required: this test fails (it does not skip) when it is not installed.

use crate::common;

use common::kubectl::kubectl_blocking;
use common::sandbox::start;

/// The shared kubectl runner, as (exit code, stdout, stderr).
fn kubectl(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let r = kubectl_blocking(kubeconfig, &args, stdin);
    (r.rc, r.out, r.err)
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, labels: {app: demo}}
data: {a: "1"}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: demo}
provisioner: example.com/demo
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: demo
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"#;

#[tokio::test]
async fn kubectl_discovers_creates_gets_applies_and_deletes() {
    let sb = start().await;
    let kc = sb.kubeconfig.clone();
    let run = move |args: Vec<&'static str>, stdin: Option<&'static str>| {
        let kc = kc.clone();
        tokio::task::spawn_blocking(move || kubectl(&kc, &args, stdin))
    };
    let (rc, out, err) = run(vec!["get", "nodes"], None).await.unwrap();
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("node-a") && out.contains("Ready"), "{out}");

    let (rc, out, err) = run(vec!["create", "-f", "-"], Some(OBJECTS)).await.unwrap();
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "configmap/settings created",
            "storageclass.storage.k8s.io/demo created",
            "persistentvolumeclaim/data created"
        ]
    );
    let (rc, _, err) = run(vec!["create", "-f", "-"], Some(OBJECTS)).await.unwrap();
    assert_eq!(rc, 1);
    assert!(err.contains("AlreadyExists"), "{err}");

    let (rc, out, _) = run(vec!["get", "pvc"], None).await.unwrap();
    assert_eq!(rc, 0);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header[..3],
        ["NAME", "STATUS", "VOLUME"],
        "server-side columns: {out}"
    );
    assert!(out.lines().nth(1).unwrap().starts_with("data"), "{out}");

    let (rc, out, _) = run(
        vec!["get", "cm", "settings", "-o", "jsonpath={.data.a}"],
        None,
    )
    .await
    .unwrap();
    assert_eq!((rc, out.as_str()), (0, "1"));
    let (rc, out, _) = run(vec!["get", "cm", "-l", "app=demo", "-o", "name"], None)
        .await
        .unwrap();
    assert_eq!((rc, out.trim()), (0, "configmap/settings"));

    let changed = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, labels: {app: demo}}\ndata: {a: \"2\", b: \"3\"}\n";
    let (rc, out, err) = run(vec!["apply", "-f", "-"], Some(changed)).await.unwrap();
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.trim(), "configmap/settings configured");
    let (_, out, _) = run(
        vec!["get", "cm", "settings", "-o", "jsonpath={.data}"],
        None,
    )
    .await
    .unwrap();
    assert_eq!(out, r#"{"a":"2","b":"3"}"#);

    let (rc, out, _) = run(vec!["api-resources", "--api-group=batch"], None)
        .await
        .unwrap();
    assert_eq!(rc, 0);
    assert!(out.contains("jobs") && out.contains("batch/v1"), "{out}");
    let (rc, out, _) = run(vec!["auth", "can-i", "create", "persistentvolumes"], None)
        .await
        .unwrap();
    assert_eq!((rc, out.trim()), (0, "yes"));

    let (rc, out, err) = run(vec!["delete", "cm", "settings"], None).await.unwrap();
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.trim(), "configmap \"settings\" deleted");
    let (rc, _, err) = run(vec!["get", "cm", "settings"], None).await.unwrap();
    assert_eq!(rc, 1);
    assert!(
        err.contains("Error from server (NotFound): configmaps \"settings\" not found"),
        "{err}"
    );
}
