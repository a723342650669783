//! An in-memory metadata quorum for in-process tests: one [`AppliedState`] shared by every
//! broker of the process, always available unless a broker's link is cut, with sessions
//! expired by the same [`super::reaper`] the Raft leader runs.
//!
//! A cut link ([`LocalLink::cut`]) makes that broker's proposals and linearizable reads
//! fail as if it were partitioned from the quorum; its local reads still see the shared
//! state (a real partitioned node would see a stale one).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::applied::AppliedState;
use super::{reaper, Backend, BoxFuture, MetadataClient, QuorumError};
use crate::metadata::{Command, LogIndex, Reply};
use crate::replica::BrokerId;

/// The shared store. Drop it to stop its session reaper.
pub struct LocalQuorum {
    applied: Arc<AppliedState>,
    /// Serializes proposals so that indices are assigned in apply order.
    propose_lock: Mutex<()>,
    reaper: Mutex<Option<JoinHandle<()>>>,
    _leadership: watch::Sender<Option<u64>>,
}

/// A broker's connection to the [`LocalQuorum`], which a test can cut and heal.
#[derive(Clone)]
pub struct LocalLink {
    cut: Arc<AtomicBool>,
}

impl LocalLink {
    /// From now on the broker cannot reach the quorum.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

struct LocalBackend {
    quorum: Arc<LocalQuorum>,
    link: LocalLink,
}

impl LocalQuorum {
    /// Starts the store and its reaper on the current tokio runtime.
    pub fn start() -> Arc<LocalQuorum> {
        let (leadership, leadership_rx) = watch::channel(Some(1));
        let quorum = Arc::new(LocalQuorum {
            applied: Arc::new(AppliedState::default()),
            propose_lock: Mutex::new(()),
            reaper: Mutex::new(None),
            _leadership: leadership,
        });
        // The reaper proposes through its own, never-cut link.
        let (client, _) = quorum.client();
        let handle = tokio::spawn(reaper::run(client, leadership_rx));
        *quorum
            .reaper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(handle);
        quorum
    }

    /// A new client with its own link.
    pub fn client(self: &Arc<Self>) -> (MetadataClient, LocalLink) {
        let link = LocalLink {
            cut: Arc::new(AtomicBool::new(false)),
        };
        let backend = LocalBackend {
            quorum: self.clone(),
            link: link.clone(),
        };
        (
            MetadataClient::new(Arc::new(backend), self.applied.clone()),
            link,
        )
    }

    /// Stops the reaper; clients keep working but sessions no longer expire.
    pub fn stop(&self) {
        if let Some(handle) = self
            .reaper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            handle.abort();
        }
    }
}

impl Drop for LocalQuorum {
    fn drop(&mut self) {
        self.stop();
    }
}

impl LocalBackend {
    fn check_link(&self) -> Result<(), QuorumError> {
        if self.link.is_cut() {
            Err(QuorumError::Unavailable("link to the quorum is cut".into()))
        } else {
            Ok(())
        }
    }
}

impl Backend for LocalBackend {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Reply, QuorumError>> {
        Box::pin(async move {
            self.check_link()?;
            let result = {
                let _order = self
                    .quorum
                    .propose_lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let index = self.quorum.applied.applied_index() + 1;
                self.quorum.applied.apply(index, command)
            };
            match result {
                Some(result) => Ok(result.outcome?),
                None => Err(QuorumError::Unavailable("entry was not applied".into())),
            }
        })
    }

    fn read_index(&self) -> BoxFuture<'_, Result<LogIndex, QuorumError>> {
        Box::pin(async move {
            self.check_link()?;
            Ok(self.quorum.applied.applied_index())
        })
    }

    /// The local quorum has no broker for a leader; `Some(0)` while reachable.
    fn leader(&self) -> Option<BrokerId> {
        (!self.link.is_cut()).then_some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Op, StoreError};
    use std::time::Duration;

    #[tokio::test]
    async fn sessions_expire_and_a_cut_link_refuses_calls() {
        let quorum = LocalQuorum::start();
        let (client, link) = quorum.client();
        let Ok(Reply::SessionOpened(session)) =
            client.propose(Command::OpenSession { ttl_ms: 100 }).await
        else {
            panic!("no session")
        };
        let create = Command::Op(Op::Create {
            path: "/e".into(),
            data: Vec::new(),
            ephemeral_session: Some(session),
        });
        client.propose(create).await.unwrap();
        assert!(client.read_local(|s, _| s.exists("/e")));
        link.cut();
        assert!(matches!(
            client.propose(Command::Heartbeat { session }).await,
            Err(QuorumError::Unavailable(_))
        ));
        assert!(client.read_linearizable(|_| ()).await.is_err());
        let gone = client
            .watch(
                &crate::metadata::WatchTarget::Node("/e".into()),
                client.applied_index(),
                Duration::from_secs(5),
            )
            .await;
        assert!(gone.is_some(), "the ephemeral node went with its session");
        link.heal();
        assert!(!client.read_linearizable(|s| s.exists("/e")).await.unwrap());
        assert_eq!(
            client.propose(Command::Heartbeat { session }).await,
            Err(QuorumError::Store(StoreError::SessionExpired { session }))
        );
    }
}
