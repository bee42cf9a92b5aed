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
    /// The claim's directory in its class's `volume-base` (`volume-directory`).
    pub volume_directory: Option<String>,
}

impl Rendered {
    /// Where the claim's volume lives, for a class with `volume-base`.
    pub fn volume(&self, config: &ClassConfig) -> Option<crate::recipe::VolumeDirectory> {
        let layout = config.provisioner.volume_layout.as_ref()?;
        Some(crate::recipe::VolumeDirectory {
            base: layout.base.clone(),
            directory: self.volume_directory.clone()?,
        })
    }

    /// What a report for this claim may name: the class's declarations, or exactly the
    /// claim's directory with `volume-base`.
    pub fn allowed_volumes(&self, config: &ClassConfig) -> crate::config::AllowedVolumes {
        let p = &config.provisioner;
        let exact = self
            .volume(config)
            .and_then(|dir| crate::isolation::exact_volume(p.pod_template.as_ref()?, &dir));
        p.allowed_volumes.clone().with_exact(exact)
    }

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
    let failed = |key: &str, error| RenderFailure {
        key: key.to_owned(),
        error,
    };
    let one = |key: &str, source: &str| {
        template::render_within(source, &ctx, &mut budget.borrow_mut()).map_err(|e| failed(key, e))
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
    let parameters = (p.parameters.iter())
        .map(|(key, param)| Ok((key.clone(), one(key, param)?)))
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let volume_directory = p
        .volume_layout
        .as_ref()
        .map(|layout| {
            let key = crate::config::volume_layout::VOLUME_DIRECTORY_KEY;
            let directory = one(key, &layout.directory)?;
            match crate::isolation::directory_problem(&directory) {
                None => Ok(directory),
                Some(why) => Err(failed(key, TemplateError::Render(why))),
            }
        })
        .transpose()?;
    Ok(Rendered {
        parameters,
        args: list("args", &p.args)?,
        deprovision_args: list("deprovision-args", &p.deprovision_args)?,
        expand_args: list("expand-args", &p.expand_args)?,
        volume_directory,
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
