//! The recording's scope trees, merged: every thread's tree (live or exited) is absorbed into one
//! process-wide tree of (parent, function) nodes, which the flush turns into `recorder.ScopeTiming`
//! events and [`ScopeReport`] expands into paths.

use super::names;
use super::tree::{Counts, Tree};
use crate::fork::ForkSafeMutex as Mutex;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// The recording's trees and their merge.
#[derive(Debug, Default)]
struct Registry {
    generation: u64,
    deterministic: bool,
    clock: super::ScopeClock,
    merged: Merged,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
/// [`REGISTRY`], for the atfork handlers, which hold it across fork. A flush holds it while it
/// absorbs every thread's tree, and takes the names lock inside.
pub(crate) static REGISTRY_LOCK: &dyn crate::fork::HeldAcrossFork = &REGISTRY;

/// A new recording: the trees of the previous one are dropped.
pub(crate) fn reset(generation: u64, deterministic: bool, clock: super::ScopeClock) {
    *REGISTRY.lock() =
        Some(Registry { generation, deterministic, clock, merged: Merged { deterministic, ..Merged::new() } });
}

/// A new tree for the calling thread in recording `generation` (and whether it is deterministic,
/// and its clock), or `None` if that recording is not the current one.
pub(crate) fn register(generation: u64) -> Option<(Arc<Tree>, bool, super::ScopeClock)> {
    let mut guard = REGISTRY.lock();
    let reg = guard.as_mut().filter(|r| r.generation == generation)?;
    let tree = Arc::new(Tree::new());
    reg.merged.views.push(View { tree: Arc::clone(&tree), map: Vec::new(), seen: Vec::new() });
    Some((tree, reg.deterministic, reg.clock))
}

/// Absorbs what every thread recorded since the last call, then runs `f` on the merged tree (with
/// the registry locked: threads that start their first scope wait meanwhile).
pub(crate) fn absorb<R>(f: impl FnOnce(&mut Merged) -> R) -> R {
    let mut guard = REGISTRY.lock();
    let reg = guard.get_or_insert_with(Registry::default);
    reg.merged.absorb_all();
    f(&mut reg.merged)
}

/// One merged node: a (parent, function) path of any thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MergedNode {
    /// Parent's index (the root's is 0).
    pub parent: u32,
    /// Function index.
    pub func: u32,
    /// Sums over the threads.
    pub counts: Counts,
    weighted: bool,
    dirty: bool,
}

/// What the merge knows of one thread's tree.
#[derive(Debug)]
struct View {
    tree: Arc<Tree>,
    /// The merged node of each of the tree's nodes.
    map: Vec<u32>,
    /// The tree's counts when last absorbed.
    seen: Vec<Counts>,
}

/// The merged tree of all threads.
#[derive(Debug)]
pub(crate) struct Merged {
    deterministic: bool,
    nodes: Vec<MergedNode>,
    index: HashMap<(u32, u32), u32>,
    /// Merged nodes in the order they first received weight.
    order: Vec<u32>,
    views: Vec<View>,
    /// Nodes changed since `take_changed`.
    changed: Vec<u32>,
}

impl Default for Merged {
    fn default() -> Merged {
        Merged::new()
    }
}

impl Merged {
    fn new() -> Merged {
        let root = MergedNode { parent: 0, func: 0, counts: Counts::default(), weighted: false, dirty: false };
        Merged {
            deterministic: false,
            nodes: vec![root],
            index: HashMap::new(),
            order: Vec::new(),
            views: Vec::new(),
            changed: Vec::new(),
        }
    }

    /// Deterministic mode: times are zero.
    pub fn deterministic(&self) -> bool {
        self.deterministic
    }

    /// Takes every tree's news; trees of exited threads are dropped once absorbed for the last
    /// time (their numbers stay in the merged tree).
    fn absorb_all(&mut self) {
        let mut views = std::mem::take(&mut self.views);
        views.retain_mut(|view| {
            // Read before the counts: once set, the counts read after it are final.
            let exited = view.tree.is_exited();
            self.absorb_view(view);
            !exited
        });
        self.views = views;
    }

