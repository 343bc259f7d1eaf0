//! How every protocol connection opens: the accepting side proves nothing and asks; the calling
//! side says who it is, in which run, and proves that it holds the run's link key. Only then
//! does the accepting side hand the connection to its unit, which from then on knows whom the
//! connection's messages come from (and whom it lost when the connection ends). A connection
//! that fails is closed before the unit or its protocol core sees it.
//!
//! 1. The accepting side sends a challenge: [`CHALLENGE_BYTES`] random bytes, new for every
//!    connection.
//! 2. The calling side sends its opening, [`LINK_BYTES`] (little-endian): magic `TSRL` (4
//!    bytes), version u16 = 2, peer kind u16 (1 EVM, 2 RU, 3 BU), peer index u16, reserved
//!    u16 = 0, run number u32; then a [`TAG_BYTES`]-byte tag, HMAC-SHA256 keyed with the run's
//!    [`LinkKey`] over the opening, the challenge and a label naming the direction and the
//!    accepting unit: `TSRL-v2-call` (12 ASCII bytes), the accepting unit's kind u16 and index
//!    u16 (the same codes as in the opening).
//!
//! A recorded opening is of no use on another connection (another challenge), to another unit
//! (another label) or in another run (another key); changing any byte of the opening breaks the
//! tag. The accepting side compares tags in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tessera_evb::types::Peer;

/// Bytes of the opening, before its tag.
pub const LINK_BYTES: usize = 16;
/// Bytes of the challenge the accepting side sends.
pub const CHALLENGE_BYTES: usize = 16;
/// Bytes of the tag that follows the opening.
pub const TAG_BYTES: usize = 32;
/// Bytes the calling side sends before its first frame: the opening and its tag.
pub const SIGNED_LINK_BYTES: usize = LINK_BYTES + TAG_BYTES;
/// The opening's first four bytes.
pub const LINK_MAGIC: [u8; 4] = *b"TSRL";
/// The version of the opening this build speaks.
pub const LINK_VERSION: u16 = 2;
/// The first bytes of the label the tag covers after the challenge.
pub const CALL_LABEL: [u8; 12] = *b"TSRL-v2-call";
/// Bytes of a link key.
pub const LINK_KEY_BYTES: usize = 32;
/// The environment variable through which an agent hands a `tessera unit` its run's link key,
/// in hex.
pub const LINK_KEY_ENV: &str = "TESSERA_LINK_KEY";

/// The run's link key: random bytes that run control makes for each run and hands to every
/// unit of the run, and to nobody else. Its `Debug` shows none of them.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkKey([u8; LINK_KEY_BYTES]);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

/// A key travels (from the controller to an agent) as its hex digits.
impl serde::Serialize for LinkKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for LinkKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        LinkKey::from_hex(&text).map_err(serde::de::Error::custom)
    }
}

/// A link key that could not be made or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkKeyError {
    /// The system's random source failed.
    #[error("no random bytes for the run's link key: {0}")]
    Random(String),
    /// The text is not 64 hex digits.
    #[error("a link key is {} hex digits; this one is not", 2 * LINK_KEY_BYTES)]
    Hex,
}

impl LinkKey {
    /// A new key from the system's random source.
    pub fn generate() -> Result<Self, LinkKeyError> {
        let mut key = [0u8; LINK_KEY_BYTES];
        getrandom::fill(&mut key).map_err(|e| LinkKeyError::Random(e.to_string()))?;
        Ok(LinkKey(key))
    }

    /// The key with these bytes (tests, benchmarks).
    pub fn from_bytes(bytes: [u8; LINK_KEY_BYTES]) -> Self {
        LinkKey(bytes)
    }

    /// The key as 64 lower-case hex digits, to hand to a unit process.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads a key written by [`LinkKey::to_hex`] (upper case too; surrounding white space is
    /// ignored).
    pub fn from_hex(text: &str) -> Result<Self, LinkKeyError> {
        let text = text.trim().as_bytes();
        if text.len() != 2 * LINK_KEY_BYTES {
            return Err(LinkKeyError::Hex);
        }
        let digit = |c: u8| (c as char).to_digit(16).ok_or(LinkKeyError::Hex);
        let mut key = [0u8; LINK_KEY_BYTES];
        for (i, pair) in text.chunks(2).enumerate() {
            key[i] = (digit(pair[0])? << 4 | digit(pair[1])?) as u8;
        }
        Ok(LinkKey(key))
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }
}

