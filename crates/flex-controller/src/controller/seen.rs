//! The keys of notices already published (or writes already made), in bounded memory: two generations of at most
//! `capacity` keys each. When the newer one fills up, the older is dropped, so a key not
//! seen for a long time may be said once more (Kubernetes' event aggregation absorbs that),
//! while a controller that runs for months never grows without bound.

use std::collections::HashSet;
use std::sync::Mutex;

/// Keys per generation: far more than the notices of any burst in flight.
pub const DEFAULT_CAPACITY: usize = 50_000;

pub struct Seen {
    capacity: usize,
    generations: Mutex<(HashSet<String>, HashSet<String>)>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen::with_capacity(DEFAULT_CAPACITY)
    }
}

impl Seen {
    pub fn with_capacity(capacity: usize) -> Self {
        Seen {
            capacity: capacity.max(1),
            generations: Mutex::new((HashSet::new(), HashSet::new())),
        }
    }

    /// Records `key`; true when it was not seen before (within the memory kept).
    pub fn insert(&self, key: &str) -> bool {
        let mut g = crate::lock(&self.generations);
        let (newer, older) = &mut *g;
        if newer.contains(key) {
            return false;
        }
        // Still remembered from the older generation: carry it over, it is in use.
        let fresh = !older.remove(key);
        if newer.len() >= self.capacity {
            *older = std::mem::take(newer);
        }
        newer.insert(key.to_owned());
        fresh
    }

    /// Whether `key` is remembered (without recording it).
    pub fn contains(&self, key: &str) -> bool {
        let g = crate::lock(&self.generations);
        g.0.contains(key) || g.1.contains(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_fresh_once_and_memory_stays_bounded() {
        let seen = Seen::with_capacity(100);
        assert!(!seen.contains("a"));
        assert!(seen.insert("a"));
        assert!(!seen.insert("a"));
        assert!(seen.contains("a"));
        for i in 0..10_000 {
            assert!(seen.insert(&format!("k{i}")));
            // A key in use keeps being remembered across generations.
            assert!(!seen.insert("a"), "after {i} other keys");
        }
        let held = {
            let g = crate::lock(&seen.generations);
            g.0.len() + g.1.len()
        };
        assert!(held <= 200, "{held} keys held (at most twice the capacity)");
        // A key long out of use may be said again: the price of bounded memory.
        assert!(seen.insert("k0"));
    }
}
