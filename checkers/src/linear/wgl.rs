//! Wing & Gong's backtracking search with Lowe's memoisation, over one partition.
//!
//! The partition's ops become call and return entries in a doubly linked list, in history
//! order. Scanning from the head, a call whose op the model accepts in the current state is
//! linearized: its bit is set, and unless the cache already holds (bitset, new state) the
//! op's two entries are lifted out of the list and the scan restarts from the head. Meeting
//! a return entry means that op should have been linearized by now: undo the last
//! linearized op and try the entry after its call. An empty list is a linearization; an
//! empty undo stack when meeting a return means there is none.
//!
//! Two prunings on top, both keeping every linearization's outcome (each is argued where
//! it is applied, and tests/linear_prop.rs checks them against a brute-force oracle):
//! read-only ops are committed where they are legal (no alternative to placing them now
//! is explored), and interchangeable ops (same input and output) are placed in a fixed
//! order, so that permutations of identical timed-out writes are explored once.
//!
//! The list lives in index arrays (entry 0 is the head sentinel) so that lifting and
//! restoring are a few stores, and model states are `u32` ids so that a step compares
//! integers (a kv append or multi-register write builds its new state only the first time
//! that transition is taken); cache inserts are the memory that grows.

use super::cache::{state_hash, zobrist_keys, Bitset, Cache};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

const NIL: u32 = u32::MAX;
const HEAD: u32 = 0;
/// Limits are looked at once per this many steps (a power of two, minus one): often
/// enough to stop within a millisecond, rarely enough to cost nothing.
const CHECK_MASK: u64 = 4095;

/// A sequential specification over compact states.
pub(crate) trait Model {
    fn init(&self) -> u32;
    /// The state after applying op `op` (a partition-local index) in `state`, or `None`
    /// when the op's observed result is impossible in `state`.
    fn step(&mut self, state: u32, op: usize) -> Option<u32>;
    fn describe_state(&self, state: u32) -> String;
    /// Bytes held beyond the ops themselves (states created during the search).
    fn bytes(&self) -> usize;
    /// Whether op `op` never changes the state, in any state.
    fn read_only(&self, op: usize) -> bool;
    /// Per op, a class id: equal for ops with the same input and observed output, which
    /// are interchangeable in any sequence.
    fn classes(&self) -> Vec<u32>;
}

/// When an op may be linearized: after `call`, and before `ret` (`None`: any time up to
/// the end of the history). Both are positions in the history, so they order entries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub call: usize,
    pub ret: Option<usize>,
}

/// The bounds one partition's search runs under, shared by all partitions.
pub(crate) struct Limits<'a> {
    /// Set when another partition was found not linearizable: the answer is known.
    pub stop: &'a AtomicBool,
    pub deadline: Option<Instant>,
    /// Bytes held by all searches running now.
    pub memory_used: &'a AtomicUsize,
    pub memory_budget: usize,
}

#[derive(Debug)]
pub(crate) enum SearchOutcome {
    Linearizable,
    NotLinearizable(Failure),
    Stopped,
    TimedOut,
    OutOfMemory,
}

/// Why a partition is not linearizable, in partition-local op indices.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The longest sequence of ops linearized at any point of the search, in order.
    pub longest: Vec<u32>,
    /// The model state after `longest`.
    pub state_after: String,
    /// The op whose return entry stopped the search at `longest`: among the ops not in
    /// it, the one that returned first, which had to be linearized next and could not.
    pub unplaced: u32,
    /// Per op, the length of the longest linearized sequence that contained it (0 if it
    /// never was linearized).
    pub partials: Vec<u32>,
}

/// The call/return entries as a doubly linked list in index arrays.
struct Entries {
    next: Vec<u32>,
    prev: Vec<u32>,
    op: Vec<u32>,
    /// For a call entry, its return entry; `NIL` for return entries and the head.
    mate: Vec<u32>,
}

