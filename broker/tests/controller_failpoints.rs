//! Controller races forced with the `controller_before_state_write` failpoint (needs
//! `--features failpoints`; without it this file has no tests). The `fail` registry is
//! per process and every test here arms points for broker ids 1..=4, so they take
//! [`FAILPOINTS`] and run one at a time.
//!
//! The heart: KAFKA-3083 as kafka-replication.md §5.4's deterministic schedule, with the
//! stub replication listeners standing in for the brokers' replicas.
#![cfg(feature = "failpoints")]

mod controller_support;

use broker::controller::admin::CreateTopic;
use broker::controller::AdminRequest;
use broker::metadata::StoreError;
use broker::quorum::QuorumError;
use broker::replica::BrokerId;
use broker::server::failpoints;
use controller_support::{state, tp, wait_until, Cluster, WAIT};

static FAILPOINTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Arms `pause` on the controller's write gate of `broker`; disarmed on drop, so a
/// failing test does not leave the gate shut for the next.
struct Gate(String);

impl Gate {
    fn pause(broker: BrokerId) -> Gate {
        let name = format!("{}@{broker}", failpoints::CONTROLLER_BEFORE_STATE_WRITE);
        failpoints::arm(&name, "pause").expect("arm");
        Gate(name)
    }

    fn hits(&self) -> u64 {
        failpoints::hit_count(&self.0)
    }

    async fn wait_reached(&self, before: u64) {
        wait_until(WAIT, "the controller to reach the gate", || {
            let reached = self.hits() > before;
            async move { reached }
        })
        .await;
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        failpoints::disarm(&self.0);
    }
}

fn create(topic: &str, replicas: &[BrokerId]) -> AdminRequest {
    AdminRequest::CreateTopic(CreateTopic {
        topic: topic.into(),
        partitions: None,
        replication_factor: None,
        assignment: Some(vec![replicas.to_vec()]),
    })
}

