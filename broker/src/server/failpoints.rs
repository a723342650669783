//! Named failpoints (crate `fail`) in the replication and controller paths, armed over
//! HTTP by `PUT /v1/debug/failpoints/{name}` with `fail` crate actions. Compiled in only
//! with the `failpoints` feature; without it every point is a no-op and the endpoints
//! answer 501.
//!
//! What an action does at a point:
//!
//! - `return` (no argument): the site drops or refuses what it was doing (each point
//!   says how, below).
//! - `return(<ms>)`, a whole number of milliseconds up to [`MAX_DELAY_MS`]: a **delay**.
//!   The site waits that long with `tokio::time::sleep` and then carries on normally. It
//!   holds no thread: only the task that reached the point waits (one fetch, one
//!   LeaderAndIsr, one ISR write), while the runtime serves everything else. This is
//!   how a slow link is simulated (`25%return(300)`: a quarter of the hits wait 300 ms).
//!   Any other argument is refused when the point is armed.
//! - `sleep(<ms>)`, `pause`: `fail`'s own, which block the thread that evaluates them;
//!   such points are evaluated on tokio's blocking pool, so they hold up their request,
//!   not a runtime worker. `pause` holds until the point is disarmed or re-armed.
//!   (`fail`'s `delay(<ms>)` busy-waits a blocking-pool thread: prefer `return(<ms>)`.)
//! - `off`, probabilities (`p%`), counts (`n*`) and chains (`a->b`) as in `fail`:
//!   `1*off->pause` lets the first hit through and pauses the next.
//!
//! The `fail` registry is per process, so a point armed by name fires on every broker of
//! the process. In-process tests run several brokers in one process: a point armed as
//! `<name>@<broker id>` fires only on that broker.
//!
//! Each point sits where a delay widens a replication race of
//! `../shared/docs/kafka-replication.md` (the JIRA numbers below); a delay on it is a
//! slow link seen by that path alone.

use std::time::Duration;

use crate::replica::BrokerId;

/// Follower: before sending OffsetsForLeaderEpoch. `return` drops the request (the
/// follower re-sends on its timer). A delay keeps the follower in its truncation phase
/// while leadership moves on (KAFKA-7040).
pub const BEFORE_OFFSETS_FOR_LEADER_EPOCH: &str = "before_offsets_for_leader_epoch";
/// Follower: after the OffsetsForLeaderEpoch answer arrived, before it is applied
/// (truncation). `return` drops the answer. A delay makes the answer stale by the time
/// it is applied: the leader's epoch may have changed twice meanwhile (KAFKA-7040).
pub const AFTER_OFFSETS_FOR_LEADER_EPOCH: &str = "after_offsets_for_leader_epoch";
/// Leader: an OffsetsForLeaderEpoch request has been answered from the leader's epoch
/// cache, before the answer is sent. `return` answers with an error instead. A delay
/// delivers an answer computed in an older epoch (kafka-replication.md §5.2's
/// `delay_epoch_response_ms`, KAFKA-7040).
pub const LEADER_OFFSETS_FOR_LEADER_EPOCH: &str = "leader_offsets_for_leader_epoch";
/// Leader: a fetch has been read, before its response is sent. `return` answers the
/// fetch with an error instead. A delay carries an old high watermark to the follower,
/// so its HW lags the leader's for longer (KAFKA-7128), and slows its catch-up after an
/// ISR expansion (KAFKA-1561).
pub const LEADER_FETCH_RESPONSE: &str = "leader_fetch_response";
/// Follower: a fetch response arrived, before it is applied (append, HW). `return`
/// drops it. A delay is the follower side of the same slow link (KAFKA-7128, 1561).
pub const FOLLOWER_FETCH_RESPONSE: &str = "follower_fetch_response";
/// Follower: before sending ListOffsets (its fetch offset was out of range at the
/// leader). `return` drops the request (re-sent on the timer). A delay lets the leader's
/// log grow past the follower's offset before the answer is computed, KAFKA-2143's
/// window for truncating a whole log.
pub const BEFORE_LIST_OFFSETS: &str = "before_list_offsets";
/// Leader: before the conditional ISR write to the metadata store. `return` fails the
/// write as if the store were unavailable. A delay keeps the leader's ISR change (an
/// expansion after a leadership move, a shrink) unpublished for longer (KAFKA-7128,
/// 1561, 3083).
pub const BEFORE_ISR_WRITE: &str = "before_isr_write";
/// Controller: a partition's new state is decided, just before it is written to the
/// metadata store. `pause` holds the controller there (kafka-replication.md §5.4's gate);
/// `return` fails the write as if the store were unavailable. A delay is §5.4's slow
/// controller-to-store link, the hook-free shape of KAFKA-3083.
pub const CONTROLLER_BEFORE_STATE_WRITE: &str = "controller_before_state_write";
/// Controller: before each attempt at sending a LeaderAndIsr to a broker (the sender of
/// that broker's queue, so later requests to it wait too). `return` counts the attempt
/// as unanswered, as a cut link would: the sender retries while the broker is
/// registered. A delay keeps a broker on its old role while the stored state has moved
/// on: a follower fetching from a leader that is no longer one, an old leader still
/// acknowledging (KAFKA-1561, 7040, 7128).
pub const CONTROLLER_LEADER_AND_ISR_SEND: &str = "controller_leader_and_isr_send";

