//! The control plane in-process: several [`ControlPlane`]s on one `LocalQuorum`, with
//! stub replication listeners recording the LeaderAndIsr requests the controller sends
//! (see `controller_support`). Election and failover, broker death and startup, unclean
//! election on and off, the admin operations and their HTTP API.
//!
//! [`ControlPlane`]: broker::controller::ControlPlane

mod controller_support;

use broker::controller::admin::{
    CreateTopic, ElectPreferred, ElectionResult, PartitionInfo, Reassign, TransferLeader,
};
use broker::controller::{AdminError, AdminReply, AdminRequest};
use broker::metadata::layout;
use broker::replica::BrokerId;
use controller_support::{state, tp, wait_until, Cluster, WAIT};
use serde_json::json;

fn create(topic: &str, assignment: &[&[BrokerId]]) -> AdminRequest {
    AdminRequest::CreateTopic(CreateTopic {
        topic: topic.into(),
        partitions: None,
        replication_factor: None,
        assignment: Some(assignment.iter().map(|r| r.to_vec()).collect()),
    })
}

/// The brokers of `1..=n` other than `except`, in order.
fn others(n: BrokerId, except: &[BrokerId]) -> Vec<BrokerId> {
    (1..=n).filter(|id| !except.contains(id)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_controller_is_elected_and_the_epoch_is_incremented() {
    let cluster = Cluster::start(3, "", "").await;
    let (controller, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    assert_eq!(epoch, 1);
    assert_eq!(
        cluster.controller_epoch_version(),
        Some(0),
        "/controller_epoch was created once, never set"
    );
    for id in 1..=3 {
        let status = cluster.control_plane(id).status();
        if id == controller {
            assert_eq!(
                (status.controller_epoch, status.elections_won),
                (Some(1), 1)
            );
        } else {
            assert_eq!((status.controller_epoch, status.elections_won), (None, 0));
        }
    }
    for id in 1..=3 {
        let (status, body) = cluster.get(id, "/v1/metadata").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["controller"], json!({"id": controller, "epoch": 1}));
        let brokers: Vec<_> = body["brokers"]
            .as_array()
            .expect("brokers")
            .iter()
            .map(|b| b["id"].clone())
            .collect();
        assert_eq!(brokers, vec![json!(1), json!(2), json!(3)]);
        assert_eq!(body["topics"], json!([]));
    }
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_controller_is_replaced_and_its_successor_announces_every_partition() {
    let mut cluster = Cluster::start(3, "", "").await;
    let (first, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    cluster
        .admin(first, create("t", &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]))
        .await
        .expect("create");
    for id in 1..=3 {
        for p in 0..3 {
            cluster
                .wait_received(id, "the initial LeaderAndIsr", |r| {
                    r.body.partition == p
                        && r.body.controller_epoch == epoch
                        && r.rejected.is_none()
                })
                .await;
        }
    }
    let before: Vec<_> = (0..3)
        .map(|p| cluster.partition(&tp("t", p)).expect("created"))
        .collect();
    cluster.kill(first);
    let survivors = others(3, &[first]);
    let (second, new_epoch) = cluster.wait_for_any_controller(&survivors).await;
    assert_ne!(second, first);
    assert_eq!(new_epoch, epoch + 1);
    for &id in &survivors {
        for p in 0..3 {
            cluster
                .wait_received(id, "LeaderAndIsr from the new controller", |r| {
                    r.body.partition == p && r.body.controller_epoch == new_epoch
                })
                .await;
        }
    }
    for (p, before) in before.iter().enumerate() {
        let now = cluster.partition(&tp("t", p as u32)).expect("exists");
        if before.state.leader == Some(first) {
            // The dead broker led it: the new controller elects a leader at failover.
            let expected_isr: Vec<_> = before
                .state
                .isr
                .iter()
                .copied()
                .filter(|id| *id != first)
                .collect();
            assert_eq!(
                now.state,
                state(
                    expected_isr.first().copied(),
                    before.state.leader_epoch + 1,
                    &expected_isr,
                    new_epoch,
                    &before.state.replicas
                )
            );
            assert_eq!(now.version, before.version + 1);
        } else {
            // Not rewritten, and the dead broker is still in the ISR (as in Kafka).
            assert_eq!(&now, before, "partition {p} was rewritten at failover");
            assert!(now.state.isr.contains(&first));
        }
    }
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_shut_down_gracefully_leaves_at_once() {
    let mut cluster = Cluster::start(3, "", "").await;
    let (first, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let control_plane = cluster.control_plane(first);
    cluster.shutdown(first).await;
    // Its session was closed: no waiting for the TTL.
    assert!(
        cluster.controller().is_none_or(|(id, _)| id != first),
        "/controller went with the session"
    );
    assert!(!cluster.registered().contains(&first));
    let status = control_plane.status();
    assert_eq!((status.controller_epoch, status.resignations), (None, 1));
    assert_eq!(
        control_plane
            .admin(AdminRequest::ElectPreferred(ElectPreferred::default()))
            .await
            .err()
            .map(|e| e.code()),
        Some("not_controller")
    );
    let (second, new_epoch) = cluster.wait_for_any_controller(&others(3, &[first])).await;
    assert_eq!((second == first, new_epoch), (false, epoch + 1));
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_cut_from_the_quorum_is_replaced_and_resigns() {
    let cluster = Cluster::start(3, "", "").await;
    let (first, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    cluster.link(first).cut();
    let (second, new_epoch) = cluster.wait_for_any_controller(&others(3, &[first])).await;
    assert_eq!((new_epoch, second == first), (epoch + 1, false));
    cluster.link(first).heal();
    let old = cluster.control_plane(first);
    wait_until(WAIT, "the old controller to resign", || {
        let status = old.status();
        async move { status.controller_epoch.is_none() && status.resignations == 1 }
    })
    .await;
    // It registers again on a new session, and the new controller sees it come back.
    cluster.wait_for_controller(second, &[1, 2, 3]).await;
    assert_eq!(cluster.controller(), Some((second, new_epoch)));
    assert_eq!(old.status().elections_won, 1, "it never won again");
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_replaced_from_the_isr_and_restarted_brokers_are_told_their_partitions() {
    let mut cluster = Cluster::start(4, "", "").await;
    let (controller, epoch) = cluster.wait_for_any_controller(&[1, 2, 3, 4]).await;
    let [a, b, d] = <[BrokerId; 3]>::try_from(others(4, &[controller])).expect("three");
    let p = tp("d", 0);
    cluster
        .admin(controller, create("d", &[&[a, b, d]]))
        .await
        .expect("create");
    cluster
        .wait_received(a, "the partition", |r| r.rejected.is_none())
        .await;

    // The leader dies: the next ISR member in assignment order leads, the ISR shrinks.
    cluster.kill(a);
    let written = cluster
        .wait_partition(&p, "led by b", |s| s.state.leader == Some(b))
        .await;
    assert_eq!(written.state, state(Some(b), 1, &[b, d], epoch, &[a, b, d]));
    assert_eq!(written.version, 1);
    for id in [b, d] {
        let received = cluster
            .wait_received(id, "the new leader", |r| r.body.leader_epoch == 1)
            .await;
        assert_eq!(received.rejected, None);
        assert_eq!(
            (
                received.body.controller_epoch,
                received.body.leader,
                received.body.isr.clone(),
                received.body.version,
                received.body.replicas.clone()
            ),
            (epoch, b, vec![b, d], 1, vec![a, b, d])
        );
    }
    assert!(
        !cluster
            .host(a)
            .received()
            .iter()
            .any(|r| r.body.leader_epoch == 1),
        "nothing is sent to a dead broker"
    );

    // A follower dies: it only leaves the ISR.
    cluster.kill(d);
    let written = cluster
        .wait_partition(&p, "without d", |s| s.state.isr == [b])
        .await;
    assert_eq!(
        (
            written.state.leader,
            written.state.leader_epoch,
            written.version
        ),
        (Some(b), 2, 2)
    );

    // A restarted broker is sent the state of the partitions it hosts.
    cluster.start_broker(d);
    let received = cluster
        .wait_received(d, "the current state", |r| r.body.leader_epoch == 2)
        .await;
    assert_eq!(
        (
            received.body.leader,
            received.body.isr,
            received.body.version
        ),
        (b, vec![b], 2)
    );
    assert_eq!(
        cluster.partition(&p).map(|s| s.version),
        Some(2),
        "a start changes no led partition"
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_unclean_election_the_last_isr_member_stays_and_the_partition_waits_for_it() {
    let mut cluster = Cluster::start(3, "", "").await;
    let (controller, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let [a, b] = <[BrokerId; 2]>::try_from(others(3, &[controller])).expect("two");
    let p = tp("u", 0);
    cluster
        .admin(controller, create("u", &[&[a, b]]))
        .await
        .expect("create");
    cluster.kill(b);
    cluster
        .wait_partition(&p, "ISR {a}", |s| s.state.isr == [a])
        .await;
    cluster.kill(a);
    let offline = cluster
        .wait_partition(&p, "offline", |s| s.state.leader.is_none())
        .await;
    assert_eq!(offline.state, state(None, 2, &[a], epoch, &[a, b]));
    assert_eq!(offline.version, 2);

    // The out-of-sync replica returns: it may not lead.
    cluster.start_broker(b);
    let mut live = vec![b, controller];
    live.sort_unstable();
    cluster.wait_for_controller(controller, &live).await;
    assert_eq!(cluster.partition(&p), Some(offline));
    assert!(
        !cluster
            .host(b)
            .received()
            .iter()
            .any(|r| r.body.leader == b),
        "b was never made leader"
    );

    // The last ISR member returns: it leads again, with a new epoch.
    cluster.start_broker(a);
    let back = cluster
        .wait_partition(&p, "led by a", |s| s.state.leader == Some(a))
        .await;
    assert_eq!(back.state, state(Some(a), 3, &[a], epoch, &[a, b]));
    let received = cluster
        .wait_received(a, "its leadership", |r| r.body.leader_epoch == 3)
        .await;
    assert_eq!((received.body.leader, received.rejected), (a, None));
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_unclean_election_a_live_out_of_sync_replica_leads() {
    let mut cluster = Cluster::start(3, "unclean_leader_election = true", "").await;
    let (controller, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let [a, b] = <[BrokerId; 2]>::try_from(others(3, &[controller])).expect("two");
    let p = tp("x", 0);
    cluster
        .admin(controller, create("x", &[&[a, b]]))
        .await
        .expect("create");
    // The leader shrinks b out of the ISR, as it would when b lags.
    let version = cluster
        .leader_write(&p, &state(Some(a), 0, &[a], epoch, &[a, b]), 0)
        .await
        .expect("leader's ISR write");
    assert_eq!(version, 1);
    cluster.kill(a);
    let elected = cluster
        .wait_partition(&p, "led by b", |s| s.state.leader == Some(b))
        .await;
    assert_eq!(elected.state, state(Some(b), 1, &[b], epoch, &[a, b]));
    assert_eq!(elected.version, 2);
    let received = cluster
        .wait_received(b, "its leadership", |r| r.body.leader == b)
        .await;
    assert_eq!(
        (
            received.body.leader_epoch,
            received.body.isr,
            received.rejected
        ),
        (1, vec![b], None)
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restarted_within_its_ttl_registers_once_its_old_session_ends() {
    let mut cluster = Cluster::start(3, "", "").await;
    let (controller, _) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let restarted = others(3, &[controller])[0];
    cluster.kill(restarted);
    cluster.start_broker(restarted);
    let control_plane = cluster.control_plane(restarted);
    let path = layout::broker_path(restarted);
    wait_until(WAIT, "the registration on the new session", || {
        let session = control_plane.session();
        let owner = cluster.read(|s| s.stat(&path).and_then(|stat| stat.ephemeral_owner));
        async move { session.is_some() && owner == session }
    })
    .await;
    cluster.wait_for_controller(controller, &[1, 2, 3]).await;
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_round_robin_through_any_broker_and_requests_are_validated() {
    let cluster = Cluster::start(3, "", "").await;
    let (controller, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let follower = others(3, &[controller])[0];
    let (status, body) = cluster
        .post(
            follower,
            "/v1/topics",
            json!({"topic": "rr", "partitions": 3, "replication_factor": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let expected = [[1, 2], [2, 3], [3, 1]];
    for (p, replicas) in expected.iter().enumerate() {
        assert_eq!(
            body["partitions"][p],
            json!({"partition": p, "replicas": replicas, "leader": replicas[0], "leader_epoch": 0,
                "isr": replicas, "controller_epoch": epoch, "version": 0})
        );
        for &id in replicas {
            cluster
                .wait_received(id, "the new partition", |r| {
                    r.body.topic == "rr" && r.body.partition == p as u32 && r.rejected.is_none()
                })
                .await;
        }
    }
    let refused = [
        (
            json!({"topic": "rr", "partitions": 1, "replication_factor": 1}),
            409,
            "topic_exists",
        ),
        (
            json!({"topic": "big", "partitions": 1, "replication_factor": 4}),
            400,
            "invalid_replication_factor",
        ),
        (
            json!({"topic": "a b", "partitions": 1, "replication_factor": 1}),
            400,
            "bad_request",
        ),
        (
            json!({"topic": "e", "assignment": [[1, 9]]}),
            400,
            "invalid_replica_assignment",
        ),
        (
            json!({"topic": "e", "assignment": [[1, 1]]}),
            400,
            "invalid_replica_assignment",
        ),
        (json!({"topic": "e", "partitions": 1}), 400, "bad_request"),
        (
            json!({"topic": "e", "partitions": "many"}),
            400,
            "bad_request",
        ),
    ];
    for (request, code, error) in refused {
        for id in [controller, follower] {
            let (status, body) = cluster.post(id, "/v1/topics", request.clone()).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (code, Some(error)),
                "{request} on {id}: {body}"
            );
        }
    }
    // An explicit assignment with a dead broker: it is left out of the ISR.
    let (status, body) = cluster
        .post(
            follower,
            "/v1/topics",
            json!({"topic": "ex", "assignment": [[3, 2]]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["partitions"][0]["leader"], json!(3));

    // The metadata, linearizable by default, local on request.
    let (status, body) = cluster.get(follower, "/v1/metadata").await;
    assert_eq!(status, 200);
    let topics: Vec<_> = body["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .map(|t| t["topic"].clone())
        .collect();
    assert_eq!(topics, vec![json!("ex"), json!("rr")]);
    assert_eq!(
        body["topics"][1]["partitions"][2]["replicas"],
        json!([3, 1])
    );
    cluster.link(follower).cut();
    let (status, body) = cluster.get(follower, "/v1/metadata").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("metadata_unavailable"))
    );
    let (status, body) = cluster
        .get(follower, "/v1/metadata?consistency=local")
        .await;
    assert_eq!(
        (status, body["controller"]["id"].as_u64()),
        (200, Some(u64::from(controller)))
    );
    let (status, _) = cluster
        .get(follower, "/v1/metadata?consistency=eventual")
        .await;
    assert_eq!(status, 400);
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_transferred_to_isr_members_and_elected_back_to_the_preferred_replica() {
    let cluster = Cluster::start(3, "", "").await;
    let (controller, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let follower = others(3, &[controller])[0];
    let p = tp("pl", 0);
    cluster
        .admin(controller, create("pl", &[&[1, 2, 3]]))
        .await
        .expect("create");
    let (status, body) = cluster
        .post(
            follower,
            "/v1/admin/transfer-leader",
            json!({"topic": "pl", "partition": 0, "leader": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"topic": "pl", "partition": 0, "replicas": [1, 2, 3], "leader": 2, "leader_epoch": 1,
            "isr": [1, 2, 3], "controller_epoch": epoch, "version": 1})
    );
    cluster
        .wait_received(2, "its leadership", |r| {
            r.body.leader == 2 && r.body.leader_epoch == 1
        })
        .await;

    // The leader shrinks 3 out of the ISR; 3 may not lead, a non-replica neither.
    cluster
        .leader_write(&p, &state(Some(2), 1, &[2, 1], epoch, &[1, 2, 3]), 1)
        .await
        .expect("leader's ISR write");
    for (leader, code) in [(3, "not_in_isr"), (4, "not_a_replica")] {
        let (status, body) = cluster
            .post(
                follower,
                "/v1/admin/transfer-leader",
                json!({"topic": "pl", "partition": 0, "leader": leader}),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some(code)),
            "{body}"
        );
    }
    let (status, body) = cluster
        .post(
            follower,
            "/v1/admin/transfer-leader",
            json!({"topic": "pl", "partition": 7, "leader": 1}),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_topic_or_partition"))
    );

    // Preferred election moves it back to 1, then has nothing to do.
    let reply = cluster
        .admin(
            follower,
            AdminRequest::ElectPreferred(ElectPreferred::default()),
        )
        .await;
    assert_eq!(
        reply,
        Err(AdminError::NotController {
            controller: Some(controller)
        })
    );
    let (status, body) = cluster
        .post(follower, "/v1/admin/elect-preferred", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["partitions"],
        json!([{"topic": "pl", "partition": 0, "result": "elected", "leader": 1, "leader_epoch": 2}])
    );
    let stored = cluster.partition(&p).expect("exists");
    assert_eq!(stored.state, state(Some(1), 2, &[2, 1], epoch, &[1, 2, 3]));
    assert_eq!(stored.version, 3);
    let reply = cluster
        .admin(
            controller,
            AdminRequest::ElectPreferred(ElectPreferred {
                topic: Some("pl".into()),
                partition: Some(0),
            }),
        )
        .await;
    match reply {
        Ok(AdminReply::Elected(report)) => {
            assert_eq!(
                report.partitions[0].result,
                ElectionResult::AlreadyPreferred
            )
        }
        other => panic!("{other:?}"),
    }
    let (status, body) = cluster
        .post(
            follower,
            "/v1/admin/elect-preferred",
            json!({"topic": "nope"}),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_topic_or_partition"))
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_election_reports_an_unavailable_preferred_replica() {
    let mut cluster = Cluster::start(3, "", "").await;
    let (controller, _) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let [a, b] = <[BrokerId; 2]>::try_from(others(3, &[controller])).expect("two");
    cluster
        .admin(controller, create("pn", &[&[a, b]]))
        .await
        .expect("create");
    cluster.kill(a);
    cluster
        .wait_partition(&tp("pn", 0), "led by b", |s| s.state.leader == Some(b))
        .await;
    let reply = cluster
        .admin(
            controller,
            AdminRequest::ElectPreferred(ElectPreferred::default()),
        )
        .await;
    match reply {
        Ok(AdminReply::Elected(report)) => {
            assert_eq!(report.partitions.len(), 1);
            let outcome = &report.partitions[0];
            assert_eq!(
                (outcome.result, outcome.leader),
                (ElectionResult::PreferredNotAvailable, Some(b))
            );
            assert!(outcome.message.is_some());
        }
        other => panic!("{other:?}"),
    }
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reassignment_waits_for_its_new_replicas_then_shrinks_to_them() {
    let cluster = Cluster::start(3, "", "").await;
    let (controller, epoch) = cluster.wait_for_any_controller(&[1, 2, 3]).await;
    let p = tp("r", 0);
    cluster
        .admin(controller, create("r", &[&[1, 2]]))
        .await
        .expect("create");
    let request = |replicas: Vec<BrokerId>, timeout_ms: Option<u64>| {
        AdminRequest::Reassign(Reassign {
            topic: "r".into(),
            partition: 0,
            replicas,
            timeout_ms,
        })
    };
    let control_plane = cluster.control_plane(controller);
    let pending = {
        let control_plane = control_plane.clone();
        let request = request(vec![2, 3], None);
        tokio::spawn(async move { control_plane.admin(request).await })
    };
    // Steps 1-2: the assignment becomes the union, announced to old and new replicas.
    let union = cluster
        .wait_partition(&p, "the union assignment", |s| {
            s.state.replicas == [2, 3, 1]
        })
        .await;
    assert_eq!(union.state, state(Some(1), 1, &[1, 2], epoch, &[2, 3, 1]));
    for id in [1, 2, 3] {
        cluster
            .wait_received(id, "the union", |r| r.body.replicas == [2, 3, 1])
            .await;
    }
    assert_eq!(
        cluster.admin(controller, request(vec![3, 1], None)).await,
        Err(AdminError::ReassignmentInProgress {
            topic: "r".into(),
            partition: 0
        })
    );
    assert!(!pending.is_finished(), "3 has not joined the ISR yet");

    // The leader takes 3 into the ISR: the reassignment completes.
    cluster
        .leader_write(
            &p,
            &state(Some(1), 1, &[1, 2, 3], epoch, &[2, 3, 1]),
            union.version,
        )
        .await
        .expect("leader's ISR write");
    let reply = tokio::time::timeout(WAIT, pending)
        .await
        .expect("completes")
        .expect("task");
    let done = cluster.partition(&p).expect("exists");
    assert_eq!(done.state, state(Some(2), 2, &[2, 3], epoch, &[2, 3]));
    assert_eq!(
        reply,
        Ok(AdminReply::Partition(PartitionInfo::new(
            &p,
            &done.state,
            done.version
        )))
    );
    // The removed replica hears of it too, and answers that it is not assigned.
    let removed = cluster
        .wait_received(1, "the final assignment", |r| r.body.replicas == [2, 3])
        .await;
    assert_eq!(removed.rejected.as_deref(), Some("not_assigned"));
    cluster
        .wait_received(2, "its leadership", |r| {
            r.body.leader == 2 && r.body.leader_epoch == 2
        })
        .await;

    // A new replica that never catches up: the wait times out, the union stays.
    let (status, body) = cluster
        .post(
            controller,
            "/v1/admin/reassign",
            json!({"topic": "r", "partition": 0, "replicas": [3, 1], "timeout_ms": 300}),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (504, Some("timeout")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap_or_default().contains("[1]"),
        "{body}"
    );
    let stuck = cluster.partition(&p).expect("exists");
    assert_eq!(stuck.state.replicas, [3, 1, 2]);
    assert_eq!(stuck.state.leader, Some(2));
    let (status, body) = cluster
        .post(
            controller,
            "/v1/admin/reassign",
            json!({"topic": "r", "partition": 0, "replicas": [3, 3]}),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_replica_assignment"))
    );
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_rebalance_moves_leadership_back_to_preferred_replicas() {
    let cluster = Cluster::start(
        2,
        "",
        "[controller]\nauto_leader_rebalance = true\nleader_imbalance_check_interval_ms = 200",
    )
    .await;
    let (controller, _) = cluster.wait_for_any_controller(&[1, 2]).await;
    let p = tp("ab", 0);
    cluster
        .admin(controller, create("ab", &[&[1, 2]]))
        .await
        .expect("create");
    let moved = cluster
        .admin(
            controller,
            AdminRequest::TransferLeader(TransferLeader {
                topic: "ab".into(),
                partition: 0,
                leader: 2,
            }),
        )
        .await;
    assert!(
        matches!(moved, Ok(AdminReply::Partition(ref info)) if info.state.leader == Some(2)),
        "{moved:?}"
    );
    let back = cluster
        .wait_partition(&p, "led by its preferred replica again", |s| {
            s.state.leader == Some(1)
        })
        .await;
    assert_eq!(back.state.leader_epoch, 2);
    cluster.stop();
}