/// kafka-replication.md §5.4, deterministic version. Brokers 1..=4, broker 1 the
/// controller, p0 with replicas [3,4,2] led by 3.
async fn kafka_3083(bug: bool) {
    let _serial = FAILPOINTS.lock().await;
    let top = if bug { "bugs = [\"KAFKA-3083\"]" } else { "" };
    let mut cluster = Cluster::new(4, top, "").await;
    cluster.start_broker(1);
    cluster.wait_for_controller(1, &[1]).await;
    for id in 2..=4 {
        cluster.start_broker(id);
    }
    let epoch = cluster.wait_for_controller(1, &[1, 2, 3, 4]).await;
    let p0 = tp("p", 0);
    cluster
        .admin(1, create("p", &[3, 4, 2]))
        .await
        .expect("create");
    cluster
        .wait_received(3, "leadership of p0", |r| {
            r.body.leader == 3 && r.rejected.is_none()
        })
        .await;
    let created = cluster.partition(&p0).expect("created");
    assert_eq!(
        created.state,
        state(Some(3), 0, &[3, 4, 2], epoch, &[3, 4, 2])
    );

    // 1. Broker 4 loses the quorum (not its leader): its session expires, and controller
    //    1 stops at the gate just before writing ISR {3,2}.
    let gate = Gate::pause(1);
    let before = gate.hits();
    cluster.link(4).cut();
    gate.wait_reached(before).await;
    assert_eq!(
        cluster.partition(&p0),
        Some(created.clone()),
        "nothing written yet"
    );

    // 2. Controller 1 loses the quorum past its TTL: another broker takes over with
    //    epoch + 1 and announces p0 (unchanged) with it.
    cluster.link(1).cut();
    let (successor, new_epoch) = cluster.wait_for_any_controller(&[2, 3]).await;
    assert_eq!(new_epoch, epoch + 1);
    cluster
        .wait_received(3, "p0 from the new controller", |r| {
            r.body.controller_epoch == new_epoch
        })
        .await;
    assert_eq!(cluster.host(3).partition(&p0).controller_epoch, new_epoch);
    assert_eq!(
        cluster.partition(&p0),
        Some(created.clone()),
        "no rewrite at failover"
    );
    // What the leader caches: the state version of the last request it accepted.
    let leader_version = cluster
        .host(3)
        .partition(&p0)
        .accepted
        .map(|accepted| accepted.version);
    assert_eq!(leader_version, Some(created.version));

    // 3. Broker 1 is back, and its controller goes past the gate.
    cluster.link(1).heal();
    drop(gate);
    let zombie = cluster.control_plane(1);
    if bug {
        // The zombie's write lands: ISR {3,2} with its old controller epoch and a new
        // leader epoch, at a version the leader does not know.
        let written = cluster
            .wait_partition(&p0, "ISR {3,2}", |s| s.state.isr == [3, 2])
            .await;
        assert_eq!(written.state, state(Some(3), 1, &[3, 2], epoch, &[3, 4, 2]));
        assert_eq!(written.version, created.version + 1);
        // Its LeaderAndIsr carries the old epoch: the leader rejects it.
        let refused = cluster
            .wait_received(3, "the zombie's LeaderAndIsr", |r| {
                r.body.controller_epoch == epoch && r.body.isr == [3, 2]
            })
            .await;
        assert_eq!(refused.rejected.as_deref(), Some("stale_controller_epoch"));
        assert_eq!(
            cluster
                .host(3)
                .partition(&p0)
                .accepted
                .map(|a| (a.isr, a.version)),
            Some((vec![3, 4, 2], created.version)),
            "the leader keeps ISR {{3,4,2}} at the old version"
        );
        // So the leader's own ISR write (shrinking the dead 4) fails, now and forever.
        let shrink = state(Some(3), 0, &[3, 2], epoch, &[3, 4, 2]);
        let refused = cluster.leader_write(&p0, &shrink, created.version).await;
        assert!(
            matches!(
                refused,
                Err(QuorumError::Store(StoreError::BadVersion { expected, actual, .. }))
                    if expected == created.version && actual == created.version + 1
            ),
            "{refused:?}"
        );
    } else {
        // The zombie is fenced: nothing is written, it resigns.
        wait_until(WAIT, "the old controller to resign", || {
            let status = zombie.status();
            async move {
                status.controller_epoch.is_none()
                    && status.resignations >= 1
                    && status.fenced_writes >= 1
            }
        })
        .await;
        assert_eq!(cluster.partition(&p0), Some(created.clone()));
        assert!(
            !cluster
                .host(3)
                .received()
                .iter()
                .any(|r| r.body.isr == [3, 2]),
            "no LeaderAndIsr with ISR {{3,2}} was sent"
        );
        // The leader's own ISR write, with the version it caches, goes through.
        let shrink = state(Some(3), 0, &[3, 2], epoch, &[3, 4, 2]);
        assert_eq!(
            cluster.leader_write(&p0, &shrink, created.version).await,
            Ok(created.version + 1)
        );
    }
    // Either way the zombie ends up a plain broker under the new controller.
    wait_until(WAIT, "the zombie to resign", || {
        let status = zombie.status();
        async move { status.controller_epoch.is_none() }
    })
    .await;
    assert_eq!(cluster.controller(), Some((successor, new_epoch)));
    cluster.wait_for_controller(successor, &[1, 2, 3]).await;
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_3083_on_a_deposed_controller_overwrites_the_partition_state() {
    kafka_3083(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_3083_off_a_deposed_controller_is_fenced_and_resigns() {
    kafka_3083(false).await;
}

/// The controller's write is conditional: the leader shrinks its ISR while the
/// controller is about to write; the controller's write fails on the version, and it
/// decides again from what the leader wrote instead of overwriting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_write_racing_a_leader_write_is_redone_on_the_new_state() {
    let _serial = FAILPOINTS.lock().await;
    let mut cluster = Cluster::new(4, "", "").await;
    cluster.start_broker(1);
    cluster.wait_for_controller(1, &[1]).await;
    for id in 2..=4 {
        cluster.start_broker(id);
    }
    let epoch = cluster.wait_for_controller(1, &[1, 2, 3, 4]).await;
    let p = tp("c", 0);
    cluster
        .admin(1, create("c", &[2, 3, 4]))
        .await
        .expect("create");
    let gate = Gate::pause(1);
    let before = gate.hits();
    cluster.kill(4);
    gate.wait_reached(before).await;
    // Meanwhile the leader 2 shrinks 3 out of the ISR.
    let leader_version = cluster
        .leader_write(&p, &state(Some(2), 0, &[2, 4], epoch, &[2, 3, 4]), 0)
        .await
        .expect("leader's write");
    assert_eq!(leader_version, 1);
    drop(gate);
    let done = cluster
        .wait_partition(&p, "without 4", |s| s.state.isr == [2])
        .await;
    assert_eq!(done.state, state(Some(2), 1, &[2], epoch, &[2, 3, 4]));
    assert_eq!(done.version, 2, "one conflict, then one write");
    cluster
        .wait_received(2, "the new state", |r| {
            r.body.version == 2 && r.body.isr == [2]
        })
        .await;
    cluster.stop();
}
