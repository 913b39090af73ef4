//! The recording's constant pools: symbols, packages, classes, methods, the frames of each
//! address and the names of threads. Keys are assigned once per recording and never reused for
//! another value (design.md §4), so a constant keeps its key in every chunk; which of them a
//! chunk has *defined* is the chunk writer's business (`super::Defined`).
//!
//! How a native frame is named (class, package, method, frame type) and how a stack-trace key
//! becomes the frames a reader shows (`Pools::expand_stack`) live here, in one place.

use crate::stack::{as_elided, StackKey, StackTable};
use jfr_format::metadata::{FRAME_TYPE_INLINED, FRAME_TYPE_NATIVE};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One frame of an address as the symbolizer names it (innermost inlined frame first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameName {
    /// The function's path without its last segment (`myapp::parser::Parser`), or the library.
    pub class: String,
    /// The crate, or the library.
    pub package: String,
    /// The last path segment, or the whole C name.
    pub method: String,
    /// Source line, if debug info has one.
    pub line: Option<u32>,
    /// An inlined frame (all but the physical, outermost frame of an address).
    pub inlined: bool,
}

/// Addresses whose serialized frames the pools keep (about 100 bytes each).
const MAX_CACHED_ADDRESSES: usize = 1 << 16;

/// What the checkpoint needs from outside the chunk writer: names of addresses and of threads.
/// The flusher answers it with L released (`ChunkWriter::unresolved` / `resolved`); this trait
/// is the fallback for what is still missing when the checkpoint is written.
pub trait Resolve {
    /// The frames of `ip` (innermost inlined first); `is_return_address` for every frame of a
    /// stack but the leaf.
    fn frames(&mut self, ip: u64, is_return_address: bool) -> Vec<FrameName>;
    /// The name of thread `tid`.
    fn thread_name(&mut self, tid: u32) -> String;
}

/// An address of a stack, as the symbolizer is asked for it: (ip, is a return address).
pub type Address = (u64, bool);

/// A frame as serialized: method key, line, frame type key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FrameRef {
    pub method: u64,
    pub line: i32,
    pub frame_type: u64,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct MethodDef {
    pub class: u64,
    pub name: u64,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct ClassDef {
    pub name: u64,
    pub package: u64,
}

/// Classes whose frames are the recorder's own and are dropped from the inner end of stacks.
const OWN_CLASS_PREFIXES: [&str; 6] = [
    "recorder::event",
    "<recorder::event",
    "recorder::commit",
    "recorder::unwind",
    "recorder::stack",
    "recorder::buffer",
];

/// The pools (see the module docs).
#[derive(Debug)]
pub(super) struct Pools {
    next_key: u64,
    symbol_keys: HashMap<String, u64>,
    pub symbol_text: BTreeMap<u64, String>,
    class_keys: HashMap<String, u64>,
    pub class_defs: HashMap<u64, ClassDef>,
    package_keys: HashMap<String, u64>,
    /// Package key -> its name's symbol.
    pub package_defs: HashMap<u64, u64>,
    method_keys: HashMap<(u64, u64), u64>,
    pub method_defs: HashMap<u64, MethodDef>,
    /// The serialized frames of each address.
    frames: HashMap<Address, Vec<FrameRef>>,
    /// Classes and methods of the recorder's own commit path (see `OWN_CLASS_PREFIXES`).
    own_classes: HashSet<u64>,
    own_frames: HashSet<u64>,
    /// Thread names, captured while the threads run (and their renames).
    pub thread_names: crate::thread::ThreadNames,
    scratch: Vec<u64>,
}

impl Pools {
    pub fn new() -> Pools {
        Pools {
            next_key: 1,
            symbol_keys: HashMap::new(),
            symbol_text: BTreeMap::new(),
            class_keys: HashMap::new(),
            class_defs: HashMap::new(),
            package_keys: HashMap::new(),
            package_defs: HashMap::new(),
            method_keys: HashMap::new(),
            method_defs: HashMap::new(),
            frames: HashMap::new(),
            own_classes: HashSet::new(),
            own_frames: HashSet::new(),
            thread_names: Default::default(),
            scratch: Vec::new(),
        }
    }

    fn key(&mut self) -> u64 {
        let k = self.next_key;
        self.next_key += 1;
        k
    }

    pub fn symbol(&mut self, text: &str) -> u64 {
        if let Some(&k) = self.symbol_keys.get(text) {
            return k;
        }
        let k = self.key();
        self.symbol_keys.insert(text.to_owned(), k);
        self.symbol_text.insert(k, text.to_owned());
        k
    }

    fn package(&mut self, name: &str) -> u64 {
        if let Some(&k) = self.package_keys.get(name) {
            return k;
        }
        let sym = self.symbol(name);
        let k = self.key();
        self.package_keys.insert(name.to_owned(), k);
        self.package_defs.insert(k, sym);
        k
    }

    fn class(&mut self, name: &str, package: &str) -> u64 {
        if let Some(&k) = self.class_keys.get(name) {
            return k;
        }
        let name_sym = self.symbol(name);
        let package = if package.is_empty() { 0 } else { self.package(package) };
        let k = self.key();
        if OWN_CLASS_PREFIXES.iter().any(|p| name.starts_with(p)) {
            self.own_classes.insert(k);
        }
        self.class_keys.insert(name.to_owned(), k);
        self.class_defs.insert(k, ClassDef { name: name_sym, package });
        k
    }

    fn method(&mut self, class: u64, name: &str) -> u64 {
        let name_sym = self.symbol(name);
        let key = match self.method_keys.get(&(class, name_sym)) {
            Some(&k) => k,
            None => {
                let k = self.key();
                self.method_keys.insert((class, name_sym), k);
                self.method_defs.insert(k, MethodDef { class, name: name_sym });
                k
            }
        };
        if self.own_classes.contains(&class) {
            self.own_frames.insert(key);
        }
        key
    }

    /// The address needs no symbolizer (its frames are known, or it is a synthetic frame).
    pub fn knows(&self, address: Address) -> bool {
        as_elided(address.0).is_some() || self.frames.contains_key(&address)
    }

    /// Takes the symbolizer's names of `address` into the pools.
    pub fn add_frames(&mut self, address: Address, names: Vec<FrameName>) {
        if self.frames.contains_key(&address) {
            return;
        }
        let mut refs = Vec::with_capacity(names.len());
        for f in names {
            let class = self.class(&f.class, &f.package);
            let method = self.method(class, &f.method);
            refs.push(FrameRef {
                method,
                line: f.line.map_or(-1, |l| l as i32),
                frame_type: if f.inlined { FRAME_TYPE_INLINED } else { FRAME_TYPE_NATIVE },
            });
        }
        self.cache_frames(address, refs);
    }

    /// Keeps the frames of `address`, within [`MAX_CACHED_ADDRESSES`]: a process that keeps
    /// reaching new addresses has old ones symbolized again rather than a cache that only grows.
    fn cache_frames(&mut self, address: Address, refs: Vec<FrameRef>) {
        if self.frames.len() >= MAX_CACHED_ADDRESSES {
            self.frames.clear();
        }
        self.frames.insert(address, refs);
    }

    /// The serialized frames of one address (inlined frames first); `fallback` names an address
    /// the flusher did not resolve beforehand.
    fn frames_of(&mut self, address: Address, fallback: &mut dyn Resolve) -> Vec<FrameRef> {
        if let Some(f) = self.frames.get(&address) {
            return f.clone();
        }
        if let Some(k) = as_elided(address.0) {
            let class = self.class("", "");
            let method = self.method(class, &format!("<elided:{k}>"));
            let refs = vec![FrameRef { method, line: -1, frame_type: FRAME_TYPE_NATIVE }];
            self.cache_frames(address, refs.clone());
            return refs;
        }
        let names = fallback.frames(address.0, address.1);
        self.add_frames(address, names);
        self.frames[&address].clone()
    }

    /// The frames a reader shows for stack-trace `key`, innermost first: every address expanded
    /// into its inlined frames, the recorder's own innermost frames dropped. `None` if the key
    /// names no stack of `stacks`.
    pub fn expand_stack(
        &mut self,
        stacks: &StackTable,
        key: StackKey,
        fallback: &mut dyn Resolve,
    ) -> Option<Vec<FrameRef>> {
        let mut ips = std::mem::take(&mut self.scratch);
        ips.clear();
        let found = stacks.expand(key, &mut ips);
        let mut frames = Vec::with_capacity(ips.len());
        if found {
            for (i, &ip) in ips.iter().enumerate() {
                // Every frame but the leaf holds a return address (design.md §6).
                frames.extend(self.frames_of((ip, i > 0), fallback));
            }
        }
        self.scratch = ips;
        if !found {
            return None;
        }
        // The recorder's own frames never show: the commit API is inlined into its caller, so
        // the innermost address of an event's stack also names `Event::commit` and friends.
        let own = frames.iter().take_while(|f| self.own_frames.contains(&f.method)).count();
        if own < frames.len() {
            frames.drain(..own);
        }
        Some(frames)
    }

    /// The addresses of stack `key` the pools cannot name yet (appended to `out`).
    pub fn unknown_addresses(&mut self, stacks: &StackTable, key: StackKey, out: &mut Vec<Address>) {
        let mut ips = std::mem::take(&mut self.scratch);
        ips.clear();
        if stacks.expand(key, &mut ips) {
            for (i, &ip) in ips.iter().enumerate() {
                if !self.knows((ip, i > 0)) {
                    out.push((ip, i > 0));
                }
            }
        }
        self.scratch = ips;
    }
}
