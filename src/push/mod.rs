//! Shipping finished chunks to Grafana Pyroscope (feature `push`).
//!
//! Pyroscope ingests JFR natively (`POST /ingest?format=jfr`); a chunk file of ours is a JFR file.
//! [`crate::RecorderBuilder::push`] starts an uploader thread in the recording process, and
//! `recorder push` does the same from outside (for a repository, live with `--follow`, or a file):
//!
//! - every finished chunk is posted once, in recording order; the live chunk when it is finished;
//! - the query names the application and labels (`name=app{k=v}`), the chunk's time span
//!   (`from`/`until`), `format=jfr`, `spyName=recorder` and the **chunk's own sampling rate**
//!   (`sampleRate`, from the period in its `jdk.ActiveSetting` events: Pyroscope counts every CPU
//!   sample as `1e9 / sampleRate` ns and assumes 100 Hz without it);
//! - the body is `multipart/form-data` with the JFR file gzipped in its `jfr` part;
//! - a chunk above the server's default limits (4 MiB uncompressed, 16 000 distinct samples per
//!   profile) is cut into several valid JFR files ([`plan`]);
//! - failures are retried with exponential backoff (no connection, timeouts, 408, 429, 5xx); a
//!   rejected upload (other 4xx) is reported once and skipped; 401/403/404 stop the uploader;
//! - what was posted is recorded in a marker file in the recording directory, so a restart or a
//!   second `recorder push` never posts a chunk twice;
//! - the repository is the queue: retention keeps unposted chunks past their age and deletes them
//!   under the size limit only when nothing else is left, counting them as lost
//!   (`recorder.PushStatistics`, [`PushStats::chunks_lost`]).
//!
//! Span context: a `spanId` field (`long`) on `jdk.ExecutionSample` is read by Pyroscope's JFR
//! parser itself and becomes the sample label `profile_id` (stored as `span_id`), which is what
//! span profiles (traces to profiles) query; no `labels` form part is needed for it. That part
//! (a `LabelsSnapshot`) only resolves `contextId` and `spanName` fields, which our samples do not
//! carry, so none is sent.

#[cfg(feature = "push")]
mod http;
#[cfg(feature = "push")]
mod marker;
#[cfg(feature = "push")]
pub mod plan;
#[cfg(feature = "push")]
mod target;
#[cfg(feature = "push")]
mod uploader;

#[cfg(feature = "push")]
pub use target::{PushTarget, SPY_NAME};
#[cfg(feature = "push")]
pub use uploader::{push_path, PushError, PushEvent, PushOptions, PushStats};

#[cfg(feature = "push")]
pub(crate) use uploader::{start, Handle, UploaderShared};

use std::path::Path;

/// The recorder's side of an uploader: retention asks it which chunks are unposted and reports
/// the ones it had to delete, a finished chunk wakes it, and the recorder's own events report its
/// counters (`crate::flush::own`). Without the `push` feature (or without a target) it does
/// nothing.
#[derive(Debug, Default)]
pub(crate) struct Link {
    #[cfg(feature = "push")]
    shared: Option<std::sync::Arc<uploader::UploaderShared>>,
    #[cfg(feature = "push")]
    target: String,
}

impl Link {
    /// A link to the uploader sharing `shared`.
    #[cfg(feature = "push")]
    pub(crate) fn new(shared: std::sync::Arc<uploader::UploaderShared>, target: &PushTarget) -> Link {
        Link { shared: Some(shared), target: target.url().to_owned() }
    }

    /// The server's URL and the uploader's counters, if the recording pushes.
    #[cfg(feature = "push")]
    pub(crate) fn report(&self) -> Option<(&str, PushStats)> {
        self.shared.as_ref().map(|s| (self.target.as_str(), s.stats()))
    }

    /// Retention: the finished chunk `path` is not posted yet.
    pub(crate) fn is_unposted(&self, path: &Path) -> bool {
        #[cfg(feature = "push")]
        if let Some(s) = &self.shared {
            return s.is_unposted(path);
        }
        let _ = path;
        false
    }

    /// Retention deleted the unposted chunk `path` of `size` bytes.
    pub(crate) fn deleted_unposted(&self, path: &Path, size: u64) {
        #[cfg(feature = "push")]
        if let Some(s) = &self.shared {
            s.note_deleted_unposted(path, size);
        }
        let _ = (path, size);
    }

    /// A chunk was finished.
    pub(crate) fn chunk_finished(&self) {
        #[cfg(feature = "push")]
        if let Some(s) = &self.shared {
            s.notify();
        }
    }
}
