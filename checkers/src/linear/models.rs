//! The sequential specifications, over compact states.
//!
//! Every JSON value an op carries is mapped once, before the search, to a small integer id
//! (equal ids exactly when the JSON values are equal), so that a search step compares
//! integers. States are `u32` ids too: a register's state is the id of its value; a kv
//! key's state is the id of its string; a multi-register's state is the id of its vector
//! of value ids. Models whose steps create new states (kv append, multi-register writes)
//! memoise (state, op) → state, so each distinct transition is computed once.

use super::wgl::Model;
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The id of JSON null: for registers and multi-registers the value nil, for etcd the
/// absent key.
pub(crate) const NULL: u32 = 0;
/// A transition memo's mark for "the op is impossible in this state".
const ILLEGAL: u32 = u32::MAX;

/// JSON values interned to ids; id 0 is null.
#[derive(Debug, Clone)]
pub(crate) struct Values {
    values: Vec<Value>,
    ids: HashMap<String, u32>,
}

impl Values {
    pub(crate) fn new() -> Values {
        Values {
            values: vec![Value::Null],
            ids: HashMap::new(),
        }
    }

    pub(crate) fn intern(&mut self, value: &Value) -> u32 {
        if value.is_null() {
            return NULL;
        }
        // serde_json prints maps with sorted keys, so the text is a canonical form.
        let text = value.to_string();
        if let Some(&id) = self.ids.get(&text) {
            return id;
        }
        let id = self.values.len() as u32;
        self.values.push(value.clone());
        self.ids.insert(text, id);
        id
    }

    pub(crate) fn get(&self, id: u32) -> &Value {
        self.values.get(id as usize).unwrap_or(&Value::Null)
    }

    /// How many distinct values are interned: every id is below this.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

/// Numbers inputs so that equal inputs get equal ids.
fn classes_of<T: Eq + std::hash::Hash>(inputs: impl Iterator<Item = T>) -> Vec<u32> {
    let mut ids: HashMap<T, u32> = HashMap::new();
    inputs
        .map(|input| {
            let next = ids.len() as u32;
            *ids.entry(input).or_insert(next)
        })
        .collect()
}

/// Register, cas-register and etcd ops, with value ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RegisterOp {
    /// Legal when the state is this value.
    Read(u32),
    Write(u32),
    /// Legal when the state is `old` (and, for etcd, present); sets `new`.
    Cas {
        old: u32,
        new: u32,
    },
    /// Etcd's failed cas: legal when the compare would fail, changes nothing.
    CasFailed {
        old: u32,
    },
    /// A cas that timed out: it may have happened or not, so it is legal in every state
    /// and sets `new` when the compare holds. Placed after every completed op, as it may
    /// be, it has no observable effect, which stands for "it did not happen".
    CasUnknown {
        old: u32,
        new: u32,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct RegisterModel {
    /// Etcd semantics: null is the absent key, on which a cas always fails.
    pub etcd: bool,
    pub init: u32,
    pub ops: Vec<RegisterOp>,
    pub values: Values,
}

impl RegisterModel {
    fn compare_holds(&self, state: u32, old: u32) -> bool {
        state == old && !(self.etcd && state == NULL)
    }
}

impl Model for RegisterModel {
    fn init(&self) -> u32 {
        self.init
    }

    #[inline]
    fn step(&mut self, state: u32, op: usize) -> Option<u32> {
        match self.ops[op] {
            RegisterOp::Read(value) => (state == value).then_some(state),
            RegisterOp::Write(value) => Some(value),
            RegisterOp::Cas { old, new } => self.compare_holds(state, old).then_some(new),
            RegisterOp::CasFailed { old } => (!self.compare_holds(state, old)).then_some(state),
            RegisterOp::CasUnknown { old, new } => Some(if self.compare_holds(state, old) {
                new
            } else {
                state
            }),
        }
    }

    fn describe_state(&self, state: u32) -> String {
        if self.etcd && state == NULL {
            "absent".to_string()
        } else {
            self.values.get(state).to_string()
        }
    }

    fn bytes(&self) -> usize {
        0
    }

    fn read_only(&self, op: usize) -> bool {
        matches!(
            self.ops.get(op),
            Some(RegisterOp::Read(_) | RegisterOp::CasFailed { .. })
        )
    }

    fn classes(&self) -> Vec<u32> {
        classes_of(self.ops.iter())
    }
}

/// Key-value ops on one key's string, with string ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KvOp {
    Get(u32),
    Put(u32),
    Append(u32),
}

/// A fast hasher for the search's small integer keys (state and op ids). SipHash's
/// resistance to chosen collisions buys nothing here and costs most of a kv step.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        for &byte in chunks.remainder() {
            self.add(u64::from(byte));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // Fold the well-mixed high bits into the low ones the table indexes by.
        self.0 ^ (self.0 >> 29)
    }
}

