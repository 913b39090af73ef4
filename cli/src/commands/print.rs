//! `recorder print`: every event with its fields, thread and stack trace, as text or JSON lines.
//!
//! Work is split into units (a chunk, or a ~2 MB run of a large chunk's records) that are rendered
//! in parallel, each with its own caches (constant keys are chunk-local), and written in recording
//! order: worker threads take units in order and hand their output in pieces through one bounded
//! channel per unit; the main thread drains the channels in unit order. Memory stays bounded by
//! the channel depth, and the unit the main thread waits for is always being rendered (workers
//! take units in increasing order), so the pipeline cannot deadlock.

use crate::args::PrintConfig;
use crate::render::{HumanRenderer, JsonRenderer, TypeInfo};
use crate::source::{self, Damage, SourceChunk};
use crate::Outcome;
use jfr_format::header::HEADER_SIZE;
use jfr_format::{Event, Item};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;

/// Output is handed over in pieces of about this size.
const PIECE_BYTES: usize = 256 * 1024;
/// Pieces in flight per chunk.
const PIECES_IN_FLIGHT: usize = 4;

enum Msg {
    Data(Vec<u8>),
    Damage(jfr_format::Error),
}

pub fn run(cfg: &PrintConfig) -> anyhow::Result<Outcome> {
    let mut source = source::load(&cfg.path, cfg.recordings)?;
    source::check_type_names(cfg.filter.names(), &source.chunks)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let damage = print_chunks(&source.chunks, cfg, &mut out)?;
    out.flush()?;
    drop(out);
    if let Some(d) = damage {
        // Events were printed up to the damage; later chunks are not printed. One damage per
        // file: the load may have met the same one.
        source.damage.retain(|x| x.file != d.file);
        source.damage.insert(0, d);
    }
    source.report_damage();
    Ok(if source.damage.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}

/// A piece of work: the records of one chunk in `[from, to)` (chunk-relative offsets, record
/// boundaries). Large chunks are split so that both cores stay busy even on one-chunk files.
struct Unit<'a> {
    sc: &'a SourceChunk,
    info: &'a TypeInfo,
    /// `keep[class index]`: the class is an event type the filter keeps.
    keep: &'a [bool],
    from: usize,
    to: usize,
}

/// Units are cut at the first record boundary after this many bytes.
const UNIT_BYTES: usize = 2 * 1024 * 1024;

/// [`UNIT_BYTES`], unless the environment variable `RECORDER_PRINT_UNIT_BYTES` sets another size
/// (a test hook: the tests cut small units to check that output order survives the split).
fn unit_bytes() -> usize {
    std::env::var("RECORDER_PRINT_UNIT_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(UNIT_BYTES)
}

fn plan_units<'a>(chunks: &'a [SourceChunk], infos: &'a [(TypeInfo, Vec<bool>)], info_of: &[usize]) -> Vec<Unit<'a>> {
    let unit_bytes = unit_bytes();
    let mut units = Vec::new();
    for (sc, &i) in chunks.iter().zip(info_of) {
        let (info, keep) = &infos[i];
        if !keep.contains(&true) {
            continue;
        }
        let end = sc.chunk.bytes().len();
        let mut from = HEADER_SIZE;
        for record in sc.chunk.records() {
            let Ok(record) = record else {
                break; // the unit that reaches here reports the damage
            };
            let pos = record.offset as usize + record.bytes.len();
            if pos - from >= unit_bytes && pos < end {
                units.push(Unit { sc, info, keep, from, to: pos });
                from = pos;
            }
        }
        units.push(Unit { sc, info, keep, from, to: end });
    }
    units
}

/// Renders every chunk in order into `out`; returns the first damage found inside a chunk.
fn print_chunks(chunks: &[SourceChunk], cfg: &PrintConfig, out: &mut impl Write) -> std::io::Result<Option<Damage>> {
    // One rendering plan per distinct type table (consecutive chunks usually share one).
    let mut infos: Vec<(TypeInfo, Vec<bool>)> = Vec::new();
    let mut info_of = Vec::with_capacity(chunks.len());
    let mut last: Option<&std::sync::Arc<jfr_format::read::TypeTable>> = None;
    for sc in chunks {
        let types = sc.chunk.types();
        if !last.is_some_and(|l| std::sync::Arc::ptr_eq(l, types)) {
            let keep = types.classes().iter().map(|c| c.is_event() && cfg.filter.keeps(&c.name)).collect();
            infos.push((TypeInfo::new(types), keep));
            last = Some(types);
        }
        info_of.push(infos.len() - 1);
    }
    let units = plan_units(chunks, &infos, &info_of);
    let threads = std::thread::available_parallelism().map(usize::from).unwrap_or(1).min(units.len());
    if threads <= 1 {
        for unit in &units {
            let mut io_result = Ok(());
            let mut send = |piece: Vec<u8>| {
                io_result = out.write_all(&piece);
                io_result.is_ok()
            };
            let rendered = render_unit(unit, cfg.json, &mut send);
            io_result?;
            if let Err(e) = rendered {
                return Ok(Some(Damage::in_chunk(&unit.sc.file, e)));
            }
        }
        return Ok(None);
    }

    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..units.len())
        .map(|_| {
            let (tx, rx) = sync_channel::<Msg>(PIECES_IN_FLIGHT);
            (Mutex::new(Some(tx)), rx)
        })
        .unzip();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| worker(&units, cfg.json, &next, &stop, &senders));
        }
        let result = drain(&units, receivers, out);
        // Relaxed: only tells idle workers not to start another unit; the dropped receivers
        // make any send of a running worker fail, which stops it.
        stop.store(true, Ordering::Relaxed);
        result
    })
}

