//! The bytes pipestream puts on a connection: 32-byte frames, a payload after each message
//! frame (docs/formats.md, "pipestream").
//!
//! ```text
//! offset size field
//!      0    4 magic "TSPS"
//!      4    1 kind: 1 hello (client → server, first), 2 message (client → server), 3 ack (server → client)
//!      5    1 flags: bit 0 the message carries a checksum
//!      6    2 zero
//!      8    8 hello: the client's index; message: its sequence number on the connection, from 0;
//!             ack: messages received on the connection so far
//!     16    4 message: payload bytes that follow; else 0
//!     20    4 message: CRC-32C of the sequence number (8 bytes, little endian) and the payload,
//!             when flagged; else 0
//!     24    8 hello: the session (the scan point), which the server checks; ack: the fewest
//!             messages the server has received from any one client (the fair policy's floor)
//! ```
//! Every number is little endian.

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 32;
/// The magic that opens every frame.
pub const MAGIC: [u8; 4] = *b"TSPS";
/// Flag: the message carries a checksum.
pub const FLAG_CHECKSUM: u8 = 1;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A client names itself, once, first.
    Hello = 1,
    /// A message; its payload follows.
    Message = 2,
    /// A server's acknowledgement.
    Ack = 3,
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub kind: Kind,
    /// Flags ([`FLAG_CHECKSUM`]).
    pub flags: u8,
    /// Client index (hello), sequence number (message), messages received (ack).
    pub number: u64,
    /// Payload bytes that follow (message).
    pub length: u32,
    /// The message's checksum, when flagged.
    pub checksum: u32,
    /// Session (hello), floor (ack).
    pub aux: u64,
}

/// Why a header is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The magic is wrong: the peer speaks something else, or the stream lost its place.
    #[error("bad magic {0:02x?}: not a pipestream frame")]
    Magic([u8; 4]),
    /// An unknown kind.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// A frame that may not come this way (an ack to a server, a message to a client).
    #[error("a {0:?} frame may not come from this side")]
    Direction(Kind),
    /// A message longer than the connection's limit.
    #[error("message of {length} bytes; this run's messages have {limit}")]
    Length {
        /// Its length.
        length: u32,
        /// The run's.
        limit: u32,
    },
}

impl Header {
    /// A hello from client `client` for `session`.
    pub fn hello(client: u32, session: u64) -> Header {
        Header { kind: Kind::Hello, flags: 0, number: u64::from(client), length: 0, checksum: 0, aux: session }
    }

    /// Message `sequence` of `length` bytes, with `checksum` if given.
    pub fn message(sequence: u64, length: u32, checksum: Option<u32>) -> Header {
        Header {
            kind: Kind::Message,
            flags: if checksum.is_some() { FLAG_CHECKSUM } else { 0 },
            number: sequence,
            length,
            checksum: checksum.unwrap_or(0),
            aux: 0,
        }
    }

    /// An acknowledgement of `received` messages, with the fair policy's `floor`.
    pub fn ack(received: u64, floor: u64) -> Header {
        Header { kind: Kind::Ack, flags: 0, number: received, length: 0, checksum: 0, aux: floor }
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.kind as u8;
        b[5] = self.flags;
        b[8..16].copy_from_slice(&self.number.to_le_bytes());
        b[16..20].copy_from_slice(&self.length.to_le_bytes());
        b[20..24].copy_from_slice(&self.checksum.to_le_bytes());
        b[24..32].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    /// Reads a header.
    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<Header, WireError> {
        let magic: [u8; 4] = b[0..4].try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(WireError::Magic(magic));
        }
        let kind = match b[4] {
            1 => Kind::Hello,
            2 => Kind::Message,
            3 => Kind::Ack,
            k => return Err(WireError::Kind(k)),
        };
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(Header { kind, flags: b[5], number: u64_at(8), length: u32_at(16), checksum: u32_at(20), aux: u64_at(24) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_and_garbage_is_named() {
        for h in [Header::hello(7, 99), Header::message(1 << 40, 65536, Some(0xdead_beef)), Header::ack(12, 3)] {
            assert_eq!(Header::decode(&h.encode()), Ok(h));
        }
        let mut b = Header::ack(1, 1).encode();
        b[4] = 9;
        assert_eq!(Header::decode(&b), Err(WireError::Kind(9)));
        assert_eq!(Header::decode(&[b'G'; HEADER_BYTES]), Err(WireError::Magic(*b"GGGG")));
    }
}
