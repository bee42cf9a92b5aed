//! The one place that owns how a write's answer is read: a 404 on a patch or delete means
//! the object is gone (done, nothing to retry), a 409 on a create means it exists (adopted,
//! never duplicated, or, for a PV, judged by the next plan from the cache). Every write
//! carries its precondition where it could race (uid, resourceVersion); the reconcilers
//! call these instead of reading status codes themselves.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What a create found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Created {
    New,
    /// It existed already (made by an earlier reconcile or run, or by someone else).
    Existed,
}

/// An object that is already gone needs no further write: 404 is success, not a failure
/// to retry and warn about.
pub(super) fn gone_is_done<T>(r: Result<T, kube::Error>) -> crate::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A create's answer: 409 means the object exists.
pub(super) fn created<T>(r: Result<T, kube::Error>) -> crate::Result<Created> {
    match r {
        Ok(_) => Ok(Created::New),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::Existed),
        Err(e) => Err(e.into()),
    }
}

/// Creates an object in its own namespace, adopting one that exists.
pub(super) async fn create_or_adopt<K>(client: &Client, object: &K) -> crate::Result<Created>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let ns = object.meta().namespace.clone().unwrap_or_default();
    created(
        Api::<K>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), object)
            .await,
    )
}

/// A merge patch; an object gone meanwhile is done with.
pub(super) async fn patch<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
) -> crate::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    gone_is_done(
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await,
    )
}

/// Deletes the object only while it is the one decided on (its uid, and its
/// resourceVersion when given); one gone meanwhile is done with.
pub(super) async fn delete<K>(
    api: &Api<K>,
    name: &str,
    uid: String,
    resource_version: Option<String>,
) -> crate::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version,
        }),
        ..DeleteParams::background()
    };
    gone_is_done(api.delete(name, &dp).await)
}

/// Marks a provisioning Job as having had its PV, so that plan::orphan never takes it for
/// one whose claim was deleted before a PV was made: before the orphan path creates a PV
/// from it, and before a volume of ours is let go with its storage kept. `false`: the Job
/// is gone.
pub(super) async fn mark_pv_created(
    client: &Client,
    namespace: &str,
    job: &str,
) -> crate::Result<bool> {
    let mark = serde_json::json!({"metadata": {"annotations": {flex_core::names::ANN_PV_CREATED: "true"}}});
    let answer = Api::<Job>::namespaced(client.clone(), namespace)
        .patch(job, &PatchParams::default(), &Patch::Merge(&mark))
        .await;
    match answer {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
    use kube::client::Body;
    use tower_test::mock;

    type Handle = mock::Handle<Request<Body>, Response<Body>>;

    fn client() -> (Client, Handle) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(service, "default"), handle)
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
        let (request, send) = handle.next_request().await.expect("a request");
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
        assert_eq!(
            create_or_adopt(&client, &record()).await.unwrap(),
            Created::New
        );
        assert_eq!(
            create_or_adopt(&client, &record()).await.unwrap(),
            Created::Existed
        );
        assert!(
            create_or_adopt(&client, &record()).await.is_err(),
            "any other failure is one"
        );
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_patch_or_delete_of_what_is_gone_is_done_and_a_delete_names_its_object() {
        let (client, mut handle) = client();
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
            !mark_pv_created(&client, "ns", "j").await.unwrap(),
            "the Job is gone"
        );
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        delete(&pvs, "pv", "u1".into(), Some("7".into()))
            .await
            .unwrap();
        let conflict = delete(&pvs, "pv", "u2".into(), None).await;
        assert!(
            conflict.is_err(),
            "a precondition that failed is not done: the next plan decides"
        );
        server.await.unwrap();
    }
}
