//! Faults aimed at roles and moments (the `aimed` package): instead of a random node at
//! a random time, each strike waits for a situation in which the bugs of a replicated log
//! live and hits the node that holds the role in it.
//!
//! - [`Aim::ControllerCut`] (KAFKA-3083's shape): the controller's metadata port is cut
//!   from every other node (the metadata quorum's leader and voters among them), and,
//!   while it is cut off, an admin request (a preferred-leader election or a leader
//!   transfer) is sent to it alone; the cut lasts until another node is controller (its
//!   session expired), then a hold more, so that it comes back as a deposed controller
//!   with the request still queued. Two cuts in three are gated: the controller is first
//!   stalled just before its next metadata write, the request makes it decide, and it is
//!   let go only after the cut healed (a GC pause mid-decision across a failover). The
//!   decision is about a partition its failure leaves alone where it can be (one it holds
//!   no replica of, else one it follows; a controller that leads every partition first
//!   has one moved to a follower): its successor elects a new leader for every partition
//!   it led, so a held write about a partition it led no longer lands.
//! - [`Aim::AfterChange`] (CrashTuner, SOSP 2019: crash right after a metadata write):
//!   the roles are polled every [`POLL`] until a partition's ISR grows or shrinks or its
//!   leadership moves ([`changes`]), and that partition's leader is killed or isolated at
//!   once.
//! - [`Aim::Lagging`] (CoFI, ASE 2020: strike when a cross-node invariant is broken):
//!   each node's replica views are polled until an in-sync follower's high watermark is
//!   behind its leader's ([`lags`]); then the leader or that follower is killed or
//!   paused.
//! - [`Aim::LagMove`] (the same moment, a controlled failover): the lagging follower is
//!   made leader by a leader transfer, so it takes over with its stale high watermark
//!   while the old leader stays in the ISR; the old leader's answer to its first
//!   question as a follower is often held for a while, which keeps the new leader's high
//!   watermark where it was, and most of the time a third replica of the partition was put
//!   behind first (cut off until it left the ISR) and is let go at the move, so that it
//!   catches up from that leader and asks it to be let back in. Often the followers'
//!   fetch responses are slowed while the lag is watched for ([`LAG_WIDEN_POINT`]): a
//!   follower then learns each high watermark a slow round late, so its lag lasts until
//!   the move and spans every write its leader acknowledged in that round.
//! - [`Aim::Flap`] (fast leadership transitions): one partition's leadership moved away
//!   from its leader and back several times, often with a replica's round trips slowed
//!   so that they outlast a move; a held flap paces its moves by what the replicas say
//!   of themselves and holds the stepping-down leader's answer from before the first
//!   move until after the third ([`HeldStage`]): a reply delivered after the state it
//!   describes changed twice, which leader-epoch fencing exists to drop.
//!
//! - [`Aim::Strand`] (drawn only where the system may elect a replica outside its
//!   ISR): a leader is left alone (its followers' fetches cut until its ISR is itself),
//!   writes alone, is paused until another replica is elected without those writes, and
//!   comes back as a follower ahead of its new leader: its first fetch is out of range,
//!   and the round trip that resolves that is held until the new leader's log has grown
//!   past the follower's (KAFKA-2143's race, held open as the JIRA's scenario holds it).
//!
//! Strikes come in bursts: the package's steps alternate strike and undo (restart,
//! resume, uncut) like every package's, with the holds and gaps of [`strike_gap`] and
//! [`hold`]: several strikes a few seconds apart, then about ten calm seconds. What
//! every strike aims at, and why, is in its completion's value (`node`, `trigger`, the
//! roles or views that showed the moment). Every choice is drawn from the step's seed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::roles::Roles;
use rng::Rng;
use sut::ReplicaView;

/// How often a strike reads the roles or the replica views while it waits for its moment.
pub const POLL: Duration = Duration::from_millis(150);
/// The shortest and longest wait for a moment ([`Aim::AfterChange`], [`Aim::Lagging`]).
pub const WATCH_MS: (u64, u64) = (2_000, 5_000);
/// Within a burst, the gap before a strike and a strike's hold: 0.5–3 s.
pub const BURST_MS: (u64, u64) = (500, 3_000);
/// A calm between bursts: 8–12 s, with chance [`CALM_CHANCE`] before each strike.
pub const CALM_MS: (u64, u64) = (8_000, 12_000);
/// The chance that a strike follows a calm rather than the previous strike's undo at
/// once (bursts are three strikes long on average).
pub const CALM_CHANCE: f64 = 1.0 / 3.0;
/// The chance that a kill, pause or isolation is held 3–10 s instead of a burst's hold.
pub const LONG_HOLD_CHANCE: f64 = 0.2;
/// How long after the controller's cut its admin request is sent: 0–8 s, so that some
/// arrive before and some after its metadata session expired (6 s by default).
pub const REQUEST_AFTER_MS: (u64, u64) = (0, 8_000);
/// How long a controller cut's strike waits for its admin request's answer (the request
/// is not withdrawn: the broker may still carry it out), so that a request stuck behind
/// the cut does not hold the package for the driver's whole retry budget.
pub const REQUEST_WAIT: Duration = Duration::from_secs(4);
/// The chance that a controller cut is gated ([`Aim::ControllerCut`]'s `gated`): the
/// controller stalled mid-decision (a GC pause at its metadata write) while its session
/// expires, rather than a request that may or may not meet the cut at a useful moment.
pub const CUT_GATED_CHANCE: f64 = 2.0 / 3.0;
/// The point a gated cut holds on the controller: just before it writes a partition's
/// new state to the metadata quorum.
pub const GATE_POINT: &str = "controller_before_state_write";
/// How long a gated cut waits for its request's answer: briefly, as it is not answered
/// while the gate holds the controller; what counts is that the gate is reached.
pub const GATED_REQUEST_WAIT: Duration = Duration::from_millis(500);
/// How long a gated cut waits for the controller to reach its gate after the request:
/// a controller that is still recovering from an earlier fault (its quorum re-electing,
/// its session renewed) handles the request late, and the gate holds whenever it does.
pub const GATE_WAIT: Duration = Duration::from_secs(10);

/// How long a controller cut waits for the controller the metadata names to act as one in
/// its own view: a controller killed and restarted is still named by the `/controller`
/// node of its old incarnation until that session expires (up to the longest session
/// timeout, 15 s in the nightly matrix, and the quorum's notice of it), and cutting or
/// gating a node that does not act as controller aims at nothing.
pub const ACTING_WAIT: Duration = Duration::from_secs(20);

/// How long a strike waits for a node it cut off or paused to be replaced (its metadata
/// session expired and a successor was elected): a controller cut after its admin
/// request, a strand after its pause. Longer than the longest session timeout a test
/// uses (15 s in the nightly matrix) and the time the quorum takes to notice the expiry
/// (seen to be 5 s more), so that the fault is a soft failure, not a blip ridden out.
pub const FAILOVER_WAIT: Duration = Duration::from_secs(30);

