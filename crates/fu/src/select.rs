//! Applying a selection [`Menu`] to events: what an event holds ([`EventSummary`]) and which
//! streams it goes to ([`MenuSelector`]).
//!
//! ```
//! use tessera_fu::menu::Menu;
//! use tessera_fu::select::{EventSummary, MenuSelector};
//! let mut selector = MenuSelector::new(&Menu::default());
//! assert_eq!(selector.streams(), ["Physics", "Express", "Calibration"]);
//! // An event without fragments: no trigger type or BX, so only `express` may take it.
//! let mut summary = EventSummary::default();
//! (summary.run, summary.lumi_section, summary.event) = (1, 1, 7);
//! let streams = selector.select(&summary);
//! assert!(!streams.contains(0) && !streams.contains(2));
//! ```

use crate::StreamSet;
use crate::menu::{ByteRange, Conditions, Menu};
use tessera_formats::FormatError;
use tessera_formats::frd::FrdEvent;
use tessera_formats::orbit::{FRAME_BYTES, SR_TRAILER_MARKER, SlinkRocketHeader, SlinkRocketTrailer, UNIT_BYTES};
use tessera_formats::seeded::{GOLDEN, mix};
use tessera_formats::tcds::{TcdsRecord, is_tcds_fed};

/// What the menu's conditions look at in one event, read from its FRD record.
///
/// The FEDs are a sorted list rather than a map, and [`EventSummary::read`] refills a summary in
/// place, so that summarizing a stream of events allocates only while the largest event grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSummary {
    /// Run number, from the FRD header.
    pub run: u32,
    /// Lumi section, from the FRD header.
    pub lumi_section: u32,
    /// Event number, from the FRD header.
    pub event: u32,
    /// FRD payload size in bytes (the record's header excluded).
    pub payload_bytes: u32,
    /// Trigger type: the event type in the FED header of the trigger fragment (of an event
    /// unpacked from an orbit file, the physics type in the trigger source's SR header); `None`
    /// without a trigger fragment.
    pub trigger_type: Option<u8>,
    /// Bunch crossing, from the trigger record (of an event unpacked from an orbit file, the
    /// trigger source's SR trailer); `None` without a trigger fragment.
    pub bx: Option<u16>,
    /// (FED source id, fragment size in bytes with header and trailer), sorted by FED id.
    feds: Vec<(u16, u32)>,
}

/// An event that cannot be summarized.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SummaryError {
    /// The payload does not split into FED fragments, or the trigger fragment is malformed.
    #[error("run {run} event {event}: {source}")]
    Format {
        /// Run number, from the FRD header.
        run: u32,
        /// Event number, from the FRD header.
        event: u32,
        /// What is wrong, at which offset in the record.
        source: FormatError,
    },
    /// Two fragments of the event have the same FED id.
    #[error("run {run} event {event}: FED {fed} has two fragments")]
    DuplicateFed {
        /// Run number, from the FRD header.
        run: u32,
        /// Event number, from the FRD header.
        event: u32,
        /// The FED id.
        fed: u16,
    },
}

impl EventSummary {
    /// Summarizes `event`: walks its fragments from the end and reads its trigger fragment (FED
    /// id 1024, or another of 1024..=1099; the last one in the payload if there are several).
    /// An event unpacked from an orbit file, whose payload is SlinkRocket fragments, is read the
    /// same way, each source's fragment standing for a FED's (see [`EventSummary::read`]).
    pub fn from_frd(event: &FrdEvent<'_>) -> Result<EventSummary, SummaryError> {
        let mut summary = EventSummary::default();
        summary.read(event)?;
        Ok(summary)
    }

