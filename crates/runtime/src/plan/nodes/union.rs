//! `union`: several inputs with the same columns, merged into the consumers' input gates. It
//! does not survive planning as a node of its own (see [`super::super::build`]).

use arrow_schema::Schema;

use super::Explained;
use super::{Compiled, Planner, sql_type};
use crate::changelog::{ChangelogMode, RowKind};
use crate::spec::JobSpec;
use crate::spec::UnionSpec;

/// The union's inputs are all it has (`from:`); their wiring was resolved by the planner.
pub(super) fn plan(p: &mut Planner<'_, '_>, _union: &UnionSpec) -> Option<Compiled> {
    let mut schema = p.input.clone();
    let first = p.input_def(0).map(|(_, name, _)| name.to_owned());
    for k in 1..p.defs[p.i].inputs.len() {
        let (Some(other), Some((from, name, _))) = (p.input_schema(k), p.input_def(k)) else {
            continue;
        };
        let (mine, theirs) = (ChangelogMode::of(&schema), ChangelogMode::of(&other));
        if mine.is_append() != theirs.is_append() {
            let (from, name) = (from.to_owned(), name.to_owned());
            let first = first.as_deref().unwrap_or("?");
            let (updating, append) = if theirs.is_append() {
                (first, name.as_str())
            } else {
                (name.as_str(), first)
            };
            p.problems.push(p.src.at_value(
                &from,
                format!(
                    "`{updating}` is an updating stream and `{append}` is append-only: a union \
                     merges streams of one kind; aggregate the append-only one too, or union \
                     before the aggregate"
                ),
            ));
            continue;
        }
        if !mine.is_append() {
            // Both updating: any kind of either, and a key only if both have it.
            let kinds: Vec<RowKind> = RowKind::ALL
                .into_iter()
                .filter(|k| mine.has(*k) || theirs.has(*k))
                .collect();
            let key = (mine.key() == theirs.key())
                .then(|| mine.key().map(<[String]>::to_vec))
                .flatten();
            schema = ChangelogMode::updating(&kinds, key).apply(&schema);
        }
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
