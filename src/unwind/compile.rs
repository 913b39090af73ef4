//! Compiling `.eh_frame` into [`ModuleTable`]s, and the process's [`Tables`] from
//! `/proc/self/maps` (normal context: reads files, allocates).
//!
//! gimli evaluates each FDE's CFI program into rows (`UnwindTable`); each row becomes one [`Row`]
//! when its rule is one the walk expresses. A file's table is built once and shared by every
//! snapshot that maps it ([`Compiler`] keeps them by path, device and inode).

use super::tables::{fp_rule, kind, Mapped, ModuleTable, Row, Tables, PAGE_SHIFT};
use gimli::{BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection};
use object::{Object as _, ObjectSection as _, ObjectSegment as _};
use std::collections::HashMap;
use std::sync::Arc;

/// DWARF register numbers on x86_64.
const RSP: u16 = 7;
const RBP: u16 = 6;
const RA: u16 = 16;

/// The lazy-binding PLT's CFA expression as GNU ld writes it, up to the threshold literal:
/// `DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge; DW_OP_lit3;
/// DW_OP_shl; DW_OP_plus`.
const PLT_EXPR_HEAD: [u8; 6] = [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a];
const PLT_EXPR_TAIL: [u8; 4] = [0x2a, 0x33, 0x24, 0x22];

/// Why a file has no table.
#[derive(Debug)]
pub enum CompileError {
    /// The file could not be read or is not an ELF file we read.
    File(String),
    /// No `.eh_frame` section.
    NoEhFrame,
    /// The CFI could not be parsed.
    Cfi(gimli::Error),
    /// The file's code spans more than 4 GiB (rows hold 32-bit offsets).
    TooLarge,
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompileError::File(e) => write!(f, "{e}"),
            CompileError::NoEhFrame => f.write_str("no .eh_frame section"),
            CompileError::Cfi(e) => write!(f, "bad .eh_frame: {e}"),
            CompileError::TooLarge => f.write_str("code larger than 4 GiB"),
        }
    }
}

/// A file's table from its `.eh_frame`.
pub fn compile_file(path: &str) -> Result<ModuleTable, CompileError> {
    let mut table = with_eh_frame(path, compile_eh_frame)?;
    table.path = path.to_owned();
    Ok(table)
}

/// The signal return trampolines of a file (FDEs whose CIE is augmented `S`, as `[start, end)`
/// file addresses), without compiling its rules: what the symbolizer names a nameless address
/// in (the tables mark the same FDEs `kind::SIGNAL`).
pub fn signal_trampolines(path: &str) -> Result<Vec<(u64, u64)>, CompileError> {
    with_eh_frame(path, |data, bases| {
        let eh = EhFrame::new(data, LittleEndian);
        let mut out = Vec::new();
        let mut entries = eh.entries(bases);
        while let Some(entry) = entries.next().map_err(CompileError::Cfi)? {
            let CieOrFde::Fde(partial) = entry else { continue };
            let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else { continue };
            if fde.is_signal_trampoline() {
                out.push((fde.initial_address(), fde.initial_address() + fde.len()));
            }
        }
        Ok(out)
    })
}

/// Runs `f` on a file's `.eh_frame` bytes and the addresses they are relative to.
fn with_eh_frame<R>(
    path: &str,
    f: impl FnOnce(&[u8], &BaseAddresses) -> Result<R, CompileError>,
) -> Result<R, CompileError> {
    // The file is read in a descriptor table of the reader's own (`fds::in_private_table`): a
    // program that closes or `dup2`s over every number meanwhile keeps its files, and the bytes
    // are compiled after the file is closed.
    let (data, bases) = crate::fds::in_private_table(|| {
        let file = std::fs::File::open(path).map_err(|e| CompileError::File(format!("{path}: {e}")))?;
        let cache = object::ReadCache::new(file);
        let obj = object::File::parse(&cache).map_err(|e| CompileError::File(format!("{path}: {e}")))?;
        let section = obj.section_by_name(".eh_frame").ok_or(CompileError::NoEhFrame)?;
        let data = section.data().map_err(|e| CompileError::File(format!("{path}: {e}")))?.to_vec();
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = obj.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = obj.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        Ok((data, bases))
    })?;
    f(&data, &bases)
}

/// One FDE: its start and end (file addresses) and its rows (absolute file address, rule).
type FdeRows = (u64, u64, Vec<(u64, Row)>);

