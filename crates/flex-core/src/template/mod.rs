//! Handlebars templates of ConfigMap parameters: a strict registry (a missing variable is an
//! error), no HTML escaping (values become env values and argv entries, never markup), the
//! claim context, helpers and static checks.

mod context;
mod helpers;
mod limits;
mod lint;

pub use context::{Context, build as build_context};
pub use helpers::{BUILTIN_HELPERS, HELPERS};
pub use limits::{MAX_NESTING, MAX_OUTPUT_BYTES, MAX_SOURCE_BYTES};
pub use lint::{Field, Finding, SCHEMA, lint};

use std::sync::OnceLock;

use handlebars::template::Template;
use handlebars::{Handlebars, RenderErrorReason, no_escape};

/// Why a template cannot be compiled or rendered; the message names the variable or the
/// line and column so the admin can find it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template syntax error: {0}")]
    Syntax(String),
    #[error("the template uses `{0}`, which this claim does not have")]
    MissingVariable(String),
    #[error("{0}")]
    Render(String),
    /// A feature templates may not use here.
    #[error("the template uses {0}, which parameters may not use")]
    Unsupported(String),
    /// A size, nesting or output limit.
    #[error("{0}")]
    Limit(String),
}

fn registry() -> &'static Handlebars<'static> {
    static REGISTRY: OnceLock<Handlebars<'static>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Handlebars::new();
        r.set_strict_mode(true);
        r.register_escape_fn(no_escape);
        helpers::register(&mut r);
        r
    })
}

/// Compiles a template, reporting syntax errors with their position.
pub fn compile(source: &str) -> Result<Template, TemplateError> {
    limits::check_source(source)?;
    let template = Template::compile(source).map_err(|e| {
        let mut msg = e.reason().to_string();
        if let Some((line, col)) = e.pos() {
            msg = format!("{msg} at line {line}, column {col}");
        }
        TemplateError::Syntax(msg)
    })?;
    limits::check_structure(&template)?;
    Ok(template)
}

/// Renders a template against a claim's context, within the output budget. The template
/// is compiled (and checked) once, and that compiled form is what renders.
pub fn render(source: &str, context: &Context) -> Result<String, TemplateError> {
    use handlebars::Renderable;
    let template = compile(source)?;
    let data = handlebars::Context::wraps(context.as_json())
        .map_err(|e| TemplateError::Render(e.to_string()))?;
    let mut out = limits::Budgeted::default();
    template
        .render(
            registry(),
            &data,
            &mut handlebars::RenderContext::new(None),
            &mut out,
        )
        .map_err(|e| match e.reason() {
            RenderErrorReason::MissingVariable(Some(path)) => {
                TemplateError::MissingVariable(path.clone())
            }
            RenderErrorReason::MissingVariable(None) => {
                TemplateError::MissingVariable("a variable".into())
            }
            RenderErrorReason::TemplateError(t) => TemplateError::Syntax(t.to_string()),
            RenderErrorReason::IOError(io) if io.to_string() == limits::OVER_BUDGET => {
                TemplateError::Limit(format!(
                    "the rendered value is over {MAX_OUTPUT_BYTES} bytes"
                ))
            }
            other => TemplateError::Render(other.to_string()),
        })?;
    Ok(out.0)
}

#[cfg(test)]
mod tests;
