//! What a template may do, so that no ConfigMap and no claim can crash, hang or exhaust the
//! controller: no partials, inline partials or decorators (they allow recursion), bounded
//! nesting and size. The budget enforced while rendering is in `budget`.

use handlebars::template::{Parameter, Template, TemplateElement};

use super::TemplateError;

/// Largest template source, in bytes: far beyond any real parameter, small enough that
/// checking one stays quick.
pub const MAX_SOURCE_BYTES: usize = 16 * 1024;
/// Most expressions (`{{...}}`) in one template. The parser's time grows with expressions
/// times length, so both are bounded before it runs; real parameters use a handful.
pub const MAX_EXPRESSIONS: usize = 256;
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
    let expressions = source.matches("{{").count();
    if expressions > MAX_EXPRESSIONS {
        return Err(TemplateError::Limit(format!(
            "the template has {expressions} expressions (`{{{{...}}}}`); at most {MAX_EXPRESSIONS} are allowed"
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
                if matches!(ht.name, Parameter::Subexpression(_)) {
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
