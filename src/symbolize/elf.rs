//! The program headers of an ELF64 image: its `PT_LOAD` segments and GNU build ID.

/// What the program headers of an ELF file tell us.
#[derive(Default)]
pub(super) struct ElfLayout {
    /// `PT_LOAD` segments: (file offset, file size, virtual address).
    pub(super) loads: Vec<(u64, u64, u64)>,
    /// The GNU build ID from a `PT_NOTE` segment.
    pub(super) build_id: Option<Vec<u8>>,
}

/// Reads the program headers of an ELF64 image through `read_at(buf, offset)`.
pub(super) fn read_elf_layout(read_at: impl Fn(&mut [u8], u64) -> Option<()>) -> Option<ElfLayout> {
    let mut ehdr = [0u8; 64];
    read_at(&mut ehdr, 0)?;
    if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 {
        return None; // not ELF, or not ELF64
    }
    let big = match ehdr[5] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let u16_at = |b: &[u8], o: usize| {
        let a = [b[o], b[o + 1]];
        if big {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    };
    let u32_at = |b: &[u8], o: usize| {
        let a: [u8; 4] = b[o..o + 4].try_into().unwrap_or_default();
        if big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    };
    let u64_at = |b: &[u8], o: usize| {
        let a: [u8; 8] = b[o..o + 8].try_into().unwrap_or_default();
        if big {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        }
    };
    let phoff = u64_at(&ehdr, 0x20);
    let phentsize = usize::from(u16_at(&ehdr, 0x36));
    let phnum = usize::from(u16_at(&ehdr, 0x38));
    if !(56..=256).contains(&phentsize) || phnum > 4096 {
        return None;
    }
    let mut phdrs = vec![0u8; phentsize * phnum];
    read_at(&mut phdrs, phoff)?;
    let mut layout = ElfLayout::default();
    for p in phdrs.chunks_exact(phentsize) {
        let (offset, filesz) = (u64_at(p, 8), u64_at(p, 32));
        match u32_at(p, 0) {
            1 => layout.loads.push((offset, filesz, u64_at(p, 16))), // PT_LOAD
            4 if layout.build_id.is_none() && filesz <= 1 << 16 => {
                // PT_NOTE: namesz, descsz, type, then name and desc, each padded to `align`.
                let align: usize = if u64_at(p, 48) == 8 { 8 } else { 4 };
                let mut notes = vec![0u8; filesz as usize];
                if read_at(&mut notes, offset).is_none() {
                    continue;
                }
                let pad = |n: usize| n.div_ceil(align) * align;
                let mut at = 0;
                while at + 12 <= notes.len() {
                    let namesz = u32_at(&notes, at) as usize;
                    let descsz = u32_at(&notes, at + 4) as usize;
                    let kind = u32_at(&notes, at + 8);
                    let name_at = at + 12;
                    let desc_at = name_at + pad(namesz);
                    let Some(desc) = notes.get(desc_at..desc_at + descsz) else {
                        break;
                    };
                    // NT_GNU_BUILD_ID
                    if kind == 3 && notes.get(name_at..name_at + namesz) == Some(b"GNU\0") {
                        layout.build_id = Some(desc.to_vec());
                        break;
                    }
                    at = desc_at + pad(descsz);
                }
            }
            _ => {}
        }
    }
    Some(layout)
}