/// A flap's number of leadership moves (at least three: away, back, away again).
pub const FLAP_MOVES: (u64, u64) = (3, 5);
/// The gap between two moves of a flap.
pub const FLAP_GAP_MS: (u64, u64) = (200, 1_000);
/// The delay a slow flap arms on the partition's replicas: longer than a few of its
/// gaps, so that a round trip begun before one move is still under way after the next.
pub const FLAP_DELAY_MS: (u64, u64) = (500, 3_000);
/// The chance that a flap arms a delay.
pub const FLAP_SLOW_CHANCE: f64 = 0.75;
/// The chance that a slow flap's delay is a stale answer on the stepping-down leader
/// ([`FlapSlowed::SteppingDown`]) rather than a random point on a random replica.
pub const FLAP_STALE_CHANCE: f64 = 2.0 / 3.0;
/// A stale-answer delay in gaps: more than two (its answer is applied after the leader
/// it asked has lost and regained the partition), less than three (before the replica
/// leads a second time, when a follower's answer no longer matters).
pub const FLAP_STALE_GAPS: (f64, f64) = (2.2, 2.8);
/// The chance that a move to a lagging follower first puts a third replica of the
/// partition behind ([`Aim::LagMove`]'s `behind_ms`).
/// Most of them: with no replica out of the ISR, the stale high watermark the move hands
/// over lets nobody in, and a leader's expansions are what it decides from that mark.
pub const LAG_BEHIND_CHANCE: f64 = 0.75;
/// How long a lag move's third replica stays cut off after it left the ISR, before the
/// lag is watched for: short, as the replica must catch up to the new leader's stale
/// high watermark while the old leader's answer is held (a few tenths of a second to a
/// few seconds), and one fetch brings it at most `replica_fetch_max_records` records
/// (one, in some cells); a record behind is enough.
pub const LAG_BEHIND_MS: (u64, u64) = (200, 1_500);
/// The chance that a move to a lagging follower without a replica behind delays the old
/// leader's answer ([`Aim::LagMove`]'s `answer_delay_ms`; one that drew a replica behind
/// always draws one, used when no partition has a third replica, and otherwise holds the
/// answer until that replica rejoined the ISR, [`LAG_REJOIN_WAIT`]), and how long: below the shortest
/// `replica_lag_time_max_ms` of the nightly matrix (2 s), mostly, so that the new leader
/// does not simply drop the old one from its ISR.
pub const LAG_ANSWER_CHANCE: f64 = 0.75;
pub const LAG_ANSWER_MS: (u64, u64) = (500, 2_500);
/// How long a lag move with a replica behind holds its old leader's answer at most,
/// waiting for that replica to be back in the ISR: it catches up from the new leader
/// (one fetch brings at most `replica_fetch_max_records` records, one in some cells)
/// from as far behind as the writes of the lag time it was cut off, which a fixed
/// delay of a second or two often did not cover; the new leader drops the held old
/// leader from its ISR after `replica_lag_time_max_ms` (2 to 10 s in the nightly
/// matrix), and its high watermark moves on then anyway.
pub const LAG_REJOIN_WAIT: Duration = Duration::from_secs(8);
/// The chance that a lag move widens its lag first ([`Aim::LagMove`]'s `widen_ms`), and
/// how long each of the partition's followers' fetch responses is then held (drawn
/// log-uniform): a round of the follower's fetching takes at least that long, and the
/// high watermark it holds is the one of the round before. Without it, a follower's lag
/// lasts from its leader's acknowledgement to its next fetch response, often less than
/// the watch's poll, and a poll that saw it may be followed by a move that comes after
/// it closed.
pub const LAG_WIDEN_CHANCE: f64 = 0.75;
pub const LAG_WIDEN_MS: (u64, u64) = (200, 1_500);
/// The point a lag move widens its lag at: a follower's fetch response, held after it
/// arrived and before it is applied (its records and the high watermark it carries).
pub const LAG_WIDEN_POINT: &str = "follower_fetch_response";
/// The chance that a flap first puts a third replica of its partition behind
/// ([`Aim::Flap`]'s `behind_ms`): leadership then moves while that replica catches up
/// (CrashTuner and CoFI: strike while redundancy is being restored).
///
/// A fifth: the behind flaps caught KAFKA-7128 once in the searches, the held ones (drawn
/// from the others) caught KAFKA-7040 every time they reached all their stages, and lag
/// moves with a replica behind already strike while redundancy is being restored.
pub const FLAP_BEHIND_CHANCE: f64 = 0.2;
/// How long the third replica stays cut off after it left the ISR (it falls further
/// behind), before the cut is healed and the moves begin.
pub const FLAP_BEHIND_MS: (u64, u64) = (1_000, 3_000);
/// How long a flap waits for the cut-off third replica to leave the ISR (the leader drops
/// it after `replica_lag_time_max_ms`, at most 10 s in the nightly matrix) before it
/// flaps anyway.
pub const LEAVE_ISR_WAIT: Duration = Duration::from_secs(12);
/// The point of a stale answer: the follower's OffsetsForLeaderEpoch answer, held after it
/// arrived and before it is applied.
pub const STALE_ANSWER_POINT: &str = "after_offsets_for_leader_epoch";
/// The chance that a flap that puts no replica behind is a held one ([`Aim::Flap`]'s
/// `held`): a stale answer held until the moves it must outlast have taken effect,
/// rather than for a time drawn in gaps, which a move slower than its gap (a busy
/// controller, a slow LeaderAndIsr) makes too short. Most of them: of 11 flaps in a
/// KAFKA-7040 search at ½ behind and 0.6 held, 3 were held (both that completed found
/// it) and 7 behind (none did); at 0.35 behind and 0.75 held, every held flap that ran in
/// a cluster whose followers ask where their logs diverge reached all its stages.
pub const FLAP_HELD_CHANCE: f64 = 0.85;
/// How long a held flap waits for each of its stages ([`HeldStage`]) before it goes on
/// all the same: longer than a leadership move takes on a loaded cluster, short enough
/// that a stage that cannot happen (no writes to the partition, a truncation that asks
/// no question) costs little.
pub const HELD_STAGE_WAIT: Duration = Duration::from_secs(4);
/// The point held on the stepping-down leader while its first move takes effect: its
/// question (OffsetsForLeaderEpoch) waits until the new leader leads, so that the answer
/// it gets is a real one, not a refusal from a replica that does not lead yet.
pub const QUESTION_POINT: &str = "before_offsets_for_leader_epoch";

/// The stages of a held flap, in order, each waited for (at most [`HELD_STAGE_WAIT`])
/// by polling the replicas' own views and the failpoints' hit counts: the moment a
/// stale message is worth delivering is a state of the cluster, not a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeldStage {
    /// Leadership moved to the follower, which leads in its own view; the stepping-down
    /// leader's question, held at [`QUESTION_POINT`], is then let go.
    Away,
    /// Its answer arrived and is held at [`STALE_ANSWER_POINT`].
    Answered,
    /// Leadership back on the first leader, which leads in its own view.
    Back,
    /// It has committed a write in its new epoch (its high watermark passed its log end
    /// at the move): records the held answer knows nothing of.
    Committed,
    /// Leadership away again: the first leader follows in its own view.
    AwayAgain,
    /// Its question of that new epoch reached [`QUESTION_POINT`], held there again: it
    /// is in that epoch's truncation. The held answer, describing a log that changed
    /// twice since it was asked, is released now, and the new question only after it,
    /// so that the stale answer is the first one it gets (let go together, the fresh
    /// answer may come first, and a correct fetcher and a buggy one alike then drop the
    /// stale one as no longer awaited).
    AskedAgain,
}

