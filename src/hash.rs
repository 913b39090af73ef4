//! The hasher of the crate's maps keyed by words the process makes itself (addresses, ids,
//! packed pairs): one multiply per word. The std's SipHash resists keys an attacker crafts, which
//! these maps never see, and cost a tenth of a span's creation.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WordHasher(u64);

pub(crate) type BuildWordHasher = BuildHasherDefault<WordHasher>;

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        // A multiply mixes upwards only: the high bits come down to where hashbrown picks a
        // bucket (an aligned address has its low bits zero).
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let build = BuildWordHasher::default();
        let buckets: std::collections::HashSet<u64> =
            (0..1024u64).map(|i| build.hash_one(0x7f00_0000_0000 + i * 64) & 1023).collect();
        // A fair spread of 1024 keys over 1024 buckets fills about 63 % of them.
        assert!(buckets.len() > 550, "{} of 1024 buckets", buckets.len());
    }
}
