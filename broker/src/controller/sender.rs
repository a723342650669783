//! LeaderAndIsr delivery (Kafka's `ControllerChannelManager`): one sender task per live
//! broker, each with its own FIFO queue, POSTing to the broker's replication listener
//! (`/v1/replication/leader-and-isr`, address from the configuration) with a request
//! timeout, and retrying while the broker is registered. A broker's answer, success or
//! error, is final: only silence (a connection error, a timeout, a 5xx) is retried.
//!
//! Each attempt first passes the failpoint `controller_leader_and_isr_send` (a delay
//! there is a slow controller-to-broker link; `return` an unanswered attempt).
//!
//! The controller stops a broker's sender when the broker dies, and every sender when it
//! resigns; queued requests are then dropped, as Kafka's channel manager drops them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::config::NodeConfig;
use crate::metadata::layout;
use crate::quorum::MetadataClient;
use crate::replica::BrokerId;
use crate::server::failpoints;
use crate::server::wire::LeaderAndIsrBody;

/// Bounds one HTTP exchange with a broker.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the controller's event loop waits for a batch of LeaderAndIsr deliveries
/// before it goes on (the senders keep trying): a healthy broker takes it in
/// milliseconds, and a broker cut off would otherwise hold every decision that concerns
/// it — and each admin request queued behind that decision — for a whole
/// [`REQUEST_TIMEOUT`]. A leader transfer in a cluster with one replica cut off was
/// answered only after 3 s, or after several times that when other decisions about that
/// replica were queued (Kafka's controller does not wait for the answers at all).
pub const FLUSH_WAIT: Duration = Duration::from_secs(1);
/// Pause between attempts at an unresponsive broker.
pub const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Accepted,
    /// The broker answered with an error code (`stale_controller_epoch`,
    /// `stale_leader_epoch`, `not_assigned`, ...).
    Rejected {
        code: String,
        message: String,
    },
    /// Not delivered: the broker is no longer registered, or it cannot be reached at all.
    Abandoned(String),
}

struct Outgoing {
    body: LeaderAndIsrBody,
    done: oneshot::Sender<Delivery>,
}

struct Sender {
    queue: mpsc::UnboundedSender<Outgoing>,
    task: JoinHandle<()>,
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The senders of one controller tenure; dropping it stops them all.
pub struct Senders {
    controller: BrokerId,
    metadata: MetadataClient,
    addresses: BTreeMap<BrokerId, SocketAddr>,
    /// Signs each LeaderAndIsr with the cluster secret, if any.
    signer: peer_auth::Signer,
    by_broker: BTreeMap<BrokerId, Sender>,
}

impl Senders {
    pub fn new(config: &NodeConfig, metadata: MetadataClient) -> Senders {
        Senders {
            controller: config.broker_id,
            metadata,
            addresses: config
                .brokers
                .iter()
                .map(|peer| (peer.id, peer.replication))
                .collect(),
            signer: crate::peer_gate::signer(config),
            by_broker: BTreeMap::new(),
        }
    }

    /// Starts (or restarts, dropping its queue) the sender to `broker`.
    pub fn start(&mut self, broker: BrokerId) {
        let (queue, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_sender(
            self.controller,
            broker,
            self.addresses.get(&broker).copied(),
            self.metadata.clone(),
            self.signer.clone(),
            rx,
        ));
        self.by_broker.insert(broker, Sender { queue, task });
    }

    pub fn stop(&mut self, broker: BrokerId) {
        self.by_broker.remove(&broker);
    }