impl IdHasher {
    fn add(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Polynomial hashing base (odd, so that its powers never vanish modulo 2^64).
const BASE: u64 = 0x100_0000_01b3;

/// Strings interned to ids, for kv states and arguments. The texts share one arena, and
/// each id keeps a polynomial hash, so that the string `a + b` is found (or added) from
/// the hashes of `a` and `b` without building it first: an append whose result exists
/// costs a multiply and a comparison, not an allocation and a hash of the whole string.
#[derive(Debug, Clone, Default)]
pub(crate) struct Strings {
    arena: Vec<u8>,
    spans: Vec<(usize, usize)>,
    hashes: Vec<u64>,
    /// BASE to the power of each string's length.
    powers: Vec<u64>,
    /// Hash → the latest id with that hash; earlier ones chain through `same_hash`.
    by_hash: IdMap<u64, u32>,
    same_hash: Vec<u32>,
}

impl Strings {
    fn polynomial(bytes: &[u8]) -> (u64, u64) {
        bytes.iter().fold((0u64, 1u64), |(hash, power), &byte| {
            (
                hash.wrapping_mul(BASE).wrapping_add(u64::from(byte) + 1),
                power.wrapping_mul(BASE),
            )
        })
    }

    fn bytes_of(&self, id: u32) -> &[u8] {
        match self.spans.get(id as usize) {
            Some(&(start, len)) => &self.arena[start..start + len],
            None => &[],
        }
    }

    /// The id of the string `parts[0] + parts[1]`, which hashes to `hash`, if known.
    fn find(&self, hash: u64, parts: [&[u8]; 2]) -> Option<u32> {
        let mut candidate = *self.by_hash.get(&hash)?;
        loop {
            let text = self.bytes_of(candidate);
            if text.len() == parts[0].len() + parts[1].len()
                && text.starts_with(parts[0])
                && text.ends_with(parts[1])
            {
                return Some(candidate);
            }
            candidate = *self.same_hash.get(candidate as usize)?;
            if candidate == ILLEGAL {
                return None;
            }
        }
    }

    /// Records a new string, which the caller has just appended to the arena from `start`.
    fn add(&mut self, hash: u64, power: u64, start: usize) -> u32 {
        let id = self.spans.len() as u32;
        self.spans.push((start, self.arena.len() - start));
        self.hashes.push(hash);
        self.powers.push(power);
        self.same_hash
            .push(self.by_hash.insert(hash, id).unwrap_or(ILLEGAL));
        id
    }

    pub(crate) fn intern(&mut self, text: &str) -> u32 {
        let (hash, power) = Strings::polynomial(text.as_bytes());
        if let Some(id) = self.find(hash, [text.as_bytes(), &[]]) {
            return id;
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(text.as_bytes());
        self.add(hash, power, start)
    }

    /// The id of the concatenation of two interned strings.
    fn concat(&mut self, prefix: u32, suffix: u32) -> u32 {
        let (Some(&(prefix_start, prefix_len)), Some(&(suffix_start, suffix_len))) = (
            self.spans.get(prefix as usize),
            self.spans.get(suffix as usize),
        ) else {
            return prefix;
        };
        let (prefix_hash, prefix_power) =
            (self.hashes[prefix as usize], self.powers[prefix as usize]);
        let (suffix_hash, suffix_power) =
            (self.hashes[suffix as usize], self.powers[suffix as usize]);
        let hash = prefix_hash
            .wrapping_mul(suffix_power)
            .wrapping_add(suffix_hash);
        if let Some(id) = self.find(hash, [self.bytes_of(prefix), self.bytes_of(suffix)]) {
            return id;
        }
        // Copied within the arena, which may move as it grows: no temporary string.
        let start = self.arena.len();
        self.arena
            .extend_from_within(prefix_start..prefix_start + prefix_len);
        self.arena
            .extend_from_within(suffix_start..suffix_start + suffix_len);
        self.add(hash, prefix_power.wrapping_mul(suffix_power), start)
    }

    fn describe(&self, id: u32) -> String {
        Value::from(String::from_utf8_lossy(self.bytes_of(id)).into_owned()).to_string()
    }

    fn bytes(&self) -> usize {
        self.arena.capacity()
            + self.spans.capacity() * 16
            + (self.hashes.capacity() + self.powers.capacity()) * 8
            + self.same_hash.capacity() * 4
            + self.by_hash.capacity() * 16
    }
}

#[derive(Debug, Clone)]
pub(crate) struct KvModel {
    pub init: u32,
    pub ops: Vec<KvOp>,
    pub strings: Strings,
    /// (state, appended string) → state after it.
    appended: IdMap<(u32, u32), u32>,
}

impl KvModel {
    pub(crate) fn new(init: u32, ops: Vec<KvOp>, strings: Strings) -> KvModel {
        KvModel {
            init,
            ops,
            strings,
            appended: IdMap::default(),
        }
    }
}

impl Model for KvModel {
    fn init(&self) -> u32 {
        self.init
    }

    #[inline]
    fn step(&mut self, state: u32, op: usize) -> Option<u32> {
        match self.ops[op] {
            KvOp::Get(value) => (state == value).then_some(state),
            KvOp::Put(value) => Some(value),
            KvOp::Append(suffix) => {
                if let Some(&next) = self.appended.get(&(state, suffix)) {
                    return Some(next);
                }
                let next = self.strings.concat(state, suffix);
                self.appended.insert((state, suffix), next);
                Some(next)
            }
        }
    }

    fn describe_state(&self, state: u32) -> String {
        self.strings.describe(state)
    }

    fn bytes(&self) -> usize {
        self.strings.bytes() + self.appended.capacity() * 16
    }

    fn read_only(&self, op: usize) -> bool {
        matches!(self.ops.get(op), Some(KvOp::Get(_)))
    }

    fn classes(&self) -> Vec<u32> {
        classes_of(self.ops.iter())
    }
}

/// One read or write of a transaction, on a key slot of its component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Micro {
    pub write: bool,
    pub slot: u32,
    /// The value written, or read (`NULL` for a read whose result is unknown).
    pub value: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct MultiModel {
    pub keys: Vec<String>,
    pub values: Values,
    /// Op `i`'s micro-ops are `micros[bounds[i]..bounds[i + 1]]`.
    pub micros: Vec<Micro>,
    pub bounds: Vec<usize>,
    states: Vec<Box<[u32]>>,
    state_ids: IdMap<Box<[u32]>, u32>,
    /// (state, op) → state after it, or `ILLEGAL`.
    transitions: IdMap<(u32, u32), u32>,
    bytes: usize,
}

impl MultiModel {
    /// `init` holds the initial value id of every key slot.
    pub(crate) fn new(
        keys: Vec<String>,
        values: Values,
        init: Vec<u32>,
        micros: Vec<Micro>,
        bounds: Vec<usize>,
    ) -> MultiModel {
        let mut model = MultiModel {
            keys,
            values,
            micros,
            bounds,
            states: Vec::new(),
            state_ids: IdMap::default(),
            transitions: IdMap::default(),
            bytes: 0,
        };
        model.intern_state(init.into_boxed_slice());
        model
    }

    fn intern_state(&mut self, registers: Box<[u32]>) -> u32 {
        if let Some(&id) = self.state_ids.get(&registers) {
            return id;
        }
        let id = self.states.len() as u32;
        self.bytes += registers.len() * 8 + 64;
        self.states.push(registers.clone());
        self.state_ids.insert(registers, id);
        id
    }

    fn apply(&self, state: u32, op: usize) -> Option<Box<[u32]>> {
        let mut registers = self.states.get(state as usize)?.clone();
        for micro in &self.micros[self.bounds[op]..self.bounds[op + 1]] {
            let register = registers.get_mut(micro.slot as usize)?;
            if micro.write {
                *register = micro.value;
            } else if micro.value != NULL && micro.value != *register {
                return None;
            }
        }
        Some(registers)
    }
}

impl Model for MultiModel {
    fn init(&self) -> u32 {
        0
    }

    fn step(&mut self, state: u32, op: usize) -> Option<u32> {
        let memo_key = (state, op as u32);
        if let Some(&next) = self.transitions.get(&memo_key) {
            return (next != ILLEGAL).then_some(next);
        }
        let next = match self.apply(state, op) {
            Some(registers) => self.intern_state(registers),
            None => ILLEGAL,
        };
        self.transitions.insert(memo_key, next);
        (next != ILLEGAL).then_some(next)
    }

    fn describe_state(&self, state: u32) -> String {
        let Some(registers) = self.states.get(state as usize) else {
            return String::new();
        };
        let map: serde_json::Map<String, Value> = self
            .keys
            .iter()
            .zip(registers.iter())
            .map(|(key, &value)| (key.clone(), self.values.get(value).clone()))
            .collect();
        Value::Object(map).to_string()
    }

    fn bytes(&self) -> usize {
        self.bytes + self.transitions.capacity() * 16
    }

    fn read_only(&self, op: usize) -> bool {
        match (self.bounds.get(op), self.bounds.get(op + 1)) {
            (Some(&start), Some(&end)) => self.micros[start..end].iter().all(|micro| !micro.write),
            _ => false,
        }
    }

    fn classes(&self) -> Vec<u32> {
        classes_of(
            self.bounds
                .windows(2)
                .map(|bounds| &self.micros[bounds[0]..bounds[1]]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn register(etcd: bool, ops: Vec<RegisterOp>) -> RegisterModel {
        let mut values = Values::new();
        for v in 1..=3 {
            values.intern(&json!(v));
        }
        RegisterModel {
            etcd,
            init: NULL,
            ops,
            values,
        }
    }

    #[test]
    fn values_intern_equal_json_to_equal_ids() {
        let mut values = Values::new();
        assert_eq!(values.intern(&json!(null)), NULL);
        let a = values.intern(&json!({"b": 1, "a": [2]}));
        assert_eq!(values.intern(&json!({"a": [2], "b": 1})), a);
        assert_ne!(values.intern(&json!(1)), values.intern(&json!("1")));
    }

    #[test]
    fn etcd_cas_on_absent_fails_and_failed_cas_needs_a_differing_state() {
        let mut m = register(
            true,
            vec![
                RegisterOp::Cas { old: NULL, new: 1 },
                RegisterOp::CasFailed { old: 1 },
                RegisterOp::CasUnknown { old: 1, new: 2 },
            ],
        );
        assert_eq!(m.step(NULL, 0), None, "cas on absent key");
        assert_eq!(m.step(NULL, 1), Some(NULL), "failed cas on absent key");
        assert_eq!(m.step(1, 1), None, "failed cas although the compare holds");
        assert_eq!(m.step(2, 1), Some(2));
        assert_eq!(m.step(1, 2), Some(2));
        assert_eq!(m.step(3, 2), Some(3));
        assert_eq!(m.describe_state(NULL), "absent");
    }

    #[test]
    fn knossos_cas_register_compares_null_like_any_value() {
        let mut m = register(false, vec![RegisterOp::Cas { old: NULL, new: 1 }]);
        assert_eq!(m.step(NULL, 0), Some(1));
        assert_eq!(m.describe_state(NULL), "null");
    }

    #[test]
    fn kv_appends_concatenate_and_gets_compare() {
        let mut strings = Strings::default();
        let empty = strings.intern("");
        let x = strings.intern("x");
        let xy = strings.intern("xy");
        let y = strings.intern("y");
        let mut m = KvModel::new(
            empty,
            vec![
                KvOp::Append(x),
                KvOp::Append(y),
                KvOp::Get(xy),
                KvOp::Put(y),
            ],
            strings,
        );
        let s1 = m.step(empty, 0).unwrap();
        assert_eq!(s1, x);
        let s2 = m.step(s1, 1).unwrap();
        assert_eq!(s2, xy, "appending interns to the id the read already has");
        assert_eq!(m.step(s2, 2), Some(xy));
        assert_eq!(m.step(s1, 2), None);
        assert_eq!(m.step(s2, 3), Some(y));
        assert_eq!(m.describe_state(xy), "\"xy\"");
    }

    #[test]
    fn multi_register_reads_see_earlier_writes_of_the_same_txn() {
        let mut values = Values::new();
        let one = values.intern(&json!(1));
        let two = values.intern(&json!(2));
        let micros = vec![
            // txn 0: write x 1, read x 1, read y nil (unknown)
            Micro {
                write: true,
                slot: 0,
                value: one,
            },
            Micro {
                write: false,
                slot: 0,
                value: one,
            },
            Micro {
                write: false,
                slot: 1,
                value: NULL,
            },
            // txn 1: read y 2
            Micro {
                write: false,
                slot: 1,
                value: two,
            },
        ];
        let mut m = MultiModel::new(
            vec!["x".into(), "y".into()],
            values,
            vec![NULL, NULL],
            micros,
            vec![0, 3, 4],
        );
        let s = m.step(0, 0).unwrap();
        assert_eq!(m.step(0, 0), Some(s), "memoised");
        assert_eq!(m.step(s, 1), None);
        assert_eq!(m.describe_state(s), r#"{"x":1,"y":null}"#);
    }
}