    /// Replaces this summary by that of `event`, reusing its FED list. A payload of SlinkRocket
    /// fragments (an event an FU unpacked from an orbit file, docs/formats.md §6) is read as
    /// one fragment per source; any other as FED fragments (docs/formats.md §4). On error the
    /// summary is left partly filled and must not be selected.
    pub fn read(&mut self, event: &FrdEvent<'_>) -> Result<(), SummaryError> {
        let header = &event.header;
        let (run, number) = (header.run, header.event);
        self.run = run;
        self.lumi_section = header.lumi_section;
        self.event = number;
        self.payload_bytes = header.payload_bytes;
        self.trigger_type = None;
        self.bx = None;
        self.feds.clear();
        let format = |source: FormatError| SummaryError::Format { run, event: number, source };
        if !self.read_orbit_fragments(event.payload()) {
            self.read_fed_fragments(event).map_err(format)?;
        }
        // Fragments are usually in source order, so walking backwards gives a reversed sorted list.
        self.feds.reverse();
        self.feds.sort_unstable_by_key(|&(fed, _)| fed);
        if let Some(pair) = self.feds.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(SummaryError::DuplicateFed { run, event: number, fed: pair[0].0 });
        }
        Ok(())
    }

    /// Reads the FED fragments of `event`'s payload (docs/formats.md §4), last first.
    fn read_fed_fragments(&mut self, event: &FrdEvent<'_>) -> Result<(), FormatError> {
        for item in event.fragments() {
            let (offset, fragment) = item?;
            let fed = fragment.header.source_id;
            // A fragment is at most 2^24 words, so its size fits in 32 bits.
            self.feds.push((fed, fragment.len() as u32));
            if is_tcds_fed(fed) && self.trigger_type.is_none() {
                let (record, _) = TcdsRecord::parse(fragment.as_bytes()).map_err(|e| e.shifted(offset))?;
                self.trigger_type = Some(fragment.header.event_type);
                self.bx = Some(record.bx);
            }
        }
        Ok(())
    }

    /// Reads `payload` as the SlinkRocket fragments of an event an FU unpacked from an orbit
    /// file (docs/formats.md §6), SR header to SR trailer back to back, last first: each one a
    /// source (a source id above 65535, which no menu can name, is left out), and the trigger
    /// source's (1024..=1099) SR header's physics type and SR trailer's BX give the trigger type
    /// and the BX. False, with nothing kept, when the payload is not exactly such fragments: a
    /// FED fragment's trailer never ends with the SR trailer's marker 0xAA (its bits 59:56 are
    /// zero), and a payload that does is walked as FED fragments if it is not SR fragments.
    fn read_orbit_fragments(&mut self, payload: &[u8]) -> bool {
        if payload.last() != Some(&SR_TRAILER_MARKER) || !payload.len().is_multiple_of(FRAME_BYTES) {
            return false;
        }
        let mut end = payload.len();
        while end > 0 {
            let Ok(trailer) = SlinkRocketTrailer::parse(payload, end - FRAME_BYTES) else { break };
            let len = trailer.length_units as usize * UNIT_BYTES;
            let Some(start) = end.checked_sub(len).filter(|_| len >= 2 * FRAME_BYTES) else { break };
            let Ok(header) = SlinkRocketHeader::parse(payload, start) else { break };
            if let Ok(source) = u16::try_from(header.source_id) {
                // An SR length is at most 2^20 units, so the size fits in 32 bits.
                self.feds.push((source, len as u32));
                if is_tcds_fed(source) && self.trigger_type.is_none() {
                    self.trigger_type = Some(header.physics_type);
                    self.bx = Some(trailer.bx);
                }
            }
            end = start;
        }
        if end != 0 {
            (self.trigger_type, self.bx) = (None, None);
            self.feds.clear();
        }
        end == 0
    }

    /// The event's FEDs, (source id, fragment size in bytes), sorted by FED id.
    pub fn feds(&self) -> &[(u16, u32)] {
        &self.feds
    }

    /// The size in bytes of FED `fed`'s fragment, header and trailer included; `None` when the
    /// event has no fragment of that FED.
    pub fn fed_bytes(&self, fed: u16) -> Option<u32> {
        self.feds.binary_search_by_key(&fed, |&(id, _)| id).ok().map(|i| self.feds[i].1)
    }

    /// Whether the event has a fragment of FED `fed`.
    pub fn has_fed(&self, fed: u16) -> bool {
        self.fed_bytes(fed).is_some()
    }
}

