#![cfg_attr(feature = "libfuzzer", no_main)]

#[cfg(feature = "libfuzzer")]
libfuzzer_sys::fuzz_target!(|data: &[u8]| jfr_format_fuzz::chunk(data));

#[cfg(not(feature = "libfuzzer"))]
fn main() {
    jfr_format_fuzz::replay(jfr_format_fuzz::chunk);
}
