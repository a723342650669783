//! Waiting on futures: with a time limit, all at once on the current task, and the
//! first error of many outcomes.

use crate::BackendError;
use std::time::Duration;

/// `future`, or a [`BackendError::Setup`] after `limit`.
pub(super) async fn timed<T>(
    limit: Duration,
    future: impl std::future::Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(limit, future).await {
        Ok(outcome) => outcome,
        Err(_) => Err(BackendError::Setup(format!("no answer within {limit:?}"))),
    }
}

/// Polls every future to its end, concurrently, on the current task.
pub(super) async fn join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    use std::task::Poll;
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(results.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(output) => *slot = Some(output),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

/// The first error of `outcomes`, if any.
pub(super) fn first_error(outcomes: Vec<Result<(), BackendError>>) -> Result<(), BackendError> {
    outcomes.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}