/// Storage: a partition log's append, before anything is written. `return` fails it
/// with an I/O error, as a full or failing disk would: the partition reopens its log
/// (and the controller moves its leadership away). Evaluated in place under the
/// partition's lock, so only `return`, `off` and their counts and probabilities may be
/// armed here, no delay and nothing that blocks.
pub const LOG_APPEND: &str = "log_append";
/// Storage: opening (or reopening) a partition log. `return` fails the open: after a
/// failure the partition stays offline and is retried with backoff. Same restrictions as
/// [`LOG_APPEND`].
pub const LOG_OPEN: &str = "log_open";

/// The points evaluated in place by [`fires`], which take no delay and must not block.
const IN_PLACE: &[&str] = &[LOG_APPEND, LOG_OPEN];

/// Every point the broker has, for `GET /v1/debug/failpoints`.
pub const ALL: &[&str] = &[
    BEFORE_OFFSETS_FOR_LEADER_EPOCH,
    AFTER_OFFSETS_FOR_LEADER_EPOCH,
    LEADER_OFFSETS_FOR_LEADER_EPOCH,
    LEADER_FETCH_RESPONSE,
    FOLLOWER_FETCH_RESPONSE,
    BEFORE_LIST_OFFSETS,
    BEFORE_ISR_WRITE,
    CONTROLLER_BEFORE_STATE_WRITE,
    CONTROLLER_LEADER_AND_ISR_SEND,
    LOG_APPEND,
    LOG_OPEN,
];

/// The longest delay `return(<ms>)` may ask for: ten minutes.
pub const MAX_DELAY_MS: u64 = 600_000;

/// A failpoint armed with `return` fired: the caller drops or refuses what it was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triggered;

/// Evaluates point `name` for broker `broker`: waits as armed (a `return(<ms>)` delay on
/// the calling task, or `sleep`/`pause` on the blocking pool), and says whether a plain
/// `return` fired.
#[cfg(feature = "failpoints")]
pub async fn hit(name: &'static str, broker: BrokerId) -> Result<(), Triggered> {
    let targeted = format!("{name}@{broker}");
    let armed: Vec<String> = fail::list()
        .into_iter()
        .filter(|(armed, _)| armed == name || *armed == targeted)
        .map(|(_, actions)| actions)
        .collect();
    if armed.is_empty() {
        return Ok(());
    }
    count_hit(name, &targeted);
    let fired = if armed.iter().any(|actions| may_block(actions)) {
        let targeted = targeted.clone();
        tokio::task::spawn_blocking(move || evaluate(name, &targeted))
            .await
            .unwrap_or(None)
    } else {
        // Nothing armed here can block: evaluated in place.
        evaluate(name, &targeted)
    };
    match fired.map(|argument| argument.as_deref().map(delay_of)) {
        None => Ok(()),
        Some(Some(Ok(delay))) => {
            tracing::debug!(failpoint = name, broker, ?delay, "failpoint delays");
            count_delay(name, &targeted);
            tokio::time::sleep(delay).await;
            Ok(())
        }
        // A plain `return` (arming refuses any other argument; one set by other means
        // keeps its old meaning).
        Some(None | Some(Err(_))) => {
            tracing::info!(failpoint = name, broker, "failpoint returned");
            Err(Triggered)
        }
    }
}