impl Entries {
    fn build(spans: &[Span]) -> Entries {
        let mut events: Vec<(usize, bool, u32)> = Vec::with_capacity(spans.len() * 2);
        for (op, span) in spans.iter().enumerate() {
            events.push((span.call, false, op as u32));
            events.push((span.ret.unwrap_or(usize::MAX), true, op as u32));
        }
        // Positions are distinct except for the ops open to the end, whose returns then
        // follow op order; calls sort before returns at equal positions.
        events.sort_unstable();
        let len = events.len() + 1;
        let mut entries = Entries {
            next: (1..=len as u32).collect(),
            prev: Vec::with_capacity(len),
            op: Vec::with_capacity(len),
            mate: vec![NIL; len],
        };
        entries.next[len - 1] = NIL;
        entries.prev.push(NIL);
        entries.prev.extend(0..(len - 1) as u32);
        entries.op.push(NIL);
        let mut call_entry = vec![NIL; spans.len()];
        for (i, &(_, is_return, op)) in events.iter().enumerate() {
            let entry = i as u32 + 1;
            entries.op.push(op);
            if is_return {
                entries.mate[call_entry[op as usize] as usize] = entry;
            } else {
                call_entry[op as usize] = entry;
            }
        }
        entries
    }

    /// Unlinks a call entry and its return entry; `restore` undoes it, provided the
    /// lifts after it were undone first (dancing links).
    fn lift(&mut self, call: u32) {
        let ret = self.mate[call as usize];
        for entry in [call, ret] {
            let (prev, next) = (self.prev[entry as usize], self.next[entry as usize]);
            self.next[prev as usize] = next;
            if next != NIL {
                self.prev[next as usize] = prev;
            }
        }
    }

    fn restore(&mut self, call: u32) {
        let ret = self.mate[call as usize];
        for entry in [ret, call] {
            let (prev, next) = (self.prev[entry as usize], self.next[entry as usize]);
            self.next[prev as usize] = entry;
            if next != NIL {
                self.prev[next as usize] = entry;
            }
        }
    }

    fn bytes(&self) -> usize {
        self.next.capacity() * 16
    }
}

/// One linearized op, with the state before it to return to on backtracking.
#[derive(Debug, Clone, Copy)]
struct Frame {
    call: u32,
    op: u32,
    state_before: u32,
    /// The op is read-only (it never changes the state), so no alternative to placing it
    /// here needs exploring: if some linearization exists from the configuration before
    /// it, one exists that places this read first. Any op that could go before the read
    /// can go after it (no op not linearized returned before the read's call, since the
    /// read is reachable from the head), and the read sees the same state either way.
    /// So when this branch fails, the configuration below it fails too.
    committed: bool,
}

/// Per op, the length of the longest linearized sequence that contained it, as Porcupine
/// keeps for drawing (the lengths only: the sequences themselves, one per op, would take
/// memory quadratic in the ops). Lengths only need recording at local maxima of the stack
/// depth (the first backtrack after a push): any other stack is a prefix of the last
/// maximum. `stack_min` (the least record among the ops on the stack up to each level)
/// makes the common case, where every op on the stack already has a record this long,
/// O(1).
struct Partials {
    record: Vec<u32>,
    stack_min: Vec<u32>,
}

impl Partials {
    fn new(ops: usize) -> Partials {
        Partials {
            record: vec![0; ops],
            stack_min: Vec::with_capacity(ops),
        }
    }

    fn push(&mut self, op: u32) {
        let below = self.stack_min.last().copied().unwrap_or(u32::MAX);
        self.stack_min.push(below.min(self.record[op as usize]));
    }

    fn pop(&mut self) {
        self.stack_min.pop();
    }

    fn peak(&mut self, stack: &[Frame]) {
        let depth = stack.len() as u32;
        match self.stack_min.last() {
            Some(&least) if least < depth => {}
            _ => return,
        }
        let mut least = u32::MAX;
        for (level, frame) in stack.iter().enumerate() {
            let record = &mut self.record[frame.op as usize];
            *record = (*record).max(depth);
            least = least.min(*record);
            self.stack_min[level] = least;
        }
    }

    fn bytes(&self) -> usize {
        (self.record.capacity() + self.stack_min.capacity()) * 4
    }
}

impl Limits<'_> {
    /// Whether a search must end now, and how; looked at between steps, outside the search
    /// itself. `bytes` is what the search holds now: it becomes the search's share of the
    /// memory count unless the stop flag or the deadline already ended it.
    fn check(&self, memory: &mut MemoryShare, bytes: usize) -> Option<SearchOutcome> {
        if self.stop.load(Ordering::Relaxed) {
            return Some(SearchOutcome::Stopped);
        }
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return Some(SearchOutcome::TimedOut);
        }
        if memory.report(bytes) > self.memory_budget {
            return Some(SearchOutcome::OutOfMemory);
        }
        None
    }
}