/// Applies a [`Menu`] to events: per path, its conditions, then its prescale; the event goes to
/// the streams of every path that accepts it.
///
/// The prescale counters and the path counts live in the selector, so one selector should see
/// all the events of one filter unit, in order.
#[derive(Debug, Clone)]
pub struct MenuSelector {
    streams: Vec<String>,
    paths: Vec<PathState>,
}

/// One path, ready to apply.
#[derive(Debug, Clone)]
struct PathState {
    name: String,
    streams: StreamSet,
    prescale: u32,
    /// Bit `t` set: trigger type `t` passes; `None`: any event passes, even without a trigger.
    trigger_types: Option<u16>,
    bx: Option<(u16, u16)>,
    feds_present: Vec<u16>,
    feds_absent: Vec<u16>,
    fed_size: Option<(u16, ByteRange)>,
    event_size: Option<ByteRange>,
    /// An event passes when its draw, 53 random bits, is below this.
    random_below: Option<u64>,
    /// FNV-1a of the path name, mixed into each draw.
    name_hash: u64,
    passed: u64,
    accepted: u64,
}

impl MenuSelector {
    /// A selector for `menu`, with every counter at zero.
    ///
    /// The menu should be [valid](Menu::validate). Of an invalid menu, what a selector cannot
    /// represent is ignored: a path's stream that is not in the menu's list or is past the
    /// 64th, a trigger type above 15; a random fraction is clamped to 0..=1.
    pub fn new(menu: &Menu) -> MenuSelector {
        let paths = menu
            .paths
            .iter()
            .map(|path| {
                let mut streams = StreamSet::NONE;
                for index in path.streams.iter().filter_map(|s| menu.stream_index(s)) {
                    if index < StreamSet::MAX_STREAMS {
                        streams.insert(index);
                    }
                }
                PathState::new(&path.name, streams, path.prescale, &path.conditions)
            })
            .collect();
        MenuSelector { streams: menu.streams.clone(), paths }
    }

    /// The menu's stream names: bit `i` of a [`StreamSet`] from [`MenuSelector::select`] is
    /// stream `i` of this list.
    pub fn streams(&self) -> &[String] {
        &self.streams
    }

    /// The streams `event` goes to; empty when no path accepts it. Counts the event in every
    /// path whose conditions it passes and advances those paths' prescale counters.
    pub fn select(&mut self, event: &EventSummary) -> StreamSet {
        let mut streams = StreamSet::NONE;
        for path in &mut self.paths {
            if path.prescale == 0 || !path.passes(event) {
                continue;
            }
            let accept = path.passed % u64::from(path.prescale) == 0;
            path.passed += 1;
            if accept {
                path.accepted += 1;
                streams.0 |= path.streams.0;
            }
        }
        streams
    }

    /// Per path, in menu order: its name, the events that passed its conditions, and the events
    /// it accepted (those that also passed its prescale).
    pub fn path_counts(&self) -> Vec<(String, u64, u64)> {
        self.paths.iter().map(|p| (p.name.clone(), p.passed, p.accepted)).collect()
    }
}

impl PathState {
    fn new(name: &str, streams: StreamSet, prescale: u32, c: &Conditions) -> PathState {
        let trigger_types =
            c.trigger_type.as_ref().map(|types| types.iter().filter(|&&t| t < 16).fold(0u16, |mask, &t| mask | 1 << t));
        let sorted = |feds: &[u16]| {
            let mut feds = feds.to_vec();
            feds.sort_unstable();
            feds.dedup();
            feds
        };
        // 2^53 draws; a fraction f passes the draws below f · 2^53 (all of them for f = 1).
        let random_below = c.random_fraction.map(|f| {
            let f = if f.is_nan() { 0.0 } else { f.clamp(0.0, 1.0) };
            (f * (1u64 << 53) as f64) as u64
        });
        PathState {
            name: name.to_owned(),
            streams,
            prescale,
            trigger_types,
            bx: c.bx.map(|bx| (bx.min, bx.max)),
            feds_present: sorted(&c.feds_present),
            feds_absent: sorted(&c.feds_absent),
            fed_size: c.fed_size_bytes.map(|s| (s.fed, s.range())),
            event_size: c.event_size_bytes,
            random_below,
            name_hash: fnv1a(name.as_bytes()),
            passed: 0,
            accepted: 0,
        }
    }

