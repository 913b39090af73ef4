//! Stack interning: a fixed-capacity, insert-only trie of frames shared by every thread.
//!
//! A stack is interned outermost frame first; each node is keyed by (parent node, instruction
//! pointer), so interning a stack costs one probe per frame whatever its depth, shares prefixes with
//! every other stack, and **allocates nothing**: the node table is allocated once at start. The
//! stack-trace constant key of a stack is its innermost node id (shifted left one bit, with the
//! `truncated` flag in bit 0), so two threads that intern the same stack get the same key without
//! talking to each other. Frames are expanded into a list only when an L holder serializes the
//! stack trace into a chunk (`expand`).
//!
//! Concurrency: any thread may insert (application threads committing events that carry a stack,
//! and L holders interning sampled stacks); nobody ever removes. A slot goes EMPTY → BUSY → READY:
//! the inserter claims an empty slot with a CAS, writes `parent` and `ip`, then publishes the
//! fingerprint with a Release store. A reader that finds a BUSY slot does not wait: it moves on, and
//! at worst the same (parent, ip) gets a second node, which costs space but never correctness.

use crate::sync::{AtomicU64, Ordering};

const EMPTY: u64 = 0;
const BUSY: u64 = 1;

#[repr(C)]
struct Node {
    /// 0 = empty, 1 = being written, else the fingerprint of (parent, ip) with bit 63 set.
    tag: AtomicU64,
    parent: AtomicU64,
    ip: AtomicU64,
}

/// `n` empty nodes, from zeroed memory: the allocator maps a table this large (6 MiB at the
/// default capacity) from the kernel's zero pages, which become resident only where a node is
/// written, so a program with few distinct stacks pays for the pages its nodes hash to, not for
/// the whole table (`scripts/footprint.sh`). An empty node is all zeros (`EMPTY`).
#[cfg(not(loom))]
#[allow(unsafe_code)]
fn empty_nodes(n: usize) -> Box<[Node]> {
    let Ok(layout) = std::alloc::Layout::array::<Node>(n) else { panic!("stack table of {n} nodes") };
    // SAFETY: `layout` is non-zero-sized (n >= 1024 nodes); an all-zero `Node` is three
    // `AtomicU64`s of 0 (same layout as `u64`), a valid value, and the box is freed with the same
    // layout (`Box<[Node]>` of `n` elements, allocated by the global allocator).
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<Node>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n))
    }
}

/// loom's atomics are not plain words: built one by one.
#[cfg(loom)]
fn empty_nodes(n: usize) -> Box<[Node]> {
    (0..n).map(|_| Node { tag: AtomicU64::new(EMPTY), parent: AtomicU64::new(0), ip: AtomicU64::new(0) }).collect()
}

/// The shared stack trie.
pub struct StackTable {
    nodes: Box<[Node]>,
    mask: usize,
    /// Frames that did not fit because the table was full (statistics).
    overflow: AtomicU64,
    /// Added to every node id in a key ([`StackTable::with_key_base`]).
    key_base: u64,
}

impl std::fmt::Debug for StackTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackTable").field("capacity", &self.nodes.len()).finish()
    }
}

#[inline]
fn fingerprint(parent: u64, ip: u64) -> u64 {
    // A 64-bit mix (splitmix64 finalizer) of both words; bit 63 keeps it clear of EMPTY and BUSY.
    let mut x = parent.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ip;
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    x | (1 << 63)
}

/// A stack-trace constant key: innermost node id and truncated flag. 0 means "no stack".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackKey(pub u64);

impl StackKey {
    /// No stack trace.
    pub const NONE: StackKey = StackKey(0);

    /// The stack was cut by a depth limit.
    pub fn truncated(self) -> bool {
        self.0 & 1 != 0
    }

    fn node(self) -> u64 {
        self.0 >> 1
    }
}

impl StackTable {
    /// A table of `capacity` nodes (rounded up to a power of two, at least 1024).
    pub fn new(capacity: usize) -> StackTable {
        let capacity = capacity.max(if cfg!(loom) { 8 } else { 1024 }).next_power_of_two();
        let nodes = empty_nodes(capacity);
        StackTable { nodes, mask: capacity - 1, overflow: AtomicU64::new(0), key_base: 0 }
    }

