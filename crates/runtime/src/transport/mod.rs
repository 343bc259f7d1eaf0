//! What a protocol connection's frames travel on once its link is open: the TCP stream itself,
//! or UCX (the feature `ucx`).
//!
//! Every protocol connection opens over TCP, with the link of [`crate::link`], whatever its
//! transport: the link proves who the peer is. A link of a class that travels on UCX
//! ([`TransportSection`]) then trades UCX worker addresses on that TCP connection (each side's
//! [`UcxHello`]), and from there every frame, either way, is one UCX active message to the peer's
//! worker, with a header naming the receiving connection. The TCP connection stays open and
//! silent: its end is the link's end, which is how a peer's loss is seen where UCX itself cannot
//! see it (over shared memory). UCX's own report of a failed peer ends the link too.
//!
//! The seam, for the event loop and the connections (`crate::conn`):
//!
//! - [`Fabric`]: one per unit's loop. It owns the UCX context and worker, whose event file
//!   descriptor the loop's poller watches; it makes [`Channel`]s from peers' addresses and pumps
//!   the worker: frames received, sends finished, endpoints failed ([`Arrival`]).
//! - [`Channel`]: one per connection that travels on UCX: its endpoint and its sends in flight,
//!   at most [`MAX_SENDS_IN_FLIGHT`] of them (the rest wait in the connection's queue, and count
//!   as queued bytes, so that back-pressure reads the same as over TCP).
//!
//! Without the feature `ucx` both types exist but cannot be made: [`Fabric::new`] says the build
//! has no UCX and names the feature.

use tessera_config::{LinkClass, Transport, TransportSection};
use tessera_evb::types::Peer;

#[cfg(feature = "ucx")]
mod ucx;
#[cfg(feature = "ucx")]
pub(crate) use ucx::{Channel, Fabric};

#[cfg(not(feature = "ucx"))]
mod none;
#[cfg(not(feature = "ucx"))]
pub(crate) use none::{Channel, Fabric};

/// What UCX said when a call of the seam failed; a build without UCX makes no such call.
#[cfg(feature = "ucx")]
pub(crate) type TransportError = tessera_ucx::Error;
/// What UCX said when a call of the seam failed; a build without UCX makes no such call.
#[cfg(not(feature = "ucx"))]
pub(crate) type TransportError = std::convert::Infallible;

/// Why UCX ended a send with an error (its status, as `UCS_ERR_CANCELED`); a build without UCX
/// sends nothing.
#[cfg(feature = "ucx")]
pub(crate) type SendFailure = tessera_ucx::Status;
/// Why UCX ended a send with an error (its status, as `UCS_ERR_CANCELED`); a build without UCX
/// sends nothing.
#[cfg(not(feature = "ucx"))]
pub(crate) type SendFailure = std::convert::Infallible;

/// Why a link whose frames travel on UCX could not reach its peer's worker: the peer's hello
/// was not one, or UCX could not make the endpoint.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReachError {
    /// The peer's hello.
    #[error(transparent)]
    Hello(#[from] HelloError),
    /// UCX's endpoint to the peer's worker.
    #[error(transparent)]
    Connect(#[from] TransportError),
}

/// Most frames of one connection handed to UCX and not yet finished.
#[cfg_attr(not(feature = "ucx"), allow(dead_code))]
pub(crate) const MAX_SENDS_IN_FLIGHT: usize = 64;
/// Longest a connection closed by its own unit waits for its frames in flight to reach the peer.
pub(crate) const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The class of the link between `a` and `b`: a link with a BU at one end carries
/// super-fragments; the rest join the EVM's node and an RU.
pub(crate) fn link_class(a: Peer, b: Peer) -> LinkClass {
    if matches!(a, Peer::Bu(_)) || matches!(b, Peer::Bu(_)) { LinkClass::RuBu } else { LinkClass::EvmRu }
}

/// Whether the link between `me` and `peer` travels on UCX.
pub(crate) fn uses_ucx(transport: &TransportSection, me: Peer, peer: Peer) -> bool {
    transport.of(link_class(me, peer)) == Transport::Ucx
}

/// What pumping the fabric brought, for the connection it names.
#[derive(Debug)]
#[cfg_attr(not(feature = "ucx"), allow(dead_code))]
pub(crate) enum Arrival {
    /// A frame arrived whole for connection `token` (`nonce`: the one the header gave, which
    /// must be the connection's own).
    Frame { token: usize, nonce: u64, bytes: Vec<u8> },
    /// A send of connection `token` finished; `Err` when it failed.
    Sent { token: usize, result: Result<(), SendFailure> },
    /// The endpoint of connection `token` failed: its peer is gone.
    Failed { token: usize, why: String },
    /// Something for no connection of this unit: a message whose header names none, a fault.
    Stray { what: String },
}

/// The UCX hello: what a side sends on the TCP connection once the link is open, so that the
/// peer can reach it over UCX. 24 bytes, then the worker address:
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | `TSUX` |
/// | 4..12 | the connection's token at the sender (u64, little-endian): the receiving connection named in every frame's header |
/// | 12..20 | the sender's nonce for it (u64 LE), which every frame's header repeats |
/// | 20..24 | length of the worker address (u32 LE), 1..=[`UcxHello::MAX_ADDRESS_BYTES`] |
/// | 24.. | the sender's UCX worker address |
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UcxHello {
    /// The connection's token at the sender.
    pub token: u64,
    /// The sender's nonce.
    pub nonce: u64,
    /// The sender's worker address.
    pub address: Vec<u8>,
}

/// Why a UCX hello is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HelloError {
    /// The magic is wrong.
    #[error("a UCX hello must begin with TSUX, not {0:02x?}")]
    Magic([u8; 4]),
    /// The address length is out of bounds.
    #[error("a UCX hello's worker address of {0} bytes is outside 1..={max}", max = UcxHello::MAX_ADDRESS_BYTES)]
    AddressLength(u32),
}

