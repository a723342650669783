//! The admin HTTP API on the broker's listeners: topic creation, preferred election,
//! reassignment, leader transfer and `GET /v1/metadata` on the client listener
//! ([`routes`]), and the forwarded-request endpoint on the replication listener
//! ([`controller_routes`]). The handlers live in [`crate::controller::http`], generic
//! over the [`ControlPlaneHost`] implemented here for [`Node`], so that they are tested
//! in-process without a whole broker.

use std::sync::Arc;

use axum::Router;

use super::Node;
use crate::controller::http::{self, ControlPlaneHost};
use crate::controller::ControlPlane;

impl ControlPlaneHost for Node {
    fn control_plane(&self) -> Option<ControlPlane> {
        Node::control_plane(self).cloned()
    }
}

/// For the client listener's router.
pub fn routes() -> Router<Arc<Node>> {
    http::admin_routes::<Node>()
}

/// For the replication listener's router: where a non-controller forwards admin
/// requests to this broker when it is the controller.
pub fn controller_routes() -> Router<Arc<Node>> {
    http::controller_routes::<Node>()
}
