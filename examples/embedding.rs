use recorder::{Event, EventSettings, Recorder};
use std::time::Duration;

recorder::event! {
    /// One handled request (an instant event).
    #[event(name = "app.Request", label = "Request", category = ["App", "HTTP"])]
    pub struct Request {
        #[field(label = "Path")]
        pub path: String,
        pub status: i32,
        pub bytes: recorder::Bytes,
    }
}

recorder::event! {
    /// One database query (a duration event).
    #[event(name = "app.Query", label = "Query", category = ["App", "Database"])]
    pub struct Query {
        pub sql: &'static str,
        pub rows: u64,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rec = Recorder::builder()
        // Where the chunk files go; the default is $TMPDIR/recorder-<uid>.
        // .repository("/var/tmp/myapp-recording")
        // Queries are recorded only when they take 1 ms or more.
        .event("app.Query", EventSettings { threshold: Duration::from_millis(1), ..Default::default() })
        .start()?;

    Request { path: "/".into(), status: 200, bytes: recorder::Bytes(512) }.commit();

    let fast = Query { sql: "SELECT 1", rows: 1 }.begin(); // begin() starts the clock ...
    fast.end(); // ... end() (or drop) commits: under 1 ms, so not recorded

    let mut slow = Query { sql: "SELECT * FROM orders", rows: 0 }.begin();
    std::thread::sleep(Duration::from_millis(5)); // stands for the query's work
    slow.rows = 42;
    slow.end(); // 5 ms: recorded, with its duration

    rec.dump("now.jfr")?; // everything so far, as one file, without stopping
    println!("recording in {}, snapshot in now.jfr", rec.repository_dir().display());
    rec.stop()?; // the last chunk gets the final flag
    Ok(())
}
