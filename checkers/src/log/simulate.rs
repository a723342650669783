//! A simulated *correct* Kafka-style log under concurrent clients, producing histories in
//! the harness's format: for tests, property tests and benchmarks of the log checker.
//!
//! Every operation takes effect at its completion (reads see the log as it is then,
//! appends get the next offset then), which respects real time. Crashed appends (`info`)
//! take effect never, at once, or some steps later; the crashed worker continues as
//! process + `processes`, as Jepsen does. Appends go to any key; reads, as in a consumer
//! group, go to the keys assigned to the worker (key `k` to worker `k % processes`), and
//! are mostly polls that continue from the furthest the worker has read, sometimes
//! re-reads from an earlier offset, all bounded by `max` so that records stay few; at the
//! end every key is read from offset 0 to its end in chunks, marked `"final": true`.

use history::{History, Op, OpType, Process};
use rng::Rng;
use serde_json::{json, Map, Value};

/// Knobs of the simulation; [`SimConfig::new`] gives the defaults `generate_history` uses.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    /// Approximate number of history entries (invocations and completions), final reads
    /// included.
    pub ops: usize,
    pub keys: usize,
    /// Concurrent workers.
    pub processes: usize,
    /// Share of new operations that are appends (the rest are reads).
    pub append_percent: u32,
    /// Share of completions that fail (definitely no effect).
    pub fail_percent: u32,
    /// Share of completions that crash (`info`; the worker becomes a new process).
    pub crash_percent: u32,
    /// Share of reads made with `"consistency": "linearizable"`.
    pub linearizable_percent: u32,
    /// Share of reads that re-read from an earlier offset (with a random `max` up to
    /// `max_records`) instead of polling on.
    pub reread_percent: u32,
    /// `max` of ordinary reads.
    pub max_records: u64,
    /// `max` of each final read.
    pub final_chunk: u64,
    /// On average one nemesis fault (a start/stop pair of entries) per this many steps.
    pub nemesis_every: u64,
}

impl SimConfig {
    pub fn new(seed: u64, ops: usize, keys: usize, processes: usize) -> SimConfig {
        SimConfig {
            seed,
            ops,
            keys,
            processes,
            append_percent: 55,
            fail_percent: 3,
            crash_percent: 2,
            linearizable_percent: 20,
            reread_percent: 5,
            max_records: 100,
            final_chunk: 1000,
            nemesis_every: 5000,
        }
    }
}

/// A history of a correct log: `ops` entries (about), `keys` partitions `t/0`...,
/// `processes` concurrent workers; the same arguments give the same history.
pub fn generate_history(seed: u64, ops: usize, keys: usize, processes: usize) -> History {
    generate(&SimConfig::new(seed, ops, keys, processes))
}

#[derive(Debug, Clone)]
enum Pending {
    Append {
        key: usize,
        value: i64,
    },
    Read {
        key: usize,
        offset: i64,
        max: u64,
        linearizable: bool,
        marked_final: bool,
    },
}

struct Worker {
    process: u64,
    pending: Option<Pending>,
    /// The furthest this worker's ok reads of each key have reached.
    position: Vec<i64>,
    /// Whether the current process has polled each key: a new process (after a crash)
    /// polls first, so that its own reads never leave a gap behind its position.
    polled: Vec<bool>,
}

struct Sim<'a> {
    config: &'a SimConfig,
    rng: Rng,
    ops: Vec<Op>,
    time: u64,
    step: u64,
    logs: Vec<Vec<i64>>,
    key_names: Vec<String>,
    workers: Vec<Worker>,
    next_value: i64,
    /// Crashed appends still to take effect: (due step, key, value).
    deferred: Vec<(u64, usize, i64)>,
}

