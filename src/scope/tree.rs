//! One thread's scope tree, as the reporting side sees it: nodes interned by (parent node,
//! function index), each with its call count and total and self time, and the order in which
//! nodes first received weight.
//!
//! Only the owning thread writes a tree; any thread may read it at any time without a lock. The
//! nodes live in chunks that never move, each field an atomic the owner stores with a plain
//! (Relaxed) store — no read-modify-write on the owner's path — and a node becomes visible to
//! readers through the Release store of `len`. A reader sees each counter as of some recent
//! moment; once the owner has exited (`exited`, Release after its last store), the values are
//! final.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Nodes per chunk.
const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Chunks per tree: at most `CHUNKS * CHUNK` nodes (1 Mi) per thread; further new paths are
/// charged to the node [`OVERFLOW`] names.
const CHUNKS: usize = 256;
/// Most nodes a tree holds.
pub const MAX_NODES: u32 = (CHUNK * CHUNKS) as u32;

/// The root: the thread itself, parent of every outermost scope. It is never entered.
pub const ROOT: u32 = 0;
/// "No node" in the order list.
pub const NONE: u32 = u32::MAX;

/// One call path of one thread.
#[derive(Debug)]
pub struct Node {
    /// Parent node (ROOT's parent is ROOT).
    parent: AtomicU32,
    /// Function index (see `super::names`).
    func: AtomicU32,
    /// Completed calls.
    calls: AtomicU64,
    /// Ticks inside the calls, the profiler's own bookkeeping excluded.
    total: AtomicU64,
    /// `total` less the totals of the children.
    self_ticks: AtomicU64,
    /// The next node in first-weight order.
    next: AtomicU32,
}

impl Node {
    fn new() -> Node {
        Node {
            parent: AtomicU32::new(ROOT),
            func: AtomicU32::new(0),
            calls: AtomicU64::new(0),
            total: AtomicU64::new(0),
            self_ticks: AtomicU64::new(0),
            next: AtomicU32::new(NONE),
        }
    }
}

/// A node's numbers at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Completed calls.
    pub calls: u64,
    /// Total ticks.
    pub total: u64,
    /// Self ticks.
    pub self_ticks: u64,
}

/// One thread's tree.
#[derive(Debug)]
pub struct Tree {
    chunks: Box<[OnceLock<Box<[Node]>>]>,
    /// Nodes created (readers see `0..len`).
    len: AtomicU32,
    /// First node of the first-weight order list.
    head: AtomicU32,
    /// The owner has exited: the values are final.
    exited: AtomicBool,
}

impl Tree {
    /// A tree with its root.
    pub fn new() -> Tree {
        let tree = Tree {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
            len: AtomicU32::new(0),
            head: AtomicU32::new(NONE),
            exited: AtomicBool::new(false),
        };
        let _ = tree.push(ROOT, 0);
        tree
    }

    #[inline(always)]
    fn node(&self, i: u32) -> &Node {
        let i = i as usize;
        // Every index the owner or a reader uses is below `len`, so its chunk exists; the
        // fallback only keeps this total.
        match self.chunks.get(i >> CHUNK_BITS).and_then(OnceLock::get) {
            Some(chunk) => &chunk[i & (CHUNK - 1)],
            None => &chunk_zero()[0],
        }
    }

    /// Owner: appends a node; returns its index, or `None` when the tree is full (one place is
    /// kept for [`Tree::push_last`]).
    #[must_use]
    pub fn push(&self, parent: u32, func: u32) -> Option<u32> {
        // Relaxed: only the owner stores `len`.
        if self.len.load(Ordering::Relaxed) >= MAX_NODES - 1 {
            return None;
        }
        self.push_last(parent, func)
    }

    /// Owner: appends a node into the place `push` keeps.
    #[must_use]
    pub fn push_last(&self, parent: u32, func: u32) -> Option<u32> {
        // Relaxed: only the owner stores `len`.
        let i = self.len.load(Ordering::Relaxed);
        if i >= MAX_NODES {
            return None;
        }
        let chunk = self.chunks.get(i as usize >> CHUNK_BITS)?;
        let chunk = chunk.get_or_init(|| (0..CHUNK).map(|_| Node::new()).collect());
        let node = &chunk[i as usize & (CHUNK - 1)];
        // Relaxed: published by the Release store of `len` below.
        node.parent.store(parent, Ordering::Relaxed);
        // Relaxed: as above.
        node.func.store(func, Ordering::Relaxed);
        // Release: publishes the node's fields (and its chunk); pairs with the Acquire load in
        // `len`.
        self.len.store(i + 1, Ordering::Release);
        Some(i)
    }