/// Keeps this search's share of the shared memory count current, and gives it back when
/// the search ends, however it ends.
struct MemoryShare<'a> {
    used: &'a AtomicUsize,
    reported: usize,
}

impl MemoryShare<'_> {
    /// Reports `bytes` as this search's share; the total of all searches now.
    fn report(&mut self, bytes: usize) -> usize {
        let total = if bytes >= self.reported {
            self.used
                .fetch_add(bytes - self.reported, Ordering::Relaxed)
                + (bytes - self.reported)
        } else {
            self.used
                .fetch_sub(self.reported - bytes, Ordering::Relaxed)
                .saturating_sub(self.reported - bytes)
        };
        self.reported = bytes;
        total
    }
}

impl Drop for MemoryShare<'_> {
    fn drop(&mut self) {
        self.used.fetch_sub(self.reported, Ordering::Relaxed);
    }
}

/// Per op Y, the op X that must be linearized before it, or `NIL`: the latest op called
/// before Y that is interchangeable with it and returns no later. Any linearization can be
/// rewritten so that such an X precedes Y: give identical ops their positions in order of
/// return (X's call is before Y's position and Y's return after X's position, so both
/// still fit their intervals). Insisting on that order keeps the search from exploring
/// the same configurations under permuted names, which is what makes many identical
/// timed-out writes (each open to the end of the history) cheap.
fn earlier_twins(spans: &[Span], classes: &[u32]) -> Vec<u32> {
    let mut by_call: Vec<u32> = (0..spans.len() as u32).collect();
    by_call.sort_by_key(|&op| spans[op as usize].call);
    let mut twin = vec![NIL; spans.len()];
    // Per class, a stack of earlier ops whose returns increase towards the top: the
    // nearest earlier op returning no later than the current one is found by popping
    // those that return later, which no later op can need either.
    let mut stacks: std::collections::HashMap<u32, Vec<u32>> = std::collections::HashMap::new();
    let ret = |op: u32| spans[op as usize].ret.unwrap_or(usize::MAX);
    for op in by_call {
        let Some(&class) = classes.get(op as usize) else {
            continue;
        };
        let stack = stacks.entry(class).or_default();
        while stack.last().is_some_and(|&earlier| ret(earlier) > ret(op)) {
            stack.pop();
        }
        if let Some(&earlier) = stack.last() {
            twin[op as usize] = earlier;
        }
        stack.push(op);
    }
    twin
}

/// A search in progress, which can run in slices so that one thread can take turns
/// between partitions: a hard partition then cannot keep an easy one that fails from
/// being checked (and the whole check from failing fast).
pub(crate) struct Search<'a, M: Model> {
    model: M,
    entries: Entries,
    read_only: Vec<bool>,
    twin: Vec<u32>,
    zobrist: Vec<u64>,
    linearized: Bitset,
    linearized_hash: u64,
    cache: Cache,
    stack: Vec<Frame>,
    partials: Partials,
    memory: MemoryShare<'a>,
    /// The model state after the ops on the stack.
    state: u32,
    /// The longest stack seen, the state after it, and the op that stopped it.
    longest: Vec<u32>,
    longest_state: u32,
    longest_blocker: u32,
    /// True between a push and the next backtrack: the stack is then at a local maximum.
    at_peak: bool,
    steps: u64,
    /// The entry the scan is at.
    entry: u32,
}

