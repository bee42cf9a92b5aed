//! The sandbox API server through the real kube client: the semantics a controller relies on.

use crate::common;

use std::time::Duration;

use common::sandbox::{api_error, eventually, start};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

/// One plain HTTP request, bypassing the client's retries.
async fn raw_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

fn rv(obj: &impl kube::Resource) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn crud_statuses_and_metadata() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.uid.as_ref().unwrap().len(), 36);
    assert!(meta.creation_timestamp.is_some());
    assert!(meta.generation.is_none(), "ConfigMaps have no generation");
    assert_eq!(
        api_error(
            cms.create(&PostParams::default(), &cm("a", json!({})))
                .await
        ),
        (409, "AlreadyExists".into())
    );
    assert_eq!(
        api_error(cms.get("missing").await),
        (404, "NotFound".into())
    );
    assert_eq!(
        api_error(cms.delete("missing", &DeleteParams::default()).await),
        (404, "NotFound".into())
    );
    assert_eq!(
        api_error(
            cms.create(&PostParams::default(), &cm("Bad_Name", json!({})))
                .await
        ),
        (422, "Invalid".into())
    );
    let elsewhere: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "nowhere");
    assert_eq!(
        api_error(
            elsewhere
                .create(&PostParams::default(), &cm("x", json!({})))
                .await
        ),
        (404, "NotFound".into())
    );
    let deleted = cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(
        deleted.is_right(),
        "a delete without finalizers answers with a Status"
    );
    assert_eq!(api_error(cms.get("a").await), (404, "NotFound".into()));
    // Every namespace gets its default service account and root CA ConfigMap.
    assert!(cms.get("kube-root-ca.crt").await.is_ok());
}

