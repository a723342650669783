//! Semantics of the metadata store as a pure state machine: sessions and ephemerals,
//! conditional writes, multi-ops, watches, leader-change renewal, and determinism.

use broker::metadata::{
    ChangeKind, Command, CommandResult, MetadataState, Op, OpReply, Registration, Reply, SessionId,
    SessionTracker, StoreError, WatchRegistry, WatchTarget,
};
use proptest::prelude::*;

/// A state plus the next log index, so tests read like a sequence of proposals.
struct Log {
    state: MetadataState,
    next_index: u64,
}

impl Log {
    fn new() -> Log {
        Log {
            state: MetadataState::new(),
            next_index: 1,
        }
    }

    fn apply(&mut self, command: Command) -> CommandResult {
        let index = self.next_index;
        self.next_index += 1;
        self.state.apply(index, command)
    }

    fn ok(&mut self, command: Command) -> Reply {
        let result = self.apply(command.clone());
        match result.outcome {
            Ok(reply) => reply,
            Err(e) => panic!("{command:?} failed: {e}"),
        }
    }

    fn open(&mut self, ttl_ms: u64) -> SessionId {
        match self.ok(Command::OpenSession { ttl_ms }) {
            Reply::SessionOpened(id) => id,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    fn create(&mut self, path: &str, ephemeral_session: Option<SessionId>) {
        self.ok(create(path, b"x", ephemeral_session));
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state.to_snapshot().expect("the state serializes")
    }
}

fn create(path: &str, data: &[u8], ephemeral_session: Option<SessionId>) -> Command {
    Command::Op(Op::Create {
        path: path.to_string(),
        data: data.to_vec(),
        ephemeral_session,
    })
}

fn set(path: &str, data: &[u8], expected_version: Option<u64>) -> Command {
    Command::Op(Op::Set {
        path: path.to_string(),
        data: data.to_vec(),
        expected_version,
    })
}

/// `/brokers/ids` with brokers 1 and 2 registered ephemerally by their own sessions.
fn two_brokers(log: &mut Log) -> (SessionId, SessionId) {
    let s1 = log.open(6_000);
    let s2 = log.open(6_000);
    log.create("/brokers", None);
    log.create("/brokers/ids", None);
    log.create("/brokers/ids/1", Some(s1));
    log.create("/brokers/ids/2", Some(s2));
    (s1, s2)
}

#[test]
fn session_expiry_removes_exactly_its_ephemerals() {
    let mut log = Log::new();
    let (s1, s2) = two_brokers(&mut log);
    log.create("/controller", Some(s1));
    log.create("/controller_epoch", None);

    let renewed_index = log.state.session(s1).expect("s1 is live").renewed_index;
    let result = log.apply(Command::ExpireSession {
        session: s1,
        renewed_index,
    });
    assert_eq!(result.outcome, Ok(Reply::Done));
    // In path order: the state removes a session's nodes in sorted order.
    let removed: Vec<_> = result
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind))
        .collect();
    assert_eq!(
        removed,
        vec![
            ("/brokers/ids/1", ChangeKind::Deleted),
            ("/controller", ChangeKind::Deleted)
        ]
    );
    assert!(!log.state.exists("/brokers/ids/1"));
    assert!(!log.state.exists("/controller"));
    assert!(log.state.exists("/brokers/ids/2"), "another session's node");
    assert!(log.state.exists("/controller_epoch"), "a persistent node");
    assert_eq!(
        log.state.children("/brokers/ids"),
        Some(vec!["2".to_string()])
    );
    assert!(log.state.session(s1).is_none());
    assert!(log.state.session(s2).is_some());
    assert_eq!(log.state.check_invariants(), Ok(()));

    // The dead session can no longer heartbeat or own nodes.
    assert_eq!(
        log.apply(Command::Heartbeat { session: s1 }).outcome,
        Err(StoreError::SessionExpired { session: s1 })
    );
    assert_eq!(
        log.apply(create("/brokers/ids/1", b"x", Some(s1))).outcome,
        Err(StoreError::SessionExpired { session: s1 })
    );
}

