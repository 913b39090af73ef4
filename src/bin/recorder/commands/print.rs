//! `recorder print`: every event with its fields, thread and stack trace, as text or JSON lines.
//!
//! Chunks are rendered in parallel (constant keys are chunk-local, so each chunk renders on its
//! own with its own caches) and written in recording order: worker threads take chunks in order
//! and hand their output in pieces through one bounded channel per chunk; the main thread drains
//! the channels in chunk order. Memory stays bounded by the channel depth, and the chunk the main
//! thread waits for is always being rendered (workers take chunks in increasing order), so the
//! pipeline cannot deadlock.

use crate::args::{PrintConfig, TypeFilter};
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
    let mut source = source::load(&cfg.path)?;
    source::check_type_names(cfg.filter.names(), &source.chunks)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let damage = print_chunks(&source.chunks, cfg, &mut out)?;
    out.flush()?;
    drop(out);
    if let Some(d) = damage {
        // Events were printed up to the damage; later chunks are not printed.
        source.damage.insert(0, d);
    }
    source.report_damage();
    Ok(if source.damage.is_empty() {
        Outcome::Clean
    } else {
        Outcome::Damaged
    })
}

/// Renders every chunk in order into `out`; returns the first damage found inside a chunk.
fn print_chunks(
    chunks: &[SourceChunk],
    cfg: &PrintConfig,
    out: &mut impl Write,
) -> std::io::Result<Option<Damage>> {
    let threads = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .min(chunks.len());
    if threads <= 1 {
        for sc in chunks {
            let mut io_result = Ok(());
            let mut send = |piece: Vec<u8>| {
                io_result = out.write_all(&piece);
                io_result.is_ok()
            };
            let rendered = render_chunk(sc, cfg, &mut send);
            io_result?;
            if let Err(e) = rendered {
                return Ok(Some(Damage::in_chunk(&sc.file, e)));
            }
        }
        return Ok(None);
    }

    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..chunks.len())
        .map(|_| {
            let (tx, rx) = sync_channel::<Msg>(PIECES_IN_FLIGHT);
            (Mutex::new(Some(tx)), rx)
        })
        .unzip();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| worker(chunks, cfg, &next, &stop, &senders));
        }
        let result = drain(chunks, receivers, out);
        // Relaxed: only tells idle workers not to start another chunk; the dropped receivers
        // make any send of a running worker fail, which stops it.
        stop.store(true, Ordering::Relaxed);
        result
    })
}

fn worker(
    chunks: &[SourceChunk],
    cfg: &PrintConfig,
    next: &AtomicUsize,
    stop: &AtomicBool,
    senders: &[Mutex<Option<SyncSender<Msg>>>],
) {
    // Relaxed: `next` only hands out indexes; `stop` is advisory (see `print_chunks`).
    while !stop.load(Ordering::Relaxed) {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let (Some(sc), Some(slot)) = (chunks.get(i), senders.get(i)) else {
            return;
        };
        let Some(tx) = slot.lock().ok().and_then(|mut s| s.take()) else {
            return;
        };
        let mut send = |piece: Vec<u8>| tx.send(Msg::Data(piece)).is_ok();
        if let Err(e) = render_chunk(sc, cfg, &mut send) {
            let _ = tx.send(Msg::Damage(e));
        }
    }
}

/// Writes the pieces of each chunk in order; stops at the first damage.
fn drain(
    chunks: &[SourceChunk],
    receivers: Vec<Receiver<Msg>>,
    out: &mut impl Write,
) -> std::io::Result<Option<Damage>> {
    for (sc, rx) in chunks.iter().zip(receivers) {
        for msg in rx {
            match msg {
                Msg::Data(piece) => out.write_all(&piece)?,
                Msg::Damage(e) => return Ok(Some(Damage::in_chunk(&sc.file, e))),
            }
        }
    }
    Ok(None)
}

/// The events of one chunk that `filter` keeps, in file order. `f` returns false to stop.
fn for_each_event(
    sc: &SourceChunk,
    filter: &TypeFilter,
    mut f: impl FnMut(Event) -> jfr_format::Result<bool>,
) -> jfr_format::Result<()> {
    let chunk = &sc.chunk;
    if *filter == TypeFilter::All {
        for event in chunk.events() {
            if !f(event?)? {
                break;
            }
        }
        return Ok(());
    }
    let keep: Vec<bool> = chunk
        .types()
        .classes()
        .iter()
        .map(|c| c.is_event() && filter.keeps(&c.name))
        .collect();
    if !keep.contains(&true) {
        return Ok(());
    }
    // Only the kept records are decoded; the others are skipped by their size.
    for record in chunk.records() {
        let record = record?;
        if record.type_id < 2 || record.offset < HEADER_SIZE as u64 {
            continue;
        }
        let kept = chunk
            .types()
            .class_index(record.type_id)
            .is_some_and(|i| keep[i]);
        if !kept {
            continue;
        }
        let event = match chunk.items(record.offset).next() {
            Some(Ok(Item::Event(event))) => event,
            Some(Err(e)) => return Err(e),
            _ => continue,
        };
        if !f(event)? {
            break;
        }
    }
    Ok(())
}

/// Renders one chunk, handing output to `send` in pieces. Stops early when `send` returns false.
fn render_chunk(
    sc: &SourceChunk,
    cfg: &PrintConfig,
    send: &mut dyn FnMut(Vec<u8>) -> bool,
) -> jfr_format::Result<()> {
    let info = TypeInfo::new(sc.chunk.types());
    let mut open = true;
    if cfg.json {
        let mut renderer = JsonRenderer::new(&sc.chunk, &info);
        let mut buf = Vec::with_capacity(PIECE_BYTES + 4096);
        let result = for_each_event(sc, &cfg.filter, |event| {
            renderer.event(&event, &mut buf)?;
            if buf.len() >= PIECE_BYTES {
                open = send(std::mem::replace(
                    &mut buf,
                    Vec::with_capacity(PIECE_BYTES + 4096),
                ));
            }
            Ok(open)
        });
        if open && !buf.is_empty() {
            send(buf);
        }
        result
    } else {
        let mut renderer = HumanRenderer::new(&sc.chunk, &info);
        let mut buf = String::with_capacity(PIECE_BYTES + 4096);
        let result = for_each_event(sc, &cfg.filter, |event| {
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
