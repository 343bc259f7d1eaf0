//! Report on a capture of a FEROL stream (FED fragments in FEROL blocks) or of a DTH orbit
//! stream (orbit blocks in Tessera's DTH stream blocks).

use crate::event::Problem;
use serde::Serialize;
use std::collections::BTreeMap;
use tessera_formats::fed::LV1_MASK;
use tessera_formats::ferol::FerolStream;
use tessera_formats::orbit::DthStream;

/// One fragment (FEROL) or one orbit (DTH) of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamUnit {
    /// Byte offset in the capture.
    pub offset: u64,
    /// FED id or DTH source id.
    pub source_id: u32,
    /// LV1 id (FEROL) or orbit number (DTH).
    pub number: u64,
    /// Blocks on the wire.
    pub blocks: usize,
    /// Bytes of the fragment or orbit block, block headers excluded.
    pub bytes: usize,
    /// Events in the orbit (DTH); 1 for a fragment.
    pub events: usize,
    /// Whether the checksum (CRC-16 of a fragment, CRC-32C of an orbit) matches.
    pub crc_ok: bool,
}

/// Totals per source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct SourceSummary {
    /// Fragments or orbits.
    pub units: u64,
    /// Bytes, block headers excluded.
    pub bytes: u64,
    /// First LV1 id or orbit.
    pub first: u64,
    /// Last LV1 id or orbit.
    pub last: u64,
    /// Times the number did not follow the previous one (LV1 ids wrap at 2^24).
    pub gaps: u64,
}

/// A stream capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamReport {
    /// The capture's name as given.
    pub path: String,
    /// "FEROL" or "DTH".
    pub protocol: &'static str,
    /// Bytes in the capture.
    pub bytes: u64,
    /// Every fragment or orbit read, in order.
    pub units: Vec<StreamUnit>,
    /// Totals per source id.
    pub sources: BTreeMap<u32, SourceSummary>,
    /// What is wrong.
    pub problems: Vec<Problem>,
}

fn report(path: &str, protocol: &'static str, bytes: &[u8]) -> StreamReport {
    StreamReport {
        path: path.to_owned(),
        protocol,
        bytes: bytes.len() as u64,
        units: Vec::new(),
        sources: BTreeMap::new(),
        problems: Vec::new(),
    }
}

impl StreamReport {
    fn add(&mut self, unit: StreamUnit, next: impl Fn(u64) -> u64) {
        let s = self.sources.entry(unit.source_id).or_default();
        if s.units == 0 {
            s.first = unit.number;
        } else if unit.number != next(s.last) {
            s.gaps += 1;
            self.problems.push(Problem::at(
                unit.offset,
                format!("source {}: {} follows {} (expected {})", unit.source_id, unit.number, s.last, next(s.last)),
            ));
        }
        s.units += 1;
        s.bytes += unit.bytes as u64;
        s.last = unit.number;
        self.units.push(unit);
    }
}

/// Reads a FEROL stream capture: every block and fragment checked, CRC-16 included, and each
/// FED's LV1 ids checked for continuity across the 24-bit wrap.
pub fn inspect_ferol_stream(path: &str, bytes: &[u8]) -> StreamReport {
    let mut r = report(path, "FEROL", bytes);
    for item in FerolStream::new(bytes) {
        match item {
            Ok((offset, f)) => {
                let crc_ok = match f.check_crc() {
                    Ok(()) => true,
                    Err(e) => {
                        let e = e.shifted(offset);
                        r.problems.push(Problem::at(offset as u64, format!("FED {}: {e}", f.header.source_id)));
                        false
                    }
                };
                let unit = StreamUnit {
                    offset: offset as u64,
                    source_id: f.header.source_id.into(),
                    number: f.header.lv1_id.into(),
                    blocks: f.block_count(),
                    bytes: f.fragment_len(),
                    events: 1,
                    crc_ok,
                };
                r.add(unit, |last| (last + 1) & u64::from(LV1_MASK));
            }
            Err(e) => r.problems.push(Problem::at(e.offset().unwrap_or(0) as u64, e.to_string())),
        }
    }
    r
}

/// Reads a DTH orbit stream capture: every stream block, orbit header, CRC-32C and fragment
/// checked, and each source's orbits checked for continuity.
pub fn inspect_dth_stream(path: &str, bytes: &[u8]) -> StreamReport {
    let mut r = report(path, "DTH", bytes);
    let mut orbit = Vec::new();
    for item in DthStream::new(bytes) {
        match item {
            Ok((offset, dth)) => {
                if let Err(e) = dth.check_source_id(None) {
                    r.problems.push(Problem::at(offset as u64, e.to_string()));
                }
                orbit.resize(dth.orbit_len(), 0);
                if let Err(e) = dth.copy_to(&mut orbit) {
                    r.problems.push(Problem::at(offset as u64, e.to_string()));
                    continue;
                }
                let block = match tessera_formats::orbit::OrbitBlock::parse(&orbit) {
                    Ok(b) => b,
                    Err(e) => {
                        r.problems.push(Problem::at(offset as u64, format!("orbit block: {e}")));
                        continue;
                    }
                };
                let crc_ok = block.check_crc().is_ok();
                if let Err(e) = block.check_crc() {
                    r.problems.push(Problem::at(offset as u64, e.to_string()));
                }
                let events = match block.validate() {
                    Ok(n) => n,
                    Err(e) => {
                        r.problems.push(Problem::at(offset as u64, format!("orbit {}: {e}", block.header.orbit)));
                        0
                    }
                };
                let unit = StreamUnit {
                    offset: offset as u64,
                    source_id: block.header.source_id,
                    number: block.header.orbit.into(),
                    blocks: dth.block_count(),
                    bytes: dth.orbit_len(),
                    events,
                    crc_ok,
                };
                r.add(unit, |last| last + 1);
            }
            Err(e) => r.problems.push(Problem::at(e.offset().unwrap_or(0) as u64, e.to_string())),
        }
    }
    r
}