    /// A table whose keys start above `base` nodes: a recording that continues another's
    /// directory never reuses one of its stack-trace keys (readers keep a key's first value for
    /// the whole file: docs/jfr-format.md, "Constant pools").
    pub fn with_key_base(capacity: usize, base: u64) -> StackTable {
        StackTable { key_base: base, ..StackTable::new(capacity) }
    }

    /// Bytes of the node table resident now.
    #[cfg(not(loom))]
    pub fn resident_bytes(&self) -> usize {
        crate::resident::resident_bytes(&self.nodes)
    }

    /// Frames that could not be interned because the table was full.
    pub fn overflow(&self) -> u64 {
        // Relaxed: statistics only.
        self.overflow.load(Ordering::Relaxed)
    }

    /// The node for (parent, ip), inserting it if needed; `None` if the table is full.
    #[inline]
    fn child(&self, parent: u64, ip: u64) -> Option<u64> {
        let fp = fingerprint(parent, ip);
        let mut index = (fp as usize) & self.mask;
        // Bounded probe: a full table ends the search instead of looping forever.
        for _ in 0..64 {
            let node = &self.nodes[index];
            // Acquire: pairs with the Release store of `tag` below (other inserters), so the
            // `parent`/`ip` words read next are the ones written before the tag was published.
            let tag = node.tag.load(Ordering::Acquire);
            if tag == fp {
                // Relaxed: ordered by the Acquire load of `tag` above.
                if node.parent.load(Ordering::Relaxed) == parent && node.ip.load(Ordering::Relaxed) == ip {
                    return Some(index as u64 + 1);
                }
            } else if tag == EMPTY {
                // Relaxed on failure: we only learn the slot is taken and re-read it.
                // Acquire on success is not needed: nothing was published through EMPTY.
                if node.tag.compare_exchange(EMPTY, BUSY, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                    // Relaxed: published by the Release store of `tag` just below.
                    node.parent.store(parent, Ordering::Relaxed);
                    node.ip.store(ip, Ordering::Relaxed);
                    // Release: publishes `parent` and `ip`; pairs with the Acquire loads of `tag` in
                    // `child` and `expand` on every thread.
                    node.tag.store(fp, Ordering::Release);
                    return Some(index as u64 + 1);
                }
                // Lost the race for this slot: look at it again (it may now hold our node).
                // Acquire: as above.
                let tag = node.tag.load(Ordering::Acquire);
                if tag == fp && node.parent.load(Ordering::Relaxed) == parent && node.ip.load(Ordering::Relaxed) == ip {
                    return Some(index as u64 + 1);
                }
            }
            index = (index + 1) & self.mask;
        }
        None
    }

    /// Interns a stack given innermost frame first (the order a walk produces). `truncated` records
    /// that frames were dropped. Returns the stack-trace key.
    pub fn intern(&self, frames_innermost_first: &[u64], truncated: bool) -> StackKey {
        let mut node = 0u64;
        let mut cut = truncated;
        for &ip in frames_innermost_first.iter().rev() {
            match self.child(node, ip) {
                Some(n) => node = n,
                None => {
                    // Relaxed: statistics only.
                    self.overflow.fetch_add(1, Ordering::Relaxed);
                    cut = true;
                    break;
                }
            }
        }
        if node == 0 {
            return StackKey::NONE;
        }
        StackKey(((node + self.key_base) << 1) | u64::from(cut))
    }

