//! `union`: several inputs with the same columns, merged into the consumers' input gates. It
//! does not survive planning as a node of its own (see [`super::super::build`]).

use arrow_schema::Schema;

use super::Explained;
use super::{Compiled, Planner, sql_type};
use crate::spec::JobSpec;
use crate::spec::UnionSpec;

/// The union's inputs are all it has (`from:`); their wiring was resolved by the planner.
pub(super) fn plan(p: &mut Planner<'_, '_>, _union: &UnionSpec) -> Option<Compiled> {
    let schema = p.input.clone();
    let first = p.input_def(0).map(|(_, name, _)| name.to_owned());
    for k in 1..p.defs[p.i].inputs.len() {
        let (Some(other), Some((from, name, _))) = (p.input_schema(k), p.input_def(k)) else {
            continue;
        };
        if let Some(diff) = schema_difference(&schema, &other) {
            let (from, name) = (from.to_owned(), name.to_owned());
            let first = first.as_deref().unwrap_or("?");
            p.problems.push(p.src.at_value(
                &from,
                format!("`{name}` does not have the same columns as `{first}`: {diff}"),
            ));
        }
    }
    Some(Compiled::Union { schema })
}

/// Why two schemas differ for a union, if they do.
fn schema_difference(a: &Schema, b: &Schema) -> Option<String> {
    let describe = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), sql_type(f.data_type())))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same = a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type());
    (!same).then(|| format!("({}) versus ({})", describe(a), describe(b)))
}

/// What `weir explain` says the node keeps and what fires it: nothing: it becomes its consumers' input gates.
pub(super) fn explain(_: &UnionSpec, _: &JobSpec) -> Explained {
    Explained::default()
}
