//! VolumeSnapshots of our volumes, when the API server serves the snapshot API: the
//! watches of VolumeSnapshots, their contents and classes, and two controllers on them, one
//! per VolumeSnapshot (take it: `flex_core::plan::snapshot`) and one per content (delete it
//! and its copy: `flex_core::plan::snapshot_content`). They gather from the caches, read
//! what a plan asks for, and carry out its one step.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use super::caches::{by_snapshot, by_source_snapshot, trim_meta};
use super::compact::Shared;
use super::context::Context;
use flex_core::names::{ANN_CONTENT, ANN_SNAPSHOT, Action as JobAction, annotation};
use flex_core::plan::Ask;
use flex_core::plan::snapshot::{SnapshotInputs, SnapshotStep, plan_snapshot};
use flex_core::plan::snapshot_content::{ContentInputs, ContentStep, plan_content};
use flex_core::snapshot::record::{attempt_record_name, snapshot_record_name};
use flex_core::snapshot::{
    API_VERSION, GROUP, VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotContent, content_name,
};

type Changes<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// Whether the API server serves the three kinds at `v1` (the CRDs are installed). Asked
/// at start, then by `until_served` while it does not.
pub(super) async fn served(client: &Client) -> bool {
    for _ in 0..3 {
        match serves_snapshots(client).await {
            Ok(v1) => {
                if !v1 {
                    tracing::info!(
                        "the snapshot API ({API_VERSION}) is not served: VolumeSnapshots are not watched until it is"
                    );
                }
                return v1;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the API groups; asking again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    tracing::warn!("the API groups could not be listed: VolumeSnapshots are not watched");
    false
}

/// Returns once the API server serves the snapshot API, asking every `every`.
pub(super) async fn until_served(client: &Client, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match serves_snapshots(client).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "cannot list the API groups"),
        }
    }
}

async fn serves_snapshots(client: &Client) -> Result<bool, kube::Error> {
    let groups = client.list_api_groups().await?;
    Ok(groups
        .groups
        .iter()
        .any(|g| g.name == GROUP && g.versions.iter().any(|v| v.group_version == API_VERSION)))
}

/// The stores and the changes of the three kinds.
pub(super) struct Watches {
    snapshots: Store<VolumeSnapshot>,
    contents: Store<VolumeSnapshotContent>,
    classes: Store<VolumeSnapshotClass>,
    snapshot_changes: Changes<VolumeSnapshot>,
    content_changes: Changes<VolumeSnapshotContent>,
    class_changes: Changes<VolumeSnapshotClass>,
}

pub(super) fn watch(client: &Client) -> Watches {
    fn reflect<K>(client: &Client, trim: fn(&mut K)) -> (Store<K>, Changes<K>)
    where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        use kube::runtime::WatchStreamExt;
        let (store, writer) = kube::runtime::reflector::store();
        let changes = watcher(Api::<K>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .modify(trim)
            .reflect(writer)
            .touched_objects()
            .boxed();
        (store, changes)
    }
    let (snapshots, snapshot_changes) = reflect(client, trim_snapshot);
    let (contents, content_changes) = reflect(client, trim_meta);
    let (classes, class_changes) = reflect(client, trim_meta);
    Watches {
        snapshots,
        contents,
        classes,
        snapshot_changes,
        content_changes,
        class_changes,
    }
}

/// Any user may write hundreds of kilobytes of labels and annotations into each of their
/// VolumeSnapshots, and every one of the cluster is cached: no decision reads them, so
/// none is kept.
fn trim_snapshot(s: &mut VolumeSnapshot) {
    trim_meta(s);
    s.metadata.labels = None;
    s.metadata.annotations = None;
}