impl<'a, M: Model> Search<'a, M> {
    /// Prepares the search for a linearization of the ops of `spans` under `model`.
    pub(crate) fn new(model: M, spans: &[Span], memory_used: &'a AtomicUsize) -> Search<'a, M> {
        let ops = spans.len();
        let entries = Entries::build(spans);
        let linearized = Bitset::new(ops);
        let state = model.init();
        Search {
            read_only: (0..ops).map(|op| model.read_only(op)).collect(),
            twin: earlier_twins(spans, &model.classes()),
            zobrist: zobrist_keys(ops),
            cache: Cache::new(linearized.words().len()),
            linearized,
            linearized_hash: 0,
            stack: Vec::with_capacity(ops),
            partials: Partials::new(ops),
            memory: MemoryShare {
                used: memory_used,
                reported: 0,
            },
            state,
            longest: Vec::new(),
            longest_state: state,
            longest_blocker: NIL,
            at_peak: true,
            steps: 0,
            entry: entries.next[HEAD as usize],
            entries,
            model,
        }
    }

    /// Runs about `slice` more steps: the outcome, or `None` if the slice ended first.
    ///
    /// The search itself is [`Search::step`]; this only counts steps and, every
    /// `CHECK_MASK + 1` of them, asks [`Limits::check`] whether it may go on.
    pub(crate) fn run(&mut self, limits: &Limits, slice: u64) -> Option<SearchOutcome> {
        let until = self.steps.saturating_add(slice);
        loop {
            if self.entries.next[HEAD as usize] == NIL {
                return Some(SearchOutcome::Linearizable);
            }
            self.steps += 1;
            if self.steps & CHECK_MASK == 0 {
                let bytes = self.bytes();
                if let Some(outcome) = limits.check(&mut self.memory, bytes) {
                    return Some(outcome);
                }
                if self.steps >= until {
                    return None;
                }
            }
            if let Some(failure) = self.step() {
                return Some(SearchOutcome::NotLinearizable(failure));
            }
        }
    }

    /// One step of the search, with ops left to linearize: place the op of the current
    /// entry, or, stuck, record the stack if it is a peak and backtrack. The failure when
    /// there is nothing left to backtrack.
    #[inline]
    fn step(&mut self) -> Option<Failure> {
        if self.place() {
            return None;
        }
        self.record_peak();
        if self.backtrack() {
            None
        } else {
            Some(self.failure())
        }
    }

    /// Tries to linearize the op of the call entry the scan is at. True when the scan moved
    /// on: the op was placed (and the scan restarts from the head), or it cannot go here
    /// (its earlier twin is not placed yet, the model refuses it, or the configuration after
    /// it was explored already) and the scan goes to the next entry. False when stuck: at
    /// a return entry, whose op should have been linearized by now, or at a read whose
    /// placement here is known to fail.
    #[inline]
    fn place(&mut self) -> bool {
        let entry = self.entry;
        if self.entries.mate[entry as usize] == NIL {
            return false;
        }
        let op = self.entries.op[entry as usize];
        let twin_first = self.twin[op as usize];
        if twin_first != NIL && !self.linearized.get(twin_first as usize) {
            self.entry = self.entries.next[entry as usize];
            return true;
        }
        let Some(next_state) = self.model.step(self.state, op as usize) else {
            self.entry = self.entries.next[entry as usize];
            return true;
        };
        self.linearized.set(op as usize);
        let hash = self.linearized_hash ^ self.zobrist[op as usize];
        let fresh = self.cache.insert(
            self.linearized.words(),
            next_state,
            hash ^ state_hash(next_state),
        );
        if fresh {
            self.stack.push(Frame {
                call: entry,
                op,
                state_before: self.state,
                committed: self.read_only[op as usize],
            });
            self.partials.push(op);
            self.state = next_state;
            self.linearized_hash = hash;
            self.entries.lift(entry);
            self.entry = self.entries.next[HEAD as usize];
            self.at_peak = true;
            return true;
        }
        self.linearized.clear(op as usize);
        // Placing this read here was already explored and failed; as reads are committed
        // (see `Frame::committed`), nothing else here can succeed.
        if self.read_only[op as usize] {
            return false;
        }
        self.entry = self.entries.next[entry as usize];
        true
    }

    /// Stuck right after a push, the stack is at a local maximum: keeps it as the longest
    /// prefix if it is one (or if none was kept yet), and as each of its ops' partial.
    #[inline]
    fn record_peak(&mut self) {
        if !self.at_peak {
            return;
        }
        self.at_peak = false;
        if self.stack.len() > self.longest.len() || self.longest_blocker == NIL {
            self.longest.clear();
            self.longest.extend(self.stack.iter().map(|frame| frame.op));
            self.longest_state = self.state;
            // Every entry before `entry` is a call, so the first return from here is the
            // earliest return among the ops not linearized: the op that could not be
            // placed.
            let mut first_return = self.entry;
            while self.entries.mate[first_return as usize] != NIL {
                first_return = self.entries.next[first_return as usize];
            }
            self.longest_blocker = self.entries.op[first_return as usize];
        }
        self.partials.peak(&self.stack);
    }

    /// Undoes linearized ops, down to and including the last one not committed, and moves
    /// the scan to the entry after that op's call. False when the stack ran out first: no
    /// linearization exists.
    #[inline]
    fn backtrack(&mut self) -> bool {
        while let Some(frame) = self.stack.pop() {
            self.partials.pop();
            self.state = frame.state_before;
            self.linearized.clear(frame.op as usize);
            self.linearized_hash ^= self.zobrist[frame.op as usize];
            self.entries.restore(frame.call);
            self.entry = self.entries.next[frame.call as usize];
            if !frame.committed {
                return true;
            }
        }
        false
    }

    /// The answer once the search is exhausted: the longest prefix kept, and the partials.
    fn failure(&mut self) -> Failure {
        Failure {
            longest: std::mem::take(&mut self.longest),
            state_after: self.model.describe_state(self.longest_state),
            unplaced: self.longest_blocker,
            partials: std::mem::take(&mut self.partials.record),
        }
    }

    /// Bytes this search holds now.
    fn bytes(&self) -> usize {
        self.cache.bytes()
            + self.entries.bytes()
            + self.stack.capacity() * 16
            + self.partials.bytes()
            + self.model.bytes()
    }
}

/// Searches for a linearization of the ops of `spans` under `model`, to the end.
#[cfg(test)]
pub(crate) fn search<M: Model>(model: M, spans: &[Span], limits: &Limits) -> SearchOutcome {
    let mut search = Search::new(model, spans, limits.memory_used);
    loop {
        if let Some(outcome) = search.run(limits, u64::MAX) {
            return outcome;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(call: usize, ret: Option<usize>) -> Span {
        Span { call, ret }
    }

    #[test]
    fn earlier_twin_is_the_nearest_interchangeable_op_returning_no_later() {
        let spans = [
            span(0, Some(10)), // a
            span(1, None),     // a, open to the end
            span(2, Some(5)),  // a, returns before op 0
            span(3, Some(4)),  // b
            span(6, Some(9)),  // a
            span(7, Some(8)),  // b
        ];
        let classes = [0, 0, 0, 1, 0, 1];
        assert_eq!(
            earlier_twins(&spans, &classes),
            vec![NIL, 0, NIL, NIL, 2, 3]
        );
    }

    /// A register whose ops are writes of one value and a read of another.
    struct Constant {
        read_at: usize,
    }

    impl Model for Constant {
        fn init(&self) -> u32 {
            0
        }
        fn step(&mut self, state: u32, op: usize) -> Option<u32> {
            if op == self.read_at {
                (state == 2).then_some(state)
            } else {
                Some(1)
            }
        }
        fn describe_state(&self, state: u32) -> String {
            state.to_string()
        }
        fn bytes(&self) -> usize {
            0
        }
        fn read_only(&self, op: usize) -> bool {
            op == self.read_at
        }
        fn classes(&self) -> Vec<u32> {
            (0..=self.read_at)
                .map(|op| u32::from(op == self.read_at))
                .collect()
        }
    }

    #[test]
    fn identical_timed_out_writes_are_not_permuted() {
        // 40 identical writes open to the end, then a read nothing explains: without
        // ordering the twins, every subset of the writes would be a configuration.
        let writes = 40;
        let mut spans: Vec<Span> = (0..writes).map(|i| span(i, None)).collect();
        spans.push(span(writes, Some(writes + 1)));
        let stop = AtomicBool::new(false);
        let used = AtomicUsize::new(0);
        let limits = Limits {
            stop: &stop,
            deadline: Some(Instant::now() + std::time::Duration::from_secs(20)),
            memory_used: &used,
            memory_budget: 1 << 30,
        };
        let outcome = search(Constant { read_at: writes }, &spans, &limits);
        let SearchOutcome::NotLinearizable(failure) = outcome else {
            panic!("expected not linearizable, got {outcome:?}");
        };
        assert_eq!(failure.unplaced, writes as u32);
        assert_eq!(failure.longest.len(), writes);
        assert_eq!(used.load(Ordering::Relaxed), 0, "memory given back");
    }
}
