//! Handlebars templates of ConfigMap parameters: a strict registry (a missing variable is an
//! error), no HTML escaping (values become env values and argv entries, never markup), the
//! claim context, helpers and static checks.

mod budget;
mod context;
mod each;
mod helpers;
mod limits;
mod lint;

pub use budget::{Budget, Exceeded, MAX_RENDER_TIME, MAX_TOTAL_OUTPUT_BYTES};
pub use context::{Context, build as build_context};
pub use helpers::{BUILTIN_HELPERS, HELPERS};
pub use limits::{MAX_EXPRESSIONS, MAX_NESTING, MAX_OUTPUT_BYTES, MAX_SOURCE_BYTES};
pub use lint::{Field, Finding, SCHEMA, lint, writes_slash};

use std::sync::OnceLock;

use handlebars::template::Template;
use handlebars::{Handlebars, RenderErrorReason, no_escape};

use budget::Budgeted;

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
    /// The engine panicked; contained, and reported as a bug.
    #[error("{0}")]
    Internal(String),
}

impl TemplateError {
    /// A label from a fixed set, safe to use in metrics.
    pub fn category(&self) -> &'static str {
        match self {
            TemplateError::Syntax(_) => "syntax",
            TemplateError::MissingVariable(_) => "missing-variable",
            TemplateError::Render(_) => "render",
            TemplateError::Unsupported(_) => "unsupported",
            TemplateError::Limit(_) => "limit",
            TemplateError::Internal(_) => "internal",
        }
    }
}

fn registry() -> &'static Handlebars<'static> {
    static REGISTRY: OnceLock<Handlebars<'static>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Handlebars::new();
        r.set_strict_mode(true);
        r.register_escape_fn(no_escape);
        helpers::register(&mut r);
        // Ours charges the budget on every iteration (see `each`).
        r.register_helper("each", Box::new(each::Each));
        r
    })
}

/// Compiles a template, reporting syntax errors with their position. A panic of the parser
/// is an error too: a ConfigMap must never take the controller down.
pub fn compile(source: &str) -> Result<Template, TemplateError> {
    limits::check_source(source)?;
    let template = contained(|| Template::compile(source))?.map_err(|e| {
        let mut msg = e.reason().to_string();
        if let Some((line, col)) = e.pos() {
            msg = format!("{msg} at line {line}, column {col}");
        }
        TemplateError::Syntax(msg)
    })?;
    limits::check_structure(&template)?;
    Ok(template)
}

/// Renders a template against a claim's context with a budget of its own (one value).
pub fn render(source: &str, context: &Context) -> Result<String, TemplateError> {
    render_within(source, context, &mut Budget::new())
}

/// Renders a template against a claim's context, spending `budget`, which is shared by
/// every template of the claim. The template is compiled (and checked) once, and that
/// compiled form is what renders. Never panics: a panic while rendering is an error.
pub fn render_within(
    source: &str,
    context: &Context,
    budget: &mut Budget,
) -> Result<String, TemplateError> {
    use handlebars::Renderable;
    let template = compile(source)?;
    let data =
        handlebars::Context::wraps(&context.0).map_err(|e| TemplateError::Render(e.to_string()))?;
    let _installed = budget::Installed::new(budget);
    let mut out = Budgeted::default();
    let result = contained(|| {
        template.render(
            registry(),
            &data,
            &mut handlebars::RenderContext::new(None),
            &mut out,
        )
    })?;
    if let Some(e) = out.exceeded {
        return Err(TemplateError::Limit(e.message()));
    }
    result.map_err(|e| match e.reason() {
        RenderErrorReason::MissingVariable(Some(path)) => {
            TemplateError::MissingVariable(path.clone())
        }
        RenderErrorReason::MissingVariable(None) => {
            TemplateError::MissingVariable("a variable".into())
        }
        RenderErrorReason::TemplateError(t) => TemplateError::Syntax(t.to_string()),
        // A helper (`each`, `replace`...) stopped at a limit.
        RenderErrorReason::Other(msg) if budget::tripped().is_some() => {
            TemplateError::Limit(msg.clone())
        }
        other => TemplateError::Render(other.to_string()),
    })?;
    Ok(out.text)
}

/// Runs `f`, turning a panic into an error. Unwind safety: on a panic, everything `f`
/// touched (the output, the render context) is dropped unused, and the shared registry is
/// only read.
fn contained<T>(f: impl FnOnce() -> T) -> Result<T, TemplateError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        TemplateError::Internal(format!(
            "the template engine failed ({why}); this is a bug of flex-provisioner, please report it with the template"
        ))
    })
}

#[cfg(test)]
mod tests;
