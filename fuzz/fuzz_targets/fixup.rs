//! Input fix-ups shared by the binary-format targets.
//!
//! libFuzzer on stable Rust (`--sanitizer none`) does not solve the two-byte markers and the
//! chained block headers of these formats from nothing, so without seeds it never gets past the
//! first check. Each target therefore reads its first input byte as a mode: even, the rest of the
//! input is parsed as it is; odd, the markers, flags, block numbers and lengths that the parser
//! checks first are stamped into a copy of the rest before parsing, so that the fuzzer reaches
//! the checks behind them. Every stamp is a function of the input, and the as-is mode still
//! fuzzes the checks that the stamps satisfy.
#![allow(dead_code)]

use tessera_formats::ferol::{self, MAX_DATA_WORDS};
use tessera_formats::orbit::{self, DTH_HEADER_VERSION, FRAME_BYTES, ORBIT_HEADER_BYTES, ORBIT_VERSION, UNIT_BYTES};
use tessera_formats::tcds::{TCDS_FED_IDS, TCDS_FRAGMENT_BYTES};

/// The input after its mode byte, fixed up by `fix` when the mode is odd.
pub fn input(data: &[u8], fix: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else { return Vec::new() };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        fix(&mut buf);
    }
    buf
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Stamps a FED header's BOE marker on the word at `at` and returns (source id, LV1 id).
fn stamp_fed_header(b: &mut [u8], at: usize) -> (u16, u32) {
    b[at + 7] = (b[at + 7] & 0x0F) | 0x50;
    let w = le_u64(b, at);
    (((w >> 8) & 0xFFF) as u16, ((w >> 32) as u32) & 0x00FF_FFFF)
}

/// Stamps a FED trailer's EOE marker and `words` as its length on the word at `at`.
fn stamp_fed_trailer(b: &mut [u8], at: usize, words: usize) {
    let w = le_u64(b, at);
    let w = (w & !(0xFFFF_FFFFu64 << 32)) | (0xAu64 << 60) | (((words as u64) & 0x00FF_FFFF) << 32);
    b[at..at + 8].copy_from_slice(&w.to_le_bytes());
}

/// A FEROL stream: every block header gets the signature, a data length in 1..=510 words, its
/// first flag and block number, and the FED id and event number of its fragment's FED header;
/// each fragment gets its BOE and EOE markers and its trailer length. The last flags (where
/// fragments end) are left as they are.
pub fn ferol_stream(b: &mut Vec<u8>) {
    let mut pos = 0;
    let mut number: u64 = 0;
    let mut ids = (0u16, 0u32);
    let mut words = 0usize;
    while pos + ferol::HEADER_BYTES <= b.len() {
        let word0 = be_u64(b, pos);
        let data_words = ((word0 & 0x3FF) + u64::from(MAX_DATA_WORDS) - 1) % u64::from(MAX_DATA_WORDS) + 1;
        // Two words at least in a one-block fragment, so that header and trailer differ.
        let data_words = if number == 0 { data_words.max(2) } else { data_words };
        let end = pos + ferol::HEADER_BYTES + data_words as usize * 8;
        if end > b.len() {
            return;
        }
        if number == 0 {
            words = 0;
            ids = stamp_fed_header(b, pos + ferol::HEADER_BYTES);
        }
        let last = word0 & (1 << 30) != 0;
        let word0 = (u64::from(ferol::SIGNATURE) << 48)
            | ((number & 0xFFFF) << 32)
            | (u64::from(number == 0) << 31)
            | (u64::from(last) << 30)
            | data_words;
        let word1 = (u64::from(ids.0) << 48) | u64::from(ids.1);
        b[pos..pos + 8].copy_from_slice(&word0.to_be_bytes());
        b[pos + 8..pos + 16].copy_from_slice(&word1.to_be_bytes());
        words += data_words as usize;
        number += 1;
        pos = end;
        if last {
            stamp_fed_trailer(b, end - 8, words);
            number = 0;
        }
    }
}

/// A DTH stream: every block header gets the signature, version 1, a data length that is a
/// non-zero multiple of 16, its start flag and block number, and the source id and orbit of its
/// orbit header; each orbit's data starts with an orbit header marker and version and gets the
/// orbit's size in it when the header lies in the first block.
pub fn dth_stream(b: &mut Vec<u8>) {
    let mut pos = 0;
    let mut number: u64 = 0;
    let mut head_at = 0;
    let mut ids = 0u64;
    let mut data_len = 0usize;
    while pos + orbit::DTH_HEADER_BYTES <= b.len() {
        let word0 = be_u64(b, pos);
        // Keep blocks small: 16..=1024 bytes of data.
        let len = (((word0 & 0xFF_FFFF) % 64) + 1) * UNIT_BYTES as u64;
        let data_at = pos + orbit::DTH_HEADER_BYTES;
        let end = data_at + len as usize;
        if end > b.len() {
            return;
        }
        if number == 0 {
            head_at = data_at;
            data_len = 0;
            if len as usize >= ORBIT_HEADER_BYTES {
                b[data_at..data_at + 2].copy_from_slice(&orbit::ORBIT_MARKER);
                b[data_at + 2..data_at + 4].copy_from_slice(&ORBIT_VERSION.to_le_bytes());
                let source = u32::from_le_bytes(b[data_at + 4..data_at + 8].try_into().unwrap());
                let orbit_no = u32::from_le_bytes(b[data_at + 12..data_at + 16].try_into().unwrap());
                ids = (u64::from(source) << 32) | u64::from(orbit_no);
            } else {
                ids = be_u64(b, pos + 8);
            }
        }
        let last = word0 & (1 << 30) != 0;
        let word0 = (u64::from(orbit::DTH_SIGNATURE) << 48)
            | ((number & 0xFFFF) << 32)
            | (u64::from(number == 0) << 31)
            | (u64::from(last) << 30)
            | (u64::from(DTH_HEADER_VERSION) << 24)
            | len;
        b[pos..pos + 8].copy_from_slice(&word0.to_be_bytes());
        b[pos + 8..pos + 16].copy_from_slice(&ids.to_be_bytes());
        data_len += len as usize;
        number += 1;
        pos = end;
        if last {
            if head_at + ORBIT_HEADER_BYTES <= b.len() && b[head_at..head_at + 2] == orbit::ORBIT_MARKER {
                let units = (data_len / UNIT_BYTES) as u32;
                b[head_at + 20..head_at + 24].copy_from_slice(&units.to_le_bytes());
                // Keep the event count within what the size can hold.
                let count = u32::from_le_bytes(b[head_at + 16..head_at + 20].try_into().unwrap());
                let count = count % (units.saturating_sub(2) / 3 + 1);
                b[head_at + 16..head_at + 20].copy_from_slice(&count.to_le_bytes());
            }
            number = 0;
        }
    }
}