impl UcxHello {
    /// Bytes before the address.
    pub const FIXED_BYTES: usize = 24;
    /// Largest worker address taken (UCX's are a few hundred bytes).
    pub const MAX_ADDRESS_BYTES: u32 = 16 << 10;
    const MAGIC: [u8; 4] = *b"TSUX";

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::FIXED_BYTES + self.address.len());
        out.extend_from_slice(&Self::MAGIC);
        out.extend_from_slice(&self.token.to_le_bytes());
        out.extend_from_slice(&self.nonce.to_le_bytes());
        out.extend_from_slice(&(self.address.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.address);
        out
    }

    /// The whole length of the hello whose first [`UcxHello::FIXED_BYTES`] are `fixed`.
    pub fn length(fixed: &[u8]) -> Result<usize, HelloError> {
        let magic: [u8; 4] = fixed[0..4].try_into().expect("4 bytes");
        if magic != Self::MAGIC {
            return Err(HelloError::Magic(magic));
        }
        let n = u32::from_le_bytes(fixed[20..24].try_into().expect("4 bytes"));
        if n == 0 || n > Self::MAX_ADDRESS_BYTES {
            return Err(HelloError::AddressLength(n));
        }
        Ok(Self::FIXED_BYTES + n as usize)
    }

    /// The hello in `bytes`, whose length [`UcxHello::length`] gave.
    pub fn decode(bytes: &[u8]) -> Result<UcxHello, HelloError> {
        let length = Self::length(&bytes[..Self::FIXED_BYTES])?;
        debug_assert_eq!(length, bytes.len());
        Ok(UcxHello {
            token: u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes")),
            nonce: u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes")),
            address: bytes[Self::FIXED_BYTES..].to_vec(),
        })
    }
}

/// The header of every frame sent on UCX: the receiving connection's token and nonce, as its
/// hello gave them (16 bytes, little-endian).
pub(crate) fn frame_header(token: u64, nonce: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&token.to_le_bytes());
    h[8..].copy_from_slice(&nonce.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_round_trips_and_bad_ones_are_named() {
        let hello = UcxHello { token: 1 << 20, nonce: 0xdead_beef_1234, address: vec![7; 300] };
        let bytes = hello.encode();
        assert_eq!(UcxHello::length(&bytes[..24]), Ok(324));
        assert_eq!(UcxHello::decode(&bytes), Ok(hello));
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert_eq!(UcxHello::length(&bad[..24]), Err(HelloError::Magic(*b"XSUX")));
        let mut empty = bytes.clone();
        empty[20..24].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(UcxHello::length(&empty[..24]), Err(HelloError::AddressLength(0)));
        let mut huge = bytes;
        huge[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(UcxHello::length(&huge[..24]).unwrap_err().to_string().contains("outside 1..=16384"));
    }

    #[test]
    fn links_with_a_bu_are_ru_bu_links() {
        assert_eq!(link_class(Peer::Ru(1), Peer::Bu(0)), LinkClass::RuBu);
        assert_eq!(link_class(Peer::Bu(3), Peer::Evm), LinkClass::RuBu);
        assert_eq!(link_class(Peer::Evm, Peer::Ru(2)), LinkClass::EvmRu);
        let t = TransportSection { ru_bu: Transport::Ucx, ..TransportSection::default() };
        assert!(uses_ucx(&t, Peer::Ru(1), Peer::Bu(0)));
        assert!(!uses_ucx(&t, Peer::Ru(1), Peer::Evm));
    }
}
