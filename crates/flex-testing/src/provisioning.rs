//! A sandbox with provisioner images and the controller running, for end-to-end tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use flex_controller::controller::{Options, run};
use kube_sandbox::{Sandbox, SandboxOptions};

use super::cluster::Cluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
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

/// A PV as the original proposal's images write it: name, claimRef, class, size, one mode
/// and a hostPath, nothing of ours.
const SEED_PV: &str = r#"printf '{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"%s"},"spec":{"capacity":{"storage":"%s"},"accessModes":["ReadWriteOnce"],"storageClassName":"%s","persistentVolumeReclaimPolicy":"%s","hostPath":{"path":"/volumes/seed/%s"},"claimRef":{"namespace":"%s","name":"%s","uid":"%s"}}}' "$PV_NAME" "$REQUESTED_SIZE" "$STORAGE_CLASS" "$RECLAIM_POLICY" "$PV_NAME" "$PVC_NAMESPACE" "$PVC_NAME" "$PVC_UID""#;

/// Test images that create the PV themselves (or, `no-pv`, fail to): their classes use
/// `pv-creator: image`; every other class has the controller create the PV.
pub const IMAGE_MODE: &[&str] = &[
    "kubectl-pv",
    "wrong-size",
    "wrong-ref",
    "no-pv",
    "seed-pv",
    "bound-wrong",
];
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
                "n=$(cat \"$SANDBOX_STATE/flaky-$PVC_UID\" 2>/dev/null || echo 0)\necho $((n+1)) > \"$SANDBOX_STATE/flaky-$PVC_UID\"\nif [ \"$n\" -lt 2 ]; then echo \"flaky: backend busy (try $n)\" > \"$TERMINATION_LOG\"; exit 1; fi\n{}",
                make_pv("volumes")
            ),
        ),
        // Expansion fails twice with a message, then succeeds (pin its class to one node:
        // the count is kept on the node).
        (
            "grow-flaky",
            format!(
                "if [ \"$ACTION\" = expand ]; then n=$(cat \"$SANDBOX_STATE/grow-$PVC_UID\" 2>/dev/null || echo 0)\necho $((n+1)) > \"$SANDBOX_STATE/grow-$PVC_UID\"\nif [ \"$n\" -lt 2 ]; then echo \"grow: pool busy (try $n)\" > \"$TERMINATION_LOG\"; exit 1; fi\nexit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
        // The tests' own pods (`localhost/busybox:1.35`, the real node's base image): runs
        // its command as a shell would. Naming $ACTION keeps write_images' deprovision
        // line (which reads it) out: no Job runs this image.
        ("busybox", "# not a Job's image: $ACTION is never set\nexec \"$@\"".into()),
        ("perm", "echo \"perm: pool gold does not exist\" > \"$TERMINATION_LOG\"\nexit 2".into()),
        ("no-pv", "exit 0".into()),
        // Provisions as make-pv; every snapshot fails for good, saying why.
        (
            "snapshot-fails",
            format!(
                "case \"$ACTION\" in\nsnapshot) echo \"quota exceeded on /srv/snapshots\" > \"$TERMINATION_LOG\"; exit 2 ;;\ndeprovision|delete-snapshot) exit 0 ;;\nesac\n{}",
                make_pv("volumes")
            ),
        ),
        // Runs long enough for a test to act while its Job runs.
        ("long", format!("sleep 20\n{}", make_pv("volumes"))),
        // A backend that is never there: every attempt fails, and is retried.
        ("fails", "echo \"fails: backend unreachable\" > \"$TERMINATION_LOG\"\nexit 1".into()),
        // The original proposal's image: its own PV, written from the claim's fields, with
        // no pv.kubernetes.io/provisioned-by (deploy/'s policy accepts that).
        ("seed-pv", format!("{SEED_PV} | kubectl create -f -")),
        // A PV of a source type its class does not allow, which the image waits to see
        // bound before it exits (as a real PV controller binds it at once).
        (
            "bound-wrong",
            format!(
                "{SEED_PV} | kubectl create -f -\ni=0\nwhile [ \"$(kubectl get pv \"$PV_NAME\" -o jsonpath='{{.status.phase}}')\" != Bound ]; do i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.1; done"
            ),
        ),
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
                "printf '%s' '{{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{{\"name\":\"planted\"}},\"spec\":{{\"capacity\":{{\"storage\":\"1Gi\"}},\"accessModes\":[\"ReadWriteOnce\"],\"hostPath\":{{\"path\":\"/\"}}}}}}' | kubectl create -f - > \"$SANDBOX_STATE/probe-$PVC_UID\" 2>&1 && echo CREATED >> \"$SANDBOX_STATE/probe-$PVC_UID\" || echo REFUSED >> \"$SANDBOX_STATE/probe-$PVC_UID\"\n{}",
                make_pv("volumes")
            ),
        ),
        // Deprovisioning fails twice (the storage backend refuses), then succeeds.
        (
            "fail-delete",
            format!(
                "if [ \"$ACTION\" = deprovision ]; then\n  n=$(cat \"$SANDBOX_STATE/del-$PV_NAME\" 2>/dev/null || echo 0)\n  echo $((n+1)) > \"$SANDBOX_STATE/del-$PV_NAME\"\n  if [ \"$n\" -lt 2 ]; then echo \"backend refuses to delete (try $n)\" > \"$TERMINATION_LOG\"; exit 1; fi\n  exit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
        // First attempt: storage (a marker file) and a PV of 1Mi, too small for any claim;
        // later attempts do it right. Deprovisioning removes the marker.
        (
            "wrong-size",
            format!(
                "if [ \"$ACTION\" = deprovision ]; then rm -f \"$SANDBOX_STATE/storage-$PV_NAME\"; exit 0; fi\nif [ ! -e \"$SANDBOX_STATE/small-$PVC_UID\" ]; then touch \"$SANDBOX_STATE/small-$PVC_UID\" \"$SANDBOX_STATE/storage-$PV_NAME\"\nprintf '%s' \"$PV_TEMPLATE\" | sed 's/\"storage\":\"[^\"]*\"/\"storage\":\"1Mi\"/; s/\"spec\":{{/\"spec\":{{\"hostPath\":{{\"path\":\"\\/volumes\\/small\"}},/' | kubectl create -f -\nexit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
        // First attempt: a PV under our name whose claimRef names another claim (with this
        // claim's uid, which deploy/'s admission policy allows: the controller's check is
        // what refuses it); later attempts do it right.
        (
            "wrong-ref",
            format!(
                "if [ ! -e \"$SANDBOX_STATE/wrong-$PVC_UID\" ]; then touch \"$SANDBOX_STATE/wrong-$PVC_UID\"\nprintf '{{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{{\"name\":\"%s\"}},\"spec\":{{\"capacity\":{{\"storage\":\"1Gi\"}},\"accessModes\":[\"ReadWriteOnce\"],\"storageClassName\":\"%s\",\"hostPath\":{{\"path\":\"/volumes/x\"}},\"claimRef\":{{\"namespace\":\"other\",\"name\":\"other\",\"uid\":\"%s\"}}}}}}' \"$PV_NAME\" \"$STORAGE_CLASS\" \"$PVC_UID\" | kubectl create -f -\nexit 0\nfi\n{}",
                make_pv("volumes")
            ),
        ),
    ]
}

fn write_images() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "flex-prov-images-{}-{}",
        std::process::id(),
        kube_sandbox::ids::name_suffix()
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
    crate::binary().parent().unwrap().to_owned()
}

pub async fn sandbox() -> Cluster {
    sandbox_with(|o| o).await
}

pub fn options() -> Options {
    Options {
        provisioner_name: flex_core::names::DEFAULT_PROVISIONER_NAME.into(),
        config_namespaces: vec![NS.into()],
        controller_namespace: CONTROLLER_NS.into(),
        controller_service_account: "flex-provisioner".into(),
        job_ttl_seconds: 3600,
        retry_base: Duration::from_millis(300),
        instance: "test".into(),
        metrics_addr: None,
        leader: None,
        api_limits: None,
        snapshot_api_recheck: flex_controller::controller::SNAPSHOT_API_RECHECK,
    }
}

/// Starts the controller as a task (abort it to "kill" the controller).
pub fn controller(sb: &Cluster) -> JoinHandle<()> {
    controller_with(sb, options())
}

/// The controller runs as deploy/'s ServiceAccount `flex-provisioner`, holding exactly
/// deploy/'s RBAC: a controller that needs one more verb fails these tests.
pub fn controller_with(sb: &Cluster, options: Options) -> JoinHandle<()> {
    let config = sb.config();
    tokio::spawn(async move {
        // Built as the binary builds it (no retries below the write fence).
        let config = config_as(config, CONTROLLER_NS, "flex-provisioner").await;
        let client = flex_controller::throttle::client(config).unwrap();
        run_or_panic(client, options).await
    })
}

/// The controller on a client of the test's own making (layers around deploy/'s account).
pub fn controller_on(client: kube::Client, options: Options) -> JoinHandle<()> {
    tokio::spawn(run_or_panic(client, options))
}

async fn run_or_panic(client: kube::Client, options: Options) {
    if let Err(e) = run(client, options).await {
        panic!("controller stopped: {e}");
    }
}

/// A client acting as `system:serviceaccount:<ns>:<name>`, with a token from TokenRequest,
/// for the cluster an admin's `config` reaches.
pub async fn client_as(config: kube::Config, ns: &str, name: &str) -> kube::Client {
    kube::Client::try_from(config_as(config, ns, name).await).unwrap()
}

/// The configuration of [`client_as`], for a client built with layers of its own.
pub async fn config_as(config: kube::Config, ns: &str, name: &str) -> kube::Config {
    let admin = kube::Client::try_from(config.clone()).unwrap();
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
    let mut config = config;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config
}

/// A StorageClass of ours and its ConfigMap with `image` and extra keys.
pub async fn class(sb: &Cluster, name: &str, binding: &str, image: &str, extra: serde_json::Value) {
    let client = sb.client().unwrap();
    let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
        "provisioner": flex_core::names::DEFAULT_PROVISIONER_NAME, "reclaimPolicy": "Delete", "volumeBindingMode": binding});
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(sc).unwrap())
        .await
        .unwrap();
    // Test images report hostPath sources; the ones that write the PV themselves (kubectl)
    // or make none run in image mode, as deploy/'s image account.
    let mut data = json!({"image": image, "retries": "0", "volume-sources": "hostPath"});
    if !IMAGE_MODE.contains(&image) {
        // What the test images report: volumes under /volumes (and /slow).
        json_patch::merge(&mut data, &json!({"allowed-paths": "/volumes,/slow"}));
    }
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

