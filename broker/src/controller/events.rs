//! The controller's event queue (Kafka 1.1's `ControllerEventManager`): everything the
//! controller reacts to becomes an [`Event`], and the event loop processes them one at a
//! time, so the controller's state has one writer and no locks.
//!
//! Change notifications (brokers, `/controller`, partition states) only say "look again":
//! a second one queued behind the first adds nothing, so they are coalesced. A session
//! expiry under the fixed behaviour clears the queue and goes first
//! ([`EventQueue::clear_and_put`], KAFKA-5642's `clearAndPut(Expire)`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::{oneshot, Notify};

use super::admin::{AdminError, AdminReply, AdminRequest};
use crate::metadata::SessionId;
use crate::quorum::session::ExpiryAck;
use crate::replica::metadata::TopicPartition;

/// Where an admin request's answer goes.
pub type AdminResponder = oneshot::Sender<Result<AdminReply, AdminError>>;

#[derive(Debug)]
pub enum Event {
    /// A session was opened: elect (after resigning, if this broker was controller on
    /// the old one).
    SessionOpened(SessionId),
    /// The session expired (fixed behaviour only): resign, then acknowledge so that the
    /// session client may open a new session.
    SessionExpired(SessionId, ExpiryAck),
    /// `/controller` changed, or an election must be retried.
    ControllerChange,
    /// `/brokers/ids` changed.
    BrokerChange,
    /// A partition state changed: see whether pending reassignments may finish.
    PartitionsChanged,
    Admin(AdminRequest, AdminResponder),
    /// The wait of reassignment number `.1` for its new replicas ran out.
    ReassignTimeout(TopicPartition, u64),
    /// Time for the auto leader rebalance check.
    AutoRebalance,
    /// Stop the loop (graceful shutdown).
    Shutdown,
}

impl Event {
    /// A notification that carries no data: one queued is as good as two.
    fn is_coalescable(&self) -> bool {
        matches!(
            self,
            Event::ControllerChange
                | Event::BrokerChange
                | Event::PartitionsChanged
                | Event::AutoRebalance
        )
    }

    fn same_kind(&self, other: &Event) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    /// Disposes of an event that will not be processed: an admin request is answered.
    pub fn drop_unprocessed(self) {
        if let Event::Admin(_, responder) = self {
            let _ = responder.send(Err(AdminError::ControllerMoved));
        }
    }
}

#[derive(Default)]
pub struct EventQueue {
    events: Mutex<VecDeque<Event>>,
    ready: Notify,
    /// Once closed (the control plane stopped), events are disposed of, not queued.
    closed: AtomicBool,
}

impl EventQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Event>> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends `event`, unless it is a notification already waiting in the queue.
    pub fn put(&self, event: Event) {
        if self.closed.load(Ordering::SeqCst) {
            event.drop_unprocessed();
            return;
        }
        {
            let mut events = self.lock();
            if event.is_coalescable() && events.iter().any(|queued| queued.same_kind(&event)) {
                return;
            }
            events.push_back(event);
        }
        self.ready.notify_one();
    }

    /// Drops every queued event and queues `event` alone; the dropped events are
    /// disposed of with [`Event::drop_unprocessed`].
    pub fn clear_and_put(&self, event: Event) {
        let dropped: Vec<Event> = {
            let mut events = self.lock();
            let dropped = events.drain(..).collect();
            events.push_back(event);
            dropped
        };
        self.ready.notify_one();
        if !dropped.is_empty() {
            tracing::info!(dropped = dropped.len(), "controller event queue cleared");
        }
        for event in dropped {
            event.drop_unprocessed();
        }
    }

    /// The next event, waiting for one.
    pub async fn next(&self) -> Event {
        loop {
            if let Some(event) = self.lock().pop_front() {
                return event;
            }
            // `notify_one` stores a permit when nobody waits, so a put between the pop
            // above and this wait is not missed.
            self.ready.notified().await;
        }
    }

    /// Stops queueing, disposing of what is queued.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let dropped: Vec<Event> = self.lock().drain(..).collect();
        for event in dropped {
            event.drop_unprocessed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::admin::ElectPreferred;

    #[tokio::test]
    async fn notifications_coalesce_and_clearing_answers_dropped_admin_requests() {
        let queue = EventQueue::default();
        queue.put(Event::BrokerChange);
        queue.put(Event::BrokerChange);
        queue.put(Event::ControllerChange);
        let (tx, rx) = oneshot::channel();
        queue.put(Event::Admin(
            AdminRequest::ElectPreferred(ElectPreferred::default()),
            tx,
        ));
        queue.put(Event::BrokerChange);
        assert_eq!(queue.lock().len(), 3);
        assert!(matches!(queue.next().await, Event::BrokerChange));
        queue.clear_and_put(Event::Shutdown);
        assert_eq!(rx.await.ok(), Some(Err(AdminError::ControllerMoved)));
        assert!(matches!(queue.next().await, Event::Shutdown));
        assert!(queue.lock().is_empty());
        let waiter = tokio::time::timeout(std::time::Duration::from_secs(5), queue.next());
        queue.put(Event::PartitionsChanged);
        assert!(matches!(waiter.await, Ok(Event::PartitionsChanged)));
        queue.close();
        let (tx, rx) = oneshot::channel();
        queue.put(Event::Admin(
            AdminRequest::ElectPreferred(ElectPreferred::default()),
            tx,
        ));
        assert_eq!(rx.await.ok(), Some(Err(AdminError::ControllerMoved)));
        assert!(queue.lock().is_empty());
    }
}