/// An orbit block: the orbit header's marker, version, size (the whole input, whole units) and
/// an event count that the size can hold; then, walking back from the end as the reader does,
/// each fragment trailer's marker, the SR trailer's marker, length and orbit, and the SR header's
/// marker, version, source id and event id.
pub fn orbit_block(b: &mut Vec<u8>) {
    b.truncate(b.len() / UNIT_BYTES * UNIT_BYTES);
    if b.len() < ORBIT_HEADER_BYTES {
        return;
    }
    let units = (b.len() / UNIT_BYTES) as u32;
    b[0..2].copy_from_slice(&orbit::ORBIT_MARKER);
    b[2..4].copy_from_slice(&ORBIT_VERSION.to_le_bytes());
    b[20..24].copy_from_slice(&units.to_le_bytes());
    let source = u32::from_le_bytes(b[4..8].try_into().unwrap());
    let orbit_no = u32::from_le_bytes(b[12..16].try_into().unwrap());
    let mut end = b.len();
    let mut count = 0u32;
    while end >= ORBIT_HEADER_BYTES + 3 * FRAME_BYTES {
        let tf_at = end - FRAME_BYTES;
        let room = (tf_at - ORBIT_HEADER_BYTES) / UNIT_BYTES;
        let size = u32::from_le_bytes(b[tf_at + 4..tf_at + 8].try_into().unwrap());
        let size = (size as usize % (room - 1)) + 2; // 2..=room
        let start = tf_at - size * UNIT_BYTES;
        let sr_at = tf_at - FRAME_BYTES;
        b[tf_at..tf_at + 2].copy_from_slice(&orbit::FRAGMENT_TRAILER_MARKER);
        b[tf_at + 4..tf_at + 8].copy_from_slice(&(size as u32).to_le_bytes());
        // SR header: source id, then marker and version in the top byte and nibble.
        b[start..start + 4].copy_from_slice(&source.to_le_bytes());
        b[start + 15] = orbit::SR_HEADER_MARKER;
        b[start + 14] = (b[start + 14] & 0x0F) | (orbit::SR_VERSION << 4);
        // Event id, bits 64..108 of both: the trailer's copy is the header's.
        let event: [u8; 6] = b[start + 8..start + 14].try_into().unwrap();
        b[tf_at + 8..tf_at + 14].copy_from_slice(&event);
        // SR trailer: orbit, length in bits 76..96, marker.
        b[sr_at + 4..sr_at + 8].copy_from_slice(&orbit_no.to_le_bytes());
        let w = u128::from_le_bytes(b[sr_at..sr_at + 16].try_into().unwrap());
        let w = (w & !(0xF_FFFFu128 << 76) & !(0xFFu128 << 120))
            | ((size as u128) << 76)
            | (u128::from(orbit::SR_TRAILER_MARKER) << 120);
        b[sr_at..sr_at + 16].copy_from_slice(&w.to_le_bytes());
        count += 1;
        end = start;
    }
    let announced = u32::from_le_bytes(b[16..20].try_into().unwrap());
    // Mostly the count the walk will find; sometimes another.
    let count = if announced & 0xF000 == 0 { count } else { announced % (units.saturating_sub(2) / 3 + 1) };
    b[16..20].copy_from_slice(&count.to_le_bytes());
}

/// A trigger fragment: 952 bytes, BOE and EOE markers, a trigger FED id and the trailer length.
pub fn tcds(b: &mut Vec<u8>) {
    b.resize(TCDS_FRAGMENT_BYTES, 0);
    stamp_fed_header(b, 0);
    let w = le_u64(b, 0);
    let ids = *TCDS_FED_IDS.start()..=*TCDS_FED_IDS.end();
    let span = u64::from(ids.end() - ids.start()) + 1;
    let source = u64::from(*ids.start()) + ((w >> 8) & 0xFFF) % span;
    let w = (w & !(0xFFF << 8)) | (source << 8);
    b[0..8].copy_from_slice(&w.to_le_bytes());
    stamp_fed_trailer(b, TCDS_FRAGMENT_BYTES - 8, TCDS_FRAGMENT_BYTES / 8);
}
