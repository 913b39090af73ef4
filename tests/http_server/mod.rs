//! A tiny HTTP/1.1 server for the push tests (real sockets on 127.0.0.1): it records every
//! request and answers as the test says (a status, or never). Shared by the library's and the
//! CLI's tests (`#[path]`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    /// The multipart parts: (headers, content).
    pub fn parts(&self) -> Vec<(String, Vec<u8>)> {
        let ct = self.header("content-type").expect("a content type");
        let boundary = ct.split("boundary=").nth(1).expect("a multipart boundary");
        let delimiter = format!("--{boundary}");
        let body = &self.body;
        let mut cuts = Vec::new();
        let mut i = 0;
        while let Some(at) = find(&body[i..], delimiter.as_bytes()) {
            cuts.push(i + at);
            i += at + delimiter.len();
        }
        assert!(
            body[*cuts.last().unwrap()..].starts_with(format!("{delimiter}--\r\n").as_bytes()),
            "closing delimiter"
        );
        cuts.windows(2)
            .map(|w| {
                let part = &body[w[0] + delimiter.len() + 2..w[1] - 2];
                let split = find(part, b"\r\n\r\n").expect("part headers");
                (String::from_utf8(part[..split].to_vec()).unwrap(), part[split + 4..].to_vec())
            })
            .collect()
    }
    /// The `jfr` part, gunzipped.
    pub fn jfr(&self) -> Vec<u8> {
        let parts = self.parts();
        assert_eq!(parts.len(), 1, "one part: jfr");
        let (headers, content) = &parts[0];
        assert!(headers.contains("Content-Disposition: form-data; name=\"jfr\"; filename=\"jfr\""), "{headers}");
        assert_eq!(&content[..2], &[0x1f, 0x8b], "the jfr part is gzipped");
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&content[..]).read_to_end(&mut out).unwrap();
        out
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What the server does with request number `n` (0-based).
#[derive(Debug, Clone, Copy)]
pub enum Reply {
    Status(u16),
    /// Read the request and never answer (until the server is dropped).
    Hang,
}

type Policy = Box<dyn Fn(usize) -> Reply + Send + Sync>;

pub struct Server {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
    policy: Arc<Mutex<Policy>>,
}

impl Server {
    pub fn start(policy: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let policy: Arc<Mutex<Policy>> = Arc::new(Mutex::new(Box::new(policy)));
        let count = Arc::new(AtomicUsize::new(0));
        let (r, s, p) = (Arc::clone(&received), Arc::clone(&stop), Arc::clone(&policy));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (r, s, policy, count) = (Arc::clone(&r), Arc::clone(&s), Arc::clone(&p), Arc::clone(&count));
                std::thread::spawn(move || serve(conn, &r, &s, &policy, &count));
            }
        });
        Server { addr, received, stop, policy }
    }

    /// Changes how the following requests are answered.
    pub fn set(&self, policy: impl Fn(usize) -> Reply + Send + Sync + 'static) {
        *self.policy.lock().unwrap() = Box::new(policy);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(
    conn: TcpStream,
    received: &Mutex<Vec<Received>>,
    stop: &AtomicBool,
    policy: &Mutex<Policy>,
    count: &AtomicUsize,
) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or("").to_owned();
        let target = words.next().unwrap_or("").to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        let get = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
        if get("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
            writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
        }
        let mut body = Vec::new();
        if let Some(n) = get("content-length") {
            body.resize(n.parse().unwrap(), 0);
            reader.read_exact(&mut body).unwrap();
        } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut piece = vec![0u8; n + 2];
                reader.read_exact(&mut piece).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&piece[..n]);
            }
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let query = query
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_owned(), percent_decode(v))
            })
            .collect();
        received.lock().unwrap().push(Received { method, path: path.to_owned(), query, headers, body });
        let n = count.fetch_add(1, Ordering::SeqCst);
        let reply = (policy.lock().unwrap())(n);
        match reply {
            Reply::Status(status) => {
                let text = format!("answer {status}");
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{text}",
                    text.len()
                );
                if writer.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
            Reply::Hang => {
                // Bounded: the server is dropped at the end of its test.
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return;
            }
        }
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// A port nothing listens on.
pub fn closed_port_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}