/// The points on the round trip in which a follower asks its leader where their logs
/// diverge (OffsetsForLeaderEpoch): only a system whose followers ask
/// ([`SystemTraits::asks_divergence`]) ever reaches them.
pub const DIVERGENCE_POINTS: &[&str] = &[
    QUESTION_POINT,
    STALE_ANSWER_POINT,
    "leader_offsets_for_leader_epoch",
];

/// What the system under test does that decides which strikes can work on it, read by
/// the harness from its settings (never from a bug switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemTraits {
    /// It may elect a replica outside its in-sync set (Kafka's unclean leader election):
    /// a strand ([`Aim::Strand`]) can complete there.
    pub unclean_elections: bool,
    /// After a leadership change a follower asks its leader where their logs diverge
    /// (Kafka's OffsetsForLeaderEpoch, KIP-101) rather than cutting its log to its high
    /// watermark: only then can a flap hold or delay that question and its answer
    /// ([`DIVERGENCE_POINTS`]).
    pub asks_divergence: bool,
}

impl Default for SystemTraits {
    /// No unclean elections; followers ask where their logs diverge (Kafka's defaults).
    fn default() -> SystemTraits {
        SystemTraits {
            unclean_elections: false,
            asks_divergence: true,
        }
    }
}

/// The points a slow flap delays: the round trips a replica makes right after a
/// leadership change (where its log and the new leader's diverge, then its first
/// fetches).
pub const FLAP_POINTS: &[&str] = &[
    "before_offsets_for_leader_epoch",
    "after_offsets_for_leader_epoch",
    "leader_offsets_for_leader_epoch",
    "follower_fetch_response",
    "leader_fetch_response",
    // Pre-KIP-101 truncation resolves an out-of-range fetch by ListOffsets instead.
    "before_list_offsets",
];

/// The chance that a strike is a [`Aim::Strand`] where unclean elections are allowed:
/// most of them, as such a cluster gives up acknowledged writes by design (the strikes
/// that end in lost writes find nothing the checkers count there), and what it still
/// promises — a replica never cuts what it knew committed — is what a strand tests.
pub const STRAND_CHANCE: f64 = 0.75;
/// How long a stranded leader writes alone after its ISR shrank to itself.
pub const STRAND_ALONE_MS: (u64, u64) = (1_000, 3_000);
/// The point held (`pause`) on the stranded leader: the round trip a follower makes
/// after its fetch was out of range (before KIP-101 it asks the leader for its log's
/// bounds), the window between seeing the leader shorter and learning how long it is.
pub const OUT_OF_RANGE_POINT: &str = "before_list_offsets";
/// How long a strand looks for a partition whose leader says it leads (with another
/// replica in its ISR), as the metadata says it does.
pub const OWN_LEADER_WAIT: Duration = Duration::from_secs(10);
/// How long a strand waits for the other packages' faults to be undone before it
/// begins (it starts then whatever is still in place).
pub const QUIET_WAIT: Duration = Duration::from_secs(10);
/// How long a strand holds the returning replica's out-of-range round trip while its new
/// leader's log grows past the replica's (the replica wrote alone for the ISR's lag time
/// and more, and its successor must take as many writes).
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(20);

/// What a strike does to the node it aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strike {
    /// SIGKILL (restarted, never wiped, at the undo).
    Kill,
    /// SIGSTOP (resumed at the undo).
    Pause,
    /// All its traffic with every other node cut (healed at the undo).
    Isolate,
}

impl Strike {
    pub fn name(self) -> &'static str {
        match self {
            Strike::Kill => "kill",
            Strike::Pause => "pause",
            Strike::Isolate => "isolate",
        }
    }
}

/// Whom a strike on a lagging follower's partition hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LagTarget {
    /// The leader whose follower lags.
    Leader,
    /// The follower whose high watermark lags.
    Follower,
}

/// The admin request of a controller cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CutRequest {
    ElectPreferred,
    /// A random partition with a second in-sync replica to a random in-sync follower
    /// (a preferred-leader election when there is none).
    TransferLeader,
}

/// One strike of the `aimed` package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "aim", rename_all = "kebab-case")]
pub enum Aim {
    /// Cut the controller's metadata port, then send `request` `request_after_ms` later.
    /// With `gated`, the controller is first stalled just before its next metadata
    /// write ([`GATE_POINT`]) and `request` sent to make it decide something, then cut
    /// until another node is controller, healed, and only then let go (`request_after_ms`
    /// unused): a controller that comes back from a soft failure mid-decision.
    ControllerCut {
        request: CutRequest,
        request_after_ms: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        gated: bool,
    },
    /// Strike the leader of the first partition seen to change its ISR or move its
    /// leadership within `watch_ms`.
    AfterChange { strike: Strike, watch_ms: u64 },
    /// Strike the leader or an in-sync follower of the partition whose follower's high
    /// watermark lags the most, the first time one lags within `watch_ms`.
    Lagging {
        strike: Strike,
        whom: LagTarget,
        watch_ms: u64,
    },
    /// Move the leadership of the partition whose follower's high watermark lags the
    /// most to that follower (a leader transfer), the first time one lags within
    /// `watch_ms`. With `answer_delay_ms`, [`STALE_ANSWER_POINT`] is first delayed that
    /// long on the leader (released at the undo): as a follower its truncation waits,
    /// and so does the new leader's high watermark. With `behind_ms`, a partition with a
    /// third live replica is chosen and that replica first put behind: its replication
    /// port cut from every other node until the ISR no longer names it (at most
    /// [`LEAVE_ISR_WAIT`]) and `behind_ms` more; the lag is then watched for on that
    /// partition among the other followers, and the cut healed right after the move (or
    /// at the end of the watch), the leader's [`STALE_ANSWER_POINT`] held instead of
    /// delayed until the replica behind is back in the ISR (at most
    /// [`LAG_REJOIN_WAIT`]); where no partition has a third live replica, the move
    /// goes on without one (and `answer_delay_ms` applies). With `widen_ms`, a partition is chosen first (the one
    /// put behind, or a random partition with a live leader and a live in-sync follower)
    /// and its live in-sync followers (not the one put behind) have their
    /// [`LAG_WIDEN_POINT`] delayed that long (released at the undo) before the watch,
    /// which then looks at that partition only.
    LagMove {
        watch_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        answer_delay_ms: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        behind_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        widen_ms: Option<u64>,
    },
    /// Leadership flapping: one partition's leadership moved `moves` times, `gap_ms`
    /// apart, between one of its in-sync followers and its leader (away, back, away...);
    /// with `slow`, a delay is armed on one of the partition's replicas first
    /// (released at the undo), so that the round trips a move starts there outlast the
    /// next move. With `behind_ms`, a partition with a third live replica is chosen and
    /// that replica is first put behind: its replication port cut from every other
    /// node until the ISR no longer names it (at most [`LEAVE_ISR_WAIT`]) and `behind_ms`
    /// more; the cut is healed and the moves begin at once, while it catches up.
    /// With `held`, the first three moves are paced by the cluster's state instead of
    /// `gap_ms` and the leader that steps down first has its round trips held across
    /// them (see [`HeldStage`]); `slow` and `behind_ms` are then `None`.
    Flap {
        moves: u64,
        gap_ms: u64,
        slow: Option<FlapDelay>,
        #[serde(skip_serializing_if = "Option::is_none")]
        behind_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        held: bool,
    },
    /// A leader left ahead of the replica elected after it (module docs): cut from its
    /// followers' fetches until its ISR is itself (at most [`LEAVE_ISR_WAIT`]; healed at
    /// once, and nothing more done, when it is not by then), `alone_ms` of writes alone,
    /// [`OUT_OF_RANGE_POINT`] held on it, paused until another replica leads (at most
    /// [`FAILOVER_WAIT`]), uncut and resumed; the point is released once its
    /// successor's log reaches the end it kept (at most [`CATCH_UP_WAIT`]).
    Strand { alone_ms: u64 },
}