/// Simulates a run as configured.
pub fn generate(config: &SimConfig) -> History {
    let keys = config.keys.max(1);
    let processes = config.processes.max(1);
    let mut sim = Sim {
        config,
        rng: Rng::new(config.seed),
        ops: Vec::with_capacity(config.ops + 16),
        time: 0,
        step: 0,
        logs: vec![Vec::new(); keys],
        key_names: (0..keys).map(|k| format!("t/{k}")).collect(),
        workers: (0..processes)
            .map(|p| Worker {
                process: p as u64,
                pending: None,
                position: vec![0; keys],
                polled: vec![false; keys],
            })
            .collect(),
        next_value: 0,
        deferred: Vec::new(),
    };
    while sim.ops.len() + sim.final_reserve() < config.ops {
        sim.step += 1;
        sim.time += 1 + sim.rng.below(1000);
        sim.apply_deferred(false);
        if sim.rng.below(config.nemesis_every.max(1)) == 0 {
            sim.nemesis();
        }
        let w = sim.rng.below(processes as u64) as usize;
        if sim.workers[w].pending.is_some() {
            sim.complete(w, false);
        } else {
            sim.invoke(w);
        }
    }
    for w in 0..processes {
        if sim.workers[w].pending.is_some() {
            sim.time += 1 + sim.rng.below(1000);
            sim.complete(w, false);
        }
    }
    sim.apply_deferred(true);
    for key in 0..keys {
        sim.final_read(key);
    }
    History::from_ops(sim.ops)
}