#[test]
fn an_expiry_computed_before_a_heartbeat_is_refused() {
    let mut log = Log::new();
    let (s1, _) = two_brokers(&mut log);
    let stale = log.state.session(s1).expect("live").renewed_index;
    log.ok(Command::Heartbeat { session: s1 });
    let before = log.snapshot();
    let result = log.apply(Command::ExpireSession {
        session: s1,
        renewed_index: stale,
    });
    assert!(
        matches!(result.outcome, Err(StoreError::StaleExpiry { session, .. }) if session == s1),
        "{result:?}"
    );
    assert!(result.changes.is_empty());
    assert_eq!(log.snapshot(), before);
}

#[test]
fn closing_a_session_removes_its_ephemerals() {
    let mut log = Log::new();
    let (s1, _) = two_brokers(&mut log);
    let result = log.apply(Command::CloseSession { session: s1 });
    assert_eq!(result.outcome, Ok(Reply::Done));
    assert_eq!(result.changes.len(), 1);
    assert!(!log.state.exists("/brokers/ids/1"));
    assert!(log.state.exists("/brokers/ids/2"));
}

#[test]
fn create_of_an_existing_node_fails() {
    let mut log = Log::new();
    log.create("/controller_epoch", None);
    let before = log.snapshot();
    assert_eq!(
        log.apply(create("/controller_epoch", b"other", None))
            .outcome,
        Err(StoreError::NodeExists {
            path: "/controller_epoch".to_string()
        })
    );
    assert_eq!(log.snapshot(), before);
    assert_eq!(
        log.apply(create("/", b"", None)).outcome,
        Err(StoreError::NodeExists {
            path: "/".to_string()
        })
    );
}

#[test]
fn create_needs_a_parent_and_a_non_ephemeral_one() {
    let mut log = Log::new();
    assert_eq!(
        log.apply(create("/brokers/ids/1", b"", None)).outcome,
        Err(StoreError::NoParent {
            path: "/brokers/ids/1".to_string()
        })
    );
    let s = log.open(1_000);
    log.create("/controller", Some(s));
    assert_eq!(
        log.apply(create("/controller/x", b"", None)).outcome,
        Err(StoreError::EphemeralParent {
            path: "/controller/x".to_string()
        })
    );
}

#[test]
fn versions_start_at_zero_and_count_sets() {
    let mut log = Log::new();
    log.create("/controller_epoch", None);
    assert_eq!(log.state.get("/controller_epoch"), Some((&b"x"[..], 0)));
    assert_eq!(
        log.ok(set("/controller_epoch", b"1", Some(0))),
        Reply::Op(OpReply::Set { version: 1 })
    );
    assert_eq!(
        log.ok(set("/controller_epoch", b"2", None)),
        Reply::Op(OpReply::Set { version: 2 })
    );
    assert_eq!(log.state.get("/controller_epoch"), Some((&b"2"[..], 2)));
}

#[test]
fn a_conditional_set_or_delete_with_a_stale_version_fails_and_changes_nothing() {
    let mut log = Log::new();
    log.create("/partitions", None);
    log.create("/partitions/t", None);
    log.create("/partitions/t/0", None);
    log.create("/partitions/t/0/state", None);
    log.ok(set("/partitions/t/0/state", b"isr=[1,2]", Some(0)));
    let before = log.snapshot();

    // A zombie controller that read version 0 (KAFKA-3083's write).
    let result = log.apply(set("/partitions/t/0/state", b"isr=[1]", Some(0)));
    assert_eq!(
        result.outcome,
        Err(StoreError::BadVersion {
            path: "/partitions/t/0/state".to_string(),
            expected: 0,
            actual: 1
        })
    );
    assert!(result.changes.is_empty());
    assert_eq!(log.snapshot(), before);

    let result = log.apply(Command::Op(Op::Delete {
        path: "/partitions/t/0/state".to_string(),
        expected_version: Some(0),
    }));
    assert!(matches!(
        result.outcome,
        Err(StoreError::BadVersion {
            expected: 0,
            actual: 1,
            ..
        })
    ));
    assert_eq!(log.snapshot(), before);
    assert_eq!(
        log.state.get("/partitions/t/0/state"),
        Some((&b"isr=[1,2]"[..], 1))
    );
}