/// A slow flap's delay and the replica it is armed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlapDelay {
    #[serde(flatten)]
    pub delay: crate::slow::Delay,
    pub on: FlapSlowed,
}

/// Which replica of a flapping partition a slow flap delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlapSlowed {
    /// The leader, which steps down at the first move: the answer to the question it
    /// asks as a follower is held ([`STALE_ANSWER_POINT`]) for more than two moves, so it
    /// arrives after the replica led again and stepped down again — a stale answer
    /// about a log that has changed since (what epoch fencing must drop). Meanwhile the
    /// replica, still in the ISR, does not fetch, so the new leader's high watermark
    /// stays where it learnt it last.
    SteppingDown,
    /// A live replica drawn at random.
    AnyReplica,
}

/// The kinds of strike a swarm run chooses among ([`Aim::kind`]). A strand is one only
/// where the system may elect a replica outside its ISR (the swarm is told so), as only
/// the system's own settings decide whether it may be drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AimKind {
    ControllerCut,
    AfterChange,
    Lagging,
    LagMove,
    Flap,
    Strand,
}

impl AimKind {
    pub const ALL: [AimKind; 6] = [
        AimKind::ControllerCut,
        AimKind::AfterChange,
        AimKind::Lagging,
        AimKind::LagMove,
        AimKind::Flap,
        AimKind::Strand,
    ];

    /// The name the history uses (the `aim` of a strike).
    pub fn name(self) -> &'static str {
        match self {
            AimKind::ControllerCut => "controller-cut",
            AimKind::AfterChange => "after-change",
            AimKind::Lagging => "lagging",
            AimKind::LagMove => "lag-move",
            AimKind::Flap => "flap",
            AimKind::Strand => "strand",
        }
    }
}

impl Aim {
    /// The strike's kind.
    pub fn kind(&self) -> AimKind {
        match self {
            Aim::ControllerCut { .. } => AimKind::ControllerCut,
            Aim::AfterChange { .. } => AimKind::AfterChange,
            Aim::Lagging { .. } => AimKind::Lagging,
            Aim::LagMove { .. } => AimKind::LagMove,
            Aim::Flap { .. } => AimKind::Flap,
            Aim::Strand { .. } => AimKind::Strand,
        }
    }

    /// A strike of one of `kinds` (an empty `kinds` allows every kind but a strand) on
    /// `system` (its strands are the ones of `kinds`).
    /// A strand, when among them, with an even share (one in `kinds.len()`; alone for
    /// [`STRAND_ALONE_MS`]); otherwise drawn as [`Aim::draw`] without strands until its
    /// kind is among them: each kind keeps its own parameters' distribution, and the
    /// kinds' shares are [`Aim::draw`]'s renormalized.
    pub fn draw_among(rng: &mut Rng, kinds: &[AimKind], system: SystemTraits) -> Aim {
        let others = kinds
            .iter()
            .filter(|kind| **kind != AimKind::Strand)
            .count();
        if kinds.contains(&AimKind::Strand) && (others == 0 || rng.below(kinds.len() as u64) == 0) {
            return Aim::Strand {
                alone_ms: rng.between(STRAND_ALONE_MS.0, STRAND_ALONE_MS.1),
            };
        }
        loop {
            let without_strands = SystemTraits {
                unclean_elections: false,
                ..system
            };
            let aim = Aim::draw(rng, without_strands);
            if kinds.is_empty() || kinds.contains(&aim.kind()) {
                return aim;
            }
        }
    }

    /// Whether the strike has stages that a fault landing mid-way would undo: it takes
    /// the cluster to itself (other packages' faults undone first, none started while
    /// it runs) and the cluster must settle after it (see [`crate::settle`]). A gated
    /// controller cut, a held flap, a strand, a lag move that puts a replica behind (a
    /// kill, pause or cut of another package between the cut and the catch-up — seen to
    /// stretch one to 17 s — leaves nobody behind, or nobody lagging, by the move).
    pub fn needs_the_cluster(&self) -> bool {
        match self {
            Aim::ControllerCut { gated, .. } => *gated,
            Aim::Flap { held, .. } => *held,
            Aim::Strand { .. } => true,
            Aim::LagMove { behind_ms, .. } => behind_ms.is_some(),
            Aim::AfterChange { .. } | Aim::Lagging { .. } => false,
        }
    }

