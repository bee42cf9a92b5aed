//! The simulated control plane: the Job controller, the pod runner, the PV controller and
//! the scheduler, with the condition types, reasons and annotations of the real ones.

use crate::common;

use common::sandbox::{eventually, start};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

/// Creates a Job running `image` with `extra` merged into its spec.
async fn create_job(jobs: &Api<Job>, name: &str, image: &str, extra: serde_json::Value) {
    let mut spec = json!({"template": {"spec": {"restartPolicy": "Never",
        "containers": [{"name": "main", "image": image, "terminationMessagePolicy": "FallbackToLogsOnError"}]}}});
    json_patch::merge(&mut spec, &extra);
    let job: Job =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
}

/// (type, reason) of the Job's True conditions, once it has finished.
async fn finished(jobs: &Api<Job>, name: &str) -> Vec<(String, String)> {
    eventually(30, &format!("job {name} to finish"), || async {
        let j = jobs.get(name).await.ok()?;
        let conds: Vec<(String, String)> = j
            .status?
            .conditions?
            .into_iter()
            .filter(|c| c.status == "True")
            .map(|c| (c.type_, c.reason.unwrap_or_default()))
            .collect();
        conds
            .iter()
            .any(|(t, _)| t == "Complete" || t == "Failed")
            .then_some(conds)
    })
    .await
}

async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
}

fn terminated(p: &Pod) -> k8s_openapi::api::core::v1::ContainerStateTerminated {
    p.status.clone().unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap()
}

async fn event_reasons(events: &Api<Event>, name: &str) -> Vec<String> {
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| e.reason.unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn job_success_conditions_pods_and_events() {
    let sb = start().await;
    let c = sb.client().unwrap();
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    create_job(&jobs, "ok", "ok", json!({})).await;
    assert_eq!(
        finished(&jobs, "ok").await,
        [
            ("SuccessCriteriaMet".into(), "CompletionsReached".into()),
            ("Complete".into(), "CompletionsReached".into())
        ]
    );
    let j = jobs.get("ok").await.unwrap();
    let status = j.status.unwrap();
    assert_eq!(status.succeeded, Some(1));
    assert!(status.completion_time.is_some() && status.start_time.is_some());
    let pods = pods_of(&Api::namespaced(c.clone(), "default"), "ok").await;
    assert_eq!(pods.len(), 1);
    let p = &pods[0];
    assert_eq!(
        p.status.as_ref().unwrap().phase.as_deref(),
        Some("Succeeded")
    );
    assert_eq!(terminated(p).exit_code, 0);
    assert_eq!(terminated(p).reason.as_deref(), Some("Completed"));
    let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Job", Some(true), Some(true))
    );
    assert!(
        p.metadata
            .labels
            .as_ref()
            .unwrap()
            .contains_key("batch.kubernetes.io/controller-uid")
    );
    let reasons = event_reasons(&Api::namespaced(c, "default"), "ok").await;
    assert!(
        reasons.contains(&"SuccessfulCreate".into()) && reasons.contains(&"Completed".into()),
        "{reasons:?}"
    );
}

/// Conformance: a Job fails for its `activeDeadlineSeconds` at or after the deadline, never
/// before, although the stored `startTime` has whole seconds (`real-k8s-1.36.2.json`,
/// probe `job-deadline`, observation `job.failed_after`: "at or after the deadline").
#[tokio::test]
async fn a_job_never_fails_before_its_deadline() {
    let sb = start().await;
    let jobs: Api<Job> = Api::namespaced(sb.client().unwrap(), "default");
    // Jobs started at different fractions of a second: a deadline timed from the stored,
    // truncated startTime would fire early for some of them.
    let mut created = Vec::new();
    for i in 0..4 {
        let name = format!("deadline-{i}");
        created.push((name.clone(), std::time::Instant::now()));
        create_job(&jobs, &name, "sleep", json!({"activeDeadlineSeconds": 2})).await;
        tokio::time::sleep(std::time::Duration::from_millis(230)).await;
    }
    for (name, at) in created {
        let conds = finished(&jobs, &name).await;
        let took = at.elapsed();
        assert_eq!(
            conds.last().map(|c| c.1.as_str()),
            Some("DeadlineExceeded"),
            "{name}"
        );
        assert!(
            took >= std::time::Duration::from_secs(2),
            "{name} failed after {took:?}, before its 2 s deadline"
        );
    }
}

