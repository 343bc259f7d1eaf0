//! A build without the feature `ucx`: the transport seam's UCX types, which cannot be made.

use super::{Arrival, TransportError};
use crate::error::NodeError;
use mio::{Registry, Token};
use std::convert::Infallible;
use std::time::Duration;

/// A unit loop's UCX, which this build does not have.
pub(crate) struct Fabric(Infallible);

impl Fabric {
    /// Says that this build has no UCX.
    pub fn new(_transports: Option<&str>) -> Result<Fabric, NodeError> {
        Err(NodeError::Transport(
            "this build of Tessera has no UCX: build it with `--features ucx` (which needs UCX, \
             e.g. Debian's libucx-dev), or set the links' transport to tcp"
                .into(),
        ))
    }

    pub fn address(&self) -> &[u8] {
        match self.0 {}
    }

    pub fn register(&self, _: &Registry, _: Token) -> std::io::Result<()> {
        match self.0 {}
    }

    pub fn connect(&mut self, _: Vec<u8>, _: usize) -> Result<Channel, TransportError> {
        match self.0 {}
    }

    pub fn pump(&mut self) -> Vec<Arrival> {
        match self.0 {}
    }

    pub fn may_sleep(&self) -> Result<bool, TransportError> {
        match self.0 {}
    }
}

/// A connection's UCX endpoint, which this build cannot have.
pub(crate) struct Channel(Infallible);

impl Channel {
    pub fn has_room(&self) -> bool {
        match self.0 {}
    }

    pub fn send(&mut self, _: &mut Fabric, _: usize, _: &[u8; 16], _: Vec<u8>) {
        match self.0 {}
    }

    pub fn finished(&mut self) -> usize {
        match self.0 {}
    }

    pub fn close(self, _: &mut Fabric, _: bool, _: Duration) -> Result<(), TransportError> {
        match self.0 {}
    }
}
