//! Resolving column names against the input schema, with "did you mean" suggestions.

use arrow_schema::Schema;

use super::compile::Origin;
use super::error::ExprError;
use super::node::Node;
use super::types::SqlType;

/// How many column names an unknown-column error lists before eliding the rest.
const LISTED_COLUMNS: usize = 30;

/// Finds `name` in `schema`: the exact name first, then a unique case-insensitive match.
///
/// Names may contain dots (`bid.price` is one column), so compound identifiers arrive here already
/// joined.
pub(crate) fn resolve(schema: &Schema, name: &str, origin: &Origin) -> Result<Node, ExprError> {
    let fields = schema.fields();
    let index = match fields.iter().position(|field| field.name() == name) {
        Some(index) => index,
        None => {
            let matches: Vec<usize> = fields
                .iter()
                .enumerate()
                .filter(|(_, field)| field.name().eq_ignore_ascii_case(name))
                .map(|(index, _)| index)
                .collect();
            match matches.as_slice() {
                [index] => *index,
                [] => return Err(unknown(schema, name, origin)),
                several => {
                    let candidates = several
                        .iter()
                        .map(|&i| format!("\"{}\"", fields[i].name()))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(origin.type_error(format!(
                        "column name \"{name}\" is ambiguous: it matches {candidates} ignoring \
                         case; write the exact name in double quotes"
                    )));
                }
            }
        }
    };
    let field = &fields[index];
    let Some(ty) = SqlType::from_arrow(field.data_type()) else {
        return Err(origin.type_error(format!(
            "column \"{}\" has Arrow type {}, which expressions do not support (INT = Int64, \
             FLOAT = Float64, STRING = Utf8, BOOL = Boolean, TIMESTAMP = Timestamp(ms))",
            field.name(),
            field.data_type()
        )));
    };
    Ok(Node::column(
        index,
        ty,
        field.data_type().clone(),
        field.name().clone(),
    ))
}

fn unknown(schema: &Schema, name: &str, origin: &Origin) -> ExprError {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut available = names
        .iter()
        .take(LISTED_COLUMNS)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED_COLUMNS {
        available.push_str(&format!(", ... ({} more)", names.len() - LISTED_COLUMNS));
    }
    if names.is_empty() {
        available.push_str("(none)");
    }
    ExprError::UnknownColumn {
        name: name.to_owned(),
        suggestion: suggest(&names, name).map(str::to_owned),
        available,
        line: origin.line,
        column: origin.column,
    }
}

/// The column `name` most likely meant: a unique column whose last dotted segment is `name`
/// (`price` for `bid.price`), else the nearest name by edit distance if it is close enough to
/// be a typo.
pub(crate) fn suggest<'a>(names: &[&'a str], name: &str) -> Option<&'a str> {
    let lowered = name.to_lowercase();
    let suffix = format!(".{lowered}");
    let mut by_suffix = names
        .iter()
        .filter(|candidate| candidate.to_lowercase().ends_with(&suffix));
    if let (Some(only), None) = (by_suffix.next(), by_suffix.next()) {
        return Some(only);
    }
    let budget = 2.max(lowered.chars().count() / 3);
    names
        .iter()
        .map(|candidate| {
            (
                edit_distance(&candidate.to_lowercase(), &lowered),
                *candidate,
            )
        })
        .filter(|(distance, _)| *distance <= budget)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("price", "prise"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestion_prefers_the_dotted_column_ending_in_the_name() {
        let names = ["auction", "bid.price", "bidder"];
        assert_eq!(suggest(&names, "price"), Some("bid.price"));
        assert_eq!(suggest(&names, "auctoin"), Some("auction"));
        assert_eq!(suggest(&names, "zzzzzz"), None);
    }
}
