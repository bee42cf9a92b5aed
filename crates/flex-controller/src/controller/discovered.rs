//! Which resource serves each kind of data source the classes list, as discovery last said.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use kube::api::ApiResource;

/// How long an answer of discovery is used: an admin who installs or upgrades the kind's
/// CRD is seen within this, while a burst of claims naming a listed kind costs one
/// discovery, not one each (and the kinds are the classes', so the map stays small).
const DISCOVERY_KEPT: Duration = Duration::from_secs(300);
/// The longest one discovery may take: the claims waiting behind it wait no longer.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// `group/Kind` to its resource (`None`: the group is served without that kind). Held across
/// the discovery itself: the claims of a burst that all miss at once wait for one answer
/// rather than each asking (discovery is rare, and only claims with data sources use it).
#[derive(Default)]
pub struct Discovered(Mutex<HashMap<String, (Instant, Option<ApiResource>)>>);

impl Discovered {
    pub(super) async fn resource(
        &self,
        client: &kube::Client,
        group: &str,
        kind: &str,
    ) -> Result<Option<ApiResource>, String> {
        let key = format!("{group}/{kind}");
        let mut known = self.0.lock().await;
        if let Some((at, resource)) = known.get(&key)
            && at.elapsed() < DISCOVERY_KEPT
        {
            return Ok(resource.clone());
        }
        let discovered =
            tokio::time::timeout(DISCOVERY_TIMEOUT, kube::discovery::group(client, group))
                .await
                .map_err(|_| format!("no answer within {}s", DISCOVERY_TIMEOUT.as_secs()))?;
        // A group the API server does not serve serves none of its kinds (a CRD not
        // installed): said as such, not as a failure to read.
        let resource = match discovered {
            Ok(d) => d.recommended_kind(kind).map(|(r, _)| r),
            Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => None,
            Err(e) => return Err(e.to_string()),
        };
        known.insert(key, (Instant::now(), resource.clone()));
        Ok(resource)
    }
}
