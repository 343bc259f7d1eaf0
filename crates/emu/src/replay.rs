//! Replay: FEROL streams (or DTH orbit streams) captured once, held in memory and sent in a
//! loop, so that the sender does no per-event generation and a baseline it feeds is not bound by
//! the emulator.
//!
//! A [`Capture`] holds one FEROL stream per FED, read from the capture files `DIR/fed<ID>.ferol`
//! that `tessera ferol --output DIR` writes ([`Capture::load`]), or generated straight into memory
//! ([`Capture::generate`]). Loading checks every fragment (block headers, FED header and trailer,
//! CRC-16, one FED id per stream), that each stream's LV1 ids follow one another, and that every
//! stream holds the same events; a capture that fails is refused with its file and the offset.
//!
//! **What is rewritten.** Pass `k` of a capture of `N` events sends its event `i` as event
//! `first + k·N + i`, so that the streams stay valid for an RU however long they run:
//! - a data fragment gets its new 24-bit LV1 id in the FED header and in every FEROL block
//!   header, and its CRC-16 patched, not recomputed: the CRC is affine in the bits of the
//!   message, so the new CRC is the captured one XOR the contributions of the LV1 bits that
//!   changed, 24 values per fragment length computed once when the capture is loaded. That is a
//!   few stores and at most 24 XORs per fragment, whatever its size;
//! - the trigger fragment (FED 1024) gets its TCDS record written anew, with the event number
//!   and trigger count moved on by `k·N`, and the lumi section by `k·S` and the orbit by
//!   `k·S·2^18`, `S` being how many lumi sections the capture spans beyond its first (so lumi
//!   sections never go back, and a capture inside one lumi section replays in that one), then
//!   sealed with a CRC-16 over its 952 bytes: about a hundred nanoseconds an event, on one
//!   stream.
//!
//! - an orbit block of a DTH stream ([`Capture::generate_orbits`]) gets its new orbit number, that
//!   of its index in the run moved on by `k·N` (`tcds::orbit_number`, so that lumi sections run
//!   on as the generator numbers them), in its orbit header and in every stream block header.
//!   Neither is under the block's CRC-32C, which covers the fragments only: nothing else changes,
//!   the fragments' event ids included (every source holds the same events, so the sources of an
//!   orbit still agree with each other).
//!
//! The payloads stay as captured: beyond the first pass they are no longer the seeded payloads
//! of their event numbers (`tessera verify` of such events reports payload mismatches). Pass 0
//! sends the capture byte for byte.
//!
//! **Sending.** One thread per stream, as in [`crate::sender`]; each renumbers a batch of
//! consecutive events in its own copy of the stream (at most [`BATCH_BYTES`] and
//! [`BATCH_EVENTS`]) and writes the batch with one call straight from that buffer, without a copy
//! in user space. A replay is free running; it ends on the run's events limit, time limit or stop
//! line, as the generating sender does.

use crate::error::{EmuError, StreamName};
use crate::generator::{StreamConfig, StreamGenerator, Wire};
use crate::orbit::{OrbitGenerator, OrbitStreamConfig};
use crate::stream::{
    End, Limits, Meter, RunSummary, STREAM_BUFFER_BYTES, Sink, StopLine, StreamGauge, StreamOut, StreamSummary,
    capture_path, check_stream_count, dth_capture_path, open_named, write_all,
};
use std::fmt;
use std::io::IoSlice;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tessera_formats::fed::{self, lv1_id};
use tessera_formats::ferol::{FerolBlockHeader, FerolStream, HEADER_BYTES};
use tessera_formats::orbit::{DTH_HEADER_BYTES, DthBlockHeader, DthOrbit, ORBIT_HEADER_BYTES};
use tessera_formats::tcds::{ORBITS_PER_LUMI_SECTION, TCDS_FED_ID, TcdsRecord, is_tcds_fed, orbit_index, orbit_number};

/// Most wire bytes one write of a replayed stream carries (more when one event is larger).
pub const BATCH_BYTES: usize = STREAM_BUFFER_BYTES;
/// Most events one write of a replayed stream carries: well below the stop line's margin, so
/// that a stop still ends every stream after the same event.
pub const BATCH_EVENTS: u64 = 256;
/// LV1 bits: the part of the event number a data fragment carries.
const LV1_BITS: usize = 24;

