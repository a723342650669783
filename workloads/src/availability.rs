//! The availability probe: after the final heal, can every partition take a write?

use std::time::{Duration, Instant};

use history::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::recorder::{Recorder, RecorderError};
use crate::{WorkloadError, WorkloadKind, WorkloadOptions};
use sut::{Acks, Connector};

/// How soon a partition accepted a write after the final heal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionAvailability {
    pub partition: u32,
    /// Seconds from the start of the probe to the first acknowledged write.
    pub first_write_secs: Option<f64>,
    pub last_error: Option<String>,
}

/// Why the probe could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    #[error("availability probe task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Attempts per partition a probe may make before its values would reach the next
/// round's (one every 200 ms: far more than any bound allows).
const ATTEMPTS_PER_ROUND: i64 = 1_000_000;

/// After the heal, an acks=all write to every partition, retried until one is
/// acknowledged or [`AVAILABILITY_BOUND`] passes; recorded like any other write (values
/// negative, so they never collide with the workers').
pub async fn probe_availability(
    connector: &dyn Connector,
    options: &WorkloadOptions,
    recorder: &Recorder,
    bound: Duration,
) -> Result<Vec<PartitionAvailability>, ProbeError> {
    probe_availability_round(connector, options, recorder, bound, 0).await
}

/// [`probe_availability`] as the `round`-th probe of a run (0 the first): each round's
/// values are its own, so a later probe never writes a value an earlier one wrote.
pub async fn probe_availability_round(
    connector: &dyn Connector,
    options: &WorkloadOptions,
    recorder: &Recorder,
    bound: Duration,
    round: u32,
) -> Result<Vec<PartitionAvailability>, ProbeError> {
    let first_attempt = i64::from(round) * ATTEMPTS_PER_ROUND;
    let target = connector.target();
    let mut tasks = tokio::task::JoinSet::new();
    for partition in 0..target.partitions {
        let mut client = connector.connect(options.request_timeout, partition as usize);
        let recorder = recorder.clone();
        let f = match options.workload {
            WorkloadKind::Log => "append",
            WorkloadKind::Register => "write",
        };
        let partitions = i64::from(target.partitions);
        tasks.spawn(async move {
            let start = Instant::now();
            let mut process = recorder.reserve_process();
            let key = client.target().key(partition);
            let mut last_error = None;
            let mut attempt: i64 = first_attempt;
            while start.elapsed() < bound {
                let value = -1 - (i64::from(partition) + attempt * partitions);
                attempt += 1;
                let node = client.route(partition).await;
                let node_name = client.target().nodes.get(node).cloned();
                let invocation = recorder.invoke(
                    process,
                    f,
                    json!({"key": key, "value": value}),
                    node_name.as_deref(),
                )?;
                match client
                    .produce(node, partition, &json!(value), Acks::All)
                    .await
                {
                    Ok(offset) => {
                        let mut done = json!({"key": key, "value": value});
                        if f == "append" {
                            done["offset"] = json!(offset);
                        }
                        recorder.complete(invocation, Outcome::Ok, done, None)?;
                        return Ok(PartitionAvailability {
                            partition,
                            first_write_secs: Some(start.elapsed().as_secs_f64()),
                            last_error: None,
                        });
                    }
                    Err(error) => {
                        let outcome = error.write_outcome();
                        recorder.complete(
                            invocation,
                            outcome,
                            json!({"key": key, "value": value}),
                            Some(error.code()),
                        )?;
                        if outcome == Outcome::Info {
                            process = recorder.reserve_process();
                        }
                        last_error = Some(error.code());
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            Ok::<_, ProbeError>(PartitionAvailability {
                partition,
                first_write_secs: None,
                last_error,
            })
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        results.push(joined??);
    }
    results.sort_by_key(|p| p.partition);
    Ok(results)
}
