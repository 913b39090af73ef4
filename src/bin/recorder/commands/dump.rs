//! `recorder dump`: a copy of the recording that keeps only the chosen event types (what newer
//! JDKs call `jfr scrub`).
//!
//! Each chunk is re-encoded: metadata records are copied, the checkpoints of the chain are copied
//! with their deltas recomputed for their new offsets, kept event records are copied byte for
//! byte, and a new header is written (state finished, final flag on the last chunk only). Chunks
//! are written back to back with no trailing bytes.

use crate::args::DumpConfig;
use crate::source::{self, Damage, SourceChunk};
use crate::Outcome;
use anyhow::Context;
use jfr_format::header::{ChunkHeader, FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, HEADER_SIZE};
use jfr_format::{varint, write};
use std::io::Write;

pub fn run(cfg: &DumpConfig) -> anyhow::Result<Outcome> {
    let mut source = source::load(&cfg.path)?;
    source::check_type_names(cfg.filter.names(), &source.chunks)?;
    // Chunks are re-encoded and written one at a time; the last one is held back until we know
    // it is the last (it gets the final flag). A damaged chunk is not written: the output holds
    // the chunks that were fully readable. OUT is written under a temporary name and renamed, so
    // it is never a half-written recording.
    let mut partial = cfg.output.clone().into_os_string();
    partial.push(".part");
    let partial = std::path::PathBuf::from(partial);
    let mut chunk_damage = None;
    let written = (|| -> std::io::Result<()> {
        let mut out = None;
        let mut held: Option<Vec<u8>> = None;
        for sc in &source.chunks {
            let bytes = match rewrite_chunk(sc, cfg) {
                Ok(bytes) => bytes,
                Err(e) => {
                    chunk_damage = Some(Damage::in_chunk(&sc.file, e));
                    break;
                }
            };
            if let Some(previous) = held.replace(bytes) {
                output(&mut out, &partial)?.write_all(&previous)?;
            }
        }
        let Some(mut last) = held else {
            return Ok(()); // nothing readable: no output file
        };
        // Flags are the big-endian u16 at 66; the JDK reads byte 67.
        last[67] |= FLAG_FINAL_CHUNK as u8;
        let out = output(&mut out, &partial)?;
        out.write_all(&last)?;
        out.flush()?;
        out.get_ref().sync_all()?;
        std::fs::rename(&partial, &cfg.output)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("{}", cfg.output.display()));
    }
    if let Some(d) = chunk_damage {
        source.damage.insert(0, d);
    }
    source.report_damage();
    Ok(if source.damage.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}

/// The output file, created on first use.
fn output<'o>(
    out: &'o mut Option<std::io::BufWriter<std::fs::File>>,
    path: &std::path::Path,
) -> std::io::Result<&'o mut std::io::BufWriter<std::fs::File>> {
    let writer = match out.take() {
        Some(w) => w,
        None => std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?),
    };
    Ok(out.insert(writer))
}

/// Re-encodes one chunk with only the kept events. The final flag is left clear.
fn rewrite_chunk(sc: &SourceChunk, cfg: &DumpConfig) -> jfr_format::Result<Vec<u8>> {
    let chunk = &sc.chunk;
    let types = chunk.types();
    let keep: Vec<bool> = types.classes().iter().map(|c| c.is_event() && cfg.filter.keeps(&c.name)).collect();
    let old = *chunk.header();
    let chain = chunk.checkpoint_offsets();
    let mut out = Vec::with_capacity(chunk.size() as usize);
    out.resize(HEADER_SIZE, 0);
    let mut metadata_offset = 0u64;
    let mut last_checkpoint = 0u64;
    for record in chunk.records() {
        let record = record?;
        if record.offset < HEADER_SIZE as u64 {
            continue;
        }
        match record.type_id {
            0 => {
                // Only the metadata the header names is current; earlier ones are copied too, so
                // that the chunk keeps its history, but the header points at the current one.
                if record.offset == old.metadata_offset as u64 || metadata_offset == 0 {
                    metadata_offset = out.len() as u64;
                }
                out.extend_from_slice(&record.bytes);
            }
            1 => {
                if chain.binary_search(&record.offset).is_err() {
                    // Not on the chain the header starts: readers never see it.
                    continue;
                }
                let offset = out.len() as u64;
                let delta = if last_checkpoint == 0 { 0 } else { last_checkpoint as i64 - offset as i64 };
                relink_checkpoint(&record.bytes, delta, &mut out, sc, record.offset)?;
                last_checkpoint = offset;
            }
            id => {
                if types.class_index(id).is_some_and(|i| keep[i]) {
                    out.extend_from_slice(&record.bytes);
                }
            }
        }
    }
    let header = ChunkHeader {
        chunk_size: out.len() as i64,
        cp_offset: last_checkpoint as i64,
        metadata_offset: metadata_offset as i64,
        state: jfr_format::header::STATE_FINISHED,
        flags: FLAG_COMPRESSED_INTS,
        ..old
    };
    out[..HEADER_SIZE].copy_from_slice(&header.encode());
    Ok(out)
}

/// Appends the checkpoint record `bytes` with its delta replaced by `delta`.
fn relink_checkpoint(
    bytes: &[u8],
    delta: i64,
    out: &mut Vec<u8>,
    sc: &SourceChunk,
    offset: u64,
) -> jfr_format::Result<()> {
    let at = sc.chunk.base() + offset;
    let bad = || jfr_format::Error::UnexpectedEof { offset: at, expected: "a checkpoint header" };
    // size, type id, start time, duration, delta: five varints; the rest is copied as is.
    let mut pos = 0;
    let mut fields = [0u64; 5];
    for f in &mut fields {
        let (v, n) = varint::read_u64(bytes.get(pos..).ok_or_else(bad)?).ok_or_else(bad)?;
        *f = v;
        pos += n;
    }
    let rest = bytes.get(pos..).ok_or_else(bad)?;
    let mut body = Vec::with_capacity(rest.len() + 32);
    write::put_varint(&mut body, 1);
    write::put_varint(&mut body, fields[2]);
    write::put_varint(&mut body, fields[3]);
    write::put_long(&mut body, delta);
    body.extend_from_slice(rest);
    // The size counts its own bytes: find the width that holds the total.
    let mut size = body.len() as u64 + 1;
    while varint::encoded_len(size) + body.len() != size as usize {
        size = (varint::encoded_len(size) + body.len()) as u64;
    }
    write::put_varint(out, size);
    out.extend_from_slice(&body);
    Ok(())
}
