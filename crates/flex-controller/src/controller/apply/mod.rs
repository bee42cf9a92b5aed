//! The one writer of the reconcilers (`Applier`): each effect a plan decided becomes one
//! request, under its precondition where it could race (uid, resourceVersion). How its
//! answer is read is decided here and only here: a 404 on a patch or delete means the
//! object is gone (done, nothing to retry), a 409 on a create means it exists (adopted,
//! never duplicated, or, for a PV, judged by the next plan from the cache). What it created
//! is expected (`expected.rs`) until the caches show it. What users are told, and the
//! success metrics counted as it is told, is `tell.rs`.

mod tell;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use super::expected::Expected;
use super::seen::Seen;
use crate::metrics::Metrics;
use flex_core::names::{ANN_STORAGE_CLASS, Action};

/// What a create found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    New,
    /// It existed already (made by an earlier reconcile or run, or by someone else).
    Existed,
}

/// An object that is already gone needs no further write: 404 is success, not a failure
/// to retry and warn about. `false`: it was gone.
fn gone_is_done<T>(r: Result<T, kube::Error>, what: String) -> crate::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(crate::Error::write(what)(e)),
    }
}

/// A create's answer: 409 means the object exists.
fn created<T>(r: Result<T, kube::Error>, what: String) -> crate::Result<Created> {
    match r {
        Ok(_) => Ok(Created::New),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::Existed),
        Err(e) => Err(crate::Error::write(what)(e)),
    }
}

/// What a write does, for its error: "creating Job ns/name".
fn writing<K: Resource<DynamicType = ()>>(verb: &str, name: &str) -> String {
    format!("{verb} {} {name}", K::kind(&()))
}

/// Key under which a PV created for a claim is expected until the cache shows it.
fn pv_key(claim_uid: &str) -> String {
    format!("pv/{claim_uid}")
}

pub struct Applier {
    client: Client,
    /// Objects created here that the caches may not show yet, and one turn per class.
    pub expected: Expected,
    /// Idempotent writes already made (a volume's record, its final patch), so a reconcile
    /// on a cache that has not caught up yet does not send them again.
    written: Seen,
    /// Publishes the events users read (as `reporter`).
    recorder: Recorder,
    /// Notices already told, so each is told once per object: shared by the controllers
    /// started again (`wiring.rs`), so nothing is told, or counted, twice.
    said: std::sync::Arc<Seen>,
    /// The success and failure counts, counted here as they are told (`tell.rs`).
    metrics: std::sync::Arc<Metrics>,
}

impl Applier {
    pub fn new(
        client: Client,
        reporter: Reporter,
        metrics: std::sync::Arc<Metrics>,
        said: std::sync::Arc<Seen>,
    ) -> Self {
        Applier {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            expected: Expected::default(),
            written: Seen::default(),
            said,
            metrics,
        }
    }

    /// Where PVs are written.
    pub fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// Where the claims of `namespace` are written.
    pub fn claims(&self, namespace: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Creates an object in its own namespace, adopting one that exists.
    pub async fn create_or_adopt<K>(&self, object: &K) -> crate::Result<Created>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Serialize,
    {
        let ns = object.meta().namespace.clone().unwrap_or_default();
        let what = writing::<K>("creating", &format!("{ns}/{}", object.name_any()));
        let api = Api::<K>::namespaced(self.client.clone(), &ns);
        created(self.create_unread(&api, object).await, what)
    }

    /// Sends a write and leaves the object the API server answers with undecoded: no write
    /// here reads it, and decoding the Jobs and PVs it returned took about a tenth of the
    /// volume controller's time. Errors are the API server's, as from `Api`'s own methods.
    /// `verb` names the request's trace span, as kube's `Api` does.
    async fn send_unread(
        &self,
        verb: &'static str,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<(), kube::Error> {
        let mut request = request.map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert(verb);
        self.client.request_text(request).await.map(drop)
    }

    /// `Api::create`, its answer unread.
    async fn create_unread<K>(&self, api: &Api<K>, object: &K) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
        let request = kube::core::Request::new(api.resource_url());
        self.send_unread("create", request.create(&PostParams::default(), body))
            .await
    }

