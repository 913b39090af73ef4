//! How much of a piece of memory is resident: what the recorder's parts that are allocated at
//! start but written only where used (the stack table, the sampler's buffers) actually take.

/// Bytes of the pages `bytes` touches that are resident now (`mincore`); the whole length when
/// the kernel does not tell. Normal context: allocates a byte per page.
pub fn resident_bytes<T>(bytes: &[T]) -> usize {
    resident_range(bytes.as_ptr() as usize, std::mem::size_of_val(bytes))
}

/// As [`resident_bytes`], for `len` bytes at `start`, which must be mapped (for file-backed
/// pages `mincore` tells whether the page cache holds them, which other processes may share).
pub fn resident_range(start: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let first = start / page * page;
    let end = (start + len).div_ceil(page) * page;
    let mut vec = vec![0u8; (end - first) / page];
    // SAFETY: [first, end) covers the pages of a mapped range (a live slice, or segments of a
    // loaded library); `vec` has one byte per page of it, as mincore writes.
    let rc = unsafe { libc::mincore(first as *mut libc::c_void, end - first, vec.as_mut_ptr()) };
    if rc != 0 {
        return len;
    }
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count() * page;
    resident.min(len)
}
