//! The admin's templates rendered for one claim: parameters and argv entries.

use std::collections::BTreeMap;

use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::ClassConfig;
use crate::names::pv_name;
use crate::template::{self, TemplateError};

/// A template that failed for this claim, with the key it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parameter `{key}`: {error}")]
pub struct RenderFailure {
    pub key: String,
    pub error: TemplateError,
}

/// Everything templated, rendered. Values are only ever used as env values or single argv
/// entries, never re-parsed by a shell.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rendered {
    /// Parameter key -> rendered value.
    pub parameters: BTreeMap<String, String>,
    pub args: Option<Vec<String>>,
    pub deprovision_args: Option<Vec<String>>,
}

impl Rendered {
    /// The `PARAMETERS` JSON object.
    pub fn parameters_json(&self) -> String {
        serde_json::to_string(&self.parameters).unwrap_or_else(|_| "{}".into())
    }
}

pub fn render_for_claim(
    config: &ClassConfig,
    claim: &ClaimRequest,
    node: Option<&NodeInfo>,
    provisioner_name: &str,
) -> Result<Rendered, RenderFailure> {
    let ctx = template::build_context(
        claim,
        &config.class,
        node,
        provisioner_name,
        &pv_name(&claim.uid),
    );
    let one = |key: &str, source: &str| {
        template::render(source, &ctx).map_err(|error| RenderFailure {
            key: key.to_owned(),
            error,
        })
    };
    let list =
        |key: &str, entries: &Option<Vec<String>>| -> Result<Option<Vec<String>>, RenderFailure> {
            entries
                .as_ref()
                .map(|e| {
                    e.iter()
                        .enumerate()
                        .map(|(i, s)| one(&format!("{key}[{i}]"), s))
                        .collect()
                })
                .transpose()
        };
    let p = &config.provisioner;
    let mut parameters = BTreeMap::new();
    for (key, param) in &p.parameters {
        parameters.insert(key.clone(), one(key, &param.template)?);
    }
    Ok(Rendered {
        parameters,
        args: list("args", &p.args)?,
        deprovision_args: list("deprovision-args", &p.deprovision_args)?,
    })
}