#[test]
fn delete_refuses_a_node_with_children_and_the_root() {
    let mut log = Log::new();
    let _ = two_brokers(&mut log);
    assert_eq!(
        log.apply(Command::Op(Op::Delete {
            path: "/brokers/ids".to_string(),
            expected_version: None
        }))
        .outcome,
        Err(StoreError::NotEmpty {
            path: "/brokers/ids".to_string()
        })
    );
    assert!(matches!(
        log.apply(Command::Op(Op::Delete {
            path: "/".to_string(),
            expected_version: None
        }))
        .outcome,
        Err(StoreError::InvalidPath { .. })
    ));
}

#[test]
fn a_multi_op_with_one_failing_check_applies_nothing() {
    let mut log = Log::new();
    log.create("/controller_epoch", None);
    log.ok(set("/controller_epoch", b"2", Some(0)));
    log.create("/partitions", None);
    log.create("/partitions/t", None);
    let before = log.snapshot();

    // KAFKA-6082's fencing: every controller write checks /controller_epoch's version.
    let result = log.apply(Command::Multi(vec![
        Op::Create {
            path: "/partitions/t/0".to_string(),
            data: Vec::new(),
            ephemeral_session: None,
        },
        Op::Create {
            path: "/partitions/t/0/state".to_string(),
            data: b"leader=1".to_vec(),
            ephemeral_session: None,
        },
        Op::Set {
            path: "/partitions/t".to_string(),
            data: b"touched".to_vec(),
            expected_version: Some(0),
        },
        Op::Check {
            path: "/controller_epoch".to_string(),
            version: 0,
        },
    ]));
    assert_eq!(
        result.outcome,
        Err(StoreError::MultiFailed {
            op_index: 3,
            error: Box::new(StoreError::BadVersion {
                path: "/controller_epoch".to_string(),
                expected: 0,
                actual: 1
            })
        })
    );
    assert!(result.changes.is_empty());
    assert_eq!(
        log.snapshot(),
        before,
        "byte-identical after a failed multi"
    );

    // The same multi with the current version applies every op.
    let result = log.apply(Command::Multi(vec![
        Op::Create {
            path: "/partitions/t/0".to_string(),
            data: Vec::new(),
            ephemeral_session: None,
        },
        Op::Create {
            path: "/partitions/t/0/state".to_string(),
            data: b"leader=1".to_vec(),
            ephemeral_session: None,
        },
        Op::Check {
            path: "/controller_epoch".to_string(),
            version: 1,
        },
    ]));
    assert_eq!(
        result.outcome,
        Ok(Reply::Multi(vec![
            OpReply::Created,
            OpReply::Created,
            OpReply::Checked
        ]))
    );
    assert_eq!(result.changes.len(), 2);
    assert_eq!(
        log.state.get("/partitions/t/0/state"),
        Some((&b"leader=1"[..], 0))
    );
    assert_eq!(log.state.check_invariants(), Ok(()));
}

#[test]
fn a_failed_multi_undoes_a_delete_it_made() {
    let mut log = Log::new();
    let _ = two_brokers(&mut log);
    log.create("/x", None);
    let before = log.snapshot();
    let result = log.apply(Command::Multi(vec![
        Op::Delete {
            path: "/x".to_string(),
            expected_version: Some(0),
        },
        Op::Create {
            path: "/x".to_string(),
            data: b"again".to_vec(),
            ephemeral_session: None,
        },
        Op::Delete {
            path: "/missing".to_string(),
            expected_version: None,
        },
    ]));
    assert!(matches!(
        result.outcome,
        Err(StoreError::MultiFailed { op_index: 2, .. })
    ));
    assert_eq!(log.snapshot(), before);
}

