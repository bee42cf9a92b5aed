//! Which resource serves each kind of data source the classes list, as discovery last said.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::ApiResource;

/// How long an answer of discovery is used: an admin who installs or upgrades the kind's
/// CRD is seen within this, while a burst of claims naming a listed kind costs one
/// discovery, not one each (and the kinds are the classes', so the map stays small).
const DISCOVERY_KEPT: Duration = Duration::from_secs(300);

/// `group/Kind` to its resource (`None`: the group is served without that kind).
#[derive(Default)]
pub struct Discovered(Mutex<HashMap<String, (Instant, Option<ApiResource>)>>);

impl Discovered {
    pub(super) async fn resource(
        &self,
        client: &kube::Client,
        group: &str,
        kind: &str,
    ) -> Result<Option<ApiResource>, kube::Error> {
        let key = format!("{group}/{kind}");
        let known = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let Some((at, resource)) = known
            && at.elapsed() < DISCOVERY_KEPT
        {
            return Ok(resource);
        }
        let resource = kube::discovery::group(client, group)
            .await?
            .recommended_kind(kind)
            .map(|(r, _)| r);
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (Instant::now(), resource.clone()));
        Ok(resource)
    }
}
