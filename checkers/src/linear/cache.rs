//! The search's working set: which ops are linearized (a bitset) and Lowe's cache of the
//! (bitset, state) configurations already explored.
//!
//! The cache is an open-addressing hash set over a flat arena of bitset words rather than
//! a `HashMap<Vec<u64>, _>`: one allocation per growth instead of one per entry, and the
//! byte count the memory budget needs is exact.

/// One bit per op of a partition, set while the op is linearized.
#[derive(Debug, Clone)]
pub(crate) struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    pub(crate) fn new(bits: usize) -> Bitset {
        Bitset {
            words: vec![0; bits.div_ceil(64).max(1)],
        }
    }

    pub(crate) fn set(&mut self, bit: usize) {
        self.words[bit / 64] |= 1 << (bit % 64);
    }

    pub(crate) fn clear(&mut self, bit: usize) {
        self.words[bit / 64] &= !(1 << (bit % 64));
    }

    pub(crate) fn get(&self, bit: usize) -> bool {
        self.words[bit / 64] & (1 << (bit % 64)) != 0
    }

    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }
}

/// A fixed pseudo-random 64-bit value per op, so that the hash of a bitset is the XOR of
/// the values of its set bits (Zobrist hashing) and follows each set/clear in O(1)
/// instead of rehashing every word at every step.
pub(crate) fn zobrist_keys(ops: usize) -> Vec<u64> {
    (0..ops as u64)
        .map(|i| splitmix64(i ^ 0x6a09_e667_f3bc_c909))
        .collect()
}

/// Spreads a model state over 64 bits before it is combined with a bitset hash, so that
/// small consecutive state ids do not collide in the low bits used for slot selection.
pub(crate) fn state_hash(state: u32) -> u64 {
    splitmix64(u64::from(state) ^ 0xbb67_ae85_84ca_a73b)
}

fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One slot of the open-addressing table. The hash and state sit in the slot itself, so
/// that a probe past a different configuration touches no other memory; only a probable
/// match reads the bitset from the arena.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    hash: u64,
    state: u32,
    /// 0: empty; otherwise the entry's index + 1.
    entry: u32,
}

/// The set of explored configurations. Entry `i`'s bitset is
/// `arena[i*words..(i+1)*words]`.
#[derive(Debug)]
pub(crate) struct Cache {
    words: usize,
    arena: Vec<u64>,
    entries: usize,
    slots: Vec<Slot>,
}

impl Cache {
    pub(crate) fn new(words: usize) -> Cache {
        Cache {
            words,
            arena: Vec::new(),
            entries: 0,
            slots: vec![Slot::default(); 1024],
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    /// Adds the configuration unless present; true when it was new.
    #[inline]
    pub(crate) fn insert(&mut self, bits: &[u64], state: u32, hash: u64) -> bool {
        debug_assert_eq!(bits.len(), self.words);
        let mask = self.slots.len() - 1;
        let mut index = (hash as usize) & mask;
        loop {
            let slot = self.slots[index];
            if slot.entry == 0 {
                break;
            }
            if slot.hash == hash && slot.state == state {
                let start = (slot.entry as usize - 1) * self.words;
                let stored = &self.arena[start..start + self.words];
                // Two words or so: a plain loop beats a call to memcmp.
                if stored.iter().zip(bits).all(|(a, b)| a == b) {
                    return false;
                }
            }
            index = (index + 1) & mask;
        }
        // Entry ids must fit the u32 slots; past that the memory budget has long been
        // exceeded, so refusing to cache only costs search time, never correctness.
        let Ok(entry) = u32::try_from(self.entries + 1) else {
            return true;
        };
        self.slots[index] = Slot { hash, state, entry };
        self.arena.extend_from_slice(bits);
        self.entries += 1;
        // Half-full at most keeps linear probes short.
        if self.entries * 2 > self.slots.len() {
            self.grow();
        }
        true
    }

    fn grow(&mut self) {
        let mut slots = vec![Slot::default(); self.slots.len() * 2];
        let mask = slots.len() - 1;
        for slot in self.slots.iter().filter(|slot| slot.entry != 0) {
            let mut index = (slot.hash as usize) & mask;
            while slots[index].entry != 0 {
                index = (index + 1) & mask;
            }
            slots[index] = *slot;
        }
        self.slots = slots;
    }

    /// Bytes held, for the memory budget.
    pub(crate) fn bytes(&self) -> usize {
        self.arena.capacity() * 8 + self.slots.len() * std::mem::size_of::<Slot>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitset_sets_and_clears_across_words() {
        let mut b = Bitset::new(130);
        assert_eq!(b.words().len(), 3);
        b.set(0);
        b.set(64);
        b.set(129);
        assert_eq!(b.words(), &[1, 1, 2]);
        b.clear(64);
        assert_eq!(b.words(), &[1, 0, 2]);
    }

    #[test]
    fn cache_distinguishes_bitsets_and_states_and_survives_growth() {
        let mut cache = Cache::new(2);
        // A constant hash forces every entry into one probe chain.
        for i in 0..3000u64 {
            assert!(cache.insert(&[i, 7], 1, 42));
        }
        for i in 0..3000u64 {
            assert!(!cache.insert(&[i, 7], 1, 42));
        }
        assert!(cache.insert(&[5, 7], 2, 42));
        assert_eq!(cache.len(), 3001);
        assert!(cache.bytes() >= 3001 * 16);
    }
}