    /// Queues `body` for `broker`; the receiver resolves with its delivery.
    pub fn send(
        &mut self,
        broker: BrokerId,
        body: LeaderAndIsrBody,
    ) -> oneshot::Receiver<Delivery> {
        let (done, rx) = oneshot::channel();
        if !self.by_broker.contains_key(&broker) {
            self.start(broker);
        }
        let outgoing = Outgoing { body, done };
        if let Some(sender) = self.by_broker.get(&broker) {
            if let Err(mpsc::error::SendError(outgoing)) = sender.queue.send(outgoing) {
                let _ = outgoing
                    .done
                    .send(Delivery::Abandoned("the sender stopped".into()));
            }
        }
        rx
    }
}

async fn run_sender(
    controller: BrokerId,
    broker: BrokerId,
    address: Option<SocketAddr>,
    metadata: MetadataClient,
    signer: peer_auth::Signer,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .pool_idle_timeout(crate::server::CLIENT_POOL_IDLE)
        .build();
    let setup = match (address, client) {
        (Some(address), Ok(client)) => Ok((
            format!("http://{address}/v1/replication/leader-and-isr"),
            client,
        )),
        (None, _) => Err(format!(
            "broker {broker} is not among the configured brokers"
        )),
        (_, Err(error)) => Err(format!("cannot build an HTTP client: {error}")),
    };
    let path = layout::broker_path(broker);
    let registered = || metadata.read_local(|state, _| state.exists(&path));
    while let Some(outgoing) = queue.recv().await {
        let delivery = match &setup {
            Err(reason) => Delivery::Abandoned(reason.clone()),
            Ok((url, client)) => loop {
                let attempt =
                    match failpoints::hit(failpoints::CONTROLLER_LEADER_AND_ISR_SEND, controller)
                        .await
                    {
                        Ok(()) => post(client, &signer, url, &outgoing.body).await,
                        Err(failpoints::Triggered) => Err(format!(
                            "failpoint {} dropped the attempt",
                            failpoints::CONTROLLER_LEADER_AND_ISR_SEND
                        )),
                    };
                match attempt {
                    Ok(delivery) => break delivery,
                    Err(reason) if registered() => {
                        tracing::debug!(controller, broker, %reason, "LeaderAndIsr unanswered; retrying");
                        tokio::time::sleep(RETRY_BACKOFF).await;
                    }
                    Err(reason) => {
                        break Delivery::Abandoned(format!(
                            "{reason}; broker {broker} is no longer registered"
                        ))
                    }
                }
            },
        };
        let body = &outgoing.body;
        tracing::debug!(
            controller, broker, topic = %body.topic, partition = body.partition,
            controller_epoch = body.controller_epoch, leader_epoch = body.leader_epoch,
            outcome = ?delivery, "LeaderAndIsr delivered"
        );
        let _ = outgoing.done.send(delivery);
    }
}

/// One attempt: `Ok` with the broker's answer, `Err` with why there was none.
async fn post(
    client: &reqwest::Client,
    signer: &peer_auth::Signer,
    url: &str,
    body: &LeaderAndIsrBody,
) -> Result<Delivery, String> {
    let response = signer
        .send(client, client.post(url).json(body))
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    if status.is_success() {
        return Ok(Delivery::Accepted);
    }
    if status.is_server_error() {
        return Err(format!("answered {status}"));
    }
    let text = response.text().await.map_err(|e| e.to_string())?;
    let (code, message) = match serde_json::from_str::<crate::server::wire::ErrorBody>(&text) {
        Ok(error) => (error.error, error.message),
        Err(_) => (status.as_u16().to_string(), text),
    };
    Ok(Delivery::Rejected { code, message })
}

/// Waits until each request is delivered, rejected or abandoned, or until `bound` has
/// passed: the event loop does not wait on a slow broker for longer (its sender keeps
/// trying). `None` for a request still in flight.
pub async fn await_deliveries<K>(
    pending: Vec<(K, oneshot::Receiver<Delivery>)>,
    bound: Duration,
) -> Vec<(K, Option<Delivery>)> {
    let deadline = tokio::time::Instant::now() + bound;
    let mut outcomes = Vec::with_capacity(pending.len());
    for (key, rx) in pending {
        let outcome = match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(delivery)) => Some(delivery),
            Ok(Err(_)) => Some(Delivery::Abandoned("the sender stopped".into())),
            Err(_) => None,
        };
        outcomes.push((key, outcome));
    }
    outcomes
}