    /// Expands a key into its frames, innermost first, appending to `out`. Returns `false` if the
    /// key does not name a node of this table.
    pub fn expand(&self, key: StackKey, out: &mut Vec<u64>) -> bool {
        if key == StackKey::NONE {
            return true;
        }
        let Some(mut node) = key.node().checked_sub(self.key_base) else {
            return false;
        };
        let mut steps = 0;
        while node != 0 {
            let Some(slot) = self.nodes.get(node as usize - 1) else {
                return false;
            };
            // Acquire: pairs with the Release store of `tag` in `child`.
            let tag = slot.tag.load(Ordering::Acquire);
            if tag == EMPTY || tag == BUSY {
                return false;
            }
            out.push(slot.ip.load(Ordering::Relaxed));
            node = slot.parent.load(Ordering::Relaxed);
            steps += 1;
            if steps > self.nodes.len() {
                return false;
            }
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn same_stack_same_key_and_prefix_sharing() {
        let t = StackTable::new(1024);
        let a = t.intern(&[3, 2, 1], false);
        let b = t.intern(&[3, 2, 1], false);
        let c = t.intern(&[4, 2, 1], true);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(c.truncated());
        let mut out = Vec::new();
        assert!(t.expand(c, &mut out));
        assert_eq!(out, [4, 2, 1]);
        assert_eq!(t.intern(&[], false), StackKey::NONE);
    }

    #[test]
    fn full_table_truncates_instead_of_looping() {
        let t = StackTable::new(1024);
        let frames: Vec<u64> = (1..5000).collect();
        let k = t.intern(&frames, false);
        assert!(k.truncated());
        assert!(t.overflow() > 0);
        let mut out = Vec::new();
        assert!(t.expand(k, &mut out));
        assert!(!out.is_empty() && out.len() < frames.len());
        assert_eq!(*out.last().unwrap(), 4999);
    }

    #[test]
    fn concurrent_interning_agrees() {
        let t = std::sync::Arc::new(StackTable::new(1 << 16));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || {
                    (0..2000u64).map(|i| t.intern(&[i % 97, i % 13, 7], false)).collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<Vec<StackKey>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for keys in &results {
            for (i, k) in keys.iter().enumerate() {
                let mut out = Vec::new();
                assert!(t.expand(*k, &mut out));
                let i = i as u64;
                assert_eq!(out, [i % 97, i % 13, 7]);
            }
        }
    }
}

/// High bits that mark a synthetic `<elided:K>` frame; K is in the low 40 bits. No user-space
/// address has these bits set on x86_64 or aarch64.
const ELIDED_TAG: u64 = 0xFFFF_FF00_0000_0000;

/// The first address of a stack taken at an instrumentation call (a tracing span's creation, a
/// tracing event): its innermost frames that belong to the instrumentation library are dropped
/// when it is serialized. In a release build the library's entry points (`Span::new`,
/// `Span::child_of`, `Event::dispatch` ...) are inlined into the application's function, so the
/// return address the walk starts at also names them; only the symbolizer can tell. Not a
/// user-space address, and no elided marker (its bits under [`ELIDED_TAG`] differ).
pub const INSTRUMENTED_MARK: u64 = 0xFFFF_FE00_0000_0000;

/// The synthetic frame standing for `k` dropped frames.
pub fn elided_marker(k: u64) -> u64 {
    ELIDED_TAG | (k & 0xFF_FFFF_FFFF)
}

/// If `ip` is an elided marker, the number of frames it stands for.
pub fn as_elided(ip: u64) -> Option<u64> {
    (ip & ELIDED_TAG == ELIDED_TAG).then_some(ip & 0xFF_FFFF_FFFF)
}

/// Which frames of a deep stack are kept: the innermost `inner`, the
/// outermost `outer`, or both with one elided marker between them.
///
/// The limits count frames **as readers show them** (`tests/deep_stacks.rs`), inlined functions included.
/// Two steps apply them. The walk (signal handler or commit path) keeps that many *addresses* at
/// each end ([`DepthPolicy::apply`], [`WalkLayout`]): it cannot symbolize, and an address shows as
/// at least one frame, so they are enough. When the stack is serialized, each address expands to
/// its inlined frames and itself, and [`DepthPolicy::limit_shown`] cuts each end to the limit in
/// those frames. `<elided:K>` then counts what is missing between the two ends: the frames cut
/// there, plus the addresses the walk never kept (each counted as one frame: they were never
/// symbolized, so their inlined frames are unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthPolicy {
    /// Innermost frames kept (0 with `outer > 0` keeps only the outermost).
    pub inner: usize,
    /// Outermost frames kept.
    pub outer: usize,
}

impl Default for DepthPolicy {
    fn default() -> DepthPolicy {
        DepthPolicy { inner: 128, outer: 0 }
    }
}

/// Largest number of frames kept at each end.
pub const MAX_DEPTH_PER_END: usize = 2048;

/// A frame as a reader shows it, for [`DepthPolicy::limit_shown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown<F> {
    /// One shown frame (a function, inlined or not).
    Frame(F),
    /// `<elided:K>`: K frames missing here.
    Elided(u64),
}

impl DepthPolicy {
    /// Cuts a stack expanded into shown frames (innermost first, with at most one [`Shown::Elided`]
    /// from the walk) to the policy counted in shown frames: the innermost `inner` frames of the
    /// part before the walk's marker (the whole stack without one), the outermost `outer` of the
    /// part after it, and when both ends are kept one marker between them whose K adds the frames
    /// cut here to the walk's. Returns true if frames were cut here.
    pub fn limit_shown<F>(&self, frames: &mut Vec<Shown<F>>) -> bool {
        let inner = self.inner.min(MAX_DEPTH_PER_END);
        let outer = self.outer.min(MAX_DEPTH_PER_END);
        if inner == 0 && outer == 0 {
            return false;
        }
        let marker = frames.iter().position(|f| matches!(f, Shown::Elided(_)));
        let (inner_len, outer_len, walk_k) = match marker {
            Some(at) => {
                let Shown::Elided(k) = frames[at] else { unreachable!("found above") };
                (at, frames.len() - at - 1, Some(k))
            }
            None if inner > 0 && outer > 0 => {
                // No marker from the walk: the two ends are the innermost `inner` and the rest.
                let len = frames.len();
                if len <= inner + outer {
                    return false;
                }
                (inner, len - inner, None)
            }
            None if outer == 0 => (frames.len(), 0, None),
            None => (0, frames.len(), None),
        };
        let cut_inner = inner_len.saturating_sub(inner);
        let cut_outer = outer_len.saturating_sub(outer);
        if cut_inner == 0 && cut_outer == 0 {
            return false;
        }
        let outer_part: Vec<Shown<F>> = frames.drain(frames.len() - outer_len..).skip(cut_outer).collect();
        frames.truncate(inner_len - cut_inner);
        if inner > 0 && outer > 0 {
            let k = walk_k.unwrap_or(0) + (cut_inner + cut_outer) as u64;
            frames.push(Shown::Elided(k));
        }
        frames.extend(outer_part);
        true
    }