#[tokio::test]
async fn resource_versions_conflicts_and_generation() {
    let sb = start().await;
    let client = sb.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let mut b = a.clone();
    b.data = Some([("k".to_string(), "2".to_string())].into());
    let b = cms.replace("a", &PostParams::default(), &b).await.unwrap();
    assert!(rv(&b) > rv(&a));
    assert_eq!(
        api_error(cms.replace("a", &PostParams::default(), &a).await),
        (409, "Conflict".into())
    );
    let stale =
        json!({"metadata": {"resourceVersion": a.metadata.resource_version}, "data": {"k": "3"}});
    assert_eq!(
        api_error(
            cms.patch("a", &PatchParams::default(), &Patch::Merge(&stale))
                .await
        ),
        (409, "Conflict".into())
    );
    // An update that changes nothing keeps the version.
    let same = cms.replace("a", &PostParams::default(), &b).await.unwrap();
    assert_eq!(rv(&same), rv(&b));
    // The version is global: a write elsewhere is newer.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {"name": "c"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    let pvc = pvcs.create(&PostParams::default(), &pvc).await.unwrap();
    assert!(rv(&pvc) > rv(&b));
    assert_eq!(
        pvc.metadata.finalizers,
        Some(vec!["kubernetes.io/pvc-protection".to_string()])
    );
    assert_eq!(pvc.status.unwrap().phase.as_deref(), Some("Pending"));
    let jobs: Api<Job> = Api::namespaced(client, "default");
    let job: Job = serde_json::from_value(
        json!({"metadata": {"name": "j"}, "spec": {"suspend": true, "template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "ok"}]}}}}),
    )
    .unwrap();
    let job = jobs.create(&PostParams::default(), &job).await.unwrap();
    assert_eq!(job.metadata.generation, Some(1));
    assert_eq!(job.spec.as_ref().unwrap().backoff_limit, Some(6));
    let job = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(job.metadata.generation, Some(2));
    let job = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        job.metadata.generation,
        Some(2),
        "metadata changes keep the generation"
    );
}

#[tokio::test]
async fn label_and_field_selectors_and_pagination() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "default");
    for (name, labels) in [
        ("s0", json!({})),
        ("s1", json!({"a": "b"})),
        ("s2", json!({"a": "x"})),
        ("s3", json!({"a": "y", "tier": "x"})),
    ] {
        cms.create(&PostParams::default(), &cm(name, labels))
            .await
            .unwrap();
    }
    let names = |sel: &'static str, field: bool| {
        let cms = cms.clone();
        async move {
            let lp = if field {
                ListParams::default().fields(sel)
            } else {
                ListParams::default().labels(sel)
            };
            let mut n: Vec<String> = cms
                .list(&lp)
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect();
            n.retain(|x| x.starts_with('s'));
            n
        }
    };
    assert_eq!(names("a=b", false).await, ["s1"]);
    assert_eq!(names("a==b", false).await, ["s1"]);
    assert_eq!(names("a!=b", false).await, ["s0", "s2", "s3"]);
    assert_eq!(names("a in (x,y)", false).await, ["s2", "s3"]);
    assert_eq!(names("a notin (x)", false).await, ["s0", "s1", "s3"]);
    assert_eq!(names("a", false).await, ["s1", "s2", "s3"]);
    assert_eq!(names("!a", false).await, ["s0"]);
    assert_eq!(names("a,tier=x", false).await, ["s3"]);
    assert_eq!(names("metadata.name=s2", true).await, ["s2"]);
    assert_eq!(
        names("metadata.name!=s2,metadata.namespace=default", true).await,
        ["s0", "s1", "s3"]
    );
    assert_eq!(
        api_error(cms.list(&ListParams::default().labels("a in x")).await),
        (400, "BadRequest".into())
    );
    assert_eq!(
        api_error(cms.list(&ListParams::default().fields("data.k=v")).await),
        (400, "BadRequest".into())
    );
    let page = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().unwrap();
    let rest = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        page.items.len() + rest.items.len(),
        5,
        "4 ConfigMaps and kube-root-ca.crt, each once"
    );
    assert!(rest.metadata.continue_.is_none());
    // status.phase is a field selector for pods.
    let pods: Api<Pod> = Api::namespaced(sb.client().unwrap(), "default");
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "hold"}],
        "containers": [{"name": "c", "image": "ok"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(
        pods.list(&ListParams::default().fields("status.phase=Pending"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        pods.list(&ListParams::default().fields("status.phase=Running"))
            .await
            .unwrap()
            .items
            .len(),
        0
    );
}

#[tokio::test]
async fn status_subresource_and_finalizers() {
    let sb = start().await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {"name": "c", "finalizers": ["example.com/hold"]},
        "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})).unwrap();
    pvcs.create(&PostParams::default(), &pvc).await.unwrap();
    let main = pvcs
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}}, "status": {"phase": "Lost"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        main.status.unwrap().phase.as_deref(),
        Some("Pending"),
        "the main resource ignores status"
    );
    let status = pvcs
        .patch_status(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Lost"}, "spec": {"volumeName": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().phase.as_deref(), Some("Lost"));
    assert!(
        status.spec.unwrap().volume_name.is_none(),
        "the status subresource ignores spec"
    );
    // Finalizers hold a deleted object.
    let held = pvcs
        .delete("c", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let again = pvcs
        .delete("c", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        again.metadata.deletion_timestamp,
        held.metadata.deletion_timestamp
    );
    let add = pvcs
        .patch("c", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "kubernetes.io/pvc-protection", "example.com/new"]}})))
        .await;
    assert_eq!(api_error(add), (422, "Invalid".into()));
    pvcs.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually(5, "the claim to be gone", || async {
        pvcs.get_opt("c").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn patch_types_and_server_side_apply() {
    let sb = start().await;
    let client = sb.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("p", json!({"a": "1"})))
        .await
        .unwrap();
    let merged = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "1", "k": null}})),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.data.unwrap(),
        [("x".to_string(), "1".to_string())].into()
    );
    let ops = json!([{"op": "add", "path": "/data/y", "value": "2"}, {"op": "remove", "path": "/data/x"}]);
    let jp: json_patch::Patch = serde_json::from_value(ops).unwrap();
    let patched = cms
        .patch("p", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    assert_eq!(
        patched.data.unwrap(),
        [("y".to_string(), "2".to_string())].into()
    );
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/y", "value": "9"}])).unwrap();
    assert_eq!(
        api_error(
            cms.patch("p", &PatchParams::default(), &Patch::<()>::Json(failing))
                .await
        )
        .0,
        422
    );
    let smp = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"b": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(smp.metadata.labels.unwrap().len(), 2);
    // Strategic merge merges containers by name.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "g"}, "spec": {"schedulingGates": [{"name": "hold"}],
        "containers": [{"name": "a", "image": "sleep"}, {"name": "b", "image": "ok"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let p = pods
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "b", "image": "fail"}]}})),
        )
        .await
        .unwrap();
    let images: Vec<_> = p
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| (c.name, c.image.unwrap()))
        .collect();
    assert_eq!(
        images,
        [
            ("a".to_string(), "sleep".to_string()),
            ("b".to_string(), "fail".to_string())
        ]
    );
    // Server-side apply: create, conflict between managers, force.
    let apply = |owner: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"k1": owner}});
    let a = cms
        .patch(
            "ssa",
            &PatchParams::apply("mgr-a"),
            &Patch::Apply(apply("a")),
        )
        .await
        .unwrap();
    assert_eq!(a.data.unwrap()["k1"], "a");
    assert_eq!(
        api_error(
            cms.patch(
                "ssa",
                &PatchParams::apply("mgr-b"),
                &Patch::Apply(apply("b"))
            )
            .await
        ),
        (409, "Conflict".into())
    );
    let forced = cms
        .patch(
            "ssa",
            &PatchParams::apply("mgr-b").force(),
            &Patch::Apply(apply("b")),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["k1"], "b");
    let managers: Vec<(String, String)> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert!(
        managers.contains(&("mgr-b".into(), "Apply".into())),
        "{managers:?}"
    );
}

