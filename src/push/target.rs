//! Where and as what chunks are pushed: the server URL, the application name and labels that
//! Pyroscope files the profiles under, and the delivery knobs.

use super::plan::Limits;
use std::fmt;
use std::time::Duration;

/// The `spyName` query parameter: Pyroscope stores it as the `pyroscope_spy` label of every series,
/// naming the agent that produced the profile.
pub const SPY_NAME: &str = "recorder";

/// A Grafana Pyroscope server to push finished chunks to, and how.
///
/// ```
/// use recorder::push::PushTarget;
/// let target = PushTarget::pyroscope("http://pyroscope:4040")
///     .app_name("checkout")
///     .label("region", "eu-1")
///     .label("host", "web-7");
/// assert!(target.validate().is_ok());
/// ```
#[derive(Clone)]
pub struct PushTarget {
    pub(crate) url: String,
    pub(crate) app_name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) tenant: Option<String>,
    pub(crate) basic_auth: Option<(String, String)>,
    pub(crate) limits: Limits,
    pub(crate) request_timeout: Duration,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) stop_grace: Duration,
    pub(crate) poll_interval: Duration,
}

impl fmt::Debug for PushTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the password.
        f.debug_struct("PushTarget")
            .field("url", &self.url)
            .field("app_name", &self.app_name)
            .field("labels", &self.labels)
            .field("tenant", &self.tenant)
            .field("basic_auth_user", &self.basic_auth.as_ref().map(|(u, _)| u))
            .field("limits", &self.limits)
            .field("request_timeout", &self.request_timeout)
            .field("backoff", &self.backoff)
            .field("stop_grace", &self.stop_grace)
            .finish()
    }
}

impl PushTarget {
    /// The Pyroscope server at `url` (`http://host:4040`, `https://…`; `/ingest` is appended unless
    /// the URL already ends with it).
    pub fn pyroscope(url: impl Into<String>) -> PushTarget {
        PushTarget {
            url: url.into(),
            app_name: "recorder".into(),
            labels: Vec::new(),
            tenant: None,
            basic_auth: None,
            limits: Limits::default(),
            request_timeout: Duration::from_secs(30),
            backoff: (Duration::from_secs(1), Duration::from_secs(60)),
            stop_grace: Duration::from_secs(3),
            poll_interval: Duration::from_secs(1),
        }
    }

    /// The application name (Pyroscope's `service_name`; default `recorder`): letters, digits and
    /// `_ . - /`.
    pub fn app_name(mut self, name: impl Into<String>) -> Self {
        self.app_name = name.into();
        self
    }