/// The two controllers, with their triggers: a VolumeSnapshot's own changes, its content's
/// and its snapshot Jobs'; a content's own, its Jobs', and its VolumeSnapshot's (a deleted
/// snapshot's content goes too). `jobs`: our Jobs' changes.
pub(super) fn spawn(
    tasks: &mut tokio::task::JoinSet<()>,
    w: Watches,
    jobs: Changes<Shared<Job>>,
    ctx: Arc<Context>,
) {
    let stores = Arc::new(Stores {
        snapshots: w.snapshots.clone(),
        contents: w.contents.clone(),
        classes: w.classes.clone(),
    });
    let [jobs_for_snapshots, jobs_for_contents] = super::wiring::apart(tasks, jobs);
    let [snapshot_changes, snapshots_for_contents] =
        super::wiring::apart(tasks, w.snapshot_changes);
    let [content_changes, contents_for_snapshots] = super::wiring::apart(tasks, w.content_changes);
    tasks.spawn(w.class_changes.for_each(|_| async {}));
    let config = kube::runtime::controller::Config::default().concurrency(16);
    let take = Controller::for_stream(snapshot_changes, w.snapshots)
        .with_config(config.clone())
        .watches_stream(contents_for_snapshots, |c: VolumeSnapshotContent| {
            let r = &c.spec.volume_snapshot_ref;
            Some(ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?))
        })
        .watches_stream(jobs_for_snapshots, |j: Shared<Job>| {
            (JobAction::of(j.labels()) == Some(JobAction::Snapshot)).then_some(())?;
            let (ns, name) = annotation(&j.metadata, ANN_SNAPSHOT)?.split_once('/')?;
            Some(ObjectRef::new(name).within(ns))
        })
        .run(
            reconcile_snapshot,
            error_policy,
            Arc::new((ctx.clone(), stores.clone())),
        )
        .for_each(super::wiring::settled(&ctx, "snapshot"));
    let delete = Controller::for_stream(content_changes, w.contents)
        .with_config(config)
        .watches_stream(snapshots_for_contents, |s: VolumeSnapshot| {
            Some(ObjectRef::new(&content_name(s.metadata.uid.as_deref()?)))
        })
        .watches_stream(jobs_for_contents, |j: Shared<Job>| {
            let snapshot_job = matches!(
                JobAction::of(j.labels()),
                Some(JobAction::Snapshot | JobAction::DeleteSnapshot)
            );
            snapshot_job.then_some(())?;
            Some(ObjectRef::new(annotation(&j.metadata, ANN_CONTENT)?))
        })
        .run(
            reconcile_content,
            error_policy,
            Arc::new((ctx.clone(), stores)),
        )
        .for_each(super::wiring::settled(&ctx, "content"));
    tasks.spawn(async move {
        futures::join!(take, delete);
    });
}

/// As the other controllers' failures (`Context::error_policy`).
fn error_policy<K>(object: Arc<K>, error: &crate::Error, both: Both) -> Action
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    Context::error_policy(object, error, both.0.clone())
}

/// The snapshot caches.
struct Stores {
    snapshots: Store<VolumeSnapshot>,
    contents: Store<VolumeSnapshotContent>,
    classes: Store<VolumeSnapshotClass>,
}

/// What both reconcilers share.
type Both = Arc<(Arc<Context>, Arc<Stores>)>;

/// A snapshot's record and its attempts' record, as the cache holds them, or (`afresh`) as
/// the API server does.
async fn records_of(
    ctx: &Context,
    snapshot_uid: &str,
    afresh: bool,
) -> crate::Result<(Option<ConfigMap>, Option<ConfigMap>)> {
    let names = [
        snapshot_record_name(snapshot_uid),
        attempt_record_name(snapshot_uid),
    ];
    if !afresh {
        return Ok((cached_record(ctx, &names[0]), cached_record(ctx, &names[1])));
    }
    let taken = super::reads::snapshot_record(ctx, &names[0]).await?;
    Ok((taken, super::reads::snapshot_record(ctx, &names[1]).await?))
}

/// A snapshot's record (`snapshot_record_name`, `attempt_record_name`) as the cache holds it
/// (in any config namespace).
fn cached_record(ctx: &Context, name: &str) -> Option<ConfigMap> {
    (ctx.opts.config_namespaces.iter().zip(&ctx.caches.records))
        .find_map(|(ns, s)| s.get(&ObjectRef::new(name).within(ns))?.full())
}

