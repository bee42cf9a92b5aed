//! User impersonation (`Impersonate-User` / `Impersonate-Group` headers, what kubectl's
//! `--as` and `--as-group` send), as the API server's impersonation filter does it: the
//! requester needs the `impersonate` verb on `users`, `groups` or `serviceaccounts`, and
//! the request then runs as the impersonated user.

use super::api::Api;
use super::auth::UserInfo;
use super::rbac::{self, Attributes};
use super::status::ApiError;

const SA_PREFIX: &str = "system:serviceaccount:";

fn check(api: &Api, requester: &UserInfo, a: Attributes) -> Result<(), ApiError> {
    let d = rbac::authorize(api, requester, &a);
    if d.allowed {
        Ok(())
    } else {
        Err(rbac::forbidden(requester, &a, &d.reason))
    }
}

/// The user a request runs as: `requester`, or whom it impersonates when it may.
pub fn apply(
    api: &Api,
    requester: UserInfo,
    user: Option<&str>,
    groups: &[String],
) -> Result<UserInfo, ApiError> {
    let Some(name) = user.filter(|u| !u.is_empty()) else {
        if groups.is_empty() {
            return Ok(requester);
        }
        return Err(ApiError::bad_request(format!(
            "requested [{}] without impersonating a user",
            groups
                .iter()
                .map(|g| format!("Impersonate-Group: {g}"))
                .collect::<Vec<_>>()
                .join(" ")
        )));
    };
    let impersonate = |resource: &str, namespace: &str, name: &str| Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Default::default()
    };
    let mut user = match name.strip_prefix(SA_PREFIX).and_then(|r| r.split_once(':')) {
        Some((ns, sa)) => {
            check(api, &requester, impersonate("serviceaccounts", ns, sa))?;
            let mut u = UserInfo::service_account(ns, sa, "");
            // Set again below, after any requested groups, as the filter does.
            u.groups.retain(|g| g != "system:authenticated");
            u
        }
        None => {
            check(api, &requester, impersonate("users", "", name))?;
            UserInfo {
                name: name.to_owned(),
                groups: Vec::new(),
                service_account: None,
            }
        }
    };
    for g in groups {
        check(api, &requester, impersonate("groups", "", g))?;
        user.groups.push(g.clone());
    }
    if user.name != "system:anonymous" && !user.in_group("system:authenticated") {
        user.groups.push("system:authenticated".into());
    }
    Ok(user)
}