    /// Whether `event` passes every condition: the cheap ones first, the draw last.
    fn passes(&self, event: &EventSummary) -> bool {
        if let Some(mask) = self.trigger_types {
            match event.trigger_type {
                Some(t) if t < 16 && mask & (1 << t) != 0 => {}
                _ => return false,
            }
        }
        if let Some((min, max)) = self.bx
            && !event.bx.is_some_and(|bx| (min..=max).contains(&bx))
        {
            return false;
        }
        if let Some(range) = self.event_size
            && !range.contains(event.payload_bytes.into())
        {
            return false;
        }
        if let Some((fed, range)) = self.fed_size
            && !event.fed_bytes(fed).is_some_and(|bytes| range.contains(bytes.into()))
        {
            return false;
        }
        if !self.feds_present.iter().all(|&fed| event.has_fed(fed))
            || self.feds_absent.iter().any(|&fed| event.has_fed(fed))
        {
            return false;
        }
        self.random_below.is_none_or(|below| draw(event.run, event.event, self.name_hash) < below)
    }
}

/// 53 pseudo-random bits for an event on a path: SplitMix64 of the run and event number, mixed
/// with the path name's hash. The same inputs give the same draw on every machine.
fn draw(run: u32, event: u32, name_hash: u64) -> u64 {
    let event_key = splitmix64((u64::from(run) << 32) | u64::from(event));
    splitmix64(event_key ^ name_hash) >> 11
}

/// The SplitMix64 output for state `x`.
fn splitmix64(x: u64) -> u64 {
    mix(x.wrapping_add(GOLDEN))
}

/// The 64-bit FNV-1a hash of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3))
}

/// The built-in HLT: the menu applied to every event's summary. An event whose fragments cannot
/// be walked is a failure of the HLT for that event, set aside with the reason.
#[derive(Debug, Clone)]
pub struct MenuHlt {
    selector: MenuSelector,
    summary: EventSummary,
}

impl MenuHlt {
    /// The HLT of `menu`; refuses a menu that names [`ERROR_STREAM`](crate::ERROR_STREAM),
    /// which FUs keep for events set aside.
    pub fn new(menu: &Menu) -> Result<MenuHlt, crate::FuError> {
        if menu.streams.iter().any(|s| s == crate::ERROR_STREAM) {
            return Err(crate::FuError::Hlt(format!(
                "the menu names a stream {:?}, which is kept for events set aside; rename it",
                crate::ERROR_STREAM
            )));
        }
        Ok(MenuHlt { selector: MenuSelector::new(menu), summary: EventSummary::default() })
    }
}

impl crate::Hlt for MenuHlt {
    fn streams(&self) -> &[String] {
        self.selector.streams()
    }

    /// It judges the events it is given, never the file.
    fn reads_file(&self) -> bool {
        false
    }

    /// About a megabyte of events at a few kB to tens of kB each.
    fn batch_events(&self) -> usize {
        64
    }

    fn select_file(
        &mut self,
        _file: &std::path::Path,
        events: &[FrdEvent<'_>],
        verdicts: &mut Vec<crate::Verdict>,
    ) -> Result<(), crate::FuError> {
        for event in events {
            verdicts.push(match self.summary.read(event) {
                Ok(()) => crate::Verdict::Streams(self.selector.select(&self.summary)),
                Err(e) => crate::Verdict::Failed(e.to_string()),
            });
        }
        Ok(())
    }
}
