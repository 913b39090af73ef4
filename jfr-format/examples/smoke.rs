//! Writes a small two-chunk recording to the path given as the first argument.
use jfr_format::metadata::{event_class, ids, jdk_types, EventTypeSpec, Field, Metadata, Region};
use jfr_format::write::{put_int, put_long, put_string, put_varint, Checkpoint, ChunkEncoder};

fn main() {
    let path = std::env::args().nth(1).expect("usage: smoke OUT.jfr");
    let mut classes = jdk_types();
    classes.push(event_class(EventTypeSpec {
        id: 100,
        name: "demo.Hello",
        label: "Hello",
        description: Some("A greeting"),
        category: &["Demo"],
        duration: true,
        thread: true,
        stack_trace: true,
        fields: vec![Field::new("message", ids::STRING), Field::new("count", ids::INT)],
    }));
    let md = Metadata { id: 1, classes, region: Region::default() };
    let mut out = Vec::new();
    let now = 1_700_000_000_000_000_000i64;
    for c in 0..2 {
        let start = now + c * 1_000_000;
        let mut w = ChunkEncoder::new(start, 1000 + c * 1_000_000);
        w.write_metadata(&md, 0);
        w.write_event(100, |o| {
            put_long(o, 1000 + c * 1_000_000 + 10);
            put_long(o, 500);
            put_varint(o, 1);
            put_varint(o, 7);
            put_string(o, Some("héllo"));
            put_int(o, -3);
        });
        let mut cp = Checkpoint::new();
        cp.add(ids::THREAD, 1, |o| {
            put_string(o, Some("main"));
            put_long(o, 42);
            put_string(o, None);
            put_long(o, 0);
            put_varint(o, 0);
        });
        cp.add(ids::STACK_TRACE, 7, |o| {
            o.push(0);
            put_varint(o, 1);
            put_varint(o, 9); // method
            put_int(o, 12);
            put_int(o, 0);
            put_varint(o, 3);
        });
        cp.add(ids::METHOD, 9, |o| {
            put_varint(o, 11);
            put_varint(o, 21);
            put_varint(o, 22);
            put_int(o, 0x100);
            o.push(0);
        });
        cp.add(ids::CLASS, 11, |o| {
            put_varint(o, 0);
            put_varint(o, 23);
            put_varint(o, 0);
            put_int(o, 0);
            o.push(0);
        });
        cp.add(ids::SYMBOL, 21, |o| put_string(o, Some("do_work")));
        cp.add(ids::SYMBOL, 22, |o| put_string(o, Some("()V")));
        cp.add(ids::SYMBOL, 23, |o| put_string(o, Some("myapp::worker")));
        cp.add(ids::FRAME_TYPE, 3, |o| put_string(o, Some("Native")));
        w.write_checkpoint(&cp, 0, true);
        out.extend(w.into_bytes(1_000_000, c == 1));
    }
    std::fs::write(path, out).unwrap();
}
