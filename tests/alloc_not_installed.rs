//! Allocation sampling without the sampling allocator installed: `start` refuses with an error
//! that says how to install it (loss is never silent: a recording that could take no sample
//! does not pretend to).

use recorder::{Error, Recorder};

#[test]
fn allocation_sampling_needs_the_sampling_allocator() {
    let dir = tempfile::tempdir().unwrap();
    let err = Recorder::builder().repository(dir.path()).no_sampling().allocation_sampling(1024).start().unwrap_err();
    assert!(matches!(err, Error::AllocatorNotInstalled), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("#[global_allocator]") && text.contains("SamplingAllocator::new()"), "{text}");
    // Without allocation sampling the same builder starts.
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    rec.stop().unwrap();
}
