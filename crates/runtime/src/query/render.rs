//! Rendering stored state as JSON: a key's columns, its window, its aggregates by name.

use weir_state::Window;
use weir_state::codec::StateValue;

use super::declare::{QueryableNode, QueryableState, StateShape};
use super::{EntryValue, LookupEntry, SessionEntry, WindowBounds};
use crate::operators::accumulators::{Acc, Scalar};

impl QueryableNode {
    /// One entry of an answer: its key, its window (if namespaced by one) and its value.
    pub(super) fn render(
        &self,
        state: &QueryableState,
        entry: &weir_state::QueryEntry,
        subtask: usize,
    ) -> Result<LookupEntry, String> {
        let key = match self.keys.decode(&entry.key)? {
            serde_json::Value::Object(columns) => columns,
            other => return Err(format!("a key decoded to {other}, not to its columns")),
        };
        let (window, value) = match state.shape {
            StateShape::Accumulators => {
                let accs = Vec::<Acc>::from_bytes(&entry.value)?;
                (None, EntryValue::Aggregates(self.aggregates_json(&accs)))
            }
            StateShape::Windows => {
                let window = Window::from_namespace(&entry.namespace)?;
                let accs = Vec::<Acc>::from_bytes(&entry.value)?;
                (
                    Some(WindowBounds {
                        start: window.start,
                        end: window.end,
                    }),
                    EntryValue::Aggregates(self.aggregates_json(&accs)),
                )
            }
            StateShape::Sessions => {
                let sessions = Vec::<(i64, i64, Vec<Acc>)>::from_bytes(&entry.value)?;
                let list = sessions
                    .iter()
                    .map(|(start, end, accs)| SessionEntry {
                        window: WindowBounds {
                            start: *start,
                            end: *end,
                        },
                        value: self.aggregates_json(accs),
                    })
                    .collect();
                (None, EntryValue::Sessions(list))
            }
        };
        Ok(LookupEntry {
            key,
            window,
            value,
            subtask,
        })
    }

    fn aggregates_json(&self, accs: &[Acc]) -> serde_json::Map<String, serde_json::Value> {
        self.aggregates
            .iter()
            .zip(accs)
            .map(|(name, acc)| (name.clone(), scalar_json(&acc.result())))
            .collect()
    }
}

pub(super) fn scalar_json(s: &Scalar) -> serde_json::Value {
    match s {
        Scalar::Null => serde_json::Value::Null,
        Scalar::Int(v) | Scalar::Timestamp(v) => (*v).into(),
        Scalar::Float(v) => serde_json::Number::from_f64(*v)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        Scalar::Str(v) => v.clone().into(),
        Scalar::Bool(v) => (*v).into(),
    }
}
