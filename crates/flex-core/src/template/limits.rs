//! What a template may do, so that no ConfigMap and no claim can crash, hang or exhaust the
//! controller: no partials, inline partials or decorators (they allow recursion), bounded
//! nesting and size, and an output budget enforced while rendering.

use handlebars::template::{Parameter, Template, TemplateElement};

use super::TemplateError;

/// Largest template source, in bytes: far beyond any real parameter, small enough that
/// checking one stays quick.
pub const MAX_SOURCE_BYTES: usize = 16 * 1024;
/// Deepest nesting of blocks (`{{#each}}` in `{{#if}}`...) and of subexpressions.
pub const MAX_NESTING: usize = 8;
/// Largest rendered value of one parameter, in bytes (values become env vars and arguments).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// Checks the source before the parser sees it (its recursion follows the nesting).
pub fn check_source(source: &str) -> Result<(), TemplateError> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(TemplateError::Limit(format!(
            "the template is {} bytes; at most {MAX_SOURCE_BYTES} are allowed",
            source.len()
        )));
    }
    let mut depth = 0usize;
    for c in source.chars() {
        match c {
            '(' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(TemplateError::Limit(format!(
                        "subexpressions are nested more than {MAX_NESTING} deep"
                    )));
                }
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Checks a compiled template: no partials or decorators, blocks at most `MAX_NESTING` deep.
pub fn check_structure(template: &Template) -> Result<(), TemplateError> {
    walk(&template.elements, 0)
}

fn walk(elements: &[TemplateElement], depth: usize) -> Result<(), TemplateError> {
    for element in elements {
        match element {
            TemplateElement::PartialExpression(_) | TemplateElement::PartialBlock(_) => {
                return Err(TemplateError::Unsupported(
                    "partials (`{{> name}}`, `{{#> name}}`)".into(),
                ));
            }
            TemplateElement::DecoratorExpression(_) | TemplateElement::DecoratorBlock(_) => {
                return Err(TemplateError::Unsupported(
                    "decorators and inline partials (`{{* ...}}`, `{{#* inline}}`)".into(),
                ));
            }
            TemplateElement::HelperBlock(ht) => {
                if depth + 1 > MAX_NESTING {
                    return Err(TemplateError::Limit(format!(
                        "blocks are nested more than {MAX_NESTING} deep"
                    )));
                }
                if name_is_dynamic(&ht.name) {
                    return Err(TemplateError::Unsupported(
                        "blocks whose helper is chosen at render time".into(),
                    ));
                }
                for t in [&ht.template, &ht.inverse].into_iter().flatten() {
                    walk(&t.elements, depth + 1)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn name_is_dynamic(p: &Parameter) -> bool {
    matches!(p, Parameter::Subexpression(_))
}

/// An output that refuses to grow past `MAX_OUTPUT_BYTES`, so rendering stops as soon as the
/// budget is spent rather than after building an arbitrarily large value.
#[derive(Default)]
pub struct Budgeted(pub String);

impl handlebars::Output for Budgeted {
    fn write(&mut self, seg: &str) -> std::io::Result<()> {
        if self.0.len() + seg.len() > MAX_OUTPUT_BYTES {
            return Err(std::io::Error::other(OVER_BUDGET));
        }
        self.0.push_str(seg);
        Ok(())
    }
}

/// The message of the writer's error, recognised when mapping render errors.
pub const OVER_BUDGET: &str = "rendered value over budget";
