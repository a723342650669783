//! Named failpoints (crate `fail`) in the replication path, armed over HTTP by
//! `PUT /v1/debug/failpoints/{name}` with `fail` crate actions (`sleep(ms)`, `pause`,
//! `return`, `off`, `50%return`, ...). Compiled in only with the `failpoints` feature;
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

/// Every point the broker has, for `GET /v1/debug/failpoints`.
pub const ALL: &[&str] = &[
    BEFORE_OFFSETS_FOR_LEADER_EPOCH,
    AFTER_OFFSETS_FOR_LEADER_EPOCH,
    LEADER_FETCH_RESPONSE,
    FOLLOWER_FETCH_RESPONSE,
    BEFORE_ISR_WRITE,
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