/// FEROL streams held in memory for replay, one per FED, every one with the same events; or DTH
/// orbit streams, one per source, every one with the same orbits ([`Capture::generate_orbits`]).
#[derive(Clone)]
pub struct Capture {
    streams: Vec<CapturedStream>,
    events: u64,
    lumi_span: u32,
}

/// One FED's captured stream and what renumbering each event needs.
#[derive(Clone)]
struct CapturedStream {
    fed: u16,
    bytes: Vec<u8>,
    slots: Vec<Slot>,
    /// Offsets of every block header in `bytes`; each slot has a range of them.
    block_headers: Vec<usize>,
    renumber: Renumber,
}

/// One captured event of a stream.
#[derive(Debug, Clone)]
struct Slot {
    /// Where its blocks start and end in the stream's bytes.
    start: usize,
    end: usize,
    /// Its block headers: `block_headers[first_block..last_block]`.
    first_block: usize,
    last_block: usize,
    /// LV1 id and CRC-16 as captured.
    lv1: u32,
    crc: u16,
}

/// How the events of a stream are renumbered.
#[derive(Clone)]
enum Renumber {
    /// Data fragments: per event the index of its length's LV1 contributions in `bases`.
    Data { basis: Vec<usize>, bases: Vec<[u16; LV1_BITS]> },
    /// Trigger fragments: each event's record and event type as captured.
    Trigger { records: Vec<(TcdsRecord, u8)> },
    /// Orbit blocks of a DTH stream: orbit `i` of the capture is the run's orbit
    /// `first_index + i`, numbered for lumi sections of `orbits_per_lumi_section` orbits.
    Orbit { first_index: u64, orbits_per_lumi_section: u64 },
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture")
            .field("feds", &self.feds())
            .field("events", &self.events)
            .field("bytes", &self.bytes())
            .field("lumi_span", &self.lumi_span)
            .finish()
    }
}

