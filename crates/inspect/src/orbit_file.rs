//! Report on one orbit file, as a BU writes it in orbit mode (docs/formats.md §6–§7): its orbits
//! and, in each, its events and their fragments.
//!
//! Checked: every rule of the orbit file reader ([`OrbitFile`]), every block's CRC-32C, every
//! fragment's SR CRC-16 (and the copy in its fragment trailer), every payload byte against its
//! seed (as the DTH emulator fills it, `seeded::fill_payload(run, source, event)`), and, when the
//! file's name follows the rules, each orbit's lumi section (`orbit / 2^18 + 1`) and run against
//! the name's.

use crate::event::{EventChecks, Problem};
use serde::Serialize;
use std::path::Path;
use tessera_formats::fed::WORD_BYTES;
use tessera_formats::names::BuFileName;
use tessera_formats::orbit::{FRAME_BYTES, FileOrbit, OrbitFile};
use tessera_formats::seeded::first_payload_mismatch;
use tessera_formats::tcds::lumi_section_of_orbit;

/// One fragment of an event of an orbit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrbitFragmentReport {
    /// Byte offset of its SR header in the file.
    pub offset: u64,
    /// Source id.
    pub source_id: u32,
    /// Fragment size in bytes, SR header and trailer included.
    pub bytes: usize,
    /// Bunch crossing of its SR trailer.
    pub bx: u16,
    /// Whether the SR trailer's CRC-16, and its copy in the fragment trailer, match.
    pub crc16_ok: bool,
}

/// One event of an orbit: a fragment per source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrbitEventReport {
    /// Event id.
    pub event_id: u64,
    /// Bunch crossing (of the first source's fragment).
    pub bx: u16,
    /// One fragment per source, in block order.
    pub fragments: Vec<OrbitFragmentReport>,
}

/// One orbit of an orbit file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrbitReport {
    /// Byte offset of its first block in the file.
    pub offset: u64,
    /// Orbit number.
    pub orbit: u32,
    /// Run number.
    pub run: u32,
    /// Lumi section of the orbit number, `orbit / 2^18 + 1`.
    pub lumi_section: u32,
    /// Events its blocks announce.
    pub event_count: u16,
    /// Source ids of its blocks, in file order.
    pub sources: Vec<u32>,
    /// Bytes of all its blocks.
    pub bytes: u64,
    /// Whether every block's CRC-32C matches.
    pub crc32c_ok: bool,
    /// Its events in increasing event id order, as far as they could be read.
    pub events: Vec<OrbitEventReport>,
}

/// An orbit file: its orbits and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrbitFileReport {
    /// The file's name as given.
    pub path: String,
    /// Its size on disk.
    pub actual_bytes: u64,
    /// Every orbit that could be read.
    pub orbits: Vec<OrbitReport>,
    /// Every rule the file breaks, in the order found.
    pub problems: Vec<Problem>,
}

impl OrbitFileReport {
    /// Events in the orbits read.
    pub fn event_count(&self) -> u64 {
        self.orbits.iter().map(|o| u64::from(o.event_count)).sum()
    }

    /// Its events and orbits when the whole file could be read (`None`, `None` otherwise): what
    /// its bookkeeping is checked against.
    pub fn whole_counts(&self) -> (Option<u64>, Option<u64>) {
        let whole = self.orbits.iter().map(|o| o.bytes).sum::<u64>() == self.actual_bytes;
        (whole.then(|| self.event_count()), whole.then_some(self.orbits.len() as u64))
    }
}

/// The first byte of `payload` that differs from the seeded content of (run, source, event), if
/// any. A payload is whole 8-byte words padded with zeros to 16 bytes: a last word of zeros may be
/// padding, and is not compared.
fn payload_mismatch(run: u32, source_id: u16, event_id: u64, payload: &[u8]) -> Option<usize> {
    let bad = first_payload_mismatch(run, source_id, event_id, payload)?;
    let last_word = payload.len().saturating_sub(WORD_BYTES);
    let padding = bad >= last_word && payload[last_word..].iter().all(|&b| b == 0);
    (!padding).then_some(bad)
}