/// A table from `.eh_frame` bytes (file addresses as `bases` says).
pub fn compile_eh_frame(data: &[u8], bases: &BaseAddresses) -> Result<ModuleTable, CompileError> {
    let eh = EhFrame::new(data, LittleEndian);
    let mut ctx = Box::new(UnwindContext::new());
    // (start, end, rows starting at absolute file addresses), one per FDE.
    let mut fdes: Vec<FdeRows> = Vec::new();
    let (mut fp_framed, mut with_rows) = (0usize, 0usize);
    // Functions that set up a stack frame without the frame pointer: (start, end).
    let mut sp_framed: Vec<(u64, u64)> = Vec::new();
    let mut entries = eh.entries(bases);
    while let Some(entry) = entries.next().map_err(CompileError::Cfi)? {
        let CieOrFde::Fde(partial) = entry else { continue };
        // A bad FDE costs that function's table, not the module's.
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else { continue };
        if fde.len() == 0 {
            continue;
        }
        let Ok(mut rows) = fde.rows(&eh, bases, &mut ctx) else { continue };
        let mut out = Vec::new();
        if cfg!(target_arch = "x86_64") && fde.is_signal_trampoline() {
            // Its CFI is DWARF expressions over the kernel's ucontext, which the walk reads
            // itself (`kind::SIGNAL`, x86_64's layout).
            let row = Row { pc: 0, cfa_offset: 0, fp_offset: 0, kind: kind::SIGNAL, fp_rule: fp_rule::SAME };
            fdes.push((fde.initial_address(), fde.initial_address() + fde.len(), vec![(fde.initial_address(), row)]));
            continue;
        }
        let (mut uses_fp, mut has_frame) = (false, false);
        while let Ok(Some(row)) = rows.next_row() {
            let r = convert(&eh, row);
            uses_fp |= r.kind == kind::CFA_FP;
            has_frame |= r.kind == kind::CFA_SP && r.cfa_offset > 8;
            out.push((row.start_address(), r));
        }
        if !out.is_empty() {
            with_rows += 1;
            fp_framed += usize::from(uses_fp);
        }
        if has_frame && !uses_fp {
            sp_framed.push((fde.initial_address(), fde.initial_address() + fde.len()));
        }
        fdes.push((fde.initial_address(), fde.initial_address() + fde.len(), out));
    }
    fdes.sort_by_key(|f| f.0);
    let base = fdes.first().map_or(0, |f| f.0);
    let mut rows: Vec<Row> = Vec::new();
    let offset = |addr: u64| u32::try_from(addr - base).map_err(|_| CompileError::TooLarge);
    for (i, (start, end, fde_rows)) in fdes.iter().enumerate() {
        let (start, end) = (*start, *end);
        for (addr, r) in fde_rows {
            // Rows of an FDE that overlaps the previous one (rare, bad CFI) must not go back.
            if *addr < start || rows.last().is_some_and(|l| l.pc > offset(*addr).unwrap_or(u32::MAX)) {
                continue;
            }
            let r = Row { pc: offset(*addr)?, ..*r };
            match rows.last_mut() {
                Some(l) if l.pc == r.pc => *l = r,
                Some(l)
                    if (l.kind, l.cfa_offset, l.fp_rule, l.fp_offset)
                        == (r.kind, r.cfa_offset, r.fp_rule, r.fp_offset) => {}
                _ => rows.push(r),
            }
        }
        let next_start = fdes.get(i + 1).map(|f| f.0);
        if next_start != Some(end) {
            rows.push(Row { pc: offset(end)?, cfa_offset: 0, fp_offset: 0, kind: kind::NONE, fp_rule: fp_rule::SAME });
        }
    }
    let pages = ModuleTable::page_index(&rows);
    // Pages holding code of a function that frames itself without the frame pointer: Auto walks
    // by the table there even in a module built with frame pointers (a Rust program built
    // without them links a std built with them; C dependencies such as zstd are built without).
    let mut sp_framed_pages = vec![0u64; pages.len().div_ceil(64)];
    for (start, end) in sp_framed {
        let (Some(first), Some(last)) = (start.checked_sub(base), end.checked_sub(base + 1)) else { continue };
        for page in (first >> PAGE_SHIFT)..=(last >> PAGE_SHIFT) {
            if let Some(w) = sp_framed_pages.get_mut((page / 64) as usize) {
                *w |= 1 << (page % 64);
            }
        }
    }
    Ok(ModuleTable {
        path: String::new(),
        base,
        pages,
        rows: rows.into_boxed_slice(),
        has_frame_pointers: with_rows > 0 && fp_framed * 2 >= with_rows,
        sp_framed_pages: sp_framed_pages.into_boxed_slice(),
    })
}