    /// Creates a cluster-scoped object (a VolumeSnapshotContent); one that exists is
    /// adopted: the next plan, from the cache, judges whether it is the one it meant.
    pub async fn create_cluster<K>(&self, api: &Api<K>, object: &K) -> crate::Result<Created>
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        let what = writing::<K>("creating", &object.name_any());
        created(self.create_unread(api, object).await, what)
    }

    /// Creates an object once per run of the controller (`key` names the write): a
    /// reconcile on a cache that has not caught up yet does not send it again.
    pub async fn create_once<K>(&self, key: &str, object: &K) -> crate::Result<()>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Serialize,
    {
        if !self.written.contains(key) {
            self.create_or_adopt(object).await?;
            self.written.insert(key);
        }
        Ok(())
    }

    /// Creates a Job (adopting one that exists) and expects it for `owner` (a claim's or
    /// PV's uid) and, a provisioning Job, in its class's count of running Jobs.
    pub async fn create_job(&self, job: &Job, owner: &str) -> crate::Result<Created> {
        let answer = self.create_or_adopt(job).await?;
        let name = job.name_any();
        if Action::of(job.labels()) == Some(Action::Provision)
            && let Some(class) = job.annotations().get(ANN_STORAGE_CLASS)
        {
            self.expected.record(class, &name);
        }
        let attempt = flex_core::job::attempt_of(job);
        self.expected.record_for(owner, &name, attempt);
        Ok(answer)
    }

    /// Creates a PV, expected until the cache shows it when it is made for a claim that
    /// waits for it (`for_claim`: its uid). A conflict: it exists already (ours from an
    /// earlier reconcile, or someone else's); the next plan, from the cache, judges what is
    /// there.
    pub async fn create_pv(
        &self,
        pv: &PersistentVolume,
        for_claim: Option<&str>,
    ) -> crate::Result<Created> {
        let what = writing::<PersistentVolume>("creating", &pv.name_any());
        let answer = created(self.create_unread(&self.volumes(), pv).await, what)?;
        if let (Created::New, Some(uid)) = (answer, for_claim) {
            self.expected.record_for(&pv_key(uid), &pv.name_any(), 0);
        }
        Ok(answer)
    }

    /// Whether the PV created here for claim `claim_uid` is not cached yet (`cached`: the
    /// cache shows a PV of the claim's).
    pub fn pv_unseen(&self, claim_uid: &str, cached: bool) -> bool {
        let key = pv_key(claim_uid);
        self.expected.unseen_for(&key, |_| cached).is_some()
    }

    /// A merge patch; an object gone meanwhile is done with (`false`). A precondition goes
    /// in the patch itself (`metadata.resourceVersion`).
    pub async fn patch<K>(&self, api: &Api<K>, name: &str, patch: &Value) -> crate::Result<bool>
    where
        K: Resource<DynamicType = ()>,
    {
        let request = kube::core::Request::new(api.resource_url());
        let answer = (self.send_unread(
            "patch",
            request.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        ))
        .await;
        gone_is_done(answer, writing::<K>("patching", name))
    }

    /// The write that finishes a volume whose storage is gone (`pv_uid`, named `name`),
    /// sent once per run: counted in `delete_total` when it was sent now, and timed from
    /// `since` (the volume's first deprovision Job).
    pub async fn finish_volume(
        &self,
        pv_uid: &str,
        name: &str,
        patch: &serde_json::Value,
        class: &str,
        since: Option<jiff::Timestamp>,
    ) -> crate::Result<()> {
        let key = format!("finished/{pv_uid}");
        if self.written.contains(&key) {
            return Ok(());
        }
        self.patch(&self.volumes(), name, patch).await?;
        self.written.insert(&key);
        self.metrics.count_deleted(class, since);
        Ok(())
    }

    /// A merge patch of the status subresource, as `patch`.
    pub async fn patch_status<K>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &Value,
    ) -> crate::Result<bool>
    where
        K: Resource<DynamicType = ()>,
    {
        let request = kube::core::Request::new(api.resource_url());
        let answer = (self.send_unread(
            "patch_status",
            request.patch_subresource(
                "status",
                name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            ),
        ))
        .await;
        gone_is_done(answer, writing::<K>("patching the status of", name))
    }

    /// Deletes the object only while it is the one decided on (its uid, and its
    /// resourceVersion when given); one gone meanwhile is done with.
    pub async fn delete<K>(
        &self,
        api: &Api<K>,
        name: &str,
        uid: String,
        resource_version: Option<String>,
    ) -> crate::Result<()>
    where
        K: Resource<DynamicType = ()>,
    {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version,
            }),
            ..DeleteParams::background()
        };
        let what = writing::<K>("deleting", name);
        let request = kube::core::Request::new(api.resource_url());
        gone_is_done(
            self.send_unread("delete", request.delete(name, &dp)).await,
            what,
        )
        .map(drop)
    }

    /// Marks a provisioning Job as having had its PV, so that plan::orphan never takes it
    /// for one whose claim was deleted before a PV was made: before the orphan path creates
    /// a PV from it, and before a volume of ours is let go with its storage kept. `false`:
    /// the Job is gone.
    pub async fn mark_pv_created(&self, namespace: &str, job: &str) -> crate::Result<bool> {
        let mark = serde_json::json!({"metadata": {"annotations": {flex_core::names::ANN_PV_CREATED: "true"}}});
        let jobs = Api::<Job>::namespaced(self.client.clone(), namespace);
        self.patch(&jobs, job, &mark).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
    use kube::client::Body;
    use kube::runtime::events::Reporter;
    use tower_test::mock;

    type Handle = mock::Handle<Request<Body>, Response<Body>>;

    fn client() -> (Client, Handle) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(service, "default"), handle)
    }

    fn applier(client: Client) -> Applier {
        let reporter = Reporter {
            controller: "flex-provisioner".into(),
            instance: Some("test".into()),
        };
        Applier::new(
            client,
            reporter,
            std::sync::Arc::new(crate::metrics::Metrics::new("test")),
            std::sync::Arc::default(),
        )
    }

    fn status(code: u16, reason: &str) -> Response<Body> {
        let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "code": code, "reason": reason, "message": reason});
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    }

    fn ok(object: serde_json::Value) -> Response<Body> {
        Response::builder()
            .body(Body::from(serde_json::to_vec(&object).unwrap()))
            .unwrap()
    }

    /// Answers the next request with `answer`; returns its method, path and body.
    async fn serve(
        handle: &mut Handle,
        answer: Response<Body>,
    ) -> (Method, String, serde_json::Value) {
        serve_after(handle, answer, || {}).await
    }

    /// As `serve`, running `meanwhile` once the request has come and before it is answered.
    async fn serve_after(
        handle: &mut Handle,
        answer: Response<Body>,
        meanwhile: impl FnOnce(),
    ) -> (Method, String, serde_json::Value) {
        let (request, send) = handle.next_request().await.expect("a request");
        meanwhile();
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let bytes = http_body_util::BodyExt::collect(request.into_body())
            .await
            .unwrap()
            .to_bytes();
        send.send_response(answer);
        (
            method,
            path,
            serde_json::from_slice(&bytes).unwrap_or_default(),
        )
    }

    fn record() -> ConfigMap {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "r", "namespace": "ns"}}))
            .unwrap()
    }

    #[tokio::test]
    async fn a_create_that_finds_its_object_adopts_it() {
        let (client, mut handle) = client();
        let server = tokio::spawn(async move {
            serve(&mut handle, ok(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"}}))).await;
            serve(&mut handle, status(409, "AlreadyExists")).await;
            serve(&mut handle, status(500, "InternalError")).await;
        });
        let create = || async { applier(client.clone()).create_or_adopt(&record()).await };
        assert_eq!(create().await.unwrap(), Created::New);
        assert_eq!(create().await.unwrap(), Created::Existed);
        assert!(create().await.is_err(), "any other failure is one");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_patch_or_delete_of_what_is_gone_is_done_and_a_delete_names_its_object() {
        let (client, mut handle) = client();
        let apply = applier(client);
        let server = tokio::spawn(async move {
            let (m, path, _) = serve(&mut handle, status(404, "NotFound")).await;
            assert_eq!(
                (m, path.as_str()),
                (Method::PATCH, "/apis/batch/v1/namespaces/ns/jobs/j")
            );
            let (m, _, body) = serve(&mut handle, status(404, "NotFound")).await;
            assert_eq!(m, Method::DELETE);
            assert_eq!(
                body["preconditions"],
                serde_json::json!({"uid": "u1", "resourceVersion": "7"})
            );
            serve(&mut handle, status(409, "Conflict")).await;
        });
        assert!(
            !apply.mark_pv_created("ns", "j").await.unwrap(),
            "the Job is gone"
        );
        let pvs = apply.volumes();
        apply
            .delete(&pvs, "pv", "u1".into(), Some("7".into()))
            .await
            .unwrap();
        let conflict = apply.delete(&pvs, "pv", "u2".into(), None).await;
        assert!(
            conflict.is_err(),
            "a precondition that failed is not done: the next plan decides"
        );
        server.await.unwrap();
    }

    fn provision_job() -> Job {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "provision-c1", "namespace": "ns",
            "labels": {"flex-provisioner.io/action": "provision", "flex-provisioner.io/attempt": "3"},
            "annotations": {ANN_STORAGE_CLASS: "gold"}}}))
        .unwrap()
    }

    /// What the applier created is expected until the cache shows it: a Job for its owner
    /// and, a provisioning Job, in its class's count; a PV only when it was new.
    #[tokio::test]
    async fn what_is_created_is_expected_until_the_cache_shows_it() {
        let (client, mut handle) = client();
        let server = tokio::spawn(async move {
            let (m, path, body) = serve(&mut handle, status(409, "AlreadyExists")).await;
            assert_eq!(
                (m, path.as_str()),
                (Method::POST, "/apis/batch/v1/namespaces/ns/jobs")
            );
            assert_eq!(body["metadata"]["name"], "provision-c1");
            let (_, path, _) = serve(&mut handle, status(409, "AlreadyExists")).await;
            assert_eq!(path, "/api/v1/persistentvolumes");
            serve(&mut handle, ok(serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pvc-c2"}}))).await;
        });
        let apply = applier(client);
        let job = provision_job();
        assert_eq!(
            apply.create_job(&job, "c1").await.unwrap(),
            Created::Existed,
            "adopted"
        );
        assert_eq!(apply.expected.unseen_for("c1", |_| false), Some(3));
        assert_eq!(apply.expected.unseen("gold", &Default::default()), 1);
        let pv: PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pvc-c1"}})).unwrap();
        assert_eq!(
            apply.create_pv(&pv, Some("c1")).await.unwrap(),
            Created::Existed
        );
        assert!(
            !apply.pv_unseen("c1", false),
            "someone else's: the cache judges it"
        );
        let pv: PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pvc-c2"}})).unwrap();
        assert_eq!(
            apply.create_pv(&pv, Some("c2")).await.unwrap(),
            Created::New
        );
        assert!(apply.pv_unseen("c2", false));
        assert!(!apply.pv_unseen("c2", true), "seen");
        server.await.unwrap();
    }

    /// A write made once per run is not sent again; a status patch of a claim gone is done.
    #[tokio::test]
    async fn a_write_once_is_sent_once_and_a_status_patch_of_what_is_gone_is_done() {
        let (client, mut handle) = client();
        let server = tokio::spawn(async move {
            let (m, path, _) = serve(&mut handle, ok(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"}}))).await;
            assert_eq!(
                (m, path.as_str()),
                (Method::POST, "/api/v1/namespaces/ns/configmaps")
            );
            let (m, path, body) = serve(&mut handle, status(404, "NotFound")).await;
            assert_eq!(
                (m, path.as_str()),
                (
                    Method::PATCH,
                    "/api/v1/namespaces/a/persistentvolumeclaims/data/status"
                )
            );
            assert_eq!(body["status"]["phase"], "Bound");
        });
        let apply = applier(client);
        apply.create_once("record/r", &record()).await.unwrap();
        apply.create_once("record/r", &record()).await.unwrap();
        let patch = serde_json::json!({"status": {"phase": "Bound"}});
        let claims = apply.claims("a");
        let there = apply.patch_status(&claims, "data", &patch).await.unwrap();
        assert!(!there, "the claim was gone");
        server.await.unwrap();
    }

    /// A success is counted when it is told, once however often it is planned, and timed
    /// from the claim's creation, both before its event is written (a scrape meanwhile sees
    /// the count and its duration together); a finished volume is counted once, when its
    /// write is sent.
    #[tokio::test]
    async fn what_is_told_is_counted_once_and_a_volume_finished_once() {
        let (client, mut handle) = client();
        let apply = applier(client);
        let counted = apply.metrics.clone();
        let server = tokio::spawn(async move {
            let event = ok(
                serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00.000000Z"}),
            );
            let (m, path, body) = serve_after(&mut handle, event, || {
                let pair = (
                    counted.provision_total.with_label_values(&["gold"]).get(),
                    counted
                        .provision_duration
                        .with_label_values(&["gold"])
                        .get_sample_count(),
                );
                assert_eq!(pair, (1, 1), "counted and timed while the event is written");
            })
            .await;
            assert_eq!(
                (m, path.as_str()),
                (Method::POST, "/apis/events.k8s.io/v1/namespaces/a/events")
            );
            assert_eq!(body["reason"], "ProvisioningSucceeded");
            assert_eq!(body["regarding"]["name"], "data");
            let (m, path, _) = serve(&mut handle, ok(serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pvc-u1"}}))).await;
            assert_eq!(
                (m, path.as_str()),
                (Method::PATCH, "/api/v1/persistentvolumes/pvc-u1")
            );
        });
        let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "a", "uid": "u1",
                         "creationTimestamp": "2026-01-01T00:00:00Z"}}))
        .unwrap();
        let done = flex_core::plan::Notice::normal(
            "provisioned/u1",
            flex_core::plan::reasons::SUCCEEDED,
            "Successfully provisioned volume pvc-u1",
        )
        .counted_as(flex_core::plan::NoticeKind::Provisioned);
        for _ in 0..3 {
            apply
                .tell_claim(&claim, "gold", std::slice::from_ref(&done))
                .await;
        }
        let m = apply.metrics.clone();
        assert_eq!(m.provision_total.with_label_values(&["gold"]).get(), 1);
        let timed = m.provision_duration.with_label_values(&["gold"]);
        assert_eq!(timed.get_sample_count(), 1);
        assert!(
            timed.get_sample_sum() > 0.0,
            "timed from the claim's creation"
        );
        let release = serde_json::json!({"metadata": {"finalizers": null}});
        for _ in 0..2 {
            apply
                .finish_volume("u1", "pvc-u1", &release, "gold", None)
                .await
                .unwrap();
        }
        assert_eq!(m.delete_total.with_label_values(&["gold"]).get(), 1);
        assert_eq!(
            m.delete_duration
                .with_label_values(&["gold"])
                .get_sample_count(),
            0,
            "nothing to time it from"
        );
        server.await.unwrap();
    }

    /// A note is cut by bytes at a character boundary: the API server counts bytes.
    #[test]
    fn a_note_fits_the_api_servers_limit_in_bytes() {
        assert_eq!(tell::note("short"), "short");
        let wide = "\u{1F4BE}".repeat(400); // 4 bytes each: 1,600 bytes, 400 characters
        let cut = tell::note(&wide);
        assert!(cut.len() <= 1000 && cut.len() > 990, "{}", cut.len());
        assert_eq!(cut.len() % 4, 0, "never inside a character");
        let ascii = "x".repeat(5000);
        assert_eq!(tell::note(&ascii).len(), 1000);
    }
}