    /// Applies the policy to a full stack (innermost first): the kept frames, with a marker between
    /// the two ends when frames were dropped, and whether any were dropped. The walks' layout
    /// ([`KeepEnds`], [`WalkLayout`]) applied to a stack already in memory.
    pub fn apply(&self, frames: &[u64], out: &mut Vec<u64>) -> bool {
        let inner = self.inner.min(MAX_DEPTH_PER_END);
        let outer = self.outer.min(MAX_DEPTH_PER_END);
        if inner == 0 && outer == 0 {
            out.extend_from_slice(frames);
            return false;
        }
        // Frame number of each scratch slot.
        let mut slots = vec![0usize; inner + outer];
        let mut keep = KeepEnds::new(inner, outer);
        for n in 0..frames.len() {
            if let Some(slot) = keep.next_slot() {
                slots[slot] = n;
            }
        }
        let layout = keep.layout();
        out.extend((0..layout.len()).map(|i| layout.word(i, |slot| frames[slots[slot]])));
        layout.dropped() > 0
    }
}

/// Where a walk keeps the frames it finds under a depth policy, one after the other: the first
/// `inner` in order, then the outermost `outer` in a ring after them (so the outer end survives a
/// walk deeper than both limits); the rest are only counted. Every walker keeps its frames this
/// way (the SIGPROF handler in its slot's scratch, the allocation hook in its record, the commit
/// path in a vector) and reads them back through [`KeepEnds::layout`].
///
/// # Signal safety
/// Arithmetic only.
#[cfg_attr(loom, allow(dead_code))]
#[derive(Debug, Clone, Copy)]
pub struct KeepEnds {
    inner: usize,
    outer: usize,
    /// Frames seen so far.
    n: usize,
    /// The ring's next slot, in `inner..inner + outer`.
    ring: usize,
}

#[cfg_attr(loom, allow(dead_code))]
impl KeepEnds {
    /// Keeps the innermost `inner` and the outermost `outer` frames, in `inner + outer` slots.
    #[inline]
    pub fn new(inner: usize, outer: usize) -> KeepEnds {
        KeepEnds { inner, outer, n: 0, ring: inner }
    }

    /// The slot of the next frame, or `None` if it is only counted. Slots are handed out in
    /// increasing order until the ring wraps.
    #[inline]
    pub fn next_slot(&mut self) -> Option<usize> {
        let n = self.n;
        self.n += 1;
        if n < self.inner {
            return Some(n);
        }
        if self.outer == 0 {
            return None;
        }
        let at = self.ring;
        self.ring += 1;
        if self.ring == self.inner + self.outer {
            self.ring = self.inner;
        }
        Some(at)
    }

