//! The `slow` package against fake clusters: what it arms on whom, what the history
//! says, how it is released (by its stop step and by the final heal), and a cluster
//! without failpoints, whose refusal becomes the operation's error.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nemesis::schedule::ScheduleOptions;
use nemesis::{
    Action, AdminAction, BoxFuture, ClusterControl, ControlError, Delay, Grudge, Journal,
    JournalError, Nemesis, NemesisOptions, PackageKind, Ports, Roles, Step, TargetSpec,
};
use serde_json::{json, Value};
use tokio::sync::watch;

fn nodes() -> Vec<String> {
    (1..=3).map(|i| format!("n{i}")).collect()
}

/// Every `ClusterControl` method but `failpoint`: nodes that all run, no roles held.
macro_rules! plain_control {
    () => {
        fn nodes(&self) -> Vec<String> {
            nodes()
        }

        fn roles(&self) -> BoxFuture<'_, Option<Roles>> {
            Box::pin(async { Some(Roles::unknown(&nodes())) })
        }

        fn kill<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
            Box::pin(async { Ok(Some(1)) })
        }

        fn start<'a>(&'a self, _: &'a str, _: bool) -> BoxFuture<'a, Result<u32, ControlError>> {
            Box::pin(async { Ok(2) })
        }

        fn pause<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
            Box::pin(async { Ok(Some(1)) })
        }

        fn resume<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
            Box::pin(async { Ok(Some(1)) })
        }

        fn cut<'a>(&'a self, _: &'a Grudge, _: Ports) -> BoxFuture<'a, Result<(), ControlError>> {
            Box::pin(async { Ok(()) })
        }

        fn uncut<'a>(&'a self, _: &'a Grudge, _: Ports) -> BoxFuture<'a, Result<(), ControlError>> {
            Box::pin(async { Ok(()) })
        }

        fn heal(&self) -> BoxFuture<'_, Result<(), ControlError>> {
            Box::pin(async { Ok(()) })
        }

        fn admin<'a>(&'a self, _: &'a AdminAction) -> BoxFuture<'a, Result<Value, ControlError>> {
            Box::pin(async { Ok(json!({})) })
        }
    };
}

/// A cluster whose brokers have failpoints: what is armed where, and every request.
#[derive(Default)]
struct WithFailpoints {
    armed: Mutex<BTreeMap<(String, String), String>>,
    requests: Mutex<u64>,
}

impl ClusterControl for WithFailpoints {
    plain_control!();

    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            *self.requests.lock().unwrap() += 1;
            let key = (node.to_string(), point.to_string());
            let mut armed = self.armed.lock().unwrap();
            match actions {
                Some(actions) => armed.insert(key, actions.to_string()),
                None => armed.remove(&key),
            };
            Ok(json!({"name": point}))
        })
    }
}

/// A cluster of brokers built without failpoints: `failpoint` is the trait's default.
struct WithoutFailpoints;

impl ClusterControl for WithoutFailpoints {
    plain_control!();
}

