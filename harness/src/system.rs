//! The system under test this harness drives, named in this one place: our broker,
//! through its driver (the `driver` crate's implementations of the `sut` doors). The
//! rest of the harness asks the doors ([`sut::Db`], [`sut::Api`], [`sut::Client`]); a
//! second system under test is a second driver, chosen here.

use std::path::PathBuf;
use std::sync::Arc;

use sut::{Db, DbError};

/// How the test's nodes are configured and run.
pub fn db() -> Arc<dyn Db> {
    Arc::new(driver::BrokerDb)
}

/// Checks `--broker-config` (and scenario) settings without starting anything.
pub fn check_settings(settings: &[String]) -> Result<(), DbError> {
    db().check_settings(settings)
}

/// This workspace's broker, built with its failpoints; the binary's path.
pub fn build() -> Result<PathBuf, driver::BuildError> {
    driver::build_broker()
}
