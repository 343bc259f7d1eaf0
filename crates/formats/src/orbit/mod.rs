//! HL-LHC DTH orbit data, docs/formats.md §6: orbit blocks of SlinkRocket fragments, and the TCP
//! stream blocks that carry them.
//!
//! An orbit block from one source is, all little-endian:
//!
//! ```text
//! orbit header (32 bytes, "HO")
//! for each event: [SR header 16 | payload, padded to 16 | SR trailer 16] [fragment trailer 16, "TF"]
//! ```
//!
//! Readers walk a block backwards from its end, as the DTH's readers do: each fragment trailer
//! gives the size of the fragment before it. [`OrbitBlockWriter`] writes a block into a caller's
//! buffer; [`OrbitBlock`] and [`OrbitFragment`] read one in place.
//!
//! **Tessera's choices**, where the public sources stop:
//!
//! - The SR trailer's CRC is CRC-16/CMS computed word-wise (each 64-bit little-endian word most
//!   significant byte first, [`Crc16Words`](crate::crc::Crc16Words)) over SR header, payload and SR trailer, with the
//!   trailer's CRC field taken as zero. The fragment trailer's CRC-16 repeats that value.
//! - The fragment trailer's size equals the SR length: the fragment, SR header and trailer
//!   included, in 16-byte units.
//! - The link CRC is written 0 and not checked.
//! - A payload is zero-padded to a multiple of 16 bytes; the SR length counts the padded length,
//!   so a reader sees the padded payload.
//! - The DTH's own TCP block header is not public: Tessera defines [`DthBlockHeader`], below.
//!
//! ## DTH stream blocks (Tessera's own)
//!
//! An orbit block travels on TCP in stream blocks of at most `max_block_bytes` (default 8192),
//! each a 16-byte header of two **big-endian** 64-bit words, like a FEROL header, and its data:
//!
//! | word | bits | field |
//! |---|---|---|
//! | 0 | 63:48 | signature 0x475A (wire bytes `47 5A`) |
//! | 0 | 47:32 | block number within the orbit, 0, 1, 2... |
//! | 0 | 31 | start of orbit |
//! | 0 | 30 | end of orbit |
//! | 0 | 29:24 | header version = 1 |
//! | 0 | 23:0 | data length in bytes, a multiple of 16, at least 16 |
//! | 1 | 63:32 | source id |
//! | 1 | 31:0 | orbit number |
//!
//! The version field is what tells a DTH stream from a FEROL one, whose bits 29:24 are zero
//! ([`looks_like_dth_stream`]). [`DthBlocks`] and [`write_dth_blocks`] split an orbit block into
//! stream blocks; [`DthOrbit`] and [`DthStream`] gather them back, zero-copy.
//!
//! ## Orbit files
//!
//! A BU in orbit mode writes raw files with no file header: orbit after orbit, each the blocks of
//! every source. [`is_orbit_file`] tells such a file from a RAW_0002 one by its first bytes;
//! [`OrbitFile`] reads it orbit by orbit and [`FileOrbit::events`] event by event.
//!
//! One job per file: `frames` the fixed-size frames of a block (orbit header, SlinkRocket header
//! and trailer, fragment trailer), `block` orbit blocks written and read in place, `dth` the
//! TCP stream blocks that carry them, `file` the orbit files a BU writes, `agree` the rule by
//! which the blocks of one orbit must agree before a BU writes them.

mod agree;
mod block;
mod dth;
mod file;
mod frames;
#[cfg(test)]
mod test_support;

pub use agree::{BlockKey, Disagreement, OrbitAgreement, agree};
pub use block::{FragmentInfo, OrbitBlock, OrbitBlockWriter, OrbitFragment, OrbitFragments};
pub use dth::*;
pub use file::*;
pub use frames::*;

/// Size of the orbit header.
pub const ORBIT_HEADER_BYTES: usize = 32;
/// Orbit sizes and fragment lengths count 16-byte units.
pub const UNIT_BYTES: usize = 16;
/// Orbit header marker, wire bytes `48 4F` ("HO").
pub const ORBIT_MARKER: [u8; 2] = *b"HO";
/// The orbit header version this module reads and writes.
pub const ORBIT_VERSION: u16 = 1;
/// Largest event count the 12-bit field holds.
pub const MAX_EVENTS: u16 = 0xFFF;
/// Size of a SlinkRocket header, of a SlinkRocket trailer, and of a fragment trailer.
pub const FRAME_BYTES: usize = 16;
/// SlinkRocket header marker (bits 63:56 of its second word).
pub const SR_HEADER_MARKER: u8 = 0x55;
/// SlinkRocket header version (bits 55:52 of its second word).
pub const SR_VERSION: u8 = 3;
/// SlinkRocket trailer marker (bits 31:24 of its last u32).
pub const SR_TRAILER_MARKER: u8 = 0xAA;
/// Fragment trailer marker, wire bytes `54 46` ("TF").
pub const FRAGMENT_TRAILER_MARKER: [u8; 2] = *b"TF";
/// Event ids are 44 bits on the wire.
pub const EVENT_ID_MASK: u64 = (1 << 44) - 1;
/// Largest SR length the 20-bit field holds, in 16-byte units.
pub const MAX_SR_UNITS: u32 = 0xF_FFFF;

/// Orbit header flag bits.
pub mod orbit_flags {
    /// Bit 0: the DTH saw an error in this orbit.
    pub const ERROR: u32 = 1 << 0;
}

/// SlinkRocket trailer status bits.
pub mod sr_status {
    /// FED CRC error.
    pub const FED_CRC: u16 = 1 << 0;
    /// Link CRC error.
    pub const LINK_CRC: u16 = 1 << 1;
    /// Source id error.
    pub const SOURCE_ID: u16 = 1 << 2;
    /// Synchronisation lost.
    pub const SYNC_LOST: u16 = 1 << 3;
    /// Fragment cut.
    pub const CUT: u16 = 1 << 4;
}

/// Fragment trailer flag bits.
pub mod trailer_flags {
    /// FED CRC error.
    pub const FED_CRC: u16 = 1 << 0;
    /// Link CRC error.
    pub const LINK_CRC: u16 = 1 << 1;
    /// Source id error.
    pub const SOURCE_ID: u16 = 1 << 2;
    /// Fragment cut.
    pub const CUT: u16 = 1 << 3;
    /// Event id out of sync.
    pub const EVENT_ID_SYNC: u16 = 1 << 4;
    /// Time-out.
    pub const TIMEOUT: u16 = 1 << 5;
    /// Length error.
    pub const LENGTH: u16 = 1 << 6;
}