#[tokio::test]
async fn watches_replay_and_watchers_recover_from_410() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "default");
    let start_rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    cms.create(&PostParams::default(), &cm("w", json!({})))
        .await
        .unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("w", &DeleteParams::default()).await.unwrap();
    let events: Vec<_> = cms
        .watch(&WatchParams::default().timeout(1), &start_rv)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark(_) => "BOOKMARK",
            WatchEvent::Error(_) => "ERROR",
        })
        .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    // Compacted history: a watch from an old version ends with 410 Gone.
    sb.compact();
    let gone: Vec<_> = cms
        .watch(&WatchParams::default().timeout(1), &start_rv)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(
        matches!(&gone[..], [WatchEvent::Error(e)] if e.code == 410),
        "{gone:?}"
    );

    // A kube-runtime watcher relists after its watch is closed and the history is gone.
    let mut stream = watcher(cms.clone(), watcher::Config::default()).boxed();
    let mut inits = 0;
    let mut seen = Vec::new();
    cms.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut forced = false;
    while tokio::time::Instant::now() < deadline {
        let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await else {
            continue;
        };
        match ev {
            Ok(watcher::Event::Init) => inits += 1,
            Ok(watcher::Event::InitDone) if !forced => {
                forced = true;
                // Break the watch: history compacted while a write happens, then the stream closes.
                cms.create(&PostParams::default(), &cm("during", json!({})))
                    .await
                    .unwrap();
                sb.compact();
                sb.close_watches();
            }
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                seen.push(c.metadata.name.unwrap());
                if seen.contains(&"after".to_string()) {
                    break;
                }
                if forced
                    && inits >= 2
                    && !seen.contains(&"after".to_string())
                    && seen.iter().filter(|s| *s == "during").count() > 0
                {
                    cms.create(&PostParams::default(), &cm("after", json!({})))
                        .await
                        .ok();
                }
            }
            _ => {}
        }
    }
    assert!(inits >= 2, "the watcher relisted ({inits} inits)");
    assert!(seen.contains(&"during".to_string()), "{seen:?}");
    assert!(seen.contains(&"after".to_string()), "{seen:?}");
}

/// Creates ConfigMap `owner` and ConfigMap `dependent` owned by it.
async fn owner_and_dependent(cms: &Api<ConfigMap>, owner: &str, dependent: &str, block: bool) {
    let created = cms
        .create(&PostParams::default(), &cm(owner, json!({})))
        .await
        .unwrap();
    let mut dep = cm(dependent, json!({}));
    dep.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: owner.into(),
            uid: created.metadata.uid.unwrap(),
            block_owner_deletion: block.then_some(true),
            ..Default::default()
        },
    ]);
    cms.create(&PostParams::default(), &dep).await.unwrap();
}