/// The plain point first, then the targeted one: `Some(argument)` when a `return` fired.
#[cfg(feature = "failpoints")]
fn evaluate(name: &str, targeted: &str) -> Option<Option<String>> {
    fail::eval(name, |argument| argument).or_else(|| fail::eval(targeted, |argument| argument))
}

/// Without the `failpoints` feature no point can be armed.
#[cfg(not(feature = "failpoints"))]
pub async fn hit(_name: &'static str, _broker: BrokerId) -> Result<(), Triggered> {
    Ok(())
}

/// Evaluates an in-place point ([`LOG_APPEND`], [`LOG_OPEN`]) for `broker` on the
/// calling thread: whether a `return` fired.
#[cfg(feature = "failpoints")]
pub fn fires(name: &'static str, broker: BrokerId) -> bool {
    let targeted = format!("{name}@{broker}");
    let armed = fail::list()
        .iter()
        .any(|(armed, _)| armed == name || *armed == targeted);
    if !armed {
        return false;
    }
    count_hit(name, &targeted);
    let fired = evaluate(name, &targeted).is_some();
    if fired {
        tracing::info!(failpoint = name, broker, "failpoint returned");
    }
    fired
}

/// Without the `failpoints` feature no point can be armed.
#[cfg(not(feature = "failpoints"))]
pub fn fires(_name: &'static str, _broker: BrokerId) -> bool {
    false
}

/// Whether `actions` may block the evaluating thread (`sleep`, `pause`, `fail`'s
/// busy-waiting `delay`).
fn may_block(actions: &str) -> bool {
    ["sleep", "pause", "delay"]
        .iter()
        .any(|task| actions.contains(task))
}

/// The delay a `return(<argument>)` asks for.
fn delay_of(argument: &str) -> Result<Duration, String> {
    match argument.trim().parse::<u64>() {
        Ok(ms) if ms <= MAX_DELAY_MS => Ok(Duration::from_millis(ms)),
        Ok(ms) => Err(format!(
            "return({ms}): a delay is at most {MAX_DELAY_MS} ms"
        )),
        Err(_) => Err(format!(
            "return({argument}): the argument of return is a delay in whole milliseconds"
        )),
    }
}

/// Checks what `fail` accepts and we give a meaning: every `return(<argument>)` of
/// `actions` must be a delay ([`delay_of`]). `fail`'s own syntax is checked by `fail`.
fn check_actions(actions: &str) -> Result<(), String> {
    for action in actions.split("->") {
        // `fail`'s grammar: `[p%][cnt*]task[(arg)]`, the argument from the first `(`.
        let (head, argument) = match action.trim().split_once('(') {
            Some((head, rest)) => (head, rest.strip_suffix(')')),
            None => (action.trim(), None),
        };
        let task = head.rsplit(['%', '*']).next().unwrap_or(head).trim();
        if let (Some(argument), "return") = (argument, task) {
            delay_of(argument)?;
        }
    }
    Ok(())
}

/// An in-place point runs under a partition's lock on a runtime thread: no delay, no
/// blocking task.
fn check_in_place(point: &str, actions: &str) -> Result<(), String> {
    let blocks = may_block(actions) || actions.contains("panic");
    let delays = actions.split("->").any(|action| {
        action
            .split_once('(')
            .is_some_and(|(head, _)| head.trim_end().ends_with("return"))
    });
    if blocks || delays {
        return Err(format!(
            "{point} is evaluated in place: only `return`, `off` and `print` (with counts \
             and probabilities) may be armed there, not {actions:?}"
        ));
    }
    Ok(())
}

/// How many times each armed point was reached, under both its plain and its targeted
/// name, counted before its action runs: a test sees that a `pause` has been reached.
static HITS: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// How many times each point delayed its site (`return(<ms>)` fired), under both names.
static DELAYS: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

#[cfg(feature = "failpoints")]
fn count_hit(name: &str, targeted: &str) {
    count(&HITS, name, targeted);
}

