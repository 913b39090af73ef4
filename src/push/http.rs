//! One upload as an HTTP request, and what the server's answer means.
//!
//! `POST <url>/ingest?name=<app>{labels}&from=<ns>&until=<ns>&format=jfr&sampleRate=<hz>&spyName=recorder`
//! with a `multipart/form-data` body whose `jfr` part is the JFR file, gzipped. Pyroscope's ingest
//! handler (`pkg/ingester/pyroscope/ingest_handler.go`) does not decode a request
//! `Content-Encoding`, but its JFR converter (`pkg/og/convert/jfr/profile.go`) gunzips a form part
//! that starts with the gzip magic, so compression goes into the part. Parts are read as form
//! *files*, so each carries a `filename`. `from`/`until` are ns since the epoch (19 digits, which
//! Pyroscope's `attime.Parse` reads as ns).

use super::plan::Upload;
use super::target::{PushTarget, SPY_NAME};
use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::Write;
use std::time::Duration;

/// A request ready to send.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub url: String,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 2xx: the server has it.
    Posted(u16),
    /// The server refuses this upload (400, 413, 422, …): retrying the same bytes cannot help.
    Rejected(u16, String),
    /// The server refuses every upload (401, 403, 404, 405, a redirect): the target is wrong.
    Refused(u16, String),
    /// Worth retrying later: no connection, a timeout, 408, 429, 5xx.
    Retry(String),
}

/// Builds the request for `upload`.
pub(crate) fn request(target: &PushTarget, upload: &Upload) -> Request {
    let mut query = vec![
        ("name", target.series_name()),
        ("from", upload.from_nanos.to_string()),
        ("until", upload.until_nanos.to_string()),
        ("format", "jfr".to_owned()),
    ];
    if let Some(rate) = upload.sample_rate {
        query.push(("sampleRate", rate.to_string()));
    }
    query.push(("spyName", SPY_NAME.to_owned()));
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", percent_encode(v))).collect();
    let url = format!("{}?{}", target.ingest_url().unwrap_or_default(), query.join("&"));
    let jfr = gzip(&upload.jfr);
    let boundary = boundary_for(&jfr, upload.from_nanos);
    let mut body = Vec::with_capacity(jfr.len() + 256);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"jfr\"; filename=\"jfr\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(&jfr);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    Request { url, content_type: format!("multipart/form-data; boundary={boundary}"), body }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(bytes.len() / 4), Compression::new(6));
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

/// A boundary that does not occur in `part`.
fn boundary_for(part: &[u8], seed: i64) -> String {
    let mut n = seed as u64 ^ u64::from(std::process::id()).rotate_left(32);
    loop {
        // splitmix64: spreads the seed over the boundary's 64 bits.
        n = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = n;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let boundary = format!("recorder-{z:016x}");
        if !part.windows(boundary.len()).any(|w| w == boundary.as_bytes()) {
            return boundary;
        }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The HTTP client: one agent (connection pool) per uploader.
pub(crate) struct Client {
    agent: ureq::Agent,
    tenant: Option<String>,
    authorization: Option<String>,
}

impl Client {
    pub(crate) fn new(target: &PushTarget) -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // A redirect would turn the POST into a GET on some servers: report it instead.
            .max_redirects(0)
            .timeout_global(Some(target.request_timeout))
            .timeout_connect(Some(target.request_timeout.min(Duration::from_secs(10))))
            .user_agent(format!("recorder/{}", env!("CARGO_PKG_VERSION")))
            .build();
        let authorization =
            target.basic_auth.as_ref().map(|(u, p)| format!("Basic {}", base64(format!("{u}:{p}").as_bytes())));
        Client { agent: config.into(), tenant: target.tenant.clone(), authorization }
    }

    pub(crate) fn send(&self, request: &Request) -> Answer {
        let mut builder = self.agent.post(&request.url).header("Content-Type", &request.content_type);
        if let Some(t) = &self.tenant {
            builder = builder.header("X-Scope-OrgID", t);
        }
        if let Some(a) = &self.authorization {
            builder = builder.header("Authorization", a);
        }
        match builder.send(&request.body[..]) {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let location = response.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
                let text = response
                    .body_mut()
                    .with_config()
                    .limit(4096)
                    .read_to_vec()
                    .map(|b| one_line(&String::from_utf8_lossy(&b)))
                    .unwrap_or_default();
                classify(status, text, location)
            }
            Err(e) => Answer::Retry(e.to_string()),
        }
    }
}

fn classify(status: u16, text: String, location: Option<String>) -> Answer {
    let detail = if text.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {text}") };
    match status {
        200..=299 => Answer::Posted(status),
        408 | 429 | 500..=599 => Answer::Retry(detail),
        300..=399 => Answer::Refused(
            status,
            format!("{detail} (redirect to {}: give that URL)", location.as_deref().unwrap_or("an unnamed location")),
        ),
        401 | 403 | 404 | 405 => Answer::Refused(status, detail),
        _ => Answer::Rejected(status, detail),
    }
}

fn one_line(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 300 {
        line.chars().take(300).collect::<String>() + "…"
    } else {
        line
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [group[0], *group.get(1).unwrap_or(&0), *group.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(percent_encode("app{a=b,c=d}"), "app%7Ba%3Db%2Cc%3Dd%7D");
        assert_eq!(percent_encode("a-b_c.d~/"), "a-b_c.d~%2F");
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b""), "");
    }

    #[test]
    fn answers() {
        assert_eq!(classify(200, String::new(), None), Answer::Posted(200));
        assert!(matches!(classify(503, String::new(), None), Answer::Retry(_)));
        assert!(matches!(classify(429, String::new(), None), Answer::Retry(_)));
        assert!(matches!(classify(400, "bad".into(), None), Answer::Rejected(400, t) if t == "HTTP 400: bad"));
        assert!(matches!(classify(413, String::new(), None), Answer::Rejected(413, _)));
        assert!(matches!(classify(401, String::new(), None), Answer::Refused(401, _)));
        assert!(
            matches!(classify(308, String::new(), Some("https://x".into())), Answer::Refused(308, t) if t.contains("https://x"))
        );
    }

    #[test]
    fn boundary_avoids_the_content() {
        let b = boundary_for(b"", 7);
        let part = format!("xx{b}yy");
        assert_ne!(boundary_for(part.as_bytes(), 7), b);
    }
}