#[tokio::test]
async fn garbage_collection_and_propagation() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "default");
    owner_and_dependent(&cms, "owner", "dep", true).await;
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually(5, "dependent and owner gone", || async {
        (cms.get_opt("dep").await.unwrap().is_none()
            && cms.get_opt("owner").await.unwrap().is_none())
        .then_some(())
    })
    .await;
    // Orphaning releases the dependent.
    owner_and_dependent(&cms, "owner2", "dep2", false).await;
    cms.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    let kept = eventually(5, "the orphan released", || async {
        cms.get_opt("dep2")
            .await
            .unwrap()
            .filter(|d| d.metadata.owner_references.is_none())
    })
    .await;
    assert_eq!(kept.metadata.name.as_deref(), Some("dep2"));
}

#[tokio::test]
async fn injected_faults_reach_the_client() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "default");
    sb.faults
        .fail_next(Some("list"), Some("configmaps"), 1, 500);
    assert_eq!(api_error(cms.list(&ListParams::default()).await).0, 500);
    assert!(
        cms.list(&ListParams::default()).await.is_ok(),
        "only the next request fails"
    );
    // 429 carries Retry-After, which the kube client honours by retrying on its own.
    sb.faults
        .fail_next(Some("list"), Some("configmaps"), 1, 429);
    let raw = raw_get(sb.addr, "/api/v1/namespaces/default/configmaps").await;
    assert!(raw.starts_with("HTTP/1.1 429"), "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after: 1"), "{raw}");
    assert!(raw.contains("\"reason\":\"TooManyRequests\""), "{raw}");
    sb.faults.fail_next(Some("create"), None, 1, 429);
    cms.create(&PostParams::default(), &cm("t", json!({})))
        .await
        .expect("the client retries after 429");
    sb.faults.fail_next(Some("get"), Some("configmaps"), 2, 409);
    assert_eq!(api_error(cms.get("kube-root-ca.crt").await).0, 409);
    assert_eq!(api_error(cms.get("kube-root-ca.crt").await).0, 409);
    assert!(cms.get("kube-root-ca.crt").await.is_ok());
    sb.faults
        .delay_next(Some("get"), None, 1, Duration::from_millis(300));
    let t = std::time::Instant::now();
    cms.get("kube-root-ca.crt").await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
}

/// Paging across namespaces whose names sort differently from "namespace/name" strings
/// ("a" and "a-b": '-' sorts before '/'): every object once, in a stable order.
#[tokio::test]
async fn paged_lists_across_namespaces_return_every_object_once() {
    let sb = start().await;
    let client = sb.client().unwrap();
    for ns in ["a", "a-b", "b"] {
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for i in 0..3 {
            cms.create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": format!("x{i}"), "labels": {"paged": "yes"}}}),
                )
                .unwrap(),
            )
            .await
            .unwrap();
        }
    }
    let all: Api<ConfigMap> = Api::all(client);
    let mut seen = Vec::new();
    let mut lp = ListParams::default().labels("paged=yes").limit(2);
    loop {
        let page = all.list(&lp).await.unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|c| {
            format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap(),
                c.metadata.name.as_deref().unwrap()
            )
        }));
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => lp = lp.continue_token(&t),
            _ => break,
        }
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(seen.len(), 9, "{seen:?}");
    assert_eq!(unique.len(), 9, "{seen:?}");
}

/// A delete of a collection answers with the list of the objects deleted, as Kubernetes
/// does, also for objects that went at once (whose own delete answers with a Status).
#[tokio::test]
async fn delete_collection_lists_the_deleted_objects() {
    let sb = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sb.client().unwrap(), "default");
    for name in ["x1", "x2"] {
        let mut c = cm(name, json!({}));
        c.metadata.labels = Some([("set".to_string(), "x".to_string())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let deleted = cms
        .delete_collection(
            &DeleteParams::background(),
            &ListParams::default().labels("set=x"),
        )
        .await
        .expect("a list the client can read");
    let list = deleted.left().expect("a list of objects, not a Status");
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["x1", "x2"]);
    assert!(
        cms.list(&ListParams::default().labels("set=x"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