    /// The history's `targets`: `controller`, `leader-after-change`, `lagging-leader`,
    /// `lagging-follower`.
    pub fn target_name(&self) -> &'static str {
        match self {
            Aim::ControllerCut { .. } => "controller",
            Aim::AfterChange { .. } => "leader-after-change",
            Aim::Lagging {
                whom: LagTarget::Leader,
                ..
            } => "lagging-leader",
            Aim::Lagging {
                whom: LagTarget::Follower,
                ..
            } => "lagging-follower",
            Aim::LagMove { .. } => "lagging-follower-leads",
            Aim::Flap { .. } => "leadership-flap",
            Aim::Strand { .. } => "stranded-leader",
        }
    }

    /// Draws a strike: a controller cut with chance 3/16 (it holds the package for 10 to
    /// 30 s, the others for a few seconds; two in three gated, [`CUT_GATED_CHANCE`]), a
    /// strike after a change with 1/16, on a lag with 1/16, a move to a lagging follower
    /// with 5/16 (its old leader's answer delayed — always with a replica behind, else with
    /// chance [`LAG_ANSWER_CHANCE`] — for
    /// [`LAG_ANSWER_MS`], a third replica put behind first with chance
    /// [`LAG_BEHIND_CHANCE`] for [`LAG_BEHIND_MS`], its followers' lag widened with chance
    /// [`LAG_WIDEN_CHANCE`] by [`LAG_WIDEN_MS`]), a flap with ⅜ (a flap's moves, gaps and
    /// delay from [`FLAP_MOVES`], [`FLAP_GAP_MS`], [`FLAP_DELAY_MS`]; one that puts no
    /// replica behind is held with chance [`FLAP_HELD_CHANCE`]); after a change, a kill or
    /// an isolation; on a lag, a kill or a pause of the leader or the follower, each
    /// with chance ½ (a cut's request a transfer with chance ¾); waits uniform in [`WATCH_MS`], requests after
    /// [`REQUEST_AFTER_MS`].
    ///
    /// Where the system may elect a replica outside the ISR
    /// ([`SystemTraits::unclean_elections`]), a strand with chance [`STRAND_CHANCE`]
    /// first (alone for [`STRAND_ALONE_MS`]), else as without. Where its followers do not
    /// ask where their logs diverge ([`SystemTraits::asks_divergence`]), no flap is held
    /// and a flap's delay is never at a [`DIVERGENCE_POINTS`] point (a stale answer is
    /// then a delay elsewhere on any replica).
    pub fn draw(rng: &mut Rng, system: SystemTraits) -> Aim {
        if system.unclean_elections && rng.chance(STRAND_CHANCE) {
            return Aim::Strand {
                alone_ms: rng.between(STRAND_ALONE_MS.0, STRAND_ALONE_MS.1),
            };
        }
        let watch_ms = rng.between(WATCH_MS.0, WATCH_MS.1);
        match rng.below(16) {
            10..=15 => {
                let moves = rng.between(FLAP_MOVES.0, FLAP_MOVES.1);
                let gap_ms = rng.between(FLAP_GAP_MS.0, FLAP_GAP_MS.1);
                let behind = rng.between(FLAP_BEHIND_MS.0, FLAP_BEHIND_MS.1);
                let behind_ms = rng.chance(FLAP_BEHIND_CHANCE).then_some(behind);
                let asks = system.asks_divergence;
                let held = asks && behind_ms.is_none() && rng.chance(FLAP_HELD_CHANCE);
                if held {
                    return Aim::Flap {
                        moves,
                        gap_ms,
                        slow: None,
                        behind_ms: None,
                        held: true,
                    };
                }
                // A replica put behind catches up while the leader that stepped down is
                // held in its truncation (the new leader's HW waits for it): always a
                // stale answer then.
                let slow = (behind_ms.is_some() || rng.chance(FLAP_SLOW_CHANCE)).then(|| {
                    let stale = behind_ms.is_some() || rng.chance(FLAP_STALE_CHANCE);
                    if stale && asks {
                        let gaps = FLAP_STALE_GAPS.0
                            + (FLAP_STALE_GAPS.1 - FLAP_STALE_GAPS.0) * rng.unit();
                        FlapDelay {
                            delay: crate::slow::Delay {
                                point: STALE_ANSWER_POINT.to_string(),
                                delay_ms: (gap_ms as f64 * gaps).round() as u64,
                                percent: 100,
                            },
                            on: FlapSlowed::SteppingDown,
                        }
                    } else {
                        let points: Vec<&str> = FLAP_POINTS
                            .iter()
                            .copied()
                            .filter(|point| asks || !DIVERGENCE_POINTS.contains(point))
                            .collect();
                        let point = rng.pick(&points).copied().unwrap_or(FLAP_POINTS[0]);
                        FlapDelay {
                            delay: crate::slow::Delay {
                                point: point.to_string(),
                                delay_ms: crate::slow::log_uniform(
                                    FLAP_DELAY_MS.0,
                                    FLAP_DELAY_MS.1,
                                    rng.unit(),
                                ),
                                percent: 100,
                            },
                            on: FlapSlowed::AnyReplica,
                        }
                    }
                });
                Aim::Flap {
                    moves,
                    gap_ms,
                    slow,
                    behind_ms,
                    held: false,
                }
            }
            0..=2 => {
                // A preferred election is a no-op while every leader is preferred (the
                // usual state), so most cuts carry a transfer: queued work for sure; a
                // gated cut always does, as its gate waits for a decision.
                let elect = rng.chance(0.25);
                let request_after_ms = rng.between(REQUEST_AFTER_MS.0, REQUEST_AFTER_MS.1);
                let gated = rng.chance(CUT_GATED_CHANCE);
                Aim::ControllerCut {
                    request: if elect && !gated {
                        CutRequest::ElectPreferred
                    } else {
                        CutRequest::TransferLeader
                    },
                    request_after_ms,
                    gated,
                }
            }
            5..=9 => {
                let answer = rng.between(LAG_ANSWER_MS.0, LAG_ANSWER_MS.1);
                let behind = rng.between(LAG_BEHIND_MS.0, LAG_BEHIND_MS.1);
                let widen = crate::slow::log_uniform(LAG_WIDEN_MS.0, LAG_WIDEN_MS.1, rng.unit());
                let answered = rng.chance(LAG_ANSWER_CHANCE);
                let behind_ms = rng.chance(LAG_BEHIND_CHANCE).then_some(behind);
                Aim::LagMove {
                    watch_ms,
                    // With a replica behind, always: once the old leader fetches, the new
                    // leader's high watermark jumps to its log end, and the replica
                    // catching up is let in only past everything committed.
                    answer_delay_ms: (answered || behind_ms.is_some()).then_some(answer),
                    behind_ms,
                    widen_ms: rng.chance(LAG_WIDEN_CHANCE).then_some(widen),
                }
            }
            3 => Aim::AfterChange {
                strike: if rng.chance(0.5) {
                    Strike::Kill
                } else {
                    Strike::Isolate
                },
                watch_ms,
            },
            _ => Aim::Lagging {
                strike: if rng.chance(0.5) {
                    Strike::Kill
                } else {
                    Strike::Pause
                },
                whom: if rng.chance(0.5) {
                    LagTarget::Leader
                } else {
                    LagTarget::Follower
                },
                watch_ms,
            },
        }
    }
}

/// The gap before a strike: a calm ([`CALM_MS`]) with chance [`CALM_CHANCE`], else a
/// burst's ([`BURST_MS`]), uniform.
pub fn strike_gap(rng: &mut Rng) -> Duration {
    let (lo, hi) = if rng.chance(CALM_CHANCE) {
        CALM_MS
    } else {
        BURST_MS
    };
    Duration::from_millis(rng.between(lo, hi))
}

/// The gap before a strike of a swarm run, from the schedule's `gap` ([`strike_gap`])
/// and the step's `seed`: a burst's gap, drawn again from the seed where the schedule
/// drew a calm. In a swarm the calms are the swarm's calm periods (a quarter of them),
/// during which a strike waits for the calm to end. With calms of its own as well (and
/// strikes that fell in a calm period dropped), the 22 log runs of a KAFKA-7040 search
/// spent 36% of their client phases in calm periods and about a quarter between
/// strikes; its runs made 2.7 strikes each of the 3.9 kinds they drew (5.2 since).
pub fn swarm_gap(gap: Duration, seed: u64) -> Duration {
    if gap <= Duration::from_millis(BURST_MS.1) {
        return gap;
    }
    let mut rng = Rng::derive(seed, "swarm-gap", 0);
    Duration::from_millis(rng.between(BURST_MS.0, BURST_MS.1))
}

/// How long `aim`'s fault is held before its undo: a controller's cut 1–6 s after its
/// request (which itself waited 0–8 s after the cut); any other fault a burst's hold
/// ([`BURST_MS`]), or 3–10 s with chance [`LONG_HOLD_CHANCE`].
pub fn hold(aim: &Aim, rng: &mut Rng) -> Duration {
    let ms = match aim {
        Aim::ControllerCut { .. } => rng.between(1_000, 6_000),
        _ if rng.chance(LONG_HOLD_CHANCE) => rng.between(3_000, 10_000),
        _ => rng.between(BURST_MS.0, BURST_MS.1),
    };
    Duration::from_millis(ms)
}