    /// Frames seen.
    #[inline]
    pub fn seen(&self) -> usize {
        self.n
    }

    /// How the kept frames read back.
    #[inline]
    pub fn layout(&self) -> WalkLayout {
        WalkLayout::new(self.inner, self.outer, self.n)
    }
}

/// Where a bounded walk under a depth policy keeps its frames, and how they read back.
///
/// The walk stores frame number `n` (0 = innermost) at scratch index `n` while `n < inner`, and
/// the later ones in a ring of `outer` words after them (`inner + (n - inner) % outer`), counting
/// the rest. Afterwards the kept stack, innermost first, is: scratch `[0, inner_kept)`, then one
/// elided marker if frames were dropped between two kept ends, then the ring from its oldest
/// entry. This is the sampler's signal-safe form of [`DepthPolicy::apply`] (same result; see the
/// tests): no allocation, one pass, bounded scratch of `inner + outer` words.
#[cfg_attr(loom, allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkLayout {
    inner: usize,
    outer: usize,
    inner_kept: usize,
    ring_kept: usize,
    dropped: usize,
    head: usize,
    marker: bool,
}

/// One frame of a [`WalkLayout`]: a scratch word, or the elided marker for `K` frames.
#[cfg_attr(loom, allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutFrame {
    /// The frame stored at this scratch index.
    Scratch(usize),
    /// `<elided:K>`.
    Elided(u64),
}

#[cfg_attr(loom, allow(dead_code))]
impl WalkLayout {
    /// The layout after a walk of `total` frames with `inner`/`outer` scratch ends.
    #[inline]
    pub fn new(inner: usize, outer: usize, total: usize) -> WalkLayout {
        let inner_kept = total.min(inner);
        let ring_kept = (total - inner_kept).min(outer);
        let dropped = total - inner_kept - ring_kept;
        let head = if dropped > 0 && outer > 0 { (total - inner) % outer } else { 0 };
        WalkLayout { inner, outer, inner_kept, ring_kept, dropped, head, marker: dropped > 0 && inner > 0 && outer > 0 }
    }