/// One recorded entry: invoke or complete, f, value, error.
type Entry = (&'static str, String, Value, Option<String>);

/// The history.
#[derive(Default)]
struct Recorded {
    ops: Mutex<Vec<Entry>>,
}

impl Journal for Recorded {
    fn invoke(&self, f: &str, value: Value) -> Result<u64, JournalError> {
        let mut ops = self.ops.lock().unwrap();
        ops.push(("invoke", f.to_string(), value, None));
        Ok(ops.len() as u64 - 1)
    }

    fn complete(
        &self,
        _token: u64,
        f: &str,
        value: Value,
        error: Option<String>,
    ) -> Result<(), JournalError> {
        let mut ops = self.ops.lock().unwrap();
        ops.push(("complete", f.to_string(), value, error));
        Ok(())
    }
}

impl Recorded {
    fn completions(&self, f: &str) -> Vec<(Value, Option<String>)> {
        let ops = self.ops.lock().unwrap();
        ops.iter()
            .filter(|(kind, op_f, _, _)| *kind == "complete" && op_f == f)
            .map(|(_, _, value, error)| (value.clone(), error.clone()))
            .collect()
    }
}

fn options(seed: u64) -> NemesisOptions {
    NemesisOptions {
        packages: vec![PackageKind::Slow],
        schedule: ScheduleOptions {
            seed,
            interval: Duration::from_millis(10),
            targets: TargetSpec::defaults(),
            wipe: false,
            unclean_elections: false,
            asks_divergence: true,
        },
        swarm: None,
    }
}

fn step(action: Action) -> Step {
    Step {
        package: PackageKind::Slow,
        index: 0,
        delay: Duration::ZERO,
        action,
        seed: 5,
    }
}

fn two_delays() -> Vec<Delay> {
    vec![
        Delay {
            point: "leader_fetch_response".into(),
            delay_ms: 1500,
            percent: 100,
        },
        Delay {
            point: "before_isr_write".into(),
            delay_ms: 250,
            percent: 25,
        },
    ]
}

#[tokio::test]
async fn a_slow_period_arms_its_delays_on_its_targets_and_its_stop_releases_them() {
    let cluster = Arc::new(WithFailpoints::default());
    let journal = Arc::new(Recorded::default());
    let nemesis = Nemesis::new(options(1), cluster.clone(), journal.clone());
    let target = TargetSpec::Nodes(vec!["n1".into(), "n3".into()]);
    let (done, error) = nemesis
        .execute_checked(&step(Action::Slow {
            target,
            delays: two_delays(),
        }))
        .await
        .unwrap();
    assert_eq!(error, None, "{done}");
    let expected: BTreeMap<(String, String), String> = [
        ("n1", "before_isr_write", "25%return(250)"),
        ("n1", "leader_fetch_response", "return(1500)"),
        ("n3", "before_isr_write", "25%return(250)"),
        ("n3", "leader_fetch_response", "return(1500)"),
    ]
    .into_iter()
    .map(|(n, p, a)| ((n.to_string(), p.to_string()), a.to_string()))
    .collect();
    assert_eq!(*cluster.armed.lock().unwrap(), expected);
    // The history says which node, which point, which delay.
    assert_eq!(done["package"], json!("slow"));
    assert_eq!(done["targets"], json!("n1+n3"));
    assert_eq!(done["nodes"], json!(["n1", "n3"]));
    assert_eq!(
        done["delays"],
        json!([
            {"point": "leader_fetch_response", "delay_ms": 1500, "percent": 100},
            {"point": "before_isr_write", "delay_ms": 250, "percent": 25},
        ])
    );
    let armed = done["armed"].as_array().unwrap();
    assert_eq!(armed.len(), 4);
    assert!(
        armed.contains(&json!({"node": "n3", "point": "before_isr_write",
        "delay_ms": 250, "percent": 25, "actions": "25%return(250)"}))
    );
    assert_eq!(nemesis.state().slowed.len(), 4);
    assert!(!nemesis.state().is_healed());

    let (stopped, error) = nemesis
        .execute_checked(&step(Action::StopSlow))
        .await
        .unwrap();
    assert_eq!(error, None);
    assert_eq!(stopped["released"].as_array().unwrap().len(), 4);
    assert!(cluster.armed.lock().unwrap().is_empty());
    assert!(nemesis.state().is_healed());
    let ops = journal.ops.lock().unwrap();
    let fs: Vec<(&str, &str)> = ops.iter().map(|(k, f, _, _)| (*k, f.as_str())).collect();
    assert_eq!(
        fs,
        [
            ("invoke", "start-slow"),
            ("complete", "start-slow"),
            ("invoke", "stop-slow"),
            ("complete", "stop-slow"),
        ]
    );
}

#[tokio::test]
async fn the_final_heal_releases_what_a_run_left_armed() {
    let cluster = Arc::new(WithFailpoints::default());
    let journal = Arc::new(Recorded::default());
    let nemesis = Nemesis::new(options(7), cluster.clone(), journal.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let running = tokio::spawn(async move {
        let summary = nemesis.run(stop_rx).await.unwrap();
        (nemesis, summary)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop_tx.send(true).unwrap();
    let (nemesis, summary) = running.await.unwrap();
    assert!(
        summary.by_f.get("start-slow").copied().unwrap_or(0) >= 2,
        "{summary:?}"
    );
    // Every period armed on its nodes, but those aimed at roles nobody holds here (the
    // fake's roles are unknown); stops released them.
    for (value, error) in journal.completions("start-slow") {
        if let Some(error) = error {
            assert!(error.starts_with("no-target"), "{error}");
            continue;
        }
        let nodes = value["nodes"].as_array().unwrap().len();
        let delays = value["delays"].as_array().unwrap().len();
        assert_eq!(value["armed"].as_array().unwrap().len(), nodes * delays);
    }
    // Force something armed at the end, whatever the run's last step was.
    nemesis
        .execute(&step(Action::Slow {
            target: TargetSpec::All,
            delays: two_delays(),
        }))
        .await
        .unwrap();
    let armed_at_the_end = cluster.armed.lock().unwrap().len();
    assert!(armed_at_the_end >= 6);
    let left = nemesis.heal_all().await.unwrap();
    assert!(left.is_healed(), "{left:?}");
    assert!(cluster.armed.lock().unwrap().is_empty());
    let finals = journal.completions("stop-slow");
    let (last, error) = finals.last().unwrap();
    assert_eq!(error, &None);
    assert_eq!(last["final"], json!(true));
    assert_eq!(last["released"].as_array().unwrap().len(), armed_at_the_end);
    // Healed: a second heal records nothing and sends nothing.
    let ops = journal.ops.lock().unwrap().len();
    let requests = *cluster.requests.lock().unwrap();
    assert!(nemesis.heal_all().await.unwrap().is_healed());
    assert_eq!(journal.ops.lock().unwrap().len(), ops);
    assert_eq!(*cluster.requests.lock().unwrap(), requests);
}

#[tokio::test]
async fn the_same_seed_arms_the_same_delays_on_the_same_nodes() {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let cluster = Arc::new(WithFailpoints::default());
        let journal = Arc::new(Recorded::default());
        let nemesis = Nemesis::new(options(99), cluster, journal.clone());
        let schedule = nemesis::schedule::Schedule::new(PackageKind::Slow, options(99).schedule);
        for step in schedule.take(12) {
            nemesis.execute(&step).await.unwrap();
        }
        let armed: Vec<Value> = journal
            .completions("start-slow")
            .into_iter()
            .map(|(value, _)| value["armed"].clone())
            .collect();
        assert_eq!(armed.len(), 6);
        runs.push(armed);
    }
    assert_eq!(runs[0], runs[1]);
}

#[tokio::test]
async fn a_cluster_without_failpoints_makes_the_period_an_error_not_a_crash() {
    let journal = Arc::new(Recorded::default());
    let nemesis = Nemesis::new(options(3), Arc::new(WithoutFailpoints), journal.clone());
    let (done, error) = nemesis
        .execute_checked(&step(Action::Slow {
            target: TargetSpec::One,
            delays: two_delays(),
        }))
        .await
        .unwrap();
    let error = error.expect("the period failed");
    assert!(error.contains("no failpoints"), "{error}");
    assert!(error.contains("leader_fetch_response"), "{error}");
    assert_eq!(done["armed"], json!([]));
    assert_eq!(done["errors"].as_object().unwrap().len(), 2, "{done}");
    // Never confirmed: one release attempt, then forgotten, so the heal ends.
    assert_eq!(nemesis.state().slowed.len(), 2);
    let left = nemesis.heal_all().await.unwrap();
    assert!(left.is_healed(), "{left:?}");
    let (value, error) = journal.completions("stop-slow").pop().unwrap();
    assert!(error.unwrap().contains("no failpoints"));
    assert_eq!(value["released"], json!([]));
    let nodes: BTreeSet<String> = nodes().into_iter().collect();
    assert!(nodes.contains(done["nodes"][0].as_str().unwrap()));
}

#[tokio::test]
async fn killed_nodes_are_skipped_and_released_after_their_restart() {
    let cluster = Arc::new(WithFailpoints::default());
    let journal = Arc::new(Recorded::default());
    let nemesis = Nemesis::new(options(4), cluster.clone(), journal.clone());
    let n2 = TargetSpec::Nodes(vec!["n2".into()]);
    let slow_all = step(Action::Slow {
        target: TargetSpec::All,
        delays: two_delays(),
    });
    nemesis.execute(&slow_all).await.unwrap();
    assert_eq!(nemesis.state().slowed.len(), 6);
    let kill = Step {
        package: PackageKind::Kill,
        ..step(Action::Kill {
            target: n2,
            wipe: false,
        })
    };
    nemesis.execute(&kill).await.unwrap();
    let (done, error) = nemesis.execute_checked(&slow_all).await.unwrap();
    assert_eq!(error, None);
    assert_eq!(done["nodes"], json!(["n1", "n3"]));
    assert_eq!(done["skipped_killed"], json!(["n2"]));
    assert_eq!(done["armed"].as_array().unwrap().len(), 4);
    // The heal starts n2 first, then releases every point (n2's too: harmless).
    assert!(nemesis.heal_all().await.unwrap().is_healed());
    assert!(cluster.armed.lock().unwrap().is_empty());
}
