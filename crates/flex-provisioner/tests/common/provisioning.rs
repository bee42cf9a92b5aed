//! A sandbox with provisioner images and the controller running, for end-to-end tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use flex_provisioner::controller::{Options, run};
use flex_provisioner::sandbox::{Sandbox, SandboxOptions};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::task::JoinHandle;

use super::sandbox::eventually;

/// deploy/'s namespace: the controller's config namespace, where its Role applies.
pub const NS: &str = "flex-provisioner-config";
/// deploy/'s controller namespace: the controller's account and its leader Lease.
pub const CONTROLLER_NS: &str = "flex-provisioner";

/// `volume create` with a hostPath source (what a real image would do after carving storage).
fn make_pv(dir: &str) -> String {
    format!(
        "flex-provisioner volume create --source \"{{\\\"hostPath\\\":{{\\\"path\\\":\\\"/{dir}/$PV_NAME\\\"}}}}\""
    )
}

/// Test images that create the PV themselves (or, `no-pv`, fail to): their classes use
/// `pv-creator: image`; every other class has the controller create the PV.
pub const IMAGE_MODE: &[&str] = &["kubectl-pv", "wrong-size", "wrong-ref", "no-pv"];
/// deploy/'s account for `pv-creator: image` Jobs.
pub const IMAGE_ACCOUNT: &str = "flex-provisioner-volume-writer";