fn worker(
    units: &[Unit<'_>],
    json: bool,
    next: &AtomicUsize,
    stop: &AtomicBool,
    senders: &[Mutex<Option<SyncSender<Msg>>>],
) {
    // Relaxed: `next` only hands out indexes; `stop` is advisory (see `print_chunks`).
    while !stop.load(Ordering::Relaxed) {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let (Some(unit), Some(slot)) = (units.get(i), senders.get(i)) else {
            return;
        };
        let Some(tx) = slot.lock().ok().and_then(|mut s| s.take()) else {
            return;
        };
        let mut send = |piece: Vec<u8>| tx.send(Msg::Data(piece)).is_ok();
        if let Err(e) = render_unit(unit, json, &mut send) {
            let _ = tx.send(Msg::Damage(e));
        }
    }
}

/// Writes the pieces of each unit in order; stops at the first damage.
fn drain(units: &[Unit<'_>], receivers: Vec<Receiver<Msg>>, out: &mut impl Write) -> std::io::Result<Option<Damage>> {
    for (unit, rx) in units.iter().zip(receivers) {
        for msg in rx {
            match msg {
                Msg::Data(piece) => out.write_all(&piece)?,
                Msg::Damage(e) => return Ok(Some(Damage::in_chunk(&unit.sc.file, e))),
            }
        }
    }
    Ok(None)
}

/// The kept events of a unit, in file order. `f` returns false to stop.
fn for_each_event(unit: &Unit<'_>, mut f: impl FnMut(Event) -> jfr_format::Result<bool>) -> jfr_format::Result<()> {
    let chunk = &unit.sc.chunk;
    for record in chunk.records_from(unit.from as u64) {
        let record = record?;
        if record.offset >= unit.to as u64 {
            break;
        }
        let type_id = record.type_id;
        let kept = type_id > 1 && unit.info.class_index(type_id).is_some_and(|i| unit.keep[i]);
        if kept {
            // The record is an event of a declared type: the reader decodes exactly it.
            let event = match chunk.items(record.offset).next() {
                Some(Ok(Item::Event(event))) => event,
                Some(Err(e)) => return Err(e),
                _ => break,
            };
            if !f(event)? {
                break;
            }
        }
    }
    Ok(())
}

/// Renders one unit, handing output to `send` in pieces. Stops early when `send` returns false.
fn render_unit(unit: &Unit<'_>, json: bool, send: &mut dyn FnMut(Vec<u8>) -> bool) -> jfr_format::Result<()> {
    let mut open = true;
    if json {
        let mut renderer = JsonRenderer::new(&unit.sc.chunk, unit.info);
        let mut buf = Vec::with_capacity(PIECE_BYTES + 4096);
        let result = for_each_event(unit, |event| {
            renderer.event(&event, &mut buf)?;
            if buf.len() >= PIECE_BYTES {
                open = send(std::mem::replace(&mut buf, Vec::with_capacity(PIECE_BYTES + 4096)));
            }
            Ok(open)
        });
        if open && !buf.is_empty() {
            send(buf);
        }
        result
    } else {
        let mut renderer = HumanRenderer::new(&unit.sc.chunk, unit.info);
        let mut buf = String::with_capacity(PIECE_BYTES + 4096);
        let result = for_each_event(unit, |event| {
            renderer.event(&event, &mut buf)?;
            if buf.len() >= PIECE_BYTES {
                let piece = std::mem::replace(&mut buf, String::with_capacity(PIECE_BYTES + 4096));
                open = send(piece.into_bytes());
            }
            Ok(open)
        });
        if open && !buf.is_empty() {
            send(buf.into_bytes());
        }
        result
    }
}