#[tokio::test]
async fn job_backoff_limit_deadline_and_pod_failure_policy() {
    let sb = start().await;
    let c = sb.client().unwrap();
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    create_job(&jobs, "retry", "fail", json!({"backoffLimit": 2})).await;
    create_job(&jobs, "slow", "sleep", json!({"activeDeadlineSeconds": 1})).await;
    let pfp = json!({"backoffLimit": 5, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [2]}}]}});
    create_job(&jobs, "perm", "permanent", pfp).await;

    assert_eq!(
        finished(&jobs, "retry").await,
        [
            ("FailureTarget".into(), "BackoffLimitExceeded".into()),
            ("Failed".into(), "BackoffLimitExceeded".into())
        ]
    );
    assert_eq!(
        jobs.get("retry").await.unwrap().status.unwrap().failed,
        Some(3)
    );
    let tried = pods_of(&pods, "retry").await;
    assert_eq!(tried.len(), 3, "backoffLimit 2 allows three pods");
    for p in &tried {
        let t = terminated(p);
        assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
        assert_eq!(
            t.message.as_deref(),
            Some("fail: transient trouble\n"),
            "the termination log is the message"
        );
    }
    assert_eq!(
        finished(&jobs, "slow").await,
        [
            ("FailureTarget".into(), "DeadlineExceeded".into()),
            ("Failed".into(), "DeadlineExceeded".into())
        ]
    );
    eventually(10, "the deadline's pod to be deleted", || async {
        pods_of(&pods, "slow").await.is_empty().then_some(())
    })
    .await;
    let conds = finished(&jobs, "perm").await;
    assert_eq!(
        conds,
        [
            ("FailureTarget".into(), "PodFailurePolicy".into()),
            ("Failed".into(), "PodFailurePolicy".into())
        ]
    );
    let j = jobs.get("perm").await.unwrap();
    let message = j.status.unwrap().conditions.unwrap()[1]
        .message
        .clone()
        .unwrap();
    assert!(
        message.starts_with("Container main for pod default/perm-")
            && message.ends_with("failed with exit code 2 matching FailJob rule at index 0"),
        "{message}"
    );
    assert_eq!(
        pods_of(&pods, "perm").await.len(),
        1,
        "a permanent exit code is not retried"
    );
    let reasons = event_reasons(&Api::namespaced(c, "default"), "retry").await;
    assert!(
        reasons.contains(&"BackoffLimitExceeded".into()),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn ttl_deletes_the_job_and_its_pods() {
    let sb = start().await;
    let c = sb.client().unwrap();
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c, "default");
    create_job(&jobs, "brief", "ok", json!({"ttlSecondsAfterFinished": 1})).await;
    finished(&jobs, "brief").await;
    eventually(15, "the job and its pods to be deleted", || async {
        (jobs.get_opt("brief").await.unwrap().is_none() && pods_of(&pods, "brief").await.is_empty())
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn pod_runner_reports_what_a_kubelet_reports() {
    let sb = start().await;
    let c = sb.client().unwrap();
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    // Without a termination log, FallbackToLogsOnError shows the tail of the output.
    create_job(&jobs, "noisy", "noisy-fail", json!({"backoffLimit": 0})).await;
    finished(&jobs, "noisy").await;
    let t = terminated(&pods_of(&pods, "noisy").await[0]);
    assert_eq!(t.exit_code, 3);
    let msg = t.message.unwrap();
    assert!(
        msg.contains("line 49") && msg.ends_with("last words\n"),
        "{msg}"
    );
    let logs = pods
        .logs(
            pods_of(&pods, "noisy").await[0]
                .metadata
                .name
                .as_deref()
                .unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(logs.contains("line 0") && logs.contains("last words"));

    // An image nothing maps to fails like an unpullable image.
    create_job(&jobs, "ghost", "registry.example.com/ghost:1.0", json!({})).await;
    let waiting = eventually(10, "ErrImagePull", || async {
        let p = pods_of(&pods, "ghost").await.into_iter().next()?;
        let w = p
            .status?
            .container_statuses?
            .into_iter()
            .next()?
            .state?
            .waiting?;
        Some(w)
    })
    .await;
    assert!(
        matches!(
            waiting.reason.as_deref(),
            Some("ErrImagePull" | "ImagePullBackOff")
        ),
        "{waiting:?}"
    );
    assert!(
        waiting
            .message
            .unwrap()
            .contains("registry.example.com/ghost:1.0")
    );
    let ghost = pods_of(&pods, "ghost").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let reasons = event_reasons(&Api::namespaced(c.clone(), "default"), &ghost).await;
    assert!(reasons.contains(&"Failed".into()), "{reasons:?}");

    // A missing secret is a CreateContainerConfigError.
    let secret_env = json!({"template": {"spec": {"containers": [{"name": "main", "image": "ok",
        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "t"}}}]}]}}});
    create_job(&jobs, "nosecret", "ok", secret_env).await;
    let waiting = eventually(10, "CreateContainerConfigError", || async {
        let p = pods_of(&pods, "nosecret").await.into_iter().next()?;
        p.status?
            .container_statuses?
            .into_iter()
            .next()?
            .state?
            .waiting
    })
    .await;
    assert_eq!(
        waiting.reason.as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(
        waiting.message.as_deref(),
        Some("secret \"absent\" not found")
    );

    // The environment: plain values, field references, and the sandbox's own variables.
    let env_job = json!({"template": {"spec": {"containers": [{"name": "main", "image": "env",
        "env": [{"name": "PLAIN", "value": "$(not expanded) \"q\""},
                {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]}}});
    create_job(&jobs, "env", "env", env_job).await;
    finished(&jobs, "env").await;
    let p = pods_of(&pods, "env").await.remove(0);
    let node = p.spec.unwrap().node_name.unwrap();
    let dump = std::fs::read_to_string(
        sb.state_dir(&node)
            .join(format!("env-{}", p.metadata.name.unwrap())),
    )
    .unwrap();
    assert!(dump.contains("PLAIN=$(not expanded) \"q\"\n"), "{dump}");
    assert!(dump.contains(&format!("MY_NODE={node}\n")));
    assert!(dump.contains("MY_NS=default\n"));
    assert!(dump.contains(&format!("KUBECONFIG={}\n", sb.kubeconfig.display())));
}

/// Runs pod `name` of image `look` on node-a with host directory `dir` at /data.
async fn look_at(pods: &Api<Pod>, name: &str, dir: &str, hold: u32) {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"nodeName": "node-a", "restartPolicy": "Never",
            "volumes": [{"name": "v", "hostPath": {"path": dir}}],
            "containers": [{"name": "c", "image": "look", "env": [{"name": "HOLD", "value": hold.to_string()}],
                "volumeMounts": [{"name": "v", "mountPath": "/data"}]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

/// The termination message of pod `name`, once it has ended.
async fn looked(pods: &Api<Pod>, name: &str) -> String {
    eventually(30, &format!("pod {name} to end"), || async {
        let p = pods.get(name).await.ok()?;
        let t = p
            .status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .terminated?;
        Some(t.message.unwrap_or_default())
    })
    .await
}

/// As a kubelet mounts them: pods of one node that mount different volumes at one path see
/// each their own, and a link planted in a volume resolves inside the container, so one
/// naming another volume's directory on the host leads nowhere.
#[tokio::test]
async fn each_pod_sees_only_its_own_volumes_and_links_resolve_inside_it() {
    let sb = start().await;
    assert!(
        sb.mounts_volumes(),
        "the sandbox mounts volumes in a root of the pod's own only when it runs as root \
         with util-linux's unshare: run the suite as root"
    );
    let root = sb.node_root("node-a");
    for (dir, own) in [("vols/a", "A"), ("vols/b", "B")] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("own"), own).unwrap();
    }
    std::fs::write(root.join("vols/b/secret"), " b-secret").unwrap();
    // The host's path of the other volume, as an attacker who knows the node would plant it.
    std::os::unix::fs::symlink(root.join("vols/b"), root.join("vols/a/escape")).unwrap();
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    look_at(&pods, "first", "/vols/a", 5).await;
    eventually(15, "the first pod to run", || async {
        let p = pods.get("first").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    look_at(&pods, "second", "/vols/b", 0).await;
    assert_eq!(looked(&pods, "second").await, "B no-escape\n");
    assert_eq!(looked(&pods, "first").await, "A no-escape\n");
    assert!(root.join("vols/b/written-by-second").exists());
    assert!(!root.join("vols/a/written-by-second").exists());
    assert!(root.join("vols/a/written-by-first").exists());
}

/// Paths in a pod that would lead the sandbox's kubelet, which runs as root, to the host: a
/// subPath of `/` (the API server refuses it; the sandbox does not validate pods) and a
/// termination message file swapped for a link to a host file.
#[tokio::test]
async fn a_pods_paths_never_lead_the_kubelet_to_the_host() {
    let sb = start().await;
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    let whole: Pod = serde_json::from_value(json!({"metadata": {"name": "whole"},
        "spec": {"nodeName": "node-a", "restartPolicy": "Never",
            "volumes": [{"name": "v", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "look",
                "volumeMounts": [{"name": "v", "mountPath": "/data", "subPath": "/"}]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &whole).await.unwrap();
    let waiting = eventually(15, "the subPath to be refused", || async {
        let p = pods.get("whole").await.ok()?;
        p.status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .waiting
    })
    .await;
    assert_eq!(
        waiting.reason.as_deref(),
        Some("CreateContainerConfigError")
    );
    assert!(
        waiting
            .message
            .unwrap_or_default()
            .contains("relative path"),
        "says why"
    );

    let secret = sb.state_dir("node-a").join("host-secret");
    std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
    std::fs::write(&secret, "host-secret").unwrap();
    let linker: Pod = serde_json::from_value(json!({"metadata": {"name": "linker"},
        "spec": {"nodeName": "node-a", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "link-log",
                "env": [{"name": "TARGET", "value": secret.display().to_string()}]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &linker).await.unwrap();
    let message = looked(&pods, "linker").await;
    assert!(!message.contains("host-secret"), "{message}");
}

fn class(name: &str, binding: &str) -> StorageClass {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "provisioner": "example.com/ext",
        "reclaimPolicy": "Delete", "volumeBindingMode": binding}),
    )
    .unwrap()
}

fn claim(name: &str, class: &str) -> PersistentVolumeClaim {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"storageClassName": class,
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .unwrap()
}

#[tokio::test]
async fn pv_controller_annotates_binds_and_releases() {
    let sb = start().await;
    let c = sb.client().unwrap();
    Api::<StorageClass>::all(c.clone())
        .create(&PostParams::default(), &class("ext", "Immediate"))
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    let created = claims
        .create(&PostParams::default(), &claim("data", "ext"))
        .await
        .unwrap();
    let annotated = eventually(10, "the storage-provisioner annotation", || async {
        claims
            .get("data")
            .await
            .ok()?
            .metadata
            .annotations?
            .get("volume.kubernetes.io/storage-provisioner")
            .cloned()
    })
    .await;
    assert_eq!(annotated, "example.com/ext");
    let reasons = event_reasons(&Api::namespaced(c.clone(), "default"), "data").await;
    assert!(
        reasons.contains(&"ExternalProvisioning".into()),
        "{reasons:?}"
    );
    // What a provisioner does: a PV pre-bound to the claim.
    let pv: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "pv-data", "annotations": {"pv.kubernetes.io/provisioned-by": "example.com/ext"}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Delete",
                 "storageClassName": "ext", "hostPath": {"path": "/data"},
                 "claimRef": {"namespace": "default", "name": "data", "uid": created.metadata.uid}}})).unwrap();
    pvs.create(&PostParams::default(), &pv).await.unwrap();
    let bound = eventually(10, "the claim to bind", || async {
        let c = claims.get("data").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await;
    assert_eq!(bound.spec.unwrap().volume_name.as_deref(), Some("pv-data"));
    assert_eq!(
        bound.metadata.annotations.unwrap()["pv.kubernetes.io/bind-completed"],
        "yes"
    );
    assert_eq!(
        pvs.get("pv-data")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Bound")
    );
    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    eventually(10, "the volume to be Released", || async {
        (pvs.get("pv-data").await.ok()?.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    // Released with Delete and provisioned-by: left for the provisioner, not failed.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        pvs.get("pv-data")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Released")
    );
}

#[tokio::test]
async fn wait_for_first_consumer_selects_a_node_for_the_claim() {
    let sb = start().await;
    let c = sb.client().unwrap();
    Api::<StorageClass>::all(c.clone())
        .create(
            &PostParams::default(),
            &class("late", "WaitForFirstConsumer"),
        )
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    claims
        .create(&PostParams::default(), &claim("data", "late"))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let before = claims.get("data").await.unwrap();
    assert!(
        before.metadata.annotations.unwrap_or_default().is_empty(),
        "no node and no provisioner before a consumer"
    );
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "consumer"}, "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-b"},
        "containers": [{"name": "c", "image": "sleep"}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}})).unwrap();
    Api::<Pod>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let annotations = eventually(10, "selected-node and storage-provisioner", || async {
        let a = claims.get("data").await.ok()?.metadata.annotations?;
        a.contains_key("volume.kubernetes.io/storage-provisioner")
            .then_some(a)
    })
    .await;
    assert_eq!(
        annotations["volume.kubernetes.io/selected-node"], "node-b",
        "the pod's nodeSelector decides"
    );
    let pod = Api::<Pod>::namespaced(c, "default")
        .get("consumer")
        .await
        .unwrap();
    assert!(
        pod.spec.unwrap().node_name.is_none(),
        "the pod waits for its claim to bind"
    );
}
