//! What the recorder's span and scope events give the views: the names and parents of spans
//! (`recorder.Span`), so samples can be folded under the span path they ran in (`--by-span`),
//! and the merged scope tree (`recorder.ScopeTiming`) for `--weight self-time` and the JSON tree.

use jfr_format::{Chunk, Value};
use recorder::scope::ScopeReport;
use std::collections::HashMap;
use std::sync::Arc;

/// A string field's text (inline or from the constant pool); empty if it is neither.
fn text(chunk: &Chunk, value: &Value) -> String {
    match value {
        Value::String(t) => t.as_str().to_owned(),
        Value::Ref { type_id, key } => match chunk.resolve(*type_id, *key) {
            Ok(Some(Value::String(t))) => t.as_str().to_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// Spans by id: name and parent id.
#[derive(Debug, Default, Clone)]
pub struct SpanNames {
    spans: HashMap<u64, (Arc<str>, u64)>,
}

impl SpanNames {
    /// Adds the `recorder.Span` events of `chunk`.
    pub fn add_chunk(&mut self, chunk: &Chunk) -> jfr_format::Result<()> {
        let Some(class) = chunk.metadata().class_by_name("recorder.Span") else { return Ok(()) };
        let (Some(id), Some(parent), Some(name)) =
            (class.field_index("spanId"), class.field_index("parentSpanId"), class.field_index("name"))
        else {
            return Ok(());
        };
        let type_id = class.id;
        for event in chunk.events() {
            let event = event?;
            if event.type_id != type_id {
                continue;
            }
            self.add_event(chunk, &event.values, id, parent, name);
        }
        Ok(())
    }

    /// Adds one `recorder.Span` event's values (field indexes given).
    pub fn add_event(&mut self, chunk: &Chunk, values: &[Value], id: usize, parent: usize, name: usize) {
        let (Some(id), Some(parent)) =
            (values.get(id).and_then(Value::as_i64), values.get(parent).and_then(Value::as_i64))
        else {
            return;
        };
        let name = values.get(name).map(|v| text(chunk, v)).unwrap_or_default();
        self.add(id as u64, parent as u64, &name);
    }

    /// Adds span `id`, child of `parent`, called `name`.
    pub fn add(&mut self, id: u64, parent: u64, name: &str) {
        self.spans.insert(id, (Arc::from(name), parent));
    }

    /// The span path of span `id`, outermost first: each span's name, or `#id` for a span whose
    /// `recorder.Span` event is not in the recording (still open, or below its threshold).
    pub fn path(&self, id: u64) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        let mut at = id;
        while at != 0 && out.len() < 10_000 {
            match self.spans.get(&at) {
                Some((name, parent)) => {
                    out.push(Arc::clone(name));
                    at = *parent;
                }
                None => {
                    out.push(Arc::from(format!("#{at}")));
                    break;
                }
            }
        }
        out.reverse();
        out
    }
}

/// The merged scope tree of the recording: for each `recorder.ScopeTiming` path id, its newest
/// numbers (they are cumulative), expanded into paths.
pub fn scope_report<'a>(chunks: impl IntoIterator<Item = &'a Chunk>) -> jfr_format::Result<ScopeReport> {
    let mut latest: HashMap<u64, (u64, String, u64, u64, u64)> = HashMap::new();
    for chunk in chunks {
        let Some(class) = chunk.metadata().class_by_name("recorder.ScopeTiming") else { continue };
        let field = |name: &str| class.field_index(name);
        let (Some(id), Some(parent), Some(name), Some(calls), Some(total), Some(self_time)) = (
            field("pathId"),
            field("parentPathId"),
            field("name"),
            field("calls"),
            field("totalTime"),
            field("selfTime"),
        ) else {
            continue;
        };
        let type_id = class.id;
        for event in chunk.events() {
            let event = event?;
            if event.type_id != type_id {
                continue;
            }
            let v = &event.values;
            let long = |i: usize| v.get(i).and_then(Value::as_i64).unwrap_or(0).max(0) as u64;
            let node_name = v.get(name).map(|s| text(chunk, s)).unwrap_or_default();
            let row = (long(parent), node_name, long(calls), long(total), long(self_time));
            // Cumulative numbers: the newest event of a path is the one with the most calls (events
            // of one path only grow), the later one on a tie.
            match latest.get(&long(id)) {
                Some(old) if old.2 > row.2 => {}
                _ => {
                    latest.insert(long(id), row);
                }
            }
        }
    }
    let mut nodes: Vec<(u64, u64, String, u64, u64, u64)> =
        latest.into_iter().map(|(id, (p, n, c, t, s))| (id, p, n, c, t, s)).collect();
    nodes.sort_by_key(|n| n.0);
    Ok(ScopeReport::from_nodes(&nodes, false))
}