impl Sim<'_> {
    /// Entries the final phase will need, so that the total stays near `config.ops`.
    fn final_reserve(&self) -> usize {
        let records: usize = self.logs.iter().map(Vec::len).sum();
        let chunk = self.config.final_chunk.max(1) as usize;
        2 * self.workers.len() + 2 * (self.logs.len() + records / chunk + 1)
    }

    fn push(&mut self, process: u64, kind: OpType, f: &str, value: Value, error: Option<&str>) {
        let mut op = Op::new(
            self.ops.len() as u64,
            Process::Client(process),
            kind,
            f,
            value,
        );
        op.time = self.time;
        op.error = error.map(|e| Value::String(e.to_string()));
        self.ops.push(op);
    }

    fn nemesis(&mut self) {
        let target = format!("n{}", 1 + self.rng.below(5));
        for f in ["start-partition", "stop-partition"] {
            for _ in 0..2 {
                let mut op = Op::new(
                    self.ops.len() as u64,
                    Process::Nemesis,
                    OpType::Info,
                    f,
                    json!({ "isolated": [target.clone()] }),
                );
                op.time = self.time;
                self.ops.push(op);
            }
        }
    }

    fn apply_deferred(&mut self, all: bool) {
        let step = self.step;
        let mut i = 0;
        while i < self.deferred.len() {
            let (due, key, value) = self.deferred[i];
            if all || due <= step {
                self.logs[key].push(value);
                self.deferred.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// A key assigned to worker `w` for reading: `k % processes == w`, or `w % keys` when
    /// there are more workers than keys.
    fn assigned_key(&mut self, w: usize) -> usize {
        let (keys, processes) = (self.logs.len(), self.workers.len());
        if processes >= keys {
            return w % keys;
        }
        let count = (keys - w).div_ceil(processes);
        w + processes * self.rng.below(count as u64) as usize
    }

    fn invoke(&mut self, w: usize) {
        let keys = self.logs.len() as u64;
        let process = self.workers[w].process;
        if self.rng.percent(self.config.append_percent) {
            let key = self.rng.below(keys) as usize;
            let value = self.next_value;
            self.next_value += 1;
            let body = json!({ "key": self.key_names[key], "value": value });
            self.push(process, OpType::Invoke, "append", body, None);
            self.workers[w].pending = Some(Pending::Append { key, value });
        } else {
            let key = self.assigned_key(w);
            let position = self.workers[w].position[key];
            let max_records = self.config.max_records.max(1);
            let reread =
                self.workers[w].polled[key] && self.rng.percent(self.config.reread_percent);
            let (offset, max) = if reread {
                let back = self.rng.below(2 * max_records + 1).min(position as u64);
                (position - back as i64, 1 + self.rng.below(max_records))
            } else {
                (position, max_records)
            };
            let linearizable = self.rng.percent(self.config.linearizable_percent);
            let pending = Pending::Read {
                key,
                offset,
                max,
                linearizable,
                marked_final: false,
            };
            self.invoke_read(w, pending);
        }
    }

    fn read_body(&self, pending: &Pending) -> Map<String, Value> {
        let mut body = Map::new();
        if let Pending::Read {
            key,
            offset,
            max,
            linearizable,
            marked_final,
        } = pending
        {
            body.insert("key".into(), json!(self.key_names[*key]));
            body.insert("offset".into(), json!(offset));
            body.insert("max".into(), json!(max));
            if *linearizable {
                body.insert("consistency".into(), json!("linearizable"));
            }
            if *marked_final {
                body.insert("final".into(), json!(true));
            }
        }
        body
    }

    fn invoke_read(&mut self, w: usize, pending: Pending) {
        let body = Value::Object(self.read_body(&pending));
        let process = self.workers[w].process;
        self.push(process, OpType::Invoke, "read", body, None);
        self.workers[w].pending = Some(pending);
    }

    fn crash(&mut self, w: usize) {
        let processes = self.workers.len() as u64;
        let worker = &mut self.workers[w];
        worker.process += processes;
        worker.polled.iter_mut().for_each(|p| *p = false);
    }

    /// Completes worker `w`'s operation; `force_ok` for the final reads.
    fn complete(&mut self, w: usize, force_ok: bool) -> Option<i64> {
        let pending = self.workers[w].pending.take()?;
        let process = self.workers[w].process;
        let roll = if force_ok { 100 } else { self.rng.below(100) };
        let fails = roll < u64::from(self.config.fail_percent);
        let crashes =
            !fails && roll < u64::from(self.config.fail_percent + self.config.crash_percent);
        match pending {
            Pending::Append { key, value } => {
                let mut body = json!({ "key": self.key_names[key], "value": value });
                if fails {
                    self.push(process, OpType::Fail, "append", body, Some("not_leader"));
                } else if crashes {
                    match self.rng.below(3) {
                        0 => {}
                        1 => self.logs[key].push(value),
                        _ => {
                            let due = self.step + 1 + self.rng.below(50);
                            self.deferred.push((due, key, value));
                        }
                    }
                    self.push(process, OpType::Info, "append", body, Some("timeout"));
                    self.crash(w);
                } else {
                    let offset = self.logs[key].len() as i64;
                    self.logs[key].push(value);
                    body["offset"] = json!(offset);
                    self.push(process, OpType::Ok, "append", body, None);
                }
                None
            }
            Pending::Read {
                key, offset, max, ..
            } => {
                let mut body = self.read_body(&pending);
                if fails {
                    self.push(
                        process,
                        OpType::Fail,
                        "read",
                        Value::Object(body),
                        Some("timeout"),
                    );
                    return None;
                }
                if crashes {
                    self.push(
                        process,
                        OpType::Info,
                        "read",
                        Value::Object(body),
                        Some("timeout"),
                    );
                    self.crash(w);
                    return None;
                }
                let log = &self.logs[key];
                let hw = log.len() as i64;
                let from = offset.clamp(0, hw);
                let end = from.saturating_add(max.min(i64::MAX as u64) as i64).min(hw);
                let records: Vec<Value> =
                    (from..end).map(|o| json!([o, log[o as usize]])).collect();
                body.insert("records".into(), Value::Array(records));
                body.insert("high_watermark".into(), json!(hw));
                self.push(process, OpType::Ok, "read", Value::Object(body), None);
                // A re-read does not move the worker back: its next poll goes on from the
                // furthest it has read.
                let worker = &mut self.workers[w];
                worker.position[key] = worker.position[key].max(end);
                worker.polled[key] = true;
                Some(end.max(offset))
            }
        }
    }

    /// Reads `key` from offset 0 to its end in chunks, as the final phase does.
    fn final_read(&mut self, key: usize) {
        let mut offset = 0;
        loop {
            self.time += 1 + self.rng.below(1000);
            let pending = Pending::Read {
                key,
                offset,
                max: self.config.final_chunk.max(1),
                linearizable: false,
                marked_final: true,
            };
            self.invoke_read(0, pending);
            self.time += 1 + self.rng.below(1000);
            let Some(end) = self.complete(0, true) else {
                return;
            };
            if end >= self.logs[key].len() as i64 {
                return;
            }
            offset = end;
        }
    }
}
