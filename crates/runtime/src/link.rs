//! The 16 bytes that open every protocol connection: who is calling, in which run. The side that
//! accepts the connection reads them before any frame, refuses a peer that the configuration
//! does not name or that belongs to another run, and from then on knows whom the connection's
//! messages come from (and whom it lost when the connection ends).
//!
//! Layout (little-endian): magic `TSRL` (4 bytes), version u16 = 1, peer kind u16 (1 EVM, 2 RU,
//! 3 BU), peer index u16, reserved u16 = 0, run number u32.

use tessera_evb::types::Peer;

/// Bytes of the opening.
pub const LINK_BYTES: usize = 16;
/// Its first four bytes.
pub const LINK_MAGIC: [u8; 4] = *b"TSRL";
const LINK_VERSION: u16 = 1;

/// A connection's opening that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The bytes are not a Tessera link opening (a stray client, or a FEROL stream sent to a
    /// protocol port).
    #[error("not a Tessera connection: it opens with {found:02x?}, expected \"TSRL\"")]
    Magic {
        /// The first four bytes received.
        found: [u8; 4],
    },
    /// A version this build does not speak.
    #[error("link version {0}; this build speaks version {LINK_VERSION}")]
    Version(u16),
    /// An unknown peer kind.
    #[error("peer kind {0} is none of 1 (EVM), 2 (RU), 3 (BU)")]
    Kind(u16),
    /// The peer is in another run.
    #[error("{peer:?} is in run {found}, this unit in run {expected}")]
    Run {
        /// The peer.
        peer: Peer,
        /// Its run.
        found: u32,
        /// This unit's run.
        expected: u32,
    },
}

/// Encodes the opening of a connection from `peer` in `run`.
pub fn encode_link(peer: Peer, run: u32) -> [u8; LINK_BYTES] {
    let (kind, index) = match peer {
        Peer::Evm => (1u16, 0u16),
        Peer::Ru(r) => (2, r),
        Peer::Bu(b) => (3, b),
    };
    let mut out = [0u8; LINK_BYTES];
    out[0..4].copy_from_slice(&LINK_MAGIC);
    out[4..6].copy_from_slice(&LINK_VERSION.to_le_bytes());
    out[6..8].copy_from_slice(&kind.to_le_bytes());
    out[8..10].copy_from_slice(&index.to_le_bytes());
    out[12..16].copy_from_slice(&run.to_le_bytes());
    out
}

/// Reads the opening of a connection and checks that it belongs to run `run`.
pub fn parse_link(bytes: &[u8; LINK_BYTES], run: u32) -> Result<Peer, LinkError> {
    let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
    let magic: [u8; 4] = bytes[0..4].try_into().expect("4 bytes");
    if magic != LINK_MAGIC {
        return Err(LinkError::Magic { found: magic });
    }
    if u16_at(4) != LINK_VERSION {
        return Err(LinkError::Version(u16_at(4)));
    }
    let peer = match u16_at(6) {
        1 => Peer::Evm,
        2 => Peer::Ru(u16_at(8)),
        3 => Peer::Bu(u16_at(8)),
        kind => return Err(LinkError::Kind(kind)),
    };
    let found = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    if found != run {
        return Err(LinkError::Run { peer, found, expected: run });
    }
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_peer_round_trips_and_a_wrong_run_or_stray_bytes_are_refused() {
        for peer in [Peer::Evm, Peer::Ru(3), Peer::Bu(65535)] {
            assert_eq!(parse_link(&encode_link(peer, 7), 7), Ok(peer));
        }
        assert_eq!(
            parse_link(&encode_link(Peer::Bu(1), 7), 8),
            Err(LinkError::Run { peer: Peer::Bu(1), found: 7, expected: 8 })
        );
        let mut stray = encode_link(Peer::Evm, 1);
        stray[0..4].copy_from_slice(b"GET ");
        assert_eq!(parse_link(&stray, 1), Err(LinkError::Magic { found: *b"GET " }));
        let mut kind = encode_link(Peer::Evm, 1);
        kind[6] = 9;
        assert_eq!(parse_link(&kind, 1), Err(LinkError::Kind(9)));
    }
}
