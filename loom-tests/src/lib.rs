//! loom models of the recorder's buffer protocols live in `tests/`; each file is `#![cfg(loom)]`.
//! Run them with `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
