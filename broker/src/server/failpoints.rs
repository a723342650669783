//! Named failpoints (crate `fail`) in the replication and controller paths, armed over
//! HTTP by `PUT /v1/debug/failpoints/{name}` with `fail` crate actions (`sleep(ms)`,
//! `pause`, `return`, `off`, `50%return`, ...). Compiled in only with the `failpoints` feature;
//! without it every point is a no-op and the endpoints answer 501.
//!
//! The `fail` registry is per process, so a point armed by name fires on every broker of
//! the process. In-process tests run several brokers in one process: a point armed as
//! `<name>@<broker id>` fires only on that broker.
//!
//! `pause` and `sleep` block the thread that hits them, so points are evaluated on
//! tokio's blocking pool: a paused point holds up its request, not the runtime.

use crate::replica::BrokerId;

/// Follower: before sending OffsetsForLeaderEpoch. `return` drops the request (the
/// follower re-sends on its timer).
pub const BEFORE_OFFSETS_FOR_LEADER_EPOCH: &str = "before_offsets_for_leader_epoch";
/// Follower: after the OffsetsForLeaderEpoch answer arrived, before it is applied
/// (truncation). `return` drops the answer.
pub const AFTER_OFFSETS_FOR_LEADER_EPOCH: &str = "after_offsets_for_leader_epoch";
/// Leader: a fetch has been read, before its response is sent. `return` answers the
/// fetch with an error instead.
pub const LEADER_FETCH_RESPONSE: &str = "leader_fetch_response";
/// Follower: a fetch response arrived, before it is applied (append, HW). `return`
/// drops it.
pub const FOLLOWER_FETCH_RESPONSE: &str = "follower_fetch_response";
/// Leader: before the conditional ISR write to the metadata store. `return` fails the
/// write as if the store were unavailable.
pub const BEFORE_ISR_WRITE: &str = "before_isr_write";
/// Controller: a partition's new state is decided, just before it is written to the
/// metadata store. `pause` holds the controller there (kafka-replication.md §5.4's gate);
/// `return` fails the write as if the store were unavailable.
pub const CONTROLLER_BEFORE_STATE_WRITE: &str = "controller_before_state_write";

/// Every point the broker has, for `GET /v1/debug/failpoints`.
pub const ALL: &[&str] = &[
    BEFORE_OFFSETS_FOR_LEADER_EPOCH,
    AFTER_OFFSETS_FOR_LEADER_EPOCH,
    LEADER_FETCH_RESPONSE,
    FOLLOWER_FETCH_RESPONSE,
    BEFORE_ISR_WRITE,
    CONTROLLER_BEFORE_STATE_WRITE,
];

/// A failpoint armed with `return` fired: the caller drops or refuses what it was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triggered;

/// Evaluates point `name` for broker `broker`: sleeps or pauses as armed, and says
/// whether a `return` action fired.
#[cfg(feature = "failpoints")]
pub async fn hit(name: &'static str, broker: BrokerId) -> Result<(), Triggered> {
    let targeted = format!("{name}@{broker}");
    let armed = fail::list()
        .iter()
        .any(|(armed, _)| armed == name || *armed == targeted);
    if !armed {
        return Ok(());
    }
    count_hit(name, &targeted);
    let fired = tokio::task::spawn_blocking(move || {
        fail::eval(name, |_| ()).is_some() || fail::eval(&targeted, |_| ()).is_some()
    })
    .await
    .unwrap_or(false);
    if fired {
        tracing::info!(failpoint = name, broker, "failpoint returned");
        Err(Triggered)
    } else {
        Ok(())
    }
}

/// Without the `failpoints` feature no point can be armed.
#[cfg(not(feature = "failpoints"))]
pub async fn hit(_name: &'static str, _broker: BrokerId) -> Result<(), Triggered> {
    Ok(())
}

/// How many times each armed point was reached, under both its plain and its targeted
/// name, counted before its action runs: a test sees that a `pause` has been reached.
static HITS: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

#[cfg(feature = "failpoints")]
fn count_hit(name: &str, targeted: &str) {
    let mut hits = HITS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for key in [name, targeted] {
        *hits.entry(key.to_owned()).or_default() += 1;
    }
}

/// How many times point `name` (plain, or `<point>@<broker>`) was reached while armed.
pub fn hit_count(name: &str) -> u64 {
    let hits = HITS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    hits.get(name).copied().unwrap_or(0)
}

/// Every point reached while armed, with its count.
pub fn hit_counts() -> Vec<(String, u64)> {
    let hits = HITS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    hits.iter()
        .map(|(name, count)| (name.clone(), *count))
        .collect()
}

/// Whether the points are compiled in.
pub fn enabled() -> bool {
    cfg!(feature = "failpoints")
}

/// Arms `name` (any name is accepted, so `<point>@<broker>` works).
pub fn arm(name: &str, actions: &str) -> Result<(), String> {
    fail::cfg(name, actions)
}

pub fn disarm(name: &str) {
    fail::remove(name);
}

/// The armed points and their actions.
pub fn armed() -> Vec<(String, String)> {
    fail::list()
}