/// A connection's opening that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    #[error("{peer} is in run {found}, this unit in run {expected}")]
    Run {
        /// The peer.
        peer: Peer,
        /// Its run.
        found: u32,
        /// This unit's run.
        expected: u32,
    },
    /// The tag is not the run's key's over this opening, this connection's challenge and this
    /// unit: a caller without the run's key, or an opening recorded elsewhere.
    #[error("the opening naming {peer} carries no proof of this run's link key")]
    Tag {
        /// Whom the opening names.
        peer: Peer,
    },
}

fn kind_and_index(peer: Peer) -> (u16, u16) {
    match peer {
        Peer::Evm => (1, 0),
        Peer::Ru(r) => (2, r),
        Peer::Bu(b) => (3, b),
    }
}

/// A new challenge from the system's random source.
pub fn new_challenge() -> Result<[u8; CHALLENGE_BYTES], LinkKeyError> {
    let mut challenge = [0u8; CHALLENGE_BYTES];
    getrandom::fill(&mut challenge).map_err(|e| LinkKeyError::Random(e.to_string()))?;
    Ok(challenge)
}

/// Encodes the opening (without its tag) of a connection from `peer` in `run`.
pub fn encode_link(peer: Peer, run: u32) -> [u8; LINK_BYTES] {
    let (kind, index) = kind_and_index(peer);
    let mut out = [0u8; LINK_BYTES];
    out[0..4].copy_from_slice(&LINK_MAGIC);
    out[4..6].copy_from_slice(&LINK_VERSION.to_le_bytes());
    out[6..8].copy_from_slice(&kind.to_le_bytes());
    out[8..10].copy_from_slice(&index.to_le_bytes());
    out[12..16].copy_from_slice(&run.to_le_bytes());
    out
}

/// The tag's computation up to the tag itself: the opening, the challenge and the label naming
/// `callee`, the accepting unit.
fn tag_input(
    key: &LinkKey,
    opening: &[u8; LINK_BYTES],
    challenge: &[u8; CHALLENGE_BYTES],
    callee: Peer,
) -> Hmac<Sha256> {
    let (kind, index) = kind_and_index(callee);
    let mut mac = key.mac();
    mac.update(opening);
    mac.update(challenge);
    mac.update(&CALL_LABEL);
    mac.update(&kind.to_le_bytes());
    mac.update(&index.to_le_bytes());
    mac
}

/// What the calling side `me` sends in run `run` to `callee`, which sent `challenge`: the
/// opening and its tag.
pub fn answer_challenge(
    key: &LinkKey,
    me: Peer,
    run: u32,
    callee: Peer,
    challenge: &[u8; CHALLENGE_BYTES],
) -> [u8; SIGNED_LINK_BYTES] {
    let opening = encode_link(me, run);
    let tag = tag_input(key, &opening, challenge, callee).finalize().into_bytes();
    let mut out = [0u8; SIGNED_LINK_BYTES];
    out[..LINK_BYTES].copy_from_slice(&opening);
    out[LINK_BYTES..].copy_from_slice(&tag);
    out
}

/// Reads an opening (without its tag) and checks that it is one this build speaks, from a unit
/// of run `run`: whom it names. Done as soon as its bytes are in, so that a stray client or an
/// old build is refused without waiting for a tag it will never send.
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

