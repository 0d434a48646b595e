//! Rendering stored state as JSON: a key's columns, its window, its aggregates by name.

use weir_state::Window;
use weir_state::codec::StateValue;

use super::declare::{QueryableNode, QueryableState, StateShape};
use crate::operators::accumulators::{Acc, Scalar};

impl QueryableNode {
    /// One entry as JSON: its key, its window (if namespaced by one) and its value.
    pub(super) fn render(
        &self,
        state: &QueryableState,
        entry: &weir_state::QueryEntry,
        subtask: usize,
    ) -> Result<serde_json::Value, String> {
        let mut out = serde_json::Map::new();
        out.insert("key".into(), self.keys.decode(&entry.key)?);
        match state.shape {
            StateShape::Accumulators => {
                let accs = Vec::<Acc>::from_bytes(&entry.value)?;
                out.insert("value".into(), self.aggregates_json(&accs));
            }
            StateShape::Windows => {
                let window = Window::from_namespace(&entry.namespace)?;
                out.insert("window".into(), window_json(window.start, window.end));
                let accs = Vec::<Acc>::from_bytes(&entry.value)?;
                out.insert("value".into(), self.aggregates_json(&accs));
            }
            StateShape::Sessions => {
                let sessions = Vec::<(i64, i64, Vec<Acc>)>::from_bytes(&entry.value)?;
                let list = sessions
                    .iter()
                    .map(|(start, end, accs)| {
                        serde_json::json!({
                            "window": window_json(*start, *end),
                            "value": self.aggregates_json(accs),
                        })
                    })
                    .collect();
                out.insert("value".into(), serde_json::Value::Array(list));
            }
        }
        out.insert("subtask".into(), subtask.into());
        Ok(serde_json::Value::Object(out))
    }

    fn aggregates_json(&self, accs: &[Acc]) -> serde_json::Value {
        let map = self
            .aggregates
            .iter()
            .zip(accs)
            .map(|(name, acc)| (name.clone(), scalar_json(&acc.result())))
            .collect();
        serde_json::Value::Object(map)
    }
}

pub(super) fn window_json(start: i64, end: i64) -> serde_json::Value {
    serde_json::json!({ "start": start, "end": end })
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