/// Provisioner images for the tests: name -> script body.
fn images() -> Vec<(&'static str, String)> {
    vec![
        ("make-pv", make_pv("volumes")),
        ("slow", format!("sleep 2\n{}", make_pv("slow"))),
        // The original proposal's flow: a plain script that writes the PV with kubectl.
        (
            "kubectl-pv",
            "printf '%s' \"$PV_TEMPLATE\" | sed 's/\"spec\":{/\"spec\":{\"hostPath\":{\"path\":\"\\/volumes\\/kubectl\"},/' | kubectl create -f -".into(),
        ),
        (
            "flaky",
            format!(
                "n=$(cat \"$SANDBOX_ROOT/flaky-$PVC_UID\" 2>/dev/null || echo 0)\necho $((n+1)) > \"$SANDBOX_ROOT/flaky-$PVC_UID\"\nif [ \"$n\" -lt 2 ]; then echo \"flaky: backend busy (try $n)\" > \"$TERMINATION_LOG\"; exit 1; fi\n{}",
                make_pv("volumes")
            ),
        ),
        // Expansion fails twice with a message, then succeeds (pin its class to one node:
        // the count is kept on the node).
        (
            "grow-flaky",
            format!(
                "if [ \"$ACTION\" = expand ]; then n=$(cat \"$SANDBOX_ROOT/grow-$PVC_UID\" 2>/dev/null || echo 0)\necho $((n+1)) > \"$SANDBOX_ROOT/grow-$PVC_UID\"\nif [ \"$n\" -lt 2 ]; then echo \"grow: pool busy (try $n)\" > \"$TERMINATION_LOG\"; exit 1; fi\nexit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
        ("perm", "echo \"perm: pool gold does not exist\" > \"$TERMINATION_LOG\"\nexit 2".into()),
        ("no-pv", "exit 0".into()),
        // Reports that the controller must refuse.
        (
            "two-sources",
            "printf '%s' '{\"nfs\":{\"server\":\"s\",\"path\":\"/a\"},\"hostPath\":{\"path\":\"/\"}}' > \"$TERMINATION_LOG\"".into(),
        ),
        ("bad-json", "printf '%s' '{\"hostPath\":' > \"$TERMINATION_LOG\"".into()),
        // What a compromised image would try first: the API, with whatever credentials the
        // pod has. Records what happened, then reports its volume as asked.
        (
            "api-probe",
            format!(
                "printf '%s' '{{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{{\"name\":\"planted\"}},\"spec\":{{\"capacity\":{{\"storage\":\"1Gi\"}},\"accessModes\":[\"ReadWriteOnce\"],\"hostPath\":{{\"path\":\"/\"}}}}}}' | kubectl create -f - > \"$SANDBOX_ROOT/probe-$PVC_UID\" 2>&1 && echo CREATED >> \"$SANDBOX_ROOT/probe-$PVC_UID\" || echo REFUSED >> \"$SANDBOX_ROOT/probe-$PVC_UID\"\n{}",
                make_pv("volumes")
            ),
        ),
        // Deprovisioning fails twice (the storage backend refuses), then succeeds.
        (
            "fail-delete",
            format!(
                "if [ \"$ACTION\" = deprovision ]; then\n  n=$(cat \"$SANDBOX_ROOT/del-$PV_NAME\" 2>/dev/null || echo 0)\n  echo $((n+1)) > \"$SANDBOX_ROOT/del-$PV_NAME\"\n  if [ \"$n\" -lt 2 ]; then echo \"backend refuses to delete (try $n)\" > \"$TERMINATION_LOG\"; exit 1; fi\n  exit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
        // First attempt: storage (a marker file) and a PV of 1Mi, too small for any claim;
        // later attempts do it right. Deprovisioning removes the marker.
        (
            "wrong-size",
            format!(
                "if [ \"$ACTION\" = deprovision ]; then rm -f \"$SANDBOX_ROOT/storage-$PV_NAME\"; exit 0; fi\nif [ ! -e \"$SANDBOX_ROOT/small-$PVC_UID\" ]; then touch \"$SANDBOX_ROOT/small-$PVC_UID\" \"$SANDBOX_ROOT/storage-$PV_NAME\"\nprintf '%s' \"$PV_TEMPLATE\" | sed 's/\"storage\":\"[^\"]*\"/\"storage\":\"1Mi\"/; s/\"spec\":{{/\"spec\":{{\"hostPath\":{{\"path\":\"\\/volumes\\/small\"}},/' | kubectl create -f -\nexit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
        // First attempt: a PV for some other claim under our name; later attempts do it right.
        (
            "wrong-ref",
            format!(
                "if [ ! -e \"$SANDBOX_ROOT/wrong-$PVC_UID\" ]; then touch \"$SANDBOX_ROOT/wrong-$PVC_UID\"\nprintf '{{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{{\"name\":\"%s\"}},\"spec\":{{\"capacity\":{{\"storage\":\"1Gi\"}},\"accessModes\":[\"ReadWriteOnce\"],\"storageClassName\":\"%s\",\"hostPath\":{{\"path\":\"/x\"}},\"claimRef\":{{\"namespace\":\"other\",\"name\":\"other\",\"uid\":\"not-yours\"}}}}}}' \"$PV_NAME\" \"$STORAGE_CLASS\" | kubectl create -f -\nexit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
    ]
}

fn write_images() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "flex-prov-images-{}-{}",
        std::process::id(),
        flex_provisioner::sandbox::ids::name_suffix()
    ));
    for (name, body) in images() {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("entrypoint");
        // Test images keep no real storage: deprovisioning succeeds unless the image says otherwise.
        let deprovision = if body.contains("$ACTION") {
            ""
        } else {
            "if [ \"$ACTION\" = deprovision ]; then exit 0; fi\n"
        };
        std::fs::write(&p, format!("#!/bin/sh\nset -eu\n{deprovision}{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// The directory holding the `flex-provisioner` binary, so pods can call `volume create`.
fn binary_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flex-provisioner"))
        .parent()
        .unwrap()
        .to_owned()
}

pub async fn sandbox() -> Sandbox {
    sandbox_with(|o| o).await
}

pub fn options() -> Options {
    Options {
        provisioner_name: flex_provisioner::names::DEFAULT_PROVISIONER_NAME.into(),
        config_namespaces: vec![NS.into()],
        controller_namespace: CONTROLLER_NS.into(),
        controller_service_account: "flex-provisioner".into(),
        job_ttl_seconds: 3600,
        retry_base: Duration::from_millis(300),
        instance: "test".into(),
        metrics_addr: None,
        leader: None,
    }
}

/// Starts the controller as a task (abort it to "kill" the controller).
pub fn controller(sb: &Sandbox) -> JoinHandle<()> {
    controller_with(sb, options())
}

/// The controller runs as deploy/'s ServiceAccount `flex-provisioner`, holding exactly
/// deploy/'s RBAC: a controller that needs one more verb fails these tests.
pub fn controller_with(sb: &Sandbox, options: Options) -> JoinHandle<()> {
    let admin = sb.client().unwrap();
    let url = sb.url();
    tokio::spawn(async move {
        let client = client_as(admin, &url, CONTROLLER_NS, "flex-provisioner").await;
        if let Err(e) = run(client, options).await {
            panic!("controller stopped: {e}");
        }
    })
}

/// A client acting as `system:serviceaccount:<ns>:<name>`, with a token from TokenRequest.
pub async fn client_as(admin: kube::Client, url: &str, ns: &str, name: &str) -> kube::Client {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(admin, ns);
    let answer: serde_json::Value = accounts
        .create_subresource(
            "token",
            name,
            &PostParams::default(),
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await
        .expect("a token for the account");
    let token = answer["status"]["token"].as_str().unwrap().to_owned();
    let mut config = kube::Config::new(url.parse().unwrap());
    config.auth_info.token = Some(token.into());
    kube::Client::try_from(config).unwrap()
}

/// A StorageClass of ours and its ConfigMap with `image` and extra keys.
pub async fn class(sb: &Sandbox, name: &str, binding: &str, image: &str, extra: serde_json::Value) {
    let client = sb.client().unwrap();
    let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
        "provisioner": flex_provisioner::names::DEFAULT_PROVISIONER_NAME, "reclaimPolicy": "Delete", "volumeBindingMode": binding});
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(sc).unwrap())
        .await
        .unwrap();
    // Test images report hostPath sources; the ones that write the PV themselves (kubectl)
    // or make none run in image mode, as deploy/'s image account.
    let mut data = json!({"image": image, "retries": "0", "volume-sources": "hostPath"});
    if IMAGE_MODE.contains(&image) {
        json_patch::merge(
            &mut data,
            &json!({"pv-creator": "image", "service-account-name": IMAGE_ACCOUNT}),
        );
    }
    json_patch::merge(&mut data, &extra);
    let cm = json!({"metadata": {"name": format!("{name}-config"),
        "labels": {"type": "provisioner-config", "storage-class": name}}, "data": data});
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, NS)
        .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
        .await
        .unwrap();
}

pub fn claim_object(name: &str, class: &str) -> PersistentVolumeClaim {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"storageClassName": class,
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .unwrap()
}

pub async fn claim(sb: &Sandbox, name: &str, class: &str) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(&PostParams::default(), &claim_object(name, class))
        .await
        .unwrap()
}

pub async fn bound(sb: &Sandbox, name: &str, secs: u64) -> PersistentVolumeClaim {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(secs, &format!("claim {name} to bind"), || async {
        let c = claims.get(name).await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await
}

pub async fn jobs(sb: &Sandbox) -> Vec<Job> {
    Api::<Job>::namespaced(sb.client().unwrap(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

pub async fn volumes(sb: &Sandbox) -> Vec<PersistentVolume> {
    Api::<PersistentVolume>::all(sb.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// (reason, message) of the events on a claim.
pub async fn claim_events(sb: &Sandbox, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(sb.client().unwrap(), "default")
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

pub async fn wait_event(
    sb: &Sandbox,
    claim: &str,
    reason: &str,
    needle: &str,
    secs: u64,
) -> String {
    eventually(
        secs,
        &format!("a {reason} event containing {needle:?} on {claim}"),
        || async {
            claim_events(sb, claim)
                .await
                .into_iter()
                .find(|(r, m)| r == reason && m.contains(needle))
                .map(|(_, m)| m)
        },
    )
    .await
}

/// The Jobs of one action (`provision` or `deprovision`) in the test's config namespace.
pub async fn jobs_of(sb: &Sandbox, action: &str) -> Vec<Job> {
    jobs(sb)
        .await
        .into_iter()
        .filter(|j| {
            j.metadata.labels.as_ref().is_some_and(|l| {
                l.get("flex-provisioner.io/action").map(String::as_str) == Some(action)
            })
        })
        .collect()
}

/// Waits until a provisioning Job has completed.
pub async fn provisioning_complete(sb: &Sandbox, secs: u64) {
    eventually(secs, "the provisioning Job to complete", || async {
        let j = jobs_of(sb, "provision").await.pop()?;
        j.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Complete")
            .then_some(())
    })
    .await;
}

/// Where a node-local PV's directory lives on the sandbox host: the node from its affinity,
/// the path from its `local` source.
pub fn storage_dir(sb: &Sandbox, pv: &PersistentVolume) -> PathBuf {
    let node = pv
        .spec
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .required
        .as_ref()
        .unwrap()
        .node_selector_terms[0]
        .match_expressions
        .as_ref()
        .unwrap()[0]
        .values
        .as_ref()
        .unwrap()[0]
        .clone();
    let path = local_path(pv);
    sb.node_root(&node).join(path.trim_start_matches('/'))
}

/// The path of a PV's `local` source.
pub fn local_path(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .unwrap()
        .local
        .as_ref()
        .unwrap()
        .path
        .clone()
}

/// A free local address for the controller's HTTP endpoints.
pub fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// The raw HTTP response to `GET path` on `addr`, or `None` when nothing answers.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}

/// Waits until `/readyz` on `addr` answers 200.
pub async fn ready(addr: std::net::SocketAddr, secs: u64) {
    eventually(secs, "/readyz to answer 200", || async {
        http_get(addr, "/readyz")
            .await
            .filter(|r| r.starts_with("HTTP/1.1 200"))
            .map(|_| ())
    })
    .await;
}

/// The controller with its HTTP endpoints on a free address.
pub fn controller_serving(sb: &Sandbox) -> (JoinHandle<()>, std::net::SocketAddr) {
    let addr = free_addr();
    let c = controller_with(
        sb,
        Options {
            metrics_addr: Some(addr),
            ..options()
        },
    );
    (c, addr)
}

/// Stops a controller started by `controller` as a crash would.
pub async fn kill(c: JoinHandle<()>) {
    c.abort();
    let _ = c.await;
}

/// The provisioning Jobs per claim uid.
pub async fn provision_jobs_by_claim(sb: &Sandbox) -> BTreeMap<String, Vec<Job>> {
    let mut out: BTreeMap<String, Vec<Job>> = BTreeMap::new();
    for j in jobs_of(sb, "provision").await {
        let uid = j.metadata.labels.as_ref().unwrap()["flex-provisioner.io/claim-uid"].clone();
        out.entry(uid).or_default().push(j);
    }
    out
}

/// Whether a Job has completed successfully.
pub fn succeeded(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// Like `sandbox()`, with `adjust` applied to the options first (e.g. to turn on the
/// controllers' client rate limit).
pub async fn sandbox_with(adjust: impl FnOnce(SandboxOptions) -> SandboxOptions) -> Sandbox {
    super::at_root();
    let image_map = std::fs::read_dir("provisioner-images")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("entrypoint").exists())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::canonicalize(p.join("entrypoint")).unwrap(),
            )
        })
        .collect();
    let sb = Sandbox::start(adjust(SandboxOptions {
        images_dir: write_images(),
        image_map,
        pod_backoff: Duration::from_millis(100),
        nodes: vec!["node-a".into(), "node-b".into()],
        extra_path: vec![binary_dir()],
        auth: true,
        ..Default::default()
    }))
    .await
    .expect("sandbox starts");
    // What `kubectl apply -k deploy/` installs: the namespace, both accounts, the RBAC.
    let files: Vec<PathBuf> = [
        "namespace.yaml",
        "serviceaccounts.yaml",
        "rbac.yaml",
        "admission-policy.yaml",
    ]
    .iter()
    .map(|f| PathBuf::from("deploy").join(f))
    .collect();
    flex_provisioner::sandbox_cmd::apply_files(&sb, &files).expect("deploy/ applies");
    sb
}

/// `n` claims `<prefix><i>` of `class` created at once.
pub async fn burst(sb: &Sandbox, prefix: &str, n: usize, class: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    futures::future::join_all((0..n).map(|i| {
        let claims = claims.clone();
        async move {
            claims
                .create(
                    &PostParams::default(),
                    &claim_object(&format!("{prefix}{i:03}"), class),
                )
                .await
                .unwrap()
        }
    }))
    .await;
}

/// Waits until `n` claims in `default` are bound.
pub async fn all_bound(sb: &Sandbox, n: usize, secs: u64) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(secs, &format!("{n} claims bound"), || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        let bound = list
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
        (bound == n).then_some(())
    })
    .await;
}

/// Messages of the events in `default` that contain `needle`.
pub async fn events_saying(sb: &Sandbox, needle: &str) -> Vec<String> {
    Api::<Event>::namespaced(sb.client().unwrap(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.message)
        .filter(|m| m.contains(needle))
        .collect()
}

/// A sandbox with the controller running and the example files applied (deploy/'s
/// namespace, accounts and RBAC come with `sandbox()`).
pub async fn with_examples(files: &[&str]) -> (Sandbox, JoinHandle<()>) {
    let sb = sandbox().await;
    let c = controller(&sb);
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    for line in flex_provisioner::sandbox_cmd::apply_files(&sb, &files).unwrap() {
        assert!(
            line.ends_with("created") || line.ends_with("unchanged (already exists)"),
            "{line}"
        );
    }
    (sb, c)
}

/// A claim of `class` and a pod `pod` that writes hello.txt into it (so a
/// WaitForFirstConsumer class gets a node), not waiting for it to bind.
pub async fn claim_with_pod(sb: &Sandbox, name: &str, class: &str, pod: &str) {
    let c = sb.client().unwrap();
    Api::<PersistentVolumeClaim>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &claim_object(name, class))
        .await
        .unwrap();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({"metadata": {"name": pod}, "spec": {"restartPolicy": "Never",
        "containers": [{"name": "w", "image": "demo-writer", "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": name}}]}}))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(c, "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// Raises claim `name`'s storage request to `size` (a user growing their claim).
pub async fn grow(sb: &Sandbox, name: &str, size: &str) {
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"resources": {"requests": {"storage": size}}}}),
            ),
        )
        .await
        .unwrap();
}
