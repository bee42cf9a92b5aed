//! UIDs, generated name suffixes and timestamps, as the API server writes them.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// 64 random bits: a fresh randomly keyed hasher over a counter, so values never repeat.
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A version-4 style UUID.
pub fn uid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        0x8000 | (b >> 48 & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// The 5-character suffix `generateName` gets (the API server's alphabet: no vowels, no
/// look-alike digits).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// RFC 3339 with second precision, the `metav1.Time` format.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// RFC 3339 with microseconds, the `metav1.MicroTime` format.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Seconds since a `metav1.Time`, or `None` when it does not parse.
pub fn seconds_since(time: &str) -> Option<f64> {
    let t: jiff::Timestamp = time.parse().ok()?;
    let d = jiff::Timestamp::now().duration_since(t);
    Some(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let u = uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(uid(), uid());
        assert_eq!(name_suffix().len(), 5);
        assert!(now().ends_with('Z') && now().len() == 20, "{}", now());
        assert!(seconds_since(&now()).unwrap() < 5.0);
    }
}