    /// Frames in the kept stack (marker included).
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.inner_kept + usize::from(self.marker) + self.ring_kept
    }

    /// Frames dropped by the policy.
    #[inline]
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// Frame `i` (0 = innermost) of the kept stack.
    #[inline]
    pub fn frame(&self, i: usize) -> LayoutFrame {
        if i < self.inner_kept {
            return LayoutFrame::Scratch(i);
        }
        let mut j = i - self.inner_kept;
        if self.marker {
            if j == 0 {
                return LayoutFrame::Elided(self.dropped as u64);
            }
            j -= 1;
        }
        let r = self.head + j;
        LayoutFrame::Scratch(self.inner + if r >= self.outer { r - self.outer } else { r })
    }

    /// Frame `i` (0 = innermost) of the kept stack as a word: `slot(k)` for the frame kept in
    /// slot `k`, or the elided marker.
    #[inline]
    pub fn word(&self, i: usize, slot: impl FnOnce(usize) -> u64) -> u64 {
        match self.frame(i) {
            LayoutFrame::Scratch(k) => slot(k),
            LayoutFrame::Elided(k) => elided_marker(k),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod layout_tests {
    use super::*;

    /// What a depth policy keeps of a whole stack, by slicing it (the definition the walks'
    /// layout must agree with).
    fn kept_by_slicing(inner: usize, outer: usize, frames: &[u64]) -> (Vec<u64>, bool) {
        if frames.len() <= inner + outer {
            return (frames.to_vec(), false);
        }
        let mut out = frames[..inner].to_vec();
        if inner > 0 && outer > 0 {
            out.push(elided_marker((frames.len() - inner - outer) as u64));
        }
        out.extend_from_slice(&frames[frames.len() - outer..]);
        (out, true)
    }

    /// A walk through `KeepEnds` reads back exactly the innermost and outermost frames (and the
    /// marker between), and so does `DepthPolicy::apply`, for every depth and policy around the
    /// boundaries.
    #[test]
    fn ring_walk_matches_apply() {
        for inner in [0usize, 1, 2, 3, 5] {
            for outer in [0usize, 1, 2, 3, 4] {
                if inner == 0 && outer == 0 {
                    continue;
                }
                for total in 0..20usize {
                    let frames: Vec<u64> = (100..100 + total as u64).collect();
                    let mut scratch = vec![0u64; inner + outer];
                    let mut keep = KeepEnds::new(inner, outer);
                    for &ip in &frames {
                        if let Some(k) = keep.next_slot() {
                            scratch[k] = ip;
                        }
                    }
                    let l = keep.layout();
                    assert_eq!(l, WalkLayout::new(inner, outer, total));
                    let got: Vec<u64> = (0..l.len())
                        .map(|i| match l.frame(i) {
                            LayoutFrame::Scratch(k) => scratch[k],
                            LayoutFrame::Elided(k) => elided_marker(k),
                        })
                        .collect();
                    let (want, cut) = kept_by_slicing(inner, outer, &frames);
                    assert_eq!(got, want, "inner {inner} outer {outer} total {total}");
                    assert_eq!(cut, l.dropped() > 0);
                    let mut applied = Vec::new();
                    assert_eq!(DepthPolicy { inner, outer }.apply(&frames, &mut applied), cut);
                    assert_eq!(applied, want, "apply: inner {inner} outer {outer} total {total}");
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod shown_tests {
    use super::*;

    /// Walk + expansion + `limit_shown`, against the full expansion of every address: each end
    /// keeps at most its limit in shown frames, they are the real innermost and outermost frames,
    /// and the marker's K plus the frames shown adds up to the stack, each address the walk never
    /// kept counted as one frame.
    #[test]
    fn limits_count_shown_frames_and_k_counts_the_rest() {
        // Address i expands to 1 + (i * 7) % 3 shown frames (inlined ones and itself).
        let expansion = |ip: u64| 1 + (ip * 7) % 3;
        for inner in [0usize, 1, 2, 3, 6] {
            for outer in [0usize, 1, 2, 3] {
                if inner == 0 && outer == 0 {
                    continue;
                }
                for total in 0..24u64 {
                    let addresses: Vec<u64> = (0..total).collect();
                    let full: Vec<(u64, u64)> =
                        addresses.iter().flat_map(|&ip| (0..expansion(ip)).map(move |j| (ip, j))).collect();
                    let policy = DepthPolicy { inner, outer };
                    let mut walked = Vec::new();
                    let walk_cut = policy.apply(&addresses, &mut walked);
                    let mut shown: Vec<Shown<(u64, u64)>> = Vec::new();
                    for &ip in &walked {
                        match as_elided(ip) {
                            Some(k) => shown.push(Shown::Elided(k)),
                            None => shown.extend((0..expansion(ip)).map(|j| Shown::Frame((ip, j)))),
                        }
                    }
                    let cut = policy.limit_shown(&mut shown);
                    let case = format!("inner {inner} outer {outer} total {total}: {shown:?}");
                    let marker = shown.iter().position(|f| matches!(f, Shown::Elided(_)));
                    let frames: Vec<(u64, u64)> = shown
                        .iter()
                        .filter_map(|f| match f {
                            Shown::Frame(x) => Some(*x),
                            Shown::Elided(_) => None,
                        })
                        .collect();
                    let (head, tail) = match marker {
                        Some(at) => (at, frames.len() - at),
                        None if outer == 0 => (frames.len(), 0),
                        None if inner == 0 => (0, frames.len()),
                        None => (frames.len(), 0),
                    };
                    if marker.is_some() || inner == 0 || outer == 0 {
                        assert!(head <= inner && tail <= outer, "{case}");
                    } else {
                        assert!(frames.len() <= inner + outer, "{case}");
                    }
                    assert_eq!(frames[..head], full[..head], "innermost frames: {case}");
                    assert_eq!(frames[head..], full[full.len() - tail..], "outermost frames: {case}");
                    let anything_cut = walk_cut || cut;
                    assert_eq!(anything_cut, frames.len() < full.len(), "{case}");
                    assert_eq!(marker.is_some(), anything_cut && inner > 0 && outer > 0, "{case}");
                    if let Some(at) = marker {
                        let Shown::Elided(k) = shown[at] else { unreachable!() };
                        let never_kept = addresses.iter().filter(|ip| !walked.contains(ip));
                        let unexpanded: u64 = never_kept.map(|&ip| expansion(ip) - 1).sum();
                        assert_eq!(k + frames.len() as u64 + unexpanded, full.len() as u64, "{case}");
                    }
                }
            }
        }
    }
}