fn convert(eh: &EhFrame<gimli::EndianSlice<'_, LittleEndian>>, row: &gimli::UnwindTableRow<usize>) -> Row {
    let unsupported = Row { pc: 0, cfa_offset: 0, fp_offset: 0, kind: kind::UNSUPPORTED, fp_rule: fp_rule::SAME };
    match row.register(gimli::Register(RA)) {
        Some(RegisterRule::Undefined) => return Row { kind: kind::OUTERMOST, ..unsupported },
        Some(RegisterRule::Offset(-8)) => {}
        _ => return unsupported,
    }
    let (cfa_kind, cfa_offset) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(offset) = i32::try_from(*offset) else { return unsupported };
            match register.0 {
                RSP => (kind::CFA_SP, offset),
                RBP => (kind::CFA_FP, offset),
                _ => return unsupported,
            }
        }
        CfaRule::Expression(e) => {
            let Ok(expr) = e.get(eh) else { return unsupported };
            let bytes = expr.0.slice();
            match bytes {
                [h @ .., lit, t0, t1, t2, t3]
                    if *h == PLT_EXPR_HEAD && [*t0, *t1, *t2, *t3] == PLT_EXPR_TAIL && (0x30..=0x4f).contains(lit) =>
                {
                    (kind::PLT, i32::from(*lit - 0x30))
                }
                _ => return unsupported,
            }
        }
    };
    let (fp, fp_offset) = match row.register(gimli::Register(RBP)) {
        None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => (fp_rule::SAME, 0),
        Some(RegisterRule::Offset(o)) => match i16::try_from(o) {
            Ok(o) => (fp_rule::AT_CFA, o),
            Err(_) => return unsupported,
        },
        Some(_) => return unsupported,
    };
    Row { pc: 0, cfa_offset, fp_offset, kind: cfa_kind, fp_rule: fp }
}

/// Builds snapshots of the process's tables, compiling each file once.
#[derive(Debug, Default)]
pub struct Compiler {
    /// By (path, device, inode) as `/proc/self/maps` names them; `None`: the file has no table.
    files: HashMap<(String, String, u64), Option<Arc<ModuleTable>>>,
    /// The executable mappings of the last snapshot, to tell whether anything changed.
    last: Vec<(usize, usize, String)>,
}

impl Compiler {
    /// A new snapshot if the executable mappings changed since the last call (`None`: unchanged).
    pub fn refresh(&mut self) -> Option<Tables> {
        self.refresh_files(&|_| true)
    }

    /// As [`Compiler::refresh`], compiling only the files `wanted` accepts (the others are left
    /// out of the snapshot, and the next call looks at the mappings again even if unchanged).
    pub fn refresh_files(&mut self, wanted: &dyn Fn(&str) -> bool) -> Option<Tables> {
        let maps = crate::threads::proc::read_maps()?;
        let mut exec: Vec<crate::threads::proc::MapsLine> =
            maps.lines().filter_map(crate::threads::proc::parse_maps_line).filter(|m| m.executable).collect();
        exec.sort_by_key(|m| m.start);
        let key: Vec<(usize, usize, String)> = exec.iter().map(|m| (m.start, m.end, m.path.to_owned())).collect();
        if key == self.last {
            return None;
        }
        self.last = key;
        let mut modules = Vec::new();
        let mut incomplete = false;
        for m in &exec {
            if !m.path.starts_with('/') {
                continue;
            }
            if !wanted(m.path) {
                incomplete = true;
                continue;
            }
            let id = (m.path.to_owned(), m.dev.to_owned(), m.inode);
            let table = self
                .files
                .entry(id)
                .or_insert_with(|| compile_file(m.path.strip_suffix(" (deleted)").unwrap_or(m.path)).ok().map(Arc::new))
                .clone();
            let Some(table) = table else { continue };
            let Some(bias) = load_bias(m.path, m.start, m.offset) else { continue };
            modules.push(Mapped { start: m.start, end: m.end, bias, table });
        }
        if incomplete {
            self.last.clear();
        }
        Some(Tables { modules: modules.into_boxed_slice() })
    }
}

/// Runtime address minus file address for an executable mapping at `start` of file offset
/// `offset`: from the executable `PT_LOAD` whose (page-aligned) file range holds `offset`. A
/// segment's file offset need not be page-aligned while the mapping's is, so the mapping may also
/// start inside the previous (read-only) segment's range: that one must not be taken.
fn load_bias(path: &str, start: usize, offset: u64) -> Option<usize> {
    let segments = crate::fds::in_private_table(|| {
        let file = std::fs::File::open(path.strip_suffix(" (deleted)").unwrap_or(path)).ok()?;
        let cache = object::ReadCache::new(file);
        let obj = object::File::parse(&cache).ok()?;
        Some(obj.segments().map(|seg| (seg.flags(), seg.file_range(), seg.address())).collect::<Vec<_>>())
    })?;
    for (flags, (foff, fsize), vaddr) in segments {
        let executable =
            matches!(flags, object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0);
        if executable && offset >= foff & !0xfff && offset < foff + fsize.max(1) {
            // p_vaddr and p_offset agree modulo the page size: the mapping's first byte is at
            // file address p_vaddr - p_offset + offset.
            let vaddr = vaddr.wrapping_sub(foff).wrapping_add(offset);
            return Some(start.wrapping_sub(vaddr as usize));
        }
    }
    None
}