#[cfg(feature = "failpoints")]
fn count_delay(name: &str, targeted: &str) {
    count(&DELAYS, name, targeted);
}

#[cfg(feature = "failpoints")]
fn count(
    counts: &std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    name: &str,
    targeted: &str,
) {
    let mut counts = counts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for key in [name, targeted] {
        *counts.entry(key.to_owned()).or_default() += 1;
    }
}

fn counts_of(
    counts: &std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
) -> Vec<(String, u64)> {
    let counts = counts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    counts
        .iter()
        .map(|(name, count)| (name.clone(), *count))
        .collect()
}

fn count_of(counts: &std::sync::Mutex<std::collections::BTreeMap<String, u64>>, name: &str) -> u64 {
    let counts = counts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    counts.get(name).copied().unwrap_or(0)
}

/// How many times point `name` (plain, or `<point>@<broker>`) was reached while armed.
pub fn hit_count(name: &str) -> u64 {
    count_of(&HITS, name)
}

/// Every point reached while armed, with its count.
pub fn hit_counts() -> Vec<(String, u64)> {
    counts_of(&HITS)
}

/// How many times point `name` (plain, or `<point>@<broker>`) delayed its site.
pub fn delay_count(name: &str) -> u64 {
    count_of(&DELAYS, name)
}

/// Every point that delayed its site, with its count.
pub fn delay_counts() -> Vec<(String, u64)> {
    counts_of(&DELAYS)
}

/// Whether the points are compiled in.
pub fn enabled() -> bool {
    cfg!(feature = "failpoints")
}

/// Arms `name` (any name is accepted, so `<point>@<broker>` works) with `fail` actions;
/// refuses a `return` argument that is not a delay in milliseconds.
pub fn arm(name: &str, actions: &str) -> Result<(), String> {
    check_actions(actions)?;
    let point = name.split_once('@').map_or(name, |(point, _)| point);
    if IN_PLACE.contains(&point) {
        check_in_place(point, actions)?;
    }
    fail::cfg(name, actions)
}

pub fn disarm(name: &str) {
    fail::remove(name);
}

/// The armed points and their actions.
pub fn armed() -> Vec<(String, String)> {
    fail::list()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_arguments_must_be_delays() {
        for ok in [
            "return",
            "return(0)",
            "return(300)",
            "25%return(300)",
            "3*return(2000)",
            "50%2*return( 10 )",
            "1*off->return(500)",
            "sleep(100)",
            "pause",
            "1*off->pause",
            "print(a(b)",
            "off",
        ] {
            assert_eq!(check_actions(ok), Ok(()), "{ok}");
        }
        for bad in [
            "return(abc)",
            "return(-1)",
            "return(1.5)",
            "25%return(x)",
            "1*off->return(soon)",
            "return(600001)",
        ] {
            assert!(check_actions(bad).is_err(), "{bad}");
        }
        assert_eq!(delay_of("300"), Ok(Duration::from_millis(300)));
        assert_eq!(
            delay_of(&MAX_DELAY_MS.to_string()),
            Ok(Duration::from_millis(MAX_DELAY_MS))
        );
    }

    #[test]
    fn in_place_points_take_neither_delays_nor_blocking_actions() {
        for ok in [
            "return",
            "1*return",
            "25%return",
            "2*off->return",
            "off",
            "print",
        ] {
            assert_eq!(check_in_place(LOG_APPEND, ok), Ok(()), "{ok}");
        }
        for bad in [
            "return(100)",
            "1*off->return(5)",
            "pause",
            "sleep(10)",
            "delay(1)",
            "panic",
        ] {
            assert!(check_in_place(LOG_OPEN, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_thread_blocking_actions_go_to_the_blocking_pool() {
        for blocking in [
            "sleep(10)",
            "pause",
            "1*off->pause",
            "delay(5)",
            "50%sleep(1)",
        ] {
            assert!(may_block(blocking), "{blocking}");
        }
        for inline in [
            "return",
            "return(300)",
            "25%return(3000)",
            "off",
            "1*off->return",
        ] {
            assert!(!may_block(inline), "{inline}");
        }
    }

    #[test]
    fn every_point_is_listed_once() {
        let mut names = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert!(ALL
            .iter()
            .all(|name| !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    }
}