    /// A label of every profile pushed (host, version, region, …): the name is letters, digits,
    /// `_` and `.`, not starting with `__`; the value has no `,`, `{`, `}` or `=`.
    pub fn label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.push((name.into(), value.into()));
        self
    }

    /// The tenant (`X-Scope-OrgID` header) of a multi-tenant server.
    pub fn tenant(mut self, id: impl Into<String>) -> Self {
        self.tenant = Some(id.into());
        self
    }

    /// HTTP basic authentication (Grafana Cloud: the stack's user id and an access token).
    pub fn basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.basic_auth = Some((user.into(), password.into()));
        self
    }

    /// Largest upload, uncompressed (default 4 MiB, the server's `max_profile_size_bytes` default):
    /// larger chunks are cut into several valid JFR files.
    pub fn max_upload_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_bytes = bytes;
        self
    }

    /// Most distinct stacks of one profile type in one upload (default 16 000, the server's
    /// `max_profile_stacktrace_samples` default): chunks with more are cut.
    pub fn max_samples_per_upload(mut self, samples: usize) -> Self {
        self.limits.max_samples = samples;
        self
    }

    /// Longest a request may take, connection included (default 30 s); a slower one is retried.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// Wait before the first retry and the longest wait between retries (defaults 1 s and 60 s); the
    /// wait doubles after each failure.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = (first, max);
        self
    }

    /// How long stopping the recording waits for the last chunks to be posted (default 3 s; zero:
    /// do not wait). What is not posted by then stays in the repository for `recorder push DIR`.
    pub fn stop_grace(mut self, d: Duration) -> Self {
        self.stop_grace = d;
        self
    }

    /// Post only what Pyroscope reads (default false: a chunk within the limits is posted as it
    /// is). When true, every chunk is cut like an oversized one: its samples, the constants they
    /// reference and its settings, without the application's other events, which Pyroscope ignores
    /// but which can be most of a chunk's bytes.
    pub fn samples_only(mut self, on: bool) -> Self {
        self.limits.samples_only = on;
        self
    }

    /// How often a followed directory is looked at when nothing announces a new chunk (default 1 s).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// The server URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Checks every setting; the message names the wrong one.
    pub fn validate(&self) -> Result<(), String> {
        self.ingest_url()?;
        if self.app_name.is_empty() {
            return Err("the application name is empty".into());
        }
        if let Some(c) = self.app_name.chars().find(|&c| !(is_label_char(c) || matches!(c, '-' | '/'))) {
            return Err(format!(
                "application name `{}`: character {c:?} is not allowed (letters, digits, _ . - /)",
                self.app_name
            ));
        }
        for (name, value) in &self.labels {
            if name.is_empty() || name.starts_with("__") || !name.chars().all(is_label_char) {
                return Err(format!(
                    "label name `{name}`: use letters, digits, _ and . and do not start with __ (reserved)"
                ));
            }
            if matches!(name.as_str(), "service_name" | "app_name") {
                return Err(format!("label `{name}` is set from the application name"));
            }
            if value.trim().is_empty() || value.contains([',', '{', '}', '=']) || value.trim() != value {
                return Err(format!(
                    "label {name}=`{value}`: a value is not empty, has no , {{ }} = and no leading or trailing space"
                ));
            }
        }
        let mut names: Vec<&str> = self.labels.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("label `{}` is given twice", w[0]));
        }
        if self.limits.max_bytes < 64 * 1024 {
            return Err(format!("max upload size {} is below 64 KiB", self.limits.max_bytes));
        }
        if self.limits.max_samples == 0 {
            return Err("max samples per upload is 0".into());
        }
        if self.request_timeout.is_zero() {
            return Err("request timeout is 0".into());
        }
        if self.backoff.0.is_zero() || self.backoff.1 < self.backoff.0 {
            return Err(format!(
                "backoff {:?}..{:?}: the first wait must be > 0 and ≤ the longest",
                self.backoff.0, self.backoff.1
            ));
        }
        if self.poll_interval.is_zero() {
            return Err("poll interval is 0".into());
        }
        if let Some(t) = &self.tenant {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!("tenant `{t}`: printable ASCII without spaces"));
            }
        }
        Ok(())
    }

    /// The `/ingest` endpoint URL (no query).
    pub(crate) fn ingest_url(&self) -> Result<String, String> {
        let url = self.url.trim_end_matches('/');
        let rest = if let Some(r) = url.strip_prefix("http://") {
            r
        } else if let Some(r) = url.strip_prefix("https://") {
            r
        } else {
            return Err(format!("URL `{}`: give http://HOST[:PORT] or https://HOST[:PORT]", self.url));
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.is_empty() {
            return Err(format!("URL `{}` has no host", self.url));
        }
        if authority.contains('@') {
            return Err(format!(
                "URL `{}` carries credentials: give them with basic_auth (CLI: --basic-auth-user and the \
                 RECORDER_PUSH_PASSWORD environment variable)",
                self.url
            ));
        }
        if rest.contains(['?', '#']) {
            return Err(format!("URL `{}`: give the server URL without a query or fragment", self.url));
        }
        if url.ends_with("/ingest") {
            Ok(url.to_owned())
        } else {
            Ok(format!("{url}/ingest"))
        }
    }

    /// The `name` query parameter: `app{k=v,…}` with labels sorted by name.
    pub(crate) fn series_name(&self) -> String {
        let mut labels = self.labels.clone();
        labels.sort();
        let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}{{{}}}", self.app_name, inner.join(","))
    }

    /// What identifies the backend (and tenant) that a pushed-chunks marker is about: the same
    /// chunks pushed to another server are another marker.
    pub(crate) fn marker_id(&self) -> String {
        let url = self.ingest_url().unwrap_or_else(|_| self.url.clone());
        let key = format!("{url}\n{}", self.tenant.as_deref().unwrap_or(""));
        // FNV-1a, 64 bits: stable across Rust versions (unlike `DefaultHasher`).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_names() {
        let t = PushTarget::pyroscope("http://127.0.0.1:4040/")
            .app_name("checkout")
            .label("region", "eu-1")
            .label("host", "a");
        assert_eq!(t.ingest_url().unwrap(), "http://127.0.0.1:4040/ingest");
        assert_eq!(t.series_name(), "checkout{host=a,region=eu-1}");
        assert_eq!(PushTarget::pyroscope("https://h/p/ingest").ingest_url().unwrap(), "https://h/p/ingest");
        assert_eq!(PushTarget::pyroscope("http://h").app_name("a").series_name(), "a{}");
        for bad in ["ftp://h", "h:4040", "http://", "http://u:p@h", "http://h/?x=1"] {
            assert!(PushTarget::pyroscope(bad).validate().is_err(), "{bad}");
        }
        let bad_labels = [("__name__", "x"), ("a-b", "x"), ("a", "x,y"), ("a", ""), ("service_name", "x"), ("a", " x")];
        for (k, v) in bad_labels {
            assert!(PushTarget::pyroscope("http://h").label(k, v).validate().is_err(), "{k}={v}");
        }
        assert!(PushTarget::pyroscope("http://h").app_name("my app").validate().is_err());
        assert!(PushTarget::pyroscope("http://h").label("a", "1").label("a", "2").validate().is_err());
        assert!(PushTarget::pyroscope("http://h").app_name("team/svc-1.v2").label("k.v_2", "x/y:z").validate().is_ok());
    }

    #[test]
    fn debug_hides_the_password() {
        let t = PushTarget::pyroscope("http://h").basic_auth("user", "s3cret");
        let text = format!("{t:?}");
        assert!(text.contains("user") && !text.contains("s3cret"), "{text}");
    }
}