/// Checks the opening and tag a caller sent to `me`, which sent it `challenge`, in run `run`
/// with the run's `key`: whom the opening names, if the caller proved that it holds the key.
pub fn check_link(
    key: &LinkKey,
    bytes: &[u8; SIGNED_LINK_BYTES],
    challenge: &[u8; CHALLENGE_BYTES],
    me: Peer,
    run: u32,
) -> Result<Peer, LinkError> {
    let opening: &[u8; LINK_BYTES] = bytes[..LINK_BYTES].try_into().expect("16 bytes");
    let peer = parse_link(opening, run)?;
    // verify_slice compares in constant time.
    tag_input(key, opening, challenge, me).verify_slice(&bytes[LINK_BYTES..]).map_err(|_| LinkError::Tag { peer })?;
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHALLENGE: [u8; CHALLENGE_BYTES] = *b"0123456789abcdef";

    fn key(byte: u8) -> LinkKey {
        LinkKey::from_bytes([byte; LINK_KEY_BYTES])
    }

    #[test]
    fn a_caller_with_the_runs_key_is_accepted_by_the_unit_it_called() {
        for (caller, callee) in [(Peer::Bu(3), Peer::Evm), (Peer::Evm, Peer::Ru(2)), (Peer::Ru(1), Peer::Bu(65535))] {
            let signed = answer_challenge(&key(1), caller, 7, callee, &CHALLENGE);
            assert_eq!(check_link(&key(1), &signed, &CHALLENGE, callee, 7), Ok(caller));
        }
    }

    #[test]
    fn a_wrong_key_run_unit_or_challenge_or_a_changed_byte_is_refused() {
        let signed = answer_challenge(&key(1), Peer::Bu(0), 7, Peer::Evm, &CHALLENGE);
        let tag = Err(LinkError::Tag { peer: Peer::Bu(0) });
        assert_eq!(check_link(&key(2), &signed, &CHALLENGE, Peer::Evm, 7), tag, "another run's key");
        assert_eq!(
            check_link(&key(1), &signed, &CHALLENGE, Peer::Evm, 8),
            Err(LinkError::Run { peer: Peer::Bu(0), found: 7, expected: 8 })
        );
        // Made for the EVM, shown to RU 1: the label names the unit called.
        assert_eq!(check_link(&key(1), &signed, &CHALLENGE, Peer::Ru(1), 7), tag, "another unit");
        // Recorded on one connection, replayed on another, which sent another challenge.
        let mut other = CHALLENGE;
        other[15] ^= 1;
        assert_eq!(check_link(&key(1), &signed, &other, Peer::Evm, 7), tag, "replayed");
        // BU 0's opening changed to name BU 1: the tag no longer fits.
        let mut index = signed;
        index[8] = 1;
        assert_eq!(check_link(&key(1), &index, &CHALLENGE, Peer::Evm, 7), Err(LinkError::Tag { peer: Peer::Bu(1) }));
        // Or to name an RU, or a changed tag.
        let mut kind = signed;
        kind[6] = 2;
        assert_eq!(check_link(&key(1), &kind, &CHALLENGE, Peer::Evm, 7), Err(LinkError::Tag { peer: Peer::Ru(0) }));
        let mut tag_byte = signed;
        tag_byte[SIGNED_LINK_BYTES - 1] ^= 0x80;
        assert_eq!(check_link(&key(1), &tag_byte, &CHALLENGE, Peer::Evm, 7), tag);
    }

    #[test]
    fn an_old_version_stray_bytes_or_an_unknown_kind_are_refused_before_any_tag() {
        let mut v1 = encode_link(Peer::Bu(0), 7);
        v1[4] = 1;
        assert_eq!(parse_link(&v1, 7), Err(LinkError::Version(1)));
        let mut stray = encode_link(Peer::Evm, 1);
        stray[0..4].copy_from_slice(b"GET ");
        assert_eq!(parse_link(&stray, 1), Err(LinkError::Magic { found: *b"GET " }));
        let mut kind = encode_link(Peer::Evm, 1);
        kind[6] = 9;
        assert_eq!(parse_link(&kind, 1), Err(LinkError::Kind(9)));
    }

    #[test]
    fn a_key_travels_as_hex_and_its_debug_shows_no_byte() {
        let k = LinkKey::generate().expect("random bytes");
        assert_eq!(LinkKey::from_hex(&k.to_hex()).expect("hex"), k);
        assert_eq!(LinkKey::from_hex(&format!(" {} \n", k.to_hex().to_uppercase())).expect("hex"), k);
        assert_ne!(LinkKey::generate().expect("random bytes"), k, "a new key per run");
        assert!(LinkKey::from_hex("abc").is_err());
        assert!(LinkKey::from_hex(&"g".repeat(64)).is_err());
        assert_eq!(format!("{:?}", key(0xab)), "LinkKey(..)");
        assert_eq!(key(0xab).to_hex(), "ab".repeat(32));
    }
}