pub async fn claim(sb: &Cluster, name: &str, class: &str) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(&PostParams::default(), &claim_object(name, class))
        .await
        .unwrap()
}

pub async fn bound(sb: &Cluster, name: &str, secs: u64) -> PersistentVolumeClaim {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    eventually(secs, &format!("claim {name} to bind"), || async {
        let c = claims.get(name).await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await
}

pub async fn jobs(sb: &Cluster) -> Vec<Job> {
    Api::<Job>::namespaced(sb.client().unwrap(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

pub async fn volumes(sb: &Cluster) -> Vec<PersistentVolume> {
    Api::<PersistentVolume>::all(sb.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// (reason, message) of the events of `api` about object `name`.
async fn reasons_about(api: Api<Event>, name: &str) -> Vec<(String, String)> {
    let about = ListParams::default().fields(&format!("involvedObject.name={name}"));
    (events_in(api, &about).await.into_iter())
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// (reason, message) of the events on a claim.
pub async fn claim_events(sb: &Cluster, name: &str) -> Vec<(String, String)> {
    reasons_about(Api::namespaced(sb.client().unwrap(), "default"), name).await
}

/// (reason, message) of the events about object `name` in any namespace (those on a PV,
/// which has none, are kept in `default`).
pub async fn events_about(sb: &Cluster, name: &str) -> Vec<(String, String)> {
    reasons_about(Api::all(sb.client().unwrap()), name).await
}

pub async fn wait_event(
    sb: &Cluster,
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

/// Waits until the controller has recorded on claim `claim` (in `default`) that it gave up
/// on its inputs: the sign that it judged the last attempt, after which no Job may follow
/// until the claim or its configuration changes.
pub async fn given_up(sb: &Cluster, claim: &str, secs: u64) {
    let claims = Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default");
    eventually(
        secs,
        &format!("{claim} to be recorded as given up"),
        || async {
            let c = claims.get(claim).await.ok()?;
            c.annotations()
                .contains_key(flex_core::plan::claim::ANN_GAVE_UP)
                .then_some(())
        },
    )
    .await
}

/// The Jobs of one action (`provision` or `deprovision`) in the test's config namespace.
pub async fn jobs_of(sb: &Cluster, action: &str) -> Vec<Job> {
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
pub async fn provisioning_complete(sb: &Cluster, secs: u64) {
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
pub fn storage_dir(sb: &Cluster, pv: &PersistentVolume) -> PathBuf {
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

/// How many reconciles of `object` (`claim` or `volume`) the controller serving on `addr`
/// has finished, from its `/metrics`.
pub async fn reconciles(addr: std::net::SocketAddr, object: &str) -> u64 {
    let metrics = http_get(addr, "/metrics").await.unwrap_or_default();
    let series = format!("flex_provisioner_reconciles_total{{object=\"{object}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the controller serving on `addr` has finished more than `past` reconciles
/// of `object`: the sign that it looked, before a check that something did not happen.
pub async fn reconciled_past(addr: std::net::SocketAddr, object: &str, past: u64) {
    let what = format!("more than {past} reconciles of a {object}");
    eventually(60, &what, || async {
        (reconciles(addr, object).await > past).then_some(())
    })
    .await;
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
pub fn controller_serving(sb: &Cluster) -> (JoinHandle<()>, std::net::SocketAddr) {
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
pub async fn provision_jobs_by_claim(sb: &Cluster) -> BTreeMap<String, Vec<Job>> {
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
pub async fn sandbox_with(adjust: impl FnOnce(SandboxOptions) -> SandboxOptions) -> Cluster {
    let target = match super::cluster::real_target() {
        Some(scripts) => Target::Real(scripts),
        None => Target::Sandbox,
    };
    cluster_with(adjust, target).await
}

/// The sandbox, whatever the target: for tests of the images' scripts, which need what
/// only the sandbox's node offers (mounts of NFS exports, pod logs).
pub async fn sandbox_only_with(adjust: impl FnOnce(SandboxOptions) -> SandboxOptions) -> Cluster {
    cluster_with(adjust, Target::Sandbox).await
}

/// The cluster for the tests of the shipped images as real containers: a control plane
/// with a real kubelet when `FLEX_E2E_REAL_NODE` names the built images (the real-node
/// lane of `scripts/e2e-real`), the sandbox otherwise.
pub async fn node_cluster() -> Cluster {
    let target = match super::cluster::real_node_target() {
        Some((scripts, images)) => Target::RealNode(scripts, images),
        None => Target::Sandbox,
    };
    cluster_with(|o| o, target).await
}

/// Where a test's cluster runs.
enum Target {
    Sandbox,
    /// A real control plane (its scripts) with simulated nodes.
    Real(PathBuf),
    /// A real control plane (its scripts) with a real node running these image tars.
    RealNode(PathBuf, PathBuf),
}

async fn cluster_with(
    adjust: impl FnOnce(SandboxOptions) -> SandboxOptions,
    target: Target,
) -> Cluster {
    super::at_root();
    let provisioner_images: Vec<(String, PathBuf)> = std::fs::read_dir("provisioner-images")
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
    // The test images, removed with the cluster (whatever `adjust` does with the option).
    let images_dir = write_images();
    let opts = adjust(SandboxOptions {
        images_dir: images_dir.clone(),
        image_map: provisioner_images.into_iter().collect(),
        pod_backoff: Duration::from_millis(100),
        nodes: super::cluster::NODES
            .iter()
            .map(|n| n.to_string())
            .collect(),
        extra_path: vec![binary_dir()],
        auth: true,
        ..Default::default()
    });
    let cluster = match target {
        Target::RealNode(scripts, images) => super::cluster::start_real_node(scripts, images).await,
        Target::Real(scripts) => {
            // The same images and PATH, on the real control plane's simulated nodes.
            let mut images: Vec<(String, PathBuf)> = opts.image_map.clone().into_iter().collect();
            for entry in std::fs::read_dir(&opts.images_dir).unwrap() {
                let dir = entry.unwrap().path();
                let name = dir.file_name().unwrap().to_string_lossy().into_owned();
                images.push((name, dir.join("entrypoint")));
            }
            super::cluster::start_real(scripts, images, opts.extra_path.clone()).await
        }
        Target::Sandbox => {
            Cluster::from_sandbox(Sandbox::start(opts).await.expect("sandbox starts")).await
        }
    }
    .owning(images_dir);
    // What `kubectl apply -k deploy/` installs: the namespaces, both accounts, the RBAC, the
    // admission policy.
    let files: Vec<PathBuf> = DEPLOY_FILES
        .iter()
        .map(|f| PathBuf::from("deploy").join(f))
        .collect();
    cluster.apply_files(&files);
    // The test images write their volumes under /volumes: allowed as an admin would, in
    // the admission policy's parameters.
    let params: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.client().unwrap(), NS);
    params
        .patch(
            "flex-provisioner-image-volumes",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {
                "path-prefixes": "/var/lib/flex-provisioner/volumes,/dev/vg-k8s,/volumes"}})),
        )
        .await
        .expect("the admission policy's parameters");
    if cluster.is_real() {
        policy_in_force(&cluster).await;
    }
    cluster
}

/// A real API server loads a new admission policy a moment after it is created: until it
/// refuses a misnamed PV from an image account (a dry run), the tests would race it.
async fn policy_in_force(cluster: &Cluster) {
    let image = client_as(cluster.config(), NS, IMAGE_ACCOUNT).await;
    let pvs: Api<PersistentVolume> = Api::all(image);
    let probe: PersistentVolume =
        serde_json::from_value(json!({"metadata": {"name": "policy-probe"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": "/volumes/probe"},
                 "claimRef": {"namespace": "default", "name": "x", "uid": "not-the-name"}}}))
        .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(60, "deploy/'s admission policy to be in force", || async {
        match pvs.create(&dry_run, &probe).await {
            Err(kube::Error::Api(s)) if s.message.contains("ValidatingAdmissionPolicy") => Some(()),
            _ => None,
        }
    })
    .await;
}

/// deploy/'s files the tests install, unchanged (all but the controller's Deployment,
/// Service and PodDisruptionBudget: the tests run the controller themselves).
pub const DEPLOY_FILES: &[&str] = &[
    "namespace.yaml",
    "serviceaccounts.yaml",
    "rbac.yaml",
    "admission-policy-params.yaml",
    "admission-policy.yaml",
];

/// `n` claims `<prefix><i>` of `class` created at once.
pub async fn burst(sb: &Cluster, prefix: &str, n: usize, class: &str) {
    burst_in(
        &Api::namespaced(sb.client().unwrap(), "default"),
        prefix,
        n,
        class,
    )
    .await;
}

/// `burst` through `claims`: each claim made, with the instant just before it was asked
/// for (the controller may see a claim before its creator has the answer).
pub async fn burst_in(
    claims: &Api<PersistentVolumeClaim>,
    prefix: &str,
    n: usize,
    class: &str,
) -> Vec<(std::time::Instant, PersistentVolumeClaim)> {
    futures::future::join_all((0..n).map(|i| async move {
        let asked = std::time::Instant::now();
        let made = claims
            .create(
                &PostParams::default(),
                &claim_object(&format!("{prefix}{i:03}"), class),
            )
            .await
            .unwrap();
        (asked, made)
    }))
    .await
}

/// Waits until `n` claims in `default` are bound (see `all_bound_in`).
pub async fn all_bound(sb: &Cluster, n: usize, secs: u64) {
    all_bound_in(&Api::namespaced(sb.client().unwrap(), "default"), n, secs).await
}

/// Waits until `n` of the claims `claims` reaches are bound, for as long as claims keep
/// binding: it fails only when none more bound for `secs`, with how many are and the events
/// of those still pending. A burst's length depends on the machine (a shared, loaded one may
/// take several times as long); a stall does not.
pub async fn all_bound_in(claims: &Api<PersistentVolumeClaim>, n: usize, secs: u64) {
    let window = std::time::Duration::from_secs(secs);
    let (mut best, mut since) = (0, std::time::Instant::now());
    loop {
        let list = match claims.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(_) => Vec::new(),
        };
        let (bound, pending): (Vec<_>, Vec<_>) = list
            .into_iter()
            .partition(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"));
        if bound.len() == n {
            return;
        }
        if bound.len() > best {
            (best, since) = (bound.len(), std::time::Instant::now());
        }
        if since.elapsed() >= window {
            let names: Vec<String> = pending.iter().take(5).map(|c| c.name_any()).collect();
            let events = Api::<Event>::namespaced(
                claims.clone().into_client(),
                claims.namespace().unwrap_or("default"),
            )
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
            let said: Vec<String> = events
                .iter()
                .filter(|e| names.contains(&e.involved_object.name.clone().unwrap_or_default()))
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.involved_object.name.as_deref().unwrap_or(""),
                        e.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            panic!(
                "waiting for {n} claims bound: {best} bound and none more in {secs}s; pending \
                 (first 5): {names:?}; their events: {said:#?}"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The events of `api` that `params` select.
pub async fn events_in(api: Api<Event>, params: &ListParams) -> Vec<Event> {
    api.list(params).await.unwrap().items
}

/// Messages of the events in `default` that contain `needle`.
pub async fn events_saying(sb: &Cluster, needle: &str) -> Vec<String> {
    let api = Api::namespaced(sb.client().unwrap(), "default");
    (events_in(api, &ListParams::default()).await.into_iter())
        .filter_map(|e| e.message)
        .filter(|m| m.contains(needle))
        .collect()
}

/// A sandbox with the controller running and the example files applied (deploy/'s
/// namespace, accounts and RBAC come with `sandbox()`).
pub async fn with_examples(files: &[&str]) -> (Cluster, JoinHandle<()>) {
    with_examples_on(sandbox().await, files).await
}

/// `kubectl label namespace flex-provisioner-config pod-security.kubernetes.io/enforce=privileged`,
/// as the examples whose Jobs mount node paths ask of the admin.
pub async fn allow_privileged_jobs(sb: &Cluster) {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(sb.client().unwrap())
        .patch(
            NS,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "privileged"}}})),
        )
        .await
        .expect("the config namespace's Pod Security level");
}

/// `with_examples` on a given cluster.
pub async fn with_examples_on(sb: Cluster, files: &[&str]) -> (Cluster, JoinHandle<()>) {
    let c = controller(&sb);
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    // The examples whose Jobs mount node paths say to allow privileged pods in the config
    // namespace; an admin following them does.
    if files.iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .contains("enforce=privileged")
    }) {
        allow_privileged_jobs(&sb).await;
    }
    for line in sb.apply_files(&files) {
        assert!(
            line.ends_with("created")
                || line.ends_with("unchanged (already exists)")
                || line.ends_with("unchanged"),
            "{line}"
        );
    }
    (sb, c)
}

/// A claim of `class` and a pod `pod` that writes hello.txt into it (so a
/// WaitForFirstConsumer class gets a node), not waiting for it to bind.
pub async fn claim_with_pod(sb: &Cluster, name: &str, class: &str, pod: &str) {
    Api::<PersistentVolumeClaim>::namespaced(sb.client().unwrap(), "default")
        .create(&PostParams::default(), &claim_object(name, class))
        .await
        .unwrap();
    create_pod(
        sb,
        json!({"metadata": {"name": pod}, "spec": {"restartPolicy": "Never",
        "containers": [{"name": "w", "image": "demo-writer", "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": name}}]}}),
    )
    .await;
}

/// Creates the pod `body` describes in `default`.
pub async fn create_pod(sb: &Cluster, body: serde_json::Value) {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(body).unwrap();
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(sb.client().unwrap(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// Raises claim `name`'s storage request to `size` (a user growing their claim).
pub async fn grow(sb: &Cluster, name: &str, size: &str) {
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

/// A WaitForFirstConsumer class `name` whose Jobs run on the selected node, with its name
/// as the `node` parameter (env `NODE`).
pub async fn node_local_class(sb: &Cluster, name: &str) {
    let params = json!({"node-local": "true", "node": "{{node.name}}"});
    class(sb, name, "WaitForFirstConsumer", "make-pv", params).await;
}

/// A pod `pod` using claim `claim`, placed on `node` by its hostname label: the scheduler
/// selects that node for a WaitForFirstConsumer claim.
pub async fn pod_on_node(sb: &Cluster, pod: &str, claim: &str, node: &str) {
    create_pod(
        sb,
        json!({"metadata": {"name": pod},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                 "containers": [{"name": "c", "image": "make-pv"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}}),
    )
    .await;
}

/// Waits up to `secs` for claim `claim` to bind; the nodes its volume's required node
/// affinity allows (the first term's first expression).
pub async fn bound_volume_nodes(sb: &Cluster, claim: &str, secs: u64) -> Option<Vec<String>> {
    let c = bound(sb, claim, secs).await;
    let name = c.spec.and_then(|s| s.volume_name);
    let pv = volumes(sb)
        .await
        .into_iter()
        .find(|v| v.metadata.name == name)
        .expect("the bound volume");
    let terms = pv.spec?.node_affinity?.required?.node_selector_terms;
    terms
        .first()?
        .match_expressions
        .as_ref()?
        .first()?
        .values
        .clone()
}