    /// Nodes created so far (readers).
    pub fn len(&self) -> u32 {
        // Acquire: pairs with the Release store in `push`.
        self.len.load(Ordering::Acquire)
    }

    /// (parent, function index) of node `i` (`i < len()`).
    pub fn key(&self, i: u32) -> (u32, u32) {
        let n = self.node(i);
        // Relaxed: set before `len` was published past `i` (see `push`).
        (n.parent.load(Ordering::Relaxed), n.func.load(Ordering::Relaxed))
    }

    /// The numbers of node `i`.
    pub fn counts(&self, i: u32) -> Counts {
        let n = self.node(i);
        // Relaxed: counters; a reader takes each as of a recent moment (final once `exited`).
        Counts {
            calls: n.calls.load(Ordering::Relaxed),
            total: n.total.load(Ordering::Relaxed),
            self_ticks: n.self_ticks.load(Ordering::Relaxed),
        }
    }

    /// Owner: one completed call of node `i` that lasted `total` ticks, `self_ticks` of them
    /// outside its children. Plain stores of the owner's own values: no read-modify-write.
    #[inline(always)]
    pub fn add(&self, i: u32, total: u64, self_ticks: u64) {
        let n = self.node(i);
        // Relaxed (all three): only the owner writes; readers take recent values.
        n.calls.store(n.calls.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        n.total.store(n.total.load(Ordering::Relaxed) + total, Ordering::Relaxed);
        n.self_ticks.store(n.self_ticks.load(Ordering::Relaxed) + self_ticks, Ordering::Relaxed);
    }

    /// Owner: node `i` follows `tail` (NONE: it is the first) in first-weight order.
    pub fn link_after(&self, tail: u32, i: u32) {
        // Release (both): the node is created and its first weight stored before a reader can
        // reach it; pairs with the Acquire loads in `order`.
        if tail == NONE {
            self.head.store(i, Ordering::Release);
        } else {
            self.node(tail).next.store(i, Ordering::Release);
        }
    }

    /// The nodes in the order they first received weight.
    pub fn order(&self) -> Vec<u32> {
        let mut out = Vec::new();
        // Acquire: pairs with the Release stores in `link_after`.
        let mut at = self.head.load(Ordering::Acquire);
        while at != NONE && out.len() < MAX_NODES as usize {
            out.push(at);
            // Acquire: as above.
            at = self.node(at).next.load(Ordering::Acquire);
        }
        out
    }

    /// Owner: it will write no more (thread exit or a new recording).
    pub fn set_exited(&self) {
        // Release: every store of the owner happens-before a reader that sees the flag.
        self.exited.store(true, Ordering::Release);
    }

    /// The owner wrote its last values.
    pub fn is_exited(&self) -> bool {
        // Acquire: pairs with `set_exited`.
        self.exited.load(Ordering::Acquire)
    }
}

/// A chunk that is never written, for the unreachable fallback of `Tree::node`.
fn chunk_zero() -> &'static [Node] {
    static ZERO: OnceLock<Box<[Node]>> = OnceLock::new();
    ZERO.get_or_init(|| vec![Node::new()].into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_cross_chunks_and_keep_their_keys() {
        let t = Tree::new();
        for i in 1..(CHUNK as u32 * 2 + 5) {
            assert_eq!(t.push(i - 1, i), Some(i));
        }
        assert_eq!(t.len(), CHUNK as u32 * 2 + 5);
        assert_eq!(t.key(CHUNK as u32 + 3), (CHUNK as u32 + 2, CHUNK as u32 + 3));
        t.add(7, 10, 4);
        t.add(7, 5, 5);
        assert_eq!(t.counts(7), Counts { calls: 2, total: 15, self_ticks: 9 });
    }

    #[test]
    fn order_list_follows_links() {
        let t = Tree::new();
        let a = t.push(ROOT, 1).unwrap();
        let b = t.push(a, 2).unwrap();
        t.link_after(NONE, b);
        t.link_after(b, a);
        assert_eq!(t.order(), vec![b, a]);
    }
}