impl Capture {
    /// Reads every capture file `fed<ID>.ferol` of `dir` (what `tessera ferol --output DIR`
    /// writes), in the order of their FED ids, and checks them.
    pub fn load(dir: &Path) -> Result<Capture, EmuError> {
        let unreadable = |path: &Path| {
            let path = path.to_owned();
            move |source| EmuError::ReadCapture { path, source }
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(unreadable(dir))? {
            let path = entry.map_err(unreadable(dir))?.path();
            let id = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("fed")?.strip_suffix(".ferol")?.parse::<u16>().ok());
            if let Some(id) = id {
                files.push((id, path));
            }
        }
        if files.is_empty() {
            return Err(EmuError::BadCapture {
                origin: dir.display().to_string(),
                reason: "no capture file fed<ID>.ferol in it".into(),
            });
        }
        files.sort();
        let streams = files
            .into_iter()
            .map(|(id, path)| {
                let bytes = std::fs::read(&path).map_err(unreadable(&path))?;
                let stream = CapturedStream::parse(&path.display().to_string(), bytes)?;
                if stream.fed != id {
                    return Err(EmuError::BadCapture {
                        origin: path.display().to_string(),
                        reason: format!("its fragments are of FED {}, its name says FED {id}", stream.fed),
                    });
                }
                Ok(stream)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Capture::from_streams(streams, &dir.display().to_string())
    }

    /// Generates `events` events of each of `streams` into memory, as the emulator would send
    /// them, and checks them as [`Capture::load`] does (a stream with faults is refused).
    pub fn generate(streams: &[StreamConfig], events: u64) -> Result<Capture, EmuError> {
        let captured = streams
            .iter()
            .map(|config| {
                let origin = format!("generated stream of FED {}", config.fed.fed);
                let mut generator = StreamGenerator::new(config.clone())?;
                let mut bytes = Vec::new();
                for _ in 0..events {
                    let event = generator.next_event()?;
                    if matches!(event.wire, Wire::Disconnect | Wire::Stall) {
                        return Err(EmuError::BadCapture {
                            origin,
                            reason: format!("a {} fault ends it", event.fault.map_or("", |f| f.name())),
                        });
                    }
                    event.append_wire_bytes(&mut bytes);
                }
                CapturedStream::parse(&origin, bytes)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Capture::from_streams(captured, "generated capture")
    }

    /// Generates `orbits` orbits of each of `streams` (DTH sources) into memory, as the DTH
    /// emulator would send them; a stream with faults is refused. Every stream must start at the
    /// same orbit; replayed, pass `k` sends orbit `i` as the run's orbit of index
    /// `first + k·orbits + i`, so the streams go on through the run's lumi sections.
    pub fn generate_orbits(streams: &[OrbitStreamConfig], orbits: u64) -> Result<Capture, EmuError> {
        let captured = streams
            .iter()
            .map(|config| {
                let origin = format!("generated DTH stream of source {}", config.source);
                let mut generator = OrbitGenerator::new(config.clone())?;
                let mut bytes = Vec::new();
                for _ in 0..orbits {
                    let orbit = generator.next_orbit()?;
                    if orbit.fault.is_some() {
                        return Err(EmuError::BadCapture { origin, reason: "a replayed stream has no faults".into() });
                    }
                    bytes.extend_from_slice(orbit.bytes);
                }
                CapturedStream::parse_dth(&origin, bytes, config.orbits_per_lumi_section)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Capture::from_streams(captured, "generated DTH capture")
    }

    /// Whether the streams are DTH orbit streams (each "event" an orbit block).
    pub fn is_orbits(&self) -> bool {
        self.streams.first().is_some_and(|s| matches!(s.renumber, Renumber::Orbit { .. }))
    }

    /// Checks that the streams agree: at least one, distinct FEDs, the same number of events
    /// from the same LV1 id.
    fn from_streams(streams: Vec<CapturedStream>, origin: &str) -> Result<Capture, EmuError> {
        let bad = |reason: String| EmuError::BadCapture { origin: origin.to_owned(), reason };
        let first = streams.first().ok_or_else(|| bad("no stream".into()))?;
        let (events, first_lv1) = (first.slots.len(), first.slots[0].lv1);
        for s in &streams {
            if s.slots.len() != events || s.slots[0].lv1 != first_lv1 {
                return Err(bad(format!(
                    "FED {} holds {} events from LV1 id {}, FED {} {events} from {first_lv1}; every stream must hold the same events",
                    s.fed,
                    s.slots.len(),
                    s.slots[0].lv1,
                    first.fed
                )));
            }
        }
        let mut feds: Vec<u16> = streams.iter().map(|s| s.fed).collect();
        feds.sort_unstable();
        if let Some(w) = feds.windows(2).find(|w| w[0] == w[1]) {
            return Err(bad(format!("FED {} twice", w[0])));
        }
        let lumi_span = streams
            .iter()
            .find_map(|s| match &s.renumber {
                Renumber::Trigger { records } => Some(records.last()?.0.lumi_section - records.first()?.0.lumi_section),
                Renumber::Data { .. } | Renumber::Orbit { .. } => None,
            })
            .unwrap_or(0);
        Ok(Capture { streams, events: events as u64, lumi_span })
    }

    /// The FED ids, in the order of the streams.
    pub fn feds(&self) -> Vec<u16> {
        self.streams.iter().map(|s| s.fed).collect()
    }

    /// Events per stream in one pass.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Wire bytes of all streams in one pass.
    pub fn bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.bytes.len() as u64).sum()
    }
}

impl CapturedStream {
    /// Reads and checks one source's DTH stream of consecutive orbits, each orbit header in its
    /// first stream block; `origin` names it in errors.
    fn parse_dth(origin: &str, bytes: Vec<u8>, orbits_per_lumi_section: u64) -> Result<CapturedStream, EmuError> {
        let bad = |reason: String| EmuError::BadCapture { origin: origin.to_owned(), reason };
        let (mut slots, mut block_headers) = (Vec::new(), Vec::new());
        let (mut source, mut first_index, mut at) = (None, None, 0);
        while at < bytes.len() {
            let orbit = DthOrbit::parse(&bytes[at..]).map_err(|e| bad(format!("orbit at byte {at}: {e}")))?;
            orbit.check_crc().map_err(|e| bad(format!("orbit at byte {at}: {e}")))?;
            let h = orbit.header;
            let id = u16::try_from(h.source_id).map_err(|_| bad(format!("source id {} at byte {at}", h.source_id)))?;
            if *source.get_or_insert(id) != id {
                return Err(bad(format!("orbit at byte {at} is of source {id}, the stream's first of another")));
            }
            let index = orbit_index(h.orbit.into(), orbits_per_lumi_section)
                .ok_or_else(|| bad(format!("orbit {} at byte {at} is outside the run's numbering", h.orbit)))?;
            let first = *first_index.get_or_insert(index);
            if index != first + slots.len() as u64 {
                return Err(bad(format!("orbit at byte {at} is not the next one: a capture holds consecutive orbits")));
            }
            let first_block = block_headers.len();
            let mut header_at = at;
            for b in 0..orbit.block_count() {
                let block = DthBlockHeader::parse(&bytes, header_at).map_err(|e| bad(e.to_string()))?;
                if b == 0 && (block.data_len as usize) < ORBIT_HEADER_BYTES {
                    return Err(bad(format!("orbit at byte {at}: its header straddles stream blocks")));
                }
                block_headers.push(header_at);
                header_at += DTH_HEADER_BYTES + block.data_len as usize;
            }
            let end = at + orbit.wire_len();
            let lv1 = lv1_id(index);
            slots.push(Slot { start: at, end, first_block, last_block: block_headers.len(), lv1, crc: 0 });
            at = end;
        }
        let (Some(fed), Some(first_index)) = (source, first_index) else { return Err(bad("no orbit in it".into())) };
        let renumber = Renumber::Orbit { first_index, orbits_per_lumi_section };
        Ok(CapturedStream { fed, bytes, slots, block_headers, renumber })
    }

    /// Reads and checks one FED's stream; `origin` names it in errors.
    fn parse(origin: &str, bytes: Vec<u8>) -> Result<CapturedStream, EmuError> {
        let bad = |reason: String| EmuError::BadCapture { origin: origin.to_owned(), reason };
        let (mut slots, mut block_headers) = (Vec::new(), Vec::new());
        let (mut basis, mut bases, mut lengths) = (Vec::new(), Vec::new(), Vec::<usize>::new());
        let mut records: Vec<(TcdsRecord, u8)> = Vec::new();
        let mut fed = None;
        for item in FerolStream::new(&bytes) {
            let (at, f) = item.map_err(|e| bad(e.to_string()))?;
            f.check_crc().map_err(|e| bad(format!("fragment at byte {at}: {e}")))?;
            let (id, lv1) = (f.header.source_id, f.header.lv1_id);
            match fed {
                None => fed = Some(id),
                Some(first) if first != id => {
                    return Err(bad(format!(
                        "fragment at byte {at} is of FED {id}, the stream's first of FED {first}"
                    )));
                }
                Some(_) => {}
            }
            if let Some(prev) = slots.last().map(|s: &Slot| s.lv1)
                && lv1 != lv1_id(u64::from(prev) + 1)
            {
                return Err(bad(format!(
                    "fragment at byte {at} has LV1 id {lv1} after {prev}: a capture must hold consecutive events"
                )));
            }
            let first_block = block_headers.len();
            let mut header_at = at;
            for _ in 0..f.block_count() {
                block_headers.push(header_at);
                let block = FerolBlockHeader::parse(&bytes, header_at).map_err(|e| bad(e.to_string()))?;
                header_at += HEADER_BYTES + usize::from(block.data_words) * fed::WORD_BYTES;
            }
            if is_tcds_fed(id) {
                let fragment = match (id, f.as_single()) {
                    (TCDS_FED_ID, Some(fragment)) => fragment.as_bytes(),
                    _ => {
                        return Err(bad(format!(
                            "trigger fragment at byte {at}: only FED {TCDS_FED_ID} in one block is replayed"
                        )));
                    }
                };
                let (record, _) =
                    TcdsRecord::parse(fragment).map_err(|e| bad(format!("fragment at byte {at}: {e}")))?;
                let mut rewritten = [0u8; tessera_formats::tcds::TCDS_FRAGMENT_BYTES];
                let event_type = f.header.event_type;
                record.write(&mut rewritten, event_type).map_err(|e| bad(e.to_string()))?;
                if rewritten[..] != *fragment {
                    return Err(bad(format!(
                        "trigger fragment at byte {at} has fields Tessera does not write: it cannot be renumbered"
                    )));
                }
                if records.last().is_some_and(|(r, _)| r.lumi_section > record.lumi_section) {
                    return Err(bad(format!("trigger fragment at byte {at}: its lumi section goes back")));
                }
                records.push((record, event_type));
            } else {
                let len = f.fragment_len();
                let index = match lengths.iter().position(|&l| l == len) {
                    Some(i) => i,
                    None => {
                        lengths.push(len);
                        bases.push(lv1_contributions(len));
                        lengths.len() - 1
                    }
                };
                basis.push(index);
            }
            let last_block = block_headers.len();
            slots.push(Slot { start: at, end: at + f.wire_len(), first_block, last_block, lv1, crc: f.trailer.crc });
        }
        let Some(fed) = fed else { return Err(bad("no fragment in it".into())) };
        let renumber = if records.is_empty() { Renumber::Data { basis, bases } } else { Renumber::Trigger { records } };
        Ok(CapturedStream { fed, bytes, slots, block_headers, renumber })
    }

    /// Writes event `i` of the capture into the buffer as it is sent in pass `pass` of a capture
    /// of `events` events spanning `lumi_span` lumi sections beyond its first.
    fn renumber(&mut self, i: usize, pass: u64, events: u64, lumi_span: u32) -> Result<(), EmuError> {
        let slot = &self.slots[i];
        let shift = pass.wrapping_mul(events);
        if let Renumber::Orbit { first_index, orbits_per_lumi_section } = self.renumber {
            // 32 bits on the wire, as the generator writes them.
            let orbit = orbit_number(first_index + i as u64 + shift, orbits_per_lumi_section) as u32;
            let header = slot.start + DTH_HEADER_BYTES;
            self.bytes[header + 12..header + 16].copy_from_slice(&orbit.to_le_bytes());
            for &block in &self.block_headers[slot.first_block..slot.last_block] {
                self.bytes[block + 12..block + 16].copy_from_slice(&orbit.to_be_bytes());
            }
            return Ok(());
        }
        let lv1 = lv1_id(u64::from(slot.lv1).wrapping_add(shift));
        let fragment = slot.start + HEADER_BYTES;
        match &self.renumber {
            Renumber::Data { basis, bases } => {
                let crc = slot.crc ^ contribution(&bases[basis[i]], slot.lv1 ^ lv1);
                self.bytes[fragment + 4..fragment + 7].copy_from_slice(&lv1.to_le_bytes()[..3]);
                let crc_at = slot.end - fed::WORD_BYTES + 2;
                self.bytes[crc_at..crc_at + 2].copy_from_slice(&crc.to_le_bytes());
            }
            Renumber::Trigger { records } => {
                let (captured, event_type) = records[i];
                let lumi_shift = pass.wrapping_mul(u64::from(lumi_span));
                let record = TcdsRecord {
                    event_number: captured.event_number.wrapping_add(shift),
                    trigger_count: captured.trigger_count.wrapping_add(shift),
                    lumi_section: u32::try_from(u64::from(captured.lumi_section) + lumi_shift).unwrap_or(u32::MAX),
                    orbit: captured.orbit.wrapping_add(lumi_shift * ORBITS_PER_LUMI_SECTION),
                    ..captured
                };
                record
                    .write(&mut self.bytes[fragment..slot.end], event_type)
                    .map_err(|source| EmuError::Format { fed: self.fed, source })?;
            }
            Renumber::Orbit { .. } => {}
        }
        for &header in &self.block_headers[slot.first_block..slot.last_block] {
            self.bytes[header + 13..header + 16].copy_from_slice(&lv1.to_be_bytes()[1..]);
        }
        Ok(())
    }
}

/// What flipping each LV1 bit of the FED header does to the CRC-16 of a fragment of `len`
/// bytes: the CRC of a message with that bit set XOR that of the message without it (the same
/// for every message of that length, the CRC being affine).
fn lv1_contributions(len: usize) -> [u16; LV1_BITS] {
    let mut fragment = vec![0u8; len];
    let base = fed::fragment_crc(&fragment);
    std::array::from_fn(|bit| {
        // The LV1 id is bits 55:32 of the little-endian header word: bytes 4, 5 and 6.
        let (byte, mask) = (4 + bit / 8, 1u8 << (bit % 8));
        fragment[byte] ^= mask;
        let crc = fed::fragment_crc(&fragment) ^ base;
        fragment[byte] ^= mask;
        crc
    })
}

/// The change of CRC-16 when the LV1 bits in `flipped` change.
fn contribution(bases: &[u16; LV1_BITS], mut flipped: u32) -> u16 {
    let mut crc = 0;
    while flipped != 0 {
        crc ^= bases[flipped.trailing_zeros() as usize];
        flipped &= flipped - 1;
    }
    crc
}

/// Sends every stream of `capture` in a loop into `sink` on its own thread, until `limits` or
/// the stop line; returns when all streams have ended. The first stream error is returned.
pub(crate) fn run(
    capture: Capture,
    sink: &Sink,
    limits: Limits,
    stop: Option<Arc<StopLine>>,
) -> Result<RunSummary, EmuError> {
    check_stream_count(capture.streams.len())?;
    let polled = limits.seconds.is_some();
    let name = if capture.is_orbits() { dth_capture_path } else { capture_path };
    let writers = capture
        .streams
        .iter()
        .map(|s| open_named(sink, StreamName::Fed(s.fed), name, polled))
        .collect::<Result<Vec<_>, EmuError>>()?;
    let (events, lumi_span) = (capture.events, capture.lumi_span);
    let start = Instant::now();
    let results: Vec<Result<StreamSummary, EmuError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = capture
            .streams
            .into_iter()
            .zip(writers)
            .map(|(stream, writer)| {
                let stop = stop.as_ref().map(|line| (line.clone(), line.register()));
                let pass = Pass { events, lumi_span };
                scope.spawn(move || send_stream(stream, writer, pass, start, limits, stop))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("stream thread panicked")).collect()
    });
    let streams = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(RunSummary { streams, seconds: start.elapsed().as_secs_f64(), paced: false })
}

/// What every pass of a capture shares.
#[derive(Debug, Clone, Copy)]
struct Pass {
    /// Events per stream.
    events: u64,
    /// Lumi sections beyond the first.
    lumi_span: u32,
}

fn send_stream(
    mut stream: CapturedStream,
    mut out: Box<dyn StreamOut>,
    pass: Pass,
    start: Instant,
    limits: Limits,
    stop: Option<(Arc<StopLine>, Arc<StreamGauge>)>,
) -> Result<StreamSummary, EmuError> {
    let fed = stream.fed;
    let mut m = Meter::new(start, limits);
    let (mut sent, mut end) = (0u64, End::Events);
    let most = limits.events.unwrap_or(u64::MAX);
    while sent < most {
        if m.past_deadline() {
            end = End::Deadline;
            break;
        }
        let mut allowed = (most - sent).min(BATCH_EVENTS);
        if let Some((line, gauge)) = &stop {
            if sent >= line.limit() {
                end = End::Stopped;
                break;
            }
            allowed = allowed.min(line.limit() - sent);
            gauge.publish(sent, &m);
        }
        // A batch of consecutive events of this pass, the first whatever its size.
        let first = (sent % pass.events) as usize;
        let last_allowed = (first as u64 + allowed).min(pass.events) as usize;
        let from = stream.slots[first].start;
        let mut last = first + 1;
        while last < last_allowed && stream.slots[last].end - from <= BATCH_BYTES {
            last += 1;
        }
        for i in first..last {
            stream.renumber(i, sent / pass.events, pass.events, pass.lumi_span)?;
        }
        let batch = &stream.bytes[from..stream.slots[last - 1].end];
        let complete = write_all(&mut out, &mut [IoSlice::new(batch)], &mut m).map_err(|source| EmuError::Write {
            stream: StreamName::Fed(fed),
            bytes: m.bytes,
            source,
        })?;
        if !complete {
            end = End::Deadline;
            break;
        }
        sent += (last - first) as u64;
    }
    Ok(StreamSummary {
        fed,
        events: sent,
        faults: 0,
        bytes: m.bytes,
        seconds: m.start.elapsed().as_secs_f64(),
        write_seconds: m.write.as_secs_f64(),
        dead_seconds: 0.0,
        end,
    })
}