    fn absorb_view(&mut self, view: &mut View) {
        let tree = Arc::clone(&view.tree);
        let len = tree.len();
        // A parent is created before its children, so its merged node exists already.
        while (view.map.len() as u32) < len {
            let i = view.map.len() as u32;
            let merged = if i == 0 {
                0
            } else {
                let (parent, func) = tree.key(i);
                let parent = view.map.get(parent as usize).copied().unwrap_or(0);
                self.node_for(parent, func)
            };
            view.map.push(merged);
            view.seen.push(Counts::default());
        }
        // First-weight order first, so the merged order follows the threads' own.
        for i in tree.order() {
            self.apply(view, &tree, i);
        }
        for i in 1..len {
            self.apply(view, &tree, i);
        }
    }

    fn node_for(&mut self, parent: u32, func: u32) -> u32 {
        if let Some(&m) = self.index.get(&(parent, func)) {
            return m;
        }
        let m = self.nodes.len() as u32;
        self.nodes.push(MergedNode { parent, func, counts: Counts::default(), weighted: false, dirty: false });
        self.index.insert((parent, func), m);
        m
    }

    fn apply(&mut self, view: &mut View, tree: &Tree, i: u32) {
        let now = tree.counts(i);
        let (Some(seen), Some(&m)) = (view.seen.get_mut(i as usize), view.map.get(i as usize)) else { return };
        if now == *seen {
            return;
        }
        let delta = Counts {
            calls: now.calls.saturating_sub(seen.calls),
            total: now.total.saturating_sub(seen.total),
            self_ticks: now.self_ticks.saturating_sub(seen.self_ticks),
        };
        *seen = now;
        let deterministic = self.deterministic;
        let Some(node) = self.nodes.get_mut(m as usize) else { return };
        node.counts.calls += delta.calls;
        node.counts.total += delta.total;
        node.counts.self_ticks += delta.self_ticks;
        if !node.weighted && (node.counts.self_ticks > 0 || (deterministic && node.counts.calls > 0)) {
            node.weighted = true;
            self.order.push(m);
        }
        if !node.dirty {
            node.dirty = true;
            self.changed.push(m);
        }
    }

    /// The merged nodes (index 0 is the root).
    pub fn nodes(&self) -> &[MergedNode] {
        &self.nodes
    }

    /// The nodes whose numbers changed since the last call, in index order (a parent before its
    /// children).
    pub fn take_changed(&mut self) -> Vec<u32> {
        let mut changed = std::mem::take(&mut self.changed);
        for &m in &changed {
            if let Some(n) = self.nodes.get_mut(m as usize) {
                n.dirty = false;
            }
        }
        changed.sort_unstable();
        changed
    }

    /// The report: paths expanded, identical displayed paths merged.
    pub fn report(&self) -> ScopeReport {
        let names = names::snapshot();
        let deterministic = self.deterministic;
        self.report_with(
            |func| names.get(func as usize).map_or("?", |n| &**n).to_owned(),
            |ticks| if deterministic { 0 } else { super::ticks_to_nanos(ticks) },
        )
    }