async fn reconcile_snapshot(vs: Arc<VolumeSnapshot>, shared: Both) -> crate::Result<Action> {
    let (ctx, stores) = (&shared.0, &shared.1);
    ctx.readiness.wait().await;
    let class = (vs.spec.volume_snapshot_class_name.as_deref())
        .and_then(|n| stores.classes.get(&ObjectRef::new(n)));
    // Another driver's snapshot costs nothing more; one whose class is not seen (yet) is
    // looked at again: class changes bring no snapshot back.
    let Some(class) = class else {
        return Ok(Action::requeue(Duration::from_secs(60)));
    };
    if class.driver != ctx.opts.provisioner_name {
        return Ok(Action::await_change());
    }
    let ns = vs.namespace().unwrap_or_default();
    let uid = vs.uid().unwrap_or_default();
    let claim_name = vs
        .spec
        .source
        .persistent_volume_claim_name
        .clone()
        .unwrap_or_default();
    let claim = ctx.caches.claim(&ns, &claim_name);
    let volume_name = claim
        .as_ref()
        .and_then(|c| c.spec.as_ref()?.volume_name.clone());
    let pv = volume_name.as_deref().and_then(|v| ctx.caches.volume(v));
    let pv_class = (pv.as_ref())
        .and_then(|p| p.spec.as_ref()?.storage_class_name.clone())
        .unwrap_or_default();
    let enabled = match pv {
        None => Ok(false),
        Some(_) => match ctx.config_of(&pv_class).await {
            super::configs::Resolved::Ready(c) => Ok(c.provisioner.snapshots),
            super::configs::Resolved::Unusable(why) => Err(why),
        },
    };
    let content = stores.contents.get(&ObjectRef::new(&content_name(&uid)));
    let content_key = format!("content/{uid}");
    let content_unseen = (ctx.apply.expected)
        .unseen_for(&content_key, |_| content.is_some())
        .is_some();
    let (mut record, mut attempt_record) = records_of(ctx, &uid, false).await?;
    let mut record_read = false;
    let jobs = ctx.caches.jobs_by(&by_snapshot(&uid));
    let pods = ctx.caches.pods_by(&by_snapshot(&uid));
    let mut volume_record = None;
    let mut read = false;
    let plan = loop {
        let inputs = SnapshotInputs {
            snapshot: &vs,
            provisioner_name: &ctx.opts.provisioner_name,
            class: Some(&class),
            claim: claim.as_deref(),
            pv: pv.as_deref(),
            enabled: enabled.clone(),
            content: content.as_deref(),
            content_unseen,
            volume_record: volume_record.clone(),
            record: record.as_ref(),
            record_read,
            attempt_record: attempt_record.as_ref(),
            jobs: jobs.iter().map(AsRef::as_ref).collect(),
            pods: pods.iter().map(AsRef::as_ref).collect(),
            retry_base: ctx.opts.retry_base,
            job_ttl_seconds: ctx.opts.job_ttl_seconds,
            now: jiff::Timestamp::now(),
        };
        match plan_snapshot(&inputs) {
            Ok(p) => break p,
            // The volume's record and the snapshot's, afresh: they decide what runs.
            Err(Ask::Record) if !read => {
                let Some(pv) = pv.as_deref() else {
                    return Ok(Action::requeue(Duration::from_secs(30)));
                };
                let cm = super::reads::record(ctx, pv).await?;
                volume_record = Some(match cm {
                    Some(cm) => flex_core::record::read_record(&cm, pv),
                    None => Err(flex_core::record::RecordError::missing(pv)),
                });
                (record, attempt_record) = records_of(ctx, &uid, true).await?;
                (read, record_read) = (true, true);
            }
            Err(_) => return Ok(Action::requeue(Duration::from_secs(30))),
        }
    };
    let on = vs.object_ref(&());
    ctx.apply.tell(&on, &pv_class, &plan.notices, None).await;
    let apply = &ctx.apply;
    let contents = Api::<VolumeSnapshotContent>::all(ctx.client.clone());
    let content_name = content_name(&uid);
    Ok(match plan.step {
        SnapshotStep::Ignore => Action::await_change(),
        SnapshotStep::Wait(d) => Action::requeue(d),
        SnapshotStep::CreateContent(c) => {
            apply.create_cluster(&contents, c.as_ref()).await?;
            apply.expected.record_for(&content_key, &content_name, 0);
            Action::requeue(Duration::from_secs(5))
        }
        SnapshotStep::CreateJob(job) => {
            apply.create_job(&job, &uid).await?;
            Action::requeue(flex_core::plan::snapshot::RUNNING_RECHECK)
        }
        SnapshotStep::WriteRecord(cm) => {
            apply.create_or_adopt(cm.as_ref()).await?;
            Action::requeue(Duration::from_millis(100))
        }
        SnapshotStep::PatchContentStatus(p) => {
            apply.patch_status(&contents, &content_name, &p).await?;
            Action::await_change()
        }
        SnapshotStep::GiveUp { content, status } => {
            apply.patch(&contents, &content_name, &content).await?;
            apply
                .patch_status(&contents, &content_name, &status)
                .await?;
            Action::await_change()
        }
        SnapshotStep::PatchSnapshotStatus(p) => {
            let snapshots = Api::<VolumeSnapshot>::namespaced(ctx.client.clone(), &ns);
            apply.patch_status(&snapshots, &vs.name_any(), &p).await?;
            Action::await_change()
        }
    })
}

