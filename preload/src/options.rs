//! `RECORDER_OPTIONS`: what the preloaded library records, as comma-separated `key=value` pairs
//! (`period=1ms,repository=/tmp/rec,output=app.jfr`). `recorder record` writes it; a user may
//! write it by hand (README "Recording an unmodified program").

use recorder::units::{parse_duration, parse_size};
use std::path::PathBuf;
use std::time::Duration;

/// The variable the options are read from.
pub const ENV_OPTIONS: &str = "RECORDER_OPTIONS";

/// Which unwinder the sampler uses (`unwinder=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnwinderChoice {
    /// Frame pointers, DWARF CFI where a module has none.
    #[default]
    Auto,
    /// Frame pointers only.
    FramePointer,
    /// DWARF CFI wherever a module has it.
    Dwarf,
}

/// Parsed options; every one has a default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    /// CPU sampling period (`period=10ms`); `None`: the library's default.
    pub period: Option<Duration>,
    /// Base directory of the repository (`repository=DIR`); `None`: the library's default.
    pub repository: Option<PathBuf>,
    /// A `.jfr` file written at exit (`output=FILE`).
    pub output: Option<PathBuf>,
    /// Stop recording (not the program) after this long (`duration=30s`).
    pub duration: Option<Duration>,
    /// Keep the recorder in exec'd children (`follow-children=1`): each records on its own.
    pub follow_children: bool,
    /// Wall-clock sampling period (`wall=50ms`).
    pub wall: Option<Duration>,
    /// Allocation sampling interval in bytes (`alloc=512KiB`).
    pub alloc: Option<u64>,
    /// Follow the sampled allocations until they are freed (`alloc_live=1`; turns `alloc` on at
    /// 512 KiB if it is not given).
    pub alloc_live: bool,
    /// `unwinder=auto|fp|dwarf`.
    pub unwinder: UnwinderChoice,
    /// Directories separate debug files are looked for in (`debug_dir=DIR[:DIR...]`, as gdb's
    /// `debug-file-directory`); `None`: `/usr/lib/debug`.
    pub debug_dirs: Option<Vec<PathBuf>>,
    /// `symbol_memory=SIZE`: what the symbolizer may hold (`RecorderBuilder::symbol_memory`).
    pub symbol_memory: Option<u64>,
    /// A file the library appends one line to at start and at the end of each recording
    /// (`recorder record` reads it; see [`crate::report`]).
    pub report: Option<PathBuf>,
}

/// Parses the options; the error names the offending pair.
pub fn parse(text: &str) -> Result<Options, String> {
    let mut o = Options::default();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (key, value) = (key.trim(), value.trim());
        let bad = |why: String| format!("{key}={value}: {why}");
        match key {
            "period" => o.period = Some(parse_duration(value).map_err(bad)?),
            "repository" => o.repository = Some(non_empty_path(value).map_err(bad)?),
            "output" => o.output = Some(non_empty_path(value).map_err(bad)?),
            "duration" => o.duration = Some(parse_duration(value).map_err(bad)?),
            "follow-children" => o.follow_children = parse_bool(value).map_err(bad)?,
            "wall" => o.wall = Some(parse_duration(value).map_err(bad)?),
            "alloc" => {
                o.alloc = Some(parse_size(value).map_err(bad)?);
            }
            "alloc_live" | "alloc-live" => o.alloc_live = parse_bool(value).map_err(bad)?,
            "unwinder" => {
                o.unwinder = match value {
                    "auto" => UnwinderChoice::Auto,
                    "fp" | "frame-pointer" => UnwinderChoice::FramePointer,
                    "dwarf" => UnwinderChoice::Dwarf,
                    _ => return Err(bad("expected auto, fp or dwarf".into())),
                }
            }
            "symbol_memory" | "symbol-memory" => o.symbol_memory = Some(parse_size(value).map_err(bad)?),
            "report" => o.report = Some(non_empty_path(value).map_err(bad)?),
            "debug_dir" | "debug-dir" => {
                o.debug_dirs = Some(value.split(':').filter(|d| !d.is_empty()).map(PathBuf::from).collect())
            }
            _ => {
                return Err(format!(
                    "unknown option `{key}` (known: period, repository, output, duration, follow-children, wall, alloc, alloc_live, unwinder, debug_dir, symbol_memory, report)"
                ))
            }
        }
    }
    Ok(o)
}

fn non_empty_path(value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        Err("a path is required".into())
    } else {
        Ok(PathBuf::from(value))
    }
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "" | "1" | "yes" | "true" | "on" => Ok(true),
        "0" | "no" | "false" | "off" => Ok(false),
        _ => Err("expected 1 or 0".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_option_and_round_trips() {
        let o = parse("period=1ms, repository=/tmp/r,output=a.jfr,duration=2s,follow-children=1,wall=50ms,alloc=512KiB,alloc_live=1,unwinder=dwarf,debug_dir=/a:/b,report=/tmp/x")
            .unwrap();
        assert_eq!(o.period, Some(Duration::from_millis(1)));
        assert_eq!(o.repository.as_deref(), Some(std::path::Path::new("/tmp/r")));
        assert_eq!(o.output.as_deref(), Some(std::path::Path::new("a.jfr")));
        assert_eq!(o.duration, Some(Duration::from_secs(2)));
        assert!(o.follow_children);
        assert_eq!(o.wall, Some(Duration::from_millis(50)));
        assert_eq!(o.alloc, Some(512 * 1024));
        assert!(o.alloc_live);
        assert_eq!(o.debug_dirs, Some(vec![PathBuf::from("/a"), PathBuf::from("/b")]));
        assert_eq!(o.unwinder, UnwinderChoice::Dwarf);
        assert_eq!(parse("").unwrap(), Options::default());
    }

    #[test]
    fn errors_name_the_pair() {
        assert!(parse("period=fast").unwrap_err().starts_with("period=fast:"));
        assert!(parse("colour=red").unwrap_err().contains("unknown option `colour`"));
        assert!(parse("unwinder=libgcc").unwrap_err().contains("auto, fp or dwarf"));
        assert!(parse("repository=").unwrap_err().contains("path is required"));
        assert!(parse("alloc=0").unwrap_err().contains("at least 1 byte"));
        assert!(parse("alloc_live=maybe").unwrap_err().starts_with("alloc_live=maybe:"));
    }
}