#[test]
fn a_node_watch_fires_on_set_delete_and_ephemeral_removal() {
    let mut log = Log::new();
    let (s1, _) = two_brokers(&mut log);
    log.create("/controller_epoch", None);
    let mut watches = WatchRegistry::new();
    let seen = log.next_index - 1;
    let register = |watches: &mut WatchRegistry, log: &Log, path: &str| match watches.register(
        WatchTarget::Node(path.to_string()),
        seen,
        &log.state,
    ) {
        Ok(Registration::Pending(id)) => id,
        other => panic!("{other:?}"),
    };

    let on_set = register(&mut watches, &log, "/controller_epoch");
    let unrelated = register(&mut watches, &log, "/brokers/ids/2");
    let result = log.apply(set("/controller_epoch", b"1", None));
    let fired = watches.fire(&result.changes);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].id, on_set);
    assert_eq!(fired[0].change.kind, ChangeKind::DataChanged);
    // One-shot: it does not fire again.
    let result = log.apply(set("/controller_epoch", b"2", None));
    assert!(watches.fire(&result.changes).is_empty());

    let seen = log.next_index - 1;
    let on_delete = match watches.register(
        WatchTarget::Node("/controller_epoch".to_string()),
        seen,
        &log.state,
    ) {
        Ok(Registration::Pending(id)) => id,
        other => panic!("{other:?}"),
    };
    let result = log.apply(Command::Op(Op::Delete {
        path: "/controller_epoch".to_string(),
        expected_version: None,
    }));
    let fired = watches.fire(&result.changes);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].id, on_delete);
    assert_eq!(fired[0].change.kind, ChangeKind::Deleted);

    let on_expiry = match watches.register(
        WatchTarget::Node("/brokers/ids/1".to_string()),
        log.next_index - 1,
        &log.state,
    ) {
        Ok(Registration::Pending(id)) => id,
        other => panic!("{other:?}"),
    };
    let renewed_index = log.state.session(s1).expect("live").renewed_index;
    let result = log.apply(Command::ExpireSession {
        session: s1,
        renewed_index,
    });
    let fired = watches.fire(&result.changes);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].id, on_expiry);
    assert_eq!(fired[0].change.path, "/brokers/ids/1");
    assert_eq!(watches.len(), 1, "only the unrelated watch is left");
    assert!(watches.cancel(unrelated));
    assert!(watches.is_empty());
}

#[test]
fn a_subtree_watch_fires_on_child_create_and_not_on_a_lookalike_sibling() {
    let mut log = Log::new();
    let _ = two_brokers(&mut log);
    let s3 = log.open(6_000);
    let mut watches = WatchRegistry::new();
    let id = match watches.register(
        WatchTarget::Subtree("/brokers/ids".to_string()),
        log.next_index - 1,
        &log.state,
    ) {
        Ok(Registration::Pending(id)) => id,
        other => panic!("{other:?}"),
    };
    let result = log.apply(create("/brokers/ids2", b"", None));
    assert!(watches.fire(&result.changes).is_empty());
    let result = log.apply(create("/brokers/ids/3", b"", Some(s3)));
    let fired = watches.fire(&result.changes);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].id, id);
    assert_eq!(fired[0].change.path, "/brokers/ids/3");
    assert_eq!(fired[0].change.kind, ChangeKind::Created);
}

#[test]
fn a_watch_registered_after_a_missed_change_answers_at_once() {
    let mut log = Log::new();
    let _ = two_brokers(&mut log);
    let seen = log.next_index - 1;
    let s3 = log.open(6_000);
    log.create("/brokers/ids/3", Some(s3));
    let changed_at = log.next_index - 1;
    let mut watches = WatchRegistry::new();
    assert_eq!(
        watches.register(
            WatchTarget::Subtree("/brokers/ids".to_string()),
            seen,
            &log.state
        ),
        Ok(Registration::AlreadyChanged { index: changed_at })
    );
    // A deleted node leaves no trace but its parent's children index.
    log.ok(Command::Op(Op::Delete {
        path: "/brokers/ids/3".to_string(),
        expected_version: None,
    }));
    let deleted_at = log.next_index - 1;
    assert_eq!(
        watches.register(
            WatchTarget::Node("/brokers/ids/3".to_string()),
            changed_at,
            &log.state
        ),
        Ok(Registration::AlreadyChanged { index: deleted_at })
    );
    assert!(watches.is_empty());
}

