//! `each`, as Handlebars' own but charging the rendering budget on every iteration.
//!
//! `each` is the only helper that repeats work, and an iteration whose body writes nothing
//! (`{{#each a}}{{#each a}}{{/each}}{{/each}}`) would never reach the budgeted `Output`: the
//! clock must be checked here, or nested loops over 2,000 annotations run for hours. The
//! body follows handlebars 6.4 `helper_each.rs` (MIT), with the same block context, local
//! variables (`@index`, `@key`, `@first`, `@last`) and block parameters.

use handlebars::{
    BlockContext, BlockParams, Context, Handlebars, Helper, HelperDef, HelperResult, Output,
    RenderContext, RenderError, RenderErrorReason, Renderable, to_json,
};
use serde_json::Value;

use super::budget;

pub struct Each;

/// The block of the loop: a path into the context when the value has one, else the value.
fn block_for<'rc>(param: &handlebars::PathAndJson<'rc>) -> BlockContext<'rc> {
    let mut block = BlockContext::new();
    match param.context_path() {
        Some(path) => block.base_path_mut().clone_from(path),
        None => block.set_base_value(param.value().clone()),
    }
    block
}

/// Points the block at one item, and binds the block parameters (`as |item key|`).
fn enter_item<'rc>(
    block: &mut BlockContext<'rc>,
    h: &Helper<'rc>,
    base: Option<&Vec<String>>,
    (first, key, item): (bool, &Value, &Value),
    segment: String,
) -> Result<(), RenderError> {
    match base {
        Some(p) if first => {
            let mut path = p.clone();
            path.push(segment);
            *block.base_path_mut() = path;
        }
        Some(_) => {
            if let Some(last) = block.base_path_mut().last_mut() {
                *last = segment;
            }
        }
        None => block.set_base_value(item.clone()),
    }
    let mut params = BlockParams::new();
    let item_name = h.block_param().or(h.block_param_pair().map(|(v, _)| v));
    if let Some(name) = item_name {
        if base.is_some() {
            params.add_path(name, Vec::new())?;
        } else {
            params.add_value(name, item.clone())?;
        }
        if let Some((_, key_name)) = h.block_param_pair() {
            params.add_value(key_name, key.clone())?;
        }
        block.set_block_params(params);
    }
    Ok(())
}

fn over_budget(e: budget::Exceeded) -> RenderError {
    RenderErrorReason::Other(e.message()).into()
}

impl HelperDef for Each {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        r: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let value = h
            .param(0)
            .ok_or(RenderErrorReason::ParamNotFoundForIndex("each", 0))?;
        let Some(t) = h.template() else {
            return Ok(());
        };
        // Items with their key (`@index` for lists, `@key` for objects).
        let items: Vec<(Option<&String>, &Value)> = match value.value() {
            Value::Array(list) if !list.is_empty() || h.inverse().is_none() => {
                list.iter().map(|v| (None, v)).collect()
            }
            Value::Object(obj) if !obj.is_empty() || h.inverse().is_none() => {
                obj.iter().map(|(k, v)| (Some(k), v)).collect()
            }
            _ => {
                return if let Some(inverse) = h.inverse() {
                    inverse.render(r, ctx, rc, out)
                } else if r.strict_mode() {
                    Err(RenderError::strict_error(value.relative_path()))
                } else {
                    Ok(())
                };
            }
        };
        rc.push_block(block_for(value));
        let base = value.context_path();
        let len = items.len();
        for (i, (key, item)) in items.into_iter().enumerate() {
            budget::charge(0).map_err(over_budget)?;
            if let Some(block) = rc.block_mut() {
                let first = i == 0;
                block.set_local_var("first", to_json(first));
                block.set_local_var("last", to_json(i + 1 == len));
                block.set_local_var("index", to_json(i));
                let (key_json, segment) = match key {
                    Some(k) => {
                        block.set_local_var("key", to_json(k));
                        (to_json(k), k.clone())
                    }
                    None => (to_json(i), i.to_string()),
                };
                enter_item(block, h, base, (first, &key_json, item), segment)?;
            }
            t.render(r, ctx, rc, out)?;
        }
        rc.pop_block();
        Ok(())
    }
}