/// Checks one orbit: block CRC-32Cs, then its events, fragment by fragment.
fn check_orbit(orbit: &FileOrbit<'_>, checks: EventChecks, problems: &mut Vec<Problem>) -> OrbitReport {
    let context = format!("orbit {}", orbit.orbit());
    let mut crc32c_ok = true;
    for (block, &at) in orbit.blocks().iter().zip(orbit.block_offsets()) {
        if let Err(e) = block.check_crc() {
            crc32c_ok = false;
            problems.push(Problem::from_error(at as u64, format!("{context} source {}", block.header.source_id), e));
        }
    }
    let mut events = Vec::with_capacity(orbit.event_count().into());
    for event in orbit.events() {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                problems.push(Problem::from_error(0, &context, e));
                break;
            }
        };
        let mut fragments = Vec::with_capacity(event.fragments.len());
        for (fragment, &block_at) in event.fragments.iter().zip(orbit.block_offsets()) {
            let at = (block_at + fragment.offset()) as u64;
            let source_id = fragment.source_id();
            let what = format!("{context} event {} source {source_id}", event.event_id);
            let crc16_ok = match fragment.check_crc() {
                Ok(()) => true,
                Err(e) => {
                    problems.push(Problem::from_error(block_at as u64, &what, e));
                    false
                }
            };
            if checks.seeded_payloads {
                let payload_at = at + FRAME_BYTES as u64;
                match u16::try_from(source_id) {
                    Err(_) => {
                        problems.push(Problem::at(at, format!("{what}: a source id above 65535 has no seeded payload")))
                    }
                    Ok(seed_source) => {
                        if let Some(bad) =
                            payload_mismatch(orbit.run(), seed_source, event.event_id, fragment.payload())
                        {
                            problems.push(Problem::at(
                                payload_at + bad as u64,
                                format!("{what}: payload differs from its seeded content"),
                            ));
                        }
                    }
                }
            }
            fragments.push(OrbitFragmentReport {
                offset: at,
                source_id,
                bytes: fragment.as_bytes().len(),
                bx: fragment.bx(),
                crc16_ok,
            });
        }
        events.push(OrbitEventReport { event_id: event.event_id, bx: event.bx, fragments });
    }
    events.reverse();
    OrbitReport {
        offset: orbit.offset() as u64,
        orbit: orbit.orbit(),
        run: orbit.run(),
        lumi_section: lumi_section_of_orbit(orbit.orbit().into()),
        event_count: orbit.event_count(),
        sources: orbit.blocks().iter().map(|b| b.header.source_id).collect(),
        bytes: orbit.wire_len() as u64,
        crc32c_ok,
        events,
    }
}

/// Reads and checks a whole orbit file held in `bytes`. When `path`'s file name follows the
/// rules (`runRRRRRR_lsLLLL_indexIIIIII.raw`), each orbit's run and lumi section must be the
/// name's.
pub fn inspect_orbit_file(path: &str, bytes: &[u8], checks: EventChecks) -> OrbitFileReport {
    let named = Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| BuFileName::parse(n).ok())
        .filter(|n| matches!(n, BuFileName::Raw { .. }));
    let mut problems = Vec::new();
    let mut orbits = Vec::new();
    for orbit in OrbitFile::new(bytes) {
        let orbit = match orbit {
            Ok(orbit) => orbit,
            Err(e) => {
                problems.push(Problem::from_error(0, "orbit file", e));
                break;
            }
        };
        let report = check_orbit(&orbit, checks, &mut problems);
        if let Some(name) = &named {
            if report.lumi_section != name.ls() {
                problems.push(Problem::at(
                    report.offset,
                    format!(
                        "orbit {}: lumi section {} (orbit / 2^18 + 1) in a file of lumi section {}",
                        report.orbit,
                        report.lumi_section,
                        name.ls()
                    ),
                ));
            }
            if report.run != name.run() {
                problems.push(Problem::at(
                    report.offset,
                    format!("orbit {}: run {} in a file of run {}", report.orbit, report.run, name.run()),
                ));
            }
        }
        orbits.push(report);
    }
    OrbitFileReport { path: path.to_owned(), actual_bytes: bytes.len() as u64, orbits, problems }
}