#[test]
fn a_leader_change_gives_every_session_a_fresh_ttl() {
    const TTL: u64 = 6_000;
    let mut log = Log::new();
    let (s1, s2) = two_brokers(&mut log);

    // The old leader saw s1's last heartbeat at t=0 and s2's at t=5000.
    let mut old = SessionTracker::become_leader(&log.state, 0);
    log.ok(Command::Heartbeat { session: s2 });
    old.observe(&log.state, 5_000);
    assert_eq!(old.expired(TTL - 1), vec![]);
    assert_eq!(
        old.expired(TTL),
        vec![s1],
        "s1 would expire under the old leader"
    );

    // The old leader dies at t=5500, before proposing the expiry; the new leader's clock
    // is unrelated to the old one's.
    let new_start = 1_000_000;
    let mut new = SessionTracker::become_leader(&log.state, new_start);
    // Fresh from the moment of election, before the renewal is even committed.
    assert_eq!(new.expired(new_start + TTL - 1), vec![]);
    assert_eq!(new.deadline(s1), Some(new_start + TTL));
    log.ok(Command::RenewAllSessions);
    new.observe(&log.state, new_start + 10);
    for t in [new_start, new_start + TTL - 1] {
        assert_eq!(
            new.expired(t),
            vec![],
            "nothing expires before a full TTL at {t}"
        );
    }
    assert!(new.deadline(s1) >= Some(new_start + TTL));

    // An expiry the old leader decided from the old renewal is refused after the renewal.
    let stale = old.expiry_commands(TTL);
    assert_eq!(stale.len(), 1);
    for command in stale {
        assert!(matches!(
            log.apply(command).outcome,
            Err(StoreError::StaleExpiry { .. })
        ));
    }
    assert!(log.state.exists("/brokers/ids/1"));

    // Without heartbeats, both expire once a full TTL has passed under the new leader,
    // and the expiries the tracker proposes apply.
    let at = new_start + 10 + TTL;
    assert_eq!(new.expired(at), vec![s1, s2]);
    for command in new.expiry_commands(at) {
        assert_eq!(log.apply(command).outcome, Ok(Reply::Done));
    }
    new.observe(&log.state, at);
    assert_eq!(new.expired(u64::MAX), vec![]);
    assert_eq!(log.state.children("/brokers/ids"), Some(vec![]));
}

#[test]
fn snapshots_round_trip_and_corrupt_ones_are_refused() {
    let mut log = Log::new();
    let _ = two_brokers(&mut log);
    let bytes = log.snapshot();
    let restored = MetadataState::from_snapshot(&bytes).expect("restores");
    assert_eq!(restored, log.state);
    assert!(MetadataState::from_snapshot(b"{not json").is_err());
    // A node whose parent is missing.
    let text = String::from_utf8(bytes).expect("JSON is UTF-8");
    let corrupt = text.replacen("\"/brokers\":", "\"/gone\":", 1);
    assert_ne!(corrupt, text);
    assert!(MetadataState::from_snapshot(corrupt.as_bytes()).is_err());
}

// ---- Determinism and snapshots, over random command sequences ----

const PATHS: &[&str] = &["/", "/a", "/a/b", "/a/c", "/a/b/d", "/b", "/b/x", "/ab"];

fn path() -> impl Strategy<Value = String> {
    proptest::sample::select(PATHS).prop_map(str::to_string)
}

fn session() -> impl Strategy<Value = SessionId> {
    (1u64..5).prop_map(SessionId)
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..3)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (path(), data(), proptest::option::of(session())).prop_map(|(path, data, s)| {
            Op::Create {
                path,
                data,
                ephemeral_session: s,
            }
        }),
        (path(), data(), proptest::option::of(0u64..3)).prop_map(|(path, data, v)| Op::Set {
            path,
            data,
            expected_version: v,
        }),
        (path(), proptest::option::of(0u64..3)).prop_map(|(path, v)| Op::Delete {
            path,
            expected_version: v,
        }),
        (path(), 0u64..3).prop_map(|(path, version)| Op::Check { path, version }),
    ]
}

fn op_command() -> impl Strategy<Value = Command> {
    op().prop_map(Command::Op)
}