/// A partition seen to change between two reads of the roles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// `topic/partition`.
    pub key: String,
    /// `isr-expansion`, `isr-shrink` or `leader-move`.
    pub trigger: &'static str,
    /// The leader now: the node to strike.
    pub leader: String,
    pub leader_before: Option<String>,
    pub isr_before: Vec<String>,
    pub isr_after: Vec<String>,
    /// Nodes in the ISR now and not before.
    pub added: Vec<String>,
    /// Nodes in the ISR before and not now.
    pub removed: Vec<String>,
}

/// The partitions whose leadership moved (another leader, or a higher leader epoch), whose
/// ISR grew (a node in it that was not) or shrank (a node gone from it) from `before` to
/// `now`, in `now`'s order; only partitions with a leader now, and known in `before`. A
/// leadership move wins over an ISR change of the same partition, an expansion over a
/// shrink. Each is a metadata write right after which a crash finds the cluster mid-way
/// (CrashTuner): a leader struck just after its ISR shrank to itself leaves only
/// out-of-sync replicas, and with unclean elections one of them is elected behind it.
pub fn changes(before: &Roles, now: &Roles) -> Vec<Change> {
    let mut found = Vec::new();
    for partition in &now.partitions {
        let Some(leader) = partition.leader.clone() else {
            continue;
        };
        let Some(old) = before.partition(&partition.topic, partition.partition) else {
            continue;
        };
        let moved = old.leader.as_ref() != Some(&leader)
            || matches!(
                (old.leader_epoch, partition.leader_epoch),
                (Some(a), Some(b)) if b > a
            );
        let added: Vec<String> = partition
            .isr
            .iter()
            .filter(|node| !old.isr.contains(node))
            .cloned()
            .collect();
        let removed: Vec<String> = old
            .isr
            .iter()
            .filter(|node| !partition.isr.contains(node))
            .cloned()
            .collect();
        let trigger = if moved {
            "leader-move"
        } else if !added.is_empty() {
            "isr-expansion"
        } else if !removed.is_empty() {
            "isr-shrink"
        } else {
            continue;
        };
        found.push(Change {
            key: partition.key(),
            trigger,
            leader,
            leader_before: old.leader.clone(),
            isr_before: old.isr.clone(),
            isr_after: partition.isr.clone(),
            added,
            removed,
        });
    }
    found
}

/// An in-sync follower whose high watermark is behind its leader's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lag {
    pub key: String,
    pub leader: String,
    pub follower: String,
    pub leader_hw: u64,
    pub follower_hw: u64,
    pub leader_leo: u64,
    pub follower_leo: u64,
}

impl Lag {
    /// How many offsets the follower's high watermark is behind.
    pub fn by(&self) -> u64 {
        self.leader_hw.saturating_sub(self.follower_hw)
    }
}

/// Every partition of `roles` whose leader's own view says it leads, and each member of
/// its ISR (but the leader) whose view's high watermark is below the leader's: from the
/// views of `views` (node → its replicas; a node missing there is not judged). In the
/// roles' partition order, then ISR order.
pub fn lags(roles: &Roles, views: &BTreeMap<String, Vec<ReplicaView>>) -> Vec<Lag> {
    let view = |node: &str, topic: &str, partition: u32| {
        views.get(node).and_then(|all| {
            all.iter()
                .find(|v| v.topic == topic && v.partition == partition)
        })
    };
    let mut found = Vec::new();
    for partition in &roles.partitions {
        let Some(leader) = &partition.leader else {
            continue;
        };
        let Some(lead) = view(leader, &partition.topic, partition.partition) else {
            continue;
        };
        if !lead.leading {
            continue;
        }
        for follower in partition.isr.iter().filter(|node| *node != leader) {
            let Some(follow) = view(follower, &partition.topic, partition.partition) else {
                continue;
            };
            if follow.high_watermark < lead.high_watermark {
                found.push(Lag {
                    key: partition.key(),
                    leader: leader.clone(),
                    follower: follower.clone(),
                    leader_hw: lead.high_watermark,
                    follower_hw: follow.high_watermark,
                    leader_leo: lead.log_end_offset,
                    follower_leo: follow.log_end_offset,
                });
            }
        }
    }
    found
}