    /// The report, with names and times given by the caller.
    fn report_with(&self, name_of: impl Fn(u32) -> String, nanos: impl Fn(u64) -> u64) -> ScopeReport {
        // Report node of each merged node, created in index order (parents first).
        let mut rid = vec![0usize; self.nodes.len()];
        let mut by_path: HashMap<(usize, String), usize> = HashMap::new();
        // Report nodes, index 0 the root: (parent, name, counts).
        let mut out: Vec<(usize, String, Counts)> = vec![(0, String::new(), Counts::default())];
        for (m, node) in self.nodes.iter().enumerate().skip(1) {
            let parent = rid.get(node.parent as usize).copied().unwrap_or(0);
            let name = name_of(node.func);
            let r = *by_path.entry((parent, name.clone())).or_insert_with(|| {
                out.push((parent, name, Counts::default()));
                out.len() - 1
            });
            if let (Some(slot), Some(entry)) = (rid.get_mut(m), out.get_mut(r)) {
                *slot = r;
                entry.2.calls += node.counts.calls;
                entry.2.total += node.counts.total;
                entry.2.self_ticks += node.counts.self_ticks;
            }
        }
        let mut placed = vec![false; out.len()];
        let mut sequence = Vec::with_capacity(out.len());
        for r in self.order.iter().filter_map(|&m| rid.get(m as usize).copied()).chain(1..out.len()) {
            if r != 0 && !std::mem::replace(&mut placed[r], true) {
                sequence.push(r);
            }
        }
        let path = |mut r: usize| {
            let mut parts = Vec::new();
            while r != 0 {
                parts.push(out[r].1.as_str());
                r = out[r].0;
            }
            parts.reverse();
            parts
        };
        if self.deterministic {
            // Threads interleave differently from run to run: the paths give the order.
            sequence.sort_by_cached_key(|&r| path(r).into_iter().map(str::to_owned).collect::<Vec<_>>());
        }
        let mut new_id = vec![0u32; out.len()];
        for (i, &r) in sequence.iter().enumerate() {
            new_id[r] = i as u32 + 1;
        }
        let nodes = sequence
            .iter()
            .map(|&r| {
                let (parent, name, c) = &out[r];
                ScopeNode {
                    id: new_id[r],
                    parent: new_id[*parent],
                    name: name.clone(),
                    calls: c.calls,
                    total_nanos: nanos(c.total),
                    self_nanos: nanos(c.self_ticks),
                }
            })
            .collect();
        ScopeReport { deterministic: self.deterministic, nodes }
    }
}

/// What the collapsed export weighs each path by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Self time in nanoseconds.
    SelfTime,
    /// Total time in nanoseconds.
    TotalTime,
    /// Completed calls.
    Calls,
}

/// One path of the merged scope tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeNode {
    /// Id within the report (1..); the order of the report.
    pub id: u32,
    /// The parent's id; 0 for an outermost scope.
    pub parent: u32,
    /// The function (scope or span) name.
    pub name: String,
    /// Completed calls, summed over all threads.
    pub calls: u64,
    /// Time inside the calls, the profiler's own bookkeeping excluded (0 in deterministic mode).
    pub total_nanos: u64,
    /// `total_nanos` less the children's.
    pub self_nanos: u64,
}

/// The scope tree of a recording, all threads merged (including threads that exited): nodes in
/// the order they first received weight (by path in deterministic mode), each path once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeReport {
    /// Made in deterministic mode (times are zero).
    pub deterministic: bool,
    /// The paths; a node's parent may come after it (a child often receives weight first).
    pub nodes: Vec<ScopeNode>,
}