/// Weighted so that sessions are usually live, parents usually exist and ephemeral nodes
/// get created, rather than most commands failing on a missing node or session.
fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        // A zero TTL is refused; the other values open sessions.
        3 => (0u64..4).prop_map(|ttl_ms| Command::OpenSession { ttl_ms }),
        2 => session().prop_map(|session| Command::Heartbeat { session }),
        1 => (session(), 0u64..40).prop_map(|(session, renewed_index)| {
            Command::ExpireSession {
                session,
                renewed_index,
            }
        }),
        1 => Just(Command::RenewAllSessions),
        1 => session().prop_map(|session| Command::CloseSession { session }),
        4 => op_command(),
        3 => proptest::sample::select(&["/a", "/b", "/a/b"][..]).prop_map(|path| {
            create(path, b"", None)
        }),
        3 => (proptest::sample::select(&["/a/c", "/a/b/d", "/b/x", "/ab"][..]), session())
            .prop_map(|(path, session)| create(path, b"e", Some(session))),
        3 => proptest::collection::vec(op(), 0..4).prop_map(Command::Multi),
    ]
}

/// A generated step: a literal command, or the expiry of a session at its current
/// renewal (which a random index almost never names), resolved against the state the
/// steps before it reach.
#[derive(Debug, Clone)]
enum Step {
    Command(Command),
    ExpireCurrent(SessionId),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        9 => command().prop_map(Step::Command),
        1 => session().prop_map(Step::ExpireCurrent),
    ]
}

/// The concrete commands of `steps`, applied from index 1.
fn resolve(steps: &[Step]) -> Vec<Command> {
    let mut state = MetadataState::new();
    let mut commands = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let command = match step {
            Step::Command(command) => command.clone(),
            Step::ExpireCurrent(session) => Command::ExpireSession {
                session: *session,
                renewed_index: state.session(*session).map_or(0, |s| s.renewed_index),
            },
        };
        let _ = state.apply(1 + i as u64, command.clone());
        commands.push(command);
    }
    commands
}

fn apply_all(
    state: &mut MetadataState,
    first_index: u64,
    commands: &[Command],
) -> Vec<CommandResult> {
    commands
        .iter()
        .enumerate()
        .map(|(i, c)| state.apply(first_index + i as u64, c.clone()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_same_commands_give_the_same_state(steps in proptest::collection::vec(step(), 0..40)) {
        let commands = resolve(&steps);
        let mut a = MetadataState::new();
        let mut b = MetadataState::new();
        let results_a = apply_all(&mut a, 1, &commands);
        let results_b = apply_all(&mut b, 1, &commands);
        prop_assert_eq!(results_a, results_b);
        prop_assert_eq!(a.to_snapshot().ok(), b.to_snapshot().ok());
        prop_assert_eq!(a.check_invariants(), Ok(()));
    }

    #[test]
    fn snapshot_restore_then_the_rest_equals_applying_all(
        steps in proptest::collection::vec(step(), 0..40),
        split in any::<proptest::sample::Index>(),
    ) {
        let commands = resolve(&steps);
        let split = split.index(commands.len() + 1);
        let mut whole = MetadataState::new();
        let all_results = apply_all(&mut whole, 1, &commands);

        let mut prefix = MetadataState::new();
        let mut results = apply_all(&mut prefix, 1, &commands[..split]);
        let bytes = prefix.to_snapshot().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut restored = MetadataState::from_snapshot(&bytes)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        results.extend(apply_all(&mut restored, 1 + split as u64, &commands[split..]));

        prop_assert_eq!(results, all_results);
        prop_assert_eq!(restored.to_snapshot().ok(), whole.to_snapshot().ok());
    }

    #[test]
    fn a_refused_command_changes_nothing(steps in proptest::collection::vec(step(), 0..40)) {
        let commands = resolve(&steps);
        let mut state = MetadataState::new();
        for (i, command) in commands.into_iter().enumerate() {
            let before = state.to_snapshot().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let result = state.apply(1 + i as u64, command);
            if result.outcome.is_err() {
                prop_assert!(result.changes.is_empty());
                prop_assert_eq!(state.to_snapshot().ok(), Some(before));
            }
            prop_assert_eq!(state.check_invariants(), Ok(()));
        }
    }
}
