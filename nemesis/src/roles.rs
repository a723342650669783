//! Who does what in the cluster at one moment: the roles the role-aware targets name.
//! The types are the system-under-test door's (`sut::Roles`): the harness reads them
//! through `sut::Api::roles`.

pub use sut::{PartitionRoles, Roles};
