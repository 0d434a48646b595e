//! `key-by`: key expressions that partition the consumers' input edges by hash. It does not
//! survive planning as a node of its own (see [`super::super::build`]).

use std::sync::Arc;

use arrow_schema::Schema;
use sqlparser::ast::SelectItem;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::Explained;
use super::{Compiled, Planner};
use crate::expr::Expr;
use crate::keys::KeySelector;
use crate::spec::JobSpec;
use crate::spec::KeyBySpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, k: &KeyBySpec) -> Option<Compiled> {
    let schema = p.input.clone();
    let mut exprs = Vec::new();
    let mut names = Vec::new();
    for (n, key) in k.keys.iter().enumerate() {
        let key_at = format!("keys/{n}");
        match compile_key(key, &schema) {
            Ok((name, e)) => {
                if names.contains(&name) {
                    p.problem(
                        &key_at,
                        format!("two keys are named `{name}`; rename one with `AS`"),
                    );
                }
                names.push(name);
                exprs.push(e);
            }
            Err(message) => p.problem(&key_at, message),
        }
    }
    Some(Compiled::KeyBy {
        schema,
        keys: Arc::new(KeySelector::new(exprs, names, p.key_groups)),
    })
}

/// A key: `expr` or `expr AS name`; a plain column names itself.
fn compile_key(sql: &str, schema: &Schema) -> Result<(String, Expr), String> {
    crate::expr::check_size(sql).map_err(|e| e.to_string())?;
    let item = Parser::new(&GenericDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| {
            let item = p.parse_select_item()?;
            match p.peek_token().token {
                sqlparser::tokenizer::Token::EOF => Ok(item),
                other => Err(sqlparser::parser::ParserError::ParserError(format!(
                    "unexpected `{other}` after the key"
                ))),
            }
        })
        .map_err(|e| format!("cannot parse the key `{sql}`: {e}"))?;
    let (ast, alias) = match item {
        SelectItem::UnnamedExpr(e) => (e, None),
        SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value)),
        _ => {
            return Err(format!(
                "`{sql}` is not a key: write a column or `expression AS name`"
            ));
        }
    };
    let e = Expr::compile_ast(&ast, schema).map_err(|e| e.to_string())?;
    let name = match (alias, e.as_column()) {
        (Some(a), _) => a,
        (None, Some(_)) => e.default_name(),
        (None, None) => return Err(format!("name the key `{sql}`: write `{sql} AS name`")),
    };
    Ok((name, e))
}

/// What `weir explain` says the node keeps and what fires it: nothing: it becomes the hash exchange of its consumers' inputs.
pub(super) fn explain(_: &KeyBySpec, _: &JobSpec) -> Explained {
    Explained::default()
}