async fn reconcile_content(
    content: Arc<VolumeSnapshotContent>,
    shared: Both,
) -> crate::Result<Action> {
    let (ctx, stores) = (&shared.0, &shared.1);
    ctx.readiness.wait().await;
    if content.spec.driver != ctx.opts.provisioner_name {
        return Ok(Action::await_change());
    }
    let r = &content.spec.volume_snapshot_ref;
    let snapshot_uid = r.uid.clone().unwrap_or_default();
    let at = (
        r.name.clone().unwrap_or_default(),
        r.namespace.clone().unwrap_or_default(),
    );
    let same = |s: &VolumeSnapshot| s.uid().as_deref() == Some(snapshot_uid.as_str());
    let cached = stores
        .snapshots
        .get(&ObjectRef::new(&at.0).within(&at.1))
        .is_some_and(|s| same(&s));
    let jobs = ctx.caches.jobs_by(&by_snapshot(&snapshot_uid));
    let pods = ctx.caches.pods_by(&by_snapshot(&snapshot_uid));
    let cached_snapshot = stores
        .snapshots
        .get(&ObjectRef::new(&at.0).within(&at.1))
        .filter(|s| same(s));
    let mut snapshot_deleting =
        cached_snapshot.is_some_and(|s| s.metadata.deletion_timestamp.is_some());
    let restoring = (ctx
        .caches
        .jobs_by(&by_source_snapshot(&content.name_any()))
        .iter())
    .any(|j| flex_core::job::outcome(j, &[]) == flex_core::job::JobOutcome::Running);
    // A Job created a moment ago that the watch has not delivered yet.
    let unseen = (ctx.apply.expected).unseen_for(&snapshot_uid, |name| {
        jobs.iter().any(|j| j.name_any() == name)
    });
    if unseen.is_some() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let mut snapshot_exists = cached;
    let mut snapshot_confirmed = false;
    let (mut record, mut attempt_record) = records_of(ctx, &snapshot_uid, false).await?;
    let mut record_read = false;
    let plan = {
        let mut asked: Vec<Ask> = Vec::new();
        loop {
            let inputs = ContentInputs {
                content: &content,
                provisioner_name: &ctx.opts.provisioner_name,
                snapshot_exists,
                snapshot_confirmed,
                snapshot_deleting,
                restoring,
                record: record.as_ref(),
                record_read,
                attempt_record: attempt_record.as_ref(),
                jobs: jobs.iter().map(AsRef::as_ref).collect(),
                pods: pods.iter().map(AsRef::as_ref).collect(),
                retry_base: ctx.opts.retry_base,
                job_ttl_seconds: ctx.opts.job_ttl_seconds,
                now: jiff::Timestamp::now(),
            };
            let ask = match plan_content(&inputs) {
                Ok(p) => break p,
                Err(ask) if asked.contains(&ask) => {
                    return Ok(Action::requeue(Duration::from_secs(30)));
                }
                Err(ask) => ask,
            };
            match &ask {
                Ask::Snapshot => {
                    let found = Api::<VolumeSnapshot>::namespaced(ctx.client.clone(), &at.1)
                        .get_opt(&at.0)
                        .await
                        .map_err(crate::Error::read(format!(
                            "VolumeSnapshot {}/{}",
                            at.1, at.0
                        )))?;
                    let found = found.filter(|s| same(s));
                    snapshot_deleting = found
                        .as_ref()
                        .is_some_and(|s| s.metadata.deletion_timestamp.is_some());
                    snapshot_exists = found.is_some();
                    snapshot_confirmed = true;
                }
                Ask::Record => {
                    (record, attempt_record) = records_of(ctx, &snapshot_uid, true).await?;
                    record_read = true;
                }
                _ => return Ok(Action::requeue(Duration::from_secs(30))),
            }
            asked.push(ask);
        }
    };
    let on = content.object_ref(&());
    ctx.apply.tell(&on, "", &plan.notices, None).await;
    let apply = &ctx.apply;
    let contents = Api::<VolumeSnapshotContent>::all(ctx.client.clone());
    let name = content.name_any();
    Ok(match plan.step {
        ContentStep::Ignore => Action::await_change(),
        ContentStep::Wait(d) => Action::requeue(d),
        ContentStep::DeleteContent { uid } => {
            apply.delete(&contents, &name, uid, None).await?;
            Action::await_change()
        }
        ContentStep::WriteRecord(cm) => {
            apply.create_or_adopt(cm.as_ref()).await?;
            Action::requeue(Duration::from_millis(100))
        }
        ContentStep::CreateJob(job) => {
            apply.create_job(&job, &snapshot_uid).await?;
            Action::requeue(flex_core::plan::snapshot_content::RUNNING_RECHECK)
        }
        ContentStep::Finish(p) => {
            apply.patch(&contents, &name, &p).await?;
            Action::await_change()
        }
    })
}