/// The lag a strike aims at: one of those behind by the most, picked with `rng`.
pub fn worst_lag<'a>(lags: &'a [Lag], rng: &mut Rng) -> Option<&'a Lag> {
    let most = lags.iter().map(Lag::by).max()?;
    let worst: Vec<&Lag> = lags.iter().filter(|lag| lag.by() == most).collect();
    rng.pick(&worst).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::PartitionRoles;

    fn s(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| i.to_string()).collect()
    }

    fn roles(partitions: &[(&str, u32, &str, u64, &[&str])]) -> Roles {
        Roles {
            nodes: s(&["n1", "n2", "n3", "n4", "n5"]),
            partitions: partitions
                .iter()
                .map(|(topic, partition, leader, epoch, isr)| PartitionRoles {
                    topic: topic.to_string(),
                    partition: *partition,
                    leader: (!leader.is_empty()).then(|| leader.to_string()),
                    leader_epoch: Some(*epoch),
                    replicas: s(&["n1", "n2", "n3"]),
                    isr: s(isr),
                })
                .collect(),
            ..Roles::default()
        }
    }

    #[test]
    fn changes_name_the_partition_and_its_leader_now() {
        let before = roles(&[
            ("t", 0, "n1", 3, &["n1", "n2"]),
            ("t", 1, "n2", 5, &["n2", "n3", "n1"]),
            ("t", 2, "n3", 1, &["n3", "n1", "n2"]),
        ]);
        // Nothing changed.
        assert!(changes(&before, &before).is_empty());
        // t/0 takes n3 back in its ISR; t/1 moves to n3; t/2 shrinks.
        let now = roles(&[
            ("t", 0, "n1", 3, &["n1", "n2", "n3"]),
            ("t", 1, "n3", 6, &["n3", "n1"]),
            ("t", 2, "n3", 1, &["n3", "n1"]),
        ]);
        let found = changes(&before, &now);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[2].key, "t/2");
        assert_eq!(found[2].trigger, "isr-shrink");
        assert_eq!(found[2].leader, "n3");
        assert_eq!(found[2].removed, s(&["n2"]));
        assert!(found[2].added.is_empty());
        assert_eq!(found[0].key, "t/0");
        assert_eq!(found[0].trigger, "isr-expansion");
        assert_eq!(found[0].leader, "n1");
        assert_eq!(found[0].added, s(&["n3"]));
        assert_eq!(found[1].key, "t/1");
        assert_eq!(found[1].trigger, "leader-move");
        assert_eq!(found[1].leader, "n3");
        assert_eq!(found[1].leader_before.as_deref(), Some("n2"));
        // A re-election of the same leader (epoch up) is a move too.
        let reelected = roles(&[("t", 0, "n1", 4, &["n1", "n2"])]);
        let found = changes(&before, &reelected);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].trigger, found[0].leader.as_str()),
            ("leader-move", "n1")
        );
        // No leader now, or a partition unknown before: nothing to strike.
        let leaderless = roles(&[("t", 1, "", 6, &["n3"]), ("u", 0, "n2", 0, &["n2"])]);
        assert!(changes(&before, &leaderless).is_empty());
    }

    fn view(topic: &str, leading: bool, hw: u64, leo: u64) -> ReplicaView {
        ReplicaView {
            topic: topic.into(),
            partition: 0,
            leading,
            high_watermark: hw,
            log_end_offset: leo,
            ..ReplicaView::default()
        }
    }

    #[test]
    fn lags_are_in_sync_followers_behind_their_leader() {
        let roles = roles(&[
            ("a", 0, "n1", 1, &["n1", "n2", "n3"]),
            ("b", 0, "n2", 1, &["n2", "n3"]),
        ]);
        let mut views = BTreeMap::new();
        views.insert(
            "n1".to_string(),
            vec![view("a", true, 10, 12), view("b", false, 3, 7)],
        );
        views.insert(
            "n2".to_string(),
            vec![view("a", false, 10, 12), view("b", true, 7, 7)],
        );
        views.insert(
            "n3".to_string(),
            vec![view("a", false, 8, 12), view("b", false, 4, 7)],
        );
        let found = lags(&roles, &views);
        let shown: Vec<(String, String, String, u64)> = found
            .iter()
            .map(|l| (l.key.clone(), l.leader.clone(), l.follower.clone(), l.by()))
            .collect();
        // n1 lags b/0 by 4 too, but it is not in b/0's ISR.
        assert_eq!(
            shown,
            vec![
                ("a/0".into(), "n1".into(), "n3".into(), 2),
                ("b/0".into(), "n2".into(), "n3".into(), 3),
            ]
        );
        let worst = worst_lag(&found, &mut Rng::new(1)).expect("a lag");
        assert_eq!((worst.key.as_str(), worst.follower.as_str()), ("b/0", "n3"));
        // A leader that does not think it leads, or a node without views, is not judged.
        let mut stale = views.clone();
        stale.insert("n2".into(), vec![view("b", false, 7, 7)]);
        stale.remove("n3");
        assert!(lags(&roles, &stale).is_empty());
        assert!(worst_lag(&[], &mut Rng::new(1)).is_none());
    }

    #[test]
    fn a_swarm_strike_follows_a_burst_gap_never_a_calm() {
        let (mut redrawn, mut kept) = (0, 0);
        for index in 0..500 {
            let mut rng = Rng::derive(3, "aimed", index);
            let gap = strike_gap(&mut rng);
            let seed = rng.next_u64();
            let swarmed = swarm_gap(gap, seed);
            assert_eq!(swarmed, swarm_gap(gap, seed), "from the seed");
            assert!(
                (Duration::from_millis(BURST_MS.0)..=Duration::from_millis(BURST_MS.1))
                    .contains(&swarmed),
                "{gap:?} -> {swarmed:?}"
            );
            if gap == swarmed {
                kept += 1;
            } else {
                redrawn += 1;
                assert!(gap >= Duration::from_millis(CALM_MS.0), "{gap:?}");
            }
        }
        // A third of the gaps are calms (167 expected).
        assert!(
            (120..220).contains(&redrawn),
            "{redrawn} redrawn, {kept} kept"
        );
    }

    #[test]
    fn draws_cover_every_aim_and_stay_in_range() {
        let mut kinds = std::collections::BTreeSet::new();
        let mut calm = 0;
        let (mut slow_flaps, mut plain_flaps) = (0u32, 0u32);
        let (mut stale_flaps, mut watching_flaps, mut held_flaps) = (0u32, 0u32, 0u32);
        let (mut cuts, mut gated_cuts) = (0u32, 0u32);
        let (mut lag_strikes, mut lag_moves, mut moves_behind, mut moves_held) =
            (0u32, 0u32, 0u32, 0u32);
        let mut moves_widened = 0u32;
        let draws = 3_000;
        for index in 0..draws {
            let mut rng = Rng::derive(11, "aimed", index);
            let aim = Aim::draw(&mut rng, SystemTraits::default());
            assert_eq!(
                aim,
                Aim::draw(
                    &mut Rng::derive(11, "aimed", index),
                    SystemTraits::default()
                )
            );
            kinds.insert(format!(
                "{} {}",
                aim.target_name(),
                serde_json::to_value(&aim).expect("json")["strike"]
            ));
            match &aim {
                Aim::ControllerCut {
                    request,
                    request_after_ms,
                    gated,
                } => {
                    assert!(*request_after_ms <= REQUEST_AFTER_MS.1);
                    gated_cuts += u32::from(*gated);
                    if *gated {
                        assert_eq!(*request, CutRequest::TransferLeader, "{aim:?}");
                    }
                    cuts += 1;
                }
                Aim::AfterChange { strike, watch_ms } => {
                    assert_ne!(*strike, Strike::Pause);
                    assert!((WATCH_MS.0..=WATCH_MS.1).contains(watch_ms));
                }
                Aim::Lagging {
                    strike, watch_ms, ..
                } => {
                    assert_ne!(*strike, Strike::Isolate);
                    assert!((WATCH_MS.0..=WATCH_MS.1).contains(watch_ms));
                    lag_strikes += 1;
                }
                Aim::LagMove {
                    watch_ms,
                    answer_delay_ms,
                    behind_ms,
                    widen_ms,
                } => {
                    assert!((WATCH_MS.0..=WATCH_MS.1).contains(watch_ms));
                    lag_moves += 1;
                    if let Some(ms) = widen_ms {
                        moves_widened += 1;
                        assert!((LAG_WIDEN_MS.0..=LAG_WIDEN_MS.1).contains(ms));
                    }
                    if let Some(ms) = behind_ms {
                        moves_behind += 1;
                        assert!((LAG_BEHIND_MS.0..=LAG_BEHIND_MS.1).contains(ms));
                    }
                    if let Some(ms) = answer_delay_ms {
                        moves_held += 1;
                        assert!((LAG_ANSWER_MS.0..=LAG_ANSWER_MS.1).contains(ms));
                    }
                    assert!(
                        behind_ms.is_none() || answer_delay_ms.is_some(),
                        "a replica behind needs the old leader held: {aim:?}"
                    );
                }
                Aim::Flap {
                    moves,
                    gap_ms,
                    slow,
                    behind_ms,
                    held,
                } => {
                    assert!((FLAP_MOVES.0..=FLAP_MOVES.1).contains(moves));
                    if *held {
                        held_flaps += 1;
                        assert!(slow.is_none() && behind_ms.is_none(), "{aim:?}");
                    }
                    assert!((FLAP_GAP_MS.0..=FLAP_GAP_MS.1).contains(gap_ms));
                    if let Some(ms) = behind_ms {
                        watching_flaps += 1;
                        assert!((FLAP_BEHIND_MS.0..=FLAP_BEHIND_MS.1).contains(ms));
                        assert!(
                            matches!(
                                slow,
                                Some(FlapDelay {
                                    on: FlapSlowed::SteppingDown,
                                    ..
                                })
                            ),
                            "{aim:?}"
                        );
                    }
                    match slow {
                        Some(FlapDelay {
                            delay,
                            on: FlapSlowed::AnyReplica,
                        }) => {
                            slow_flaps += 1;
                            assert!(FLAP_POINTS.contains(&delay.point.as_str()));
                            assert!((FLAP_DELAY_MS.0..=FLAP_DELAY_MS.1).contains(&delay.delay_ms));
                            assert_eq!(delay.percent, 100);
                        }
                        Some(FlapDelay {
                            delay,
                            on: FlapSlowed::SteppingDown,
                        }) => {
                            stale_flaps += 1;
                            assert_eq!(delay.point, STALE_ANSWER_POINT);
                            assert_eq!(delay.percent, 100);
                            // Outlasts two moves, not three.
                            assert!(delay.delay_ms > 2 * gap_ms, "{aim:?}");
                            assert!(delay.delay_ms < 3 * gap_ms, "{aim:?}");
                        }
                        None if !*held => plain_flaps += 1,
                        None => {}
                    }
                }
                Aim::Strand { .. } => panic!("a strand without unclean elections: {aim:?}"),
            }
            let gap = strike_gap(&mut rng);
            if gap >= Duration::from_millis(CALM_MS.0) {
                calm += 1;
                assert!(gap <= Duration::from_millis(CALM_MS.1));
            } else {
                assert!(
                    (Duration::from_millis(BURST_MS.0)..=Duration::from_millis(BURST_MS.1))
                        .contains(&gap)
                );
            }
            let held = hold(&aim, &mut rng);
            assert!(held >= Duration::from_millis(500) && held <= Duration::from_secs(10));
        }
        // controller (no strike) + 2 after a change + 4 on a lag + a move to a lagging
        // follower + a flap (no strike).
        assert_eq!(kinds.len(), 9, "{kinds:?}");
        // Three draws in eight are flaps (1,125); 20% of them put a third replica
        // behind first, always with a stale answer (225); of the others, 85% are held
        // (765), and of the rest a quarter are plain (34), half stale answers (67), a
        // quarter slow elsewhere (34).
        assert!(
            (15..60).contains(&plain_flaps)
                && (240..350).contains(&stale_flaps)
                && (15..60).contains(&slow_flaps)
                && (700..880).contains(&held_flaps),
            "{plain_flaps} {stale_flaps} {slow_flaps} {held_flaps}"
        );
        assert!((180..275).contains(&watching_flaps), "{watching_flaps}");
        // Three in sixteen are controller cuts (562), two thirds of them gated.
        assert!((480..650).contains(&cuts), "{cuts}");
        // One in sixteen strikes on a lag (187), five move to the lagging follower (937),
        // three in four of those with a replica behind (703), delaying the old leader's
        // answer all of those and three in four of the others (879), three in four
        // widening the lag (703).
        assert!((140..240).contains(&lag_strikes), "{lag_strikes}");
        assert!((840..1040).contains(&lag_moves), "{lag_moves}");
        assert!((620..790).contains(&moves_behind), "{moves_behind}");
        assert!((790..970).contains(&moves_held), "{moves_held}");
        assert!((620..790).contains(&moves_widened), "{moves_widened}");
        assert!(
            (cuts * 3 / 5..cuts * 3 / 4).contains(&gated_cuts),
            "{gated_cuts} of {cuts}"
        );
        let share = f64::from(calm) / draws as f64;
        assert!((0.30..0.37).contains(&share), "calm before {share}");
    }

    #[test]
    fn where_followers_do_not_ask_where_logs_diverge_no_flap_holds_or_delays_that_question() {
        let system = SystemTraits {
            unclean_elections: false,
            asks_divergence: false,
        };
        let (mut flaps, mut slowed, mut behind) = (0u32, 0u32, 0u32);
        for index in 0..3_000 {
            let aim = Aim::draw(&mut Rng::derive(13, "aimed", index), system);
            let Aim::Flap {
                slow,
                held,
                behind_ms,
                ..
            } = &aim
            else {
                continue;
            };
            flaps += 1;
            assert!(!held, "{aim:?}");
            behind += u32::from(behind_ms.is_some());
            if let Some(FlapDelay { delay, on }) = slow {
                slowed += 1;
                assert_eq!(*on, FlapSlowed::AnyReplica, "{aim:?}");
                assert!(FLAP_POINTS.contains(&delay.point.as_str()), "{aim:?}");
                assert!(
                    !DIVERGENCE_POINTS.contains(&delay.point.as_str()),
                    "{aim:?}"
                );
            }
            assert!(behind_ms.is_none() || slow.is_some(), "{aim:?}");
        }
        // The same three in eight are flaps, a fifth of them with a replica behind (each
        // slowed elsewhere) and three in four of the others slowed.
        assert!((1_020..1_230).contains(&flaps), "{flaps}");
        assert!((180..275).contains(&behind), "{behind}");
        assert!((820..980).contains(&slowed), "{slowed} of {flaps}");
        // Where they do ask, the same streams draw the same strikes as ever.
        for index in 0..200 {
            let asking = SystemTraits::default();
            let aim = Aim::draw(&mut Rng::derive(13, "aimed", index), asking);
            if let Aim::Flap { held: true, .. } = aim {
                return;
            }
        }
        panic!("no held flap in 200 draws where followers ask");
    }

    #[test]
    fn a_lag_move_needs_the_cluster_only_when_it_puts_a_replica_behind() {
        let lag_move = |behind_ms: Option<u64>| Aim::LagMove {
            watch_ms: 1_000,
            answer_delay_ms: Some(800),
            behind_ms,
            widen_ms: Some(300),
        };
        assert!(lag_move(Some(500)).needs_the_cluster());
        assert!(!lag_move(None).needs_the_cluster());
        let quick = Aim::Lagging {
            strike: Strike::Kill,
            whom: LagTarget::Leader,
            watch_ms: 1_000,
        };
        assert!(!quick.needs_the_cluster());
    }

    #[test]
    fn with_unclean_elections_three_strikes_in_four_strand_a_leader_and_the_rest_draw_as_without() {
        let draws = 3_000;
        let mut strands = 0;
        for index in 0..draws {
            let system = SystemTraits {
                unclean_elections: true,
                ..SystemTraits::default()
            };
            let aim = Aim::draw(&mut Rng::derive(12, "aimed", index), system);
            match &aim {
                Aim::Strand { alone_ms } => {
                    strands += 1;
                    assert!((STRAND_ALONE_MS.0..=STRAND_ALONE_MS.1).contains(alone_ms));
                    let json = serde_json::to_value(&aim).expect("json");
                    assert_eq!(json["aim"], "strand");
                }
                other => assert_ne!(other.target_name(), "stranded-leader"),
            }
        }
        assert!((2_150..2_350).contains(&strands), "{strands}");
    }

    #[test]
    fn a_recorded_strike_reads_back_as_the_same_aim() {
        // A strike's `aim` in the history is what a scenario's `strike` step replays.
        for unclean_elections in [false, true] {
            let system = SystemTraits {
                unclean_elections,
                asks_divergence: true,
            };
            for index in 0..500 {
                let aim = Aim::draw(&mut Rng::derive(17, "aimed", index), system);
                let recorded = serde_json::to_value(&aim).expect("an aim serializes");
                let read: Aim = serde_json::from_value(recorded.clone())
                    .unwrap_or_else(|e| panic!("{recorded}: {e}"));
                assert_eq!(read, aim, "{recorded}");
            }
        }
    }
}
