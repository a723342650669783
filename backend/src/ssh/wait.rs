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

pub(super) use crate::join::join_all;

/// The first error of `outcomes`, if any.
pub(super) fn first_error(outcomes: Vec<Result<(), BackendError>>) -> Result<(), BackendError> {
    outcomes.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}