impl ScopeReport {
    /// The report from nodes read back from a recording (`recorder.ScopeTiming` events): `nodes`
    /// is (id, parent id, name, calls, total ns, self ns) in any order; ids need only be unique,
    /// and identical displayed paths merge as in the live report.
    pub fn from_nodes(nodes: &[(u64, u64, String, u64, u64, u64)], deterministic: bool) -> ScopeReport {
        let by_id: HashMap<u64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.0, i)).collect();
        let mut merged = Merged { deterministic, ..Merged::new() };
        let mut funcs: HashMap<&str, u32> = HashMap::new();
        let mut name_list: Vec<&str> = vec![""];
        let mut mapped: HashMap<u64, u32> = HashMap::new();
        for n in nodes {
            // The chain of ids not mapped yet, innermost first, up to a mapped one or the root
            // (an unknown or cyclic parent counts as the root).
            let mut chain = Vec::new();
            let mut at = n.0;
            while at != 0 && !mapped.contains_key(&at) && chain.len() <= nodes.len() {
                let Some(&i) = by_id.get(&at) else { break };
                if chain.contains(&i) {
                    break;
                }
                chain.push(i);
                at = nodes[i].1;
            }
            let mut parent = mapped.get(&at).copied().unwrap_or(0);
            for &i in chain.iter().rev() {
                let name = nodes[i].2.as_str();
                let func = *funcs.entry(name).or_insert_with(|| {
                    name_list.push(name);
                    name_list.len() as u32 - 1
                });
                parent = merged.node_for(parent, func);
                mapped.insert(nodes[i].0, parent);
            }
        }
        for n in nodes {
            let Some(&m) = mapped.get(&n.0) else { continue };
            if let Some(node) = merged.nodes.get_mut(m as usize) {
                node.counts.calls += n.3;
                node.counts.total += n.4;
                node.counts.self_ticks += n.5;
                if !node.weighted && (n.5 > 0 || (deterministic && n.3 > 0)) {
                    node.weighted = true;
                    merged.order.push(m);
                }
            }
        }
        // The values are nanoseconds already.
        merged.report_with(|func| name_list.get(func as usize).copied().unwrap_or("?").to_owned(), |ns| ns)
    }

    /// The full path of node `id`, outermost first.
    pub fn path(&self, id: u32) -> Vec<&str> {
        let by_id: HashMap<u32, &ScopeNode> = self.nodes.iter().map(|n| (n.id, n)).collect();
        let mut parts = Vec::new();
        let mut at = id;
        while let Some(n) = by_id.get(&at) {
            parts.push(n.name.as_str());
            at = n.parent;
            if parts.len() > self.nodes.len() {
                break;
            }
        }
        parts.reverse();
        parts
    }

    /// Collapsed stacks (`outer;inner weight` per line, the format flame graph tools read): one
    /// line per path with a positive weight, in report order. Empty when nothing has weight.
    pub fn collapsed(&self, weight: Weight) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let w = match weight {
                Weight::SelfTime => n.self_nanos,
                Weight::TotalTime => n.total_nanos,
                Weight::Calls => n.calls,
            };
            if w == 0 {
                continue;
            }
            let path: Vec<String> = self.path(n.id).into_iter().map(collapsed_frame).collect();
            let _ = writeln!(out, "{} {w}", path.join(";"));
        }
        out
    }

    /// The tree as JSON: `{"deterministic":..,"unit":"ns","roots":[{"name","calls","total_ns",
    /// "self_ns","children":[..]}]}`, children in report order.
    pub fn to_json(&self) -> String {
        let mut children: HashMap<u32, Vec<&ScopeNode>> = HashMap::new();
        for n in &self.nodes {
            children.entry(n.parent).or_default().push(n);
        }
        fn write(out: &mut String, n: &ScopeNode, children: &HashMap<u32, Vec<&ScopeNode>>, depth: usize) {
            out.push_str("{\"name\":");
            json_string(out, &n.name);
            let _ = write!(
                out,
                ",\"calls\":{},\"total_ns\":{},\"self_ns\":{},\"children\":[",
                n.calls, n.total_nanos, n.self_nanos
            );
            if depth < 10_000 {
                for (i, c) in children.get(&n.id).into_iter().flatten().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(out, c, children, depth + 1);
                }
            }
            out.push_str("]}");
        }
        let mut out = format!("{{\"deterministic\":{},\"unit\":\"ns\",\"roots\":[", self.deterministic);
        for (i, n) in children.get(&0).into_iter().flatten().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write(&mut out, n, &children, 0);
        }
        out.push_str("]}");
        out
    }

    /// Sum of the self times (the time inside outermost scopes).
    pub fn total_self_nanos(&self) -> u64 {
        self.nodes.iter().map(|n| n.self_nanos).sum()
    }

    /// The node at `path` (outermost first), if any.
    pub fn find(&self, path: &[&str]) -> Option<&ScopeNode> {
        self.nodes.iter().find(|n| self.path(n.id) == path)
    }
}

/// A frame name as collapsed stacks can hold it: `;` separates frames and the last space the
/// weight, and a line holds one stack.
fn collapsed_frame(name: &str) -> String {
    name.chars().map(|c| if c == ';' || c == '\n' || c == '\r' { '_' } else { c }).collect()
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
