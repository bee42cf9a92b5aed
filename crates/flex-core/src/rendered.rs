//! The admin's templates rendered for one claim: parameters and argv entries.
//!
//! Rendering is isolated so that no ConfigMap or claim can crash, hang or exhaust the
//! controller: one `Budget` (output bytes across every value, wall time) is spent by all the
//! claim's templates and checked while they render; a panic of the engine is contained and
//! becomes an error; recursion is impossible (no partials, nesting at most 8, checked when
//! the template is compiled). The work is CPU-bound and bounded by `MAX_RENDER_TIME`: the
//! controller runs it off its async threads (`plan::claim::Prepared`).

use std::collections::BTreeMap;

use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::ClassConfig;
use crate::names::pv_name;
use crate::template::{self, Budget, TemplateError};

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
    pub expand_args: Option<Vec<String>>,
}

impl Rendered {
    /// The `PARAMETERS` JSON object.
    pub fn parameters_json(&self) -> String {
        serde_json::to_string(&self.parameters).unwrap_or_else(|_| "{}".into())
    }
}

/// Renders every template of the class for one claim (parameters, `args`,
/// `deprovision-args`), within one budget; the first failure names its key. Never panics.
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
    // One budget for the whole claim: every value renders within what is left of it.
    let budget = std::cell::RefCell::new(Budget::new());
    let one = |key: &str, source: &str| {
        template::render_within(source, &ctx, &mut budget.borrow_mut()).map_err(|error| {
            RenderFailure {
                key: key.to_owned(),
                error,
            }
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
        expand_args: list("expand-args", &p.expand_args)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_static<T: Send + Sync + 'static>() {}

    /// What crosses into `spawn_blocking` and back must be owned and sendable.
    #[test]
    fn render_types_can_move_to_a_blocking_thread() {
        send_static::<Result<Rendered, RenderFailure>>();
        send_static::<ClassConfig>();
    }
}
