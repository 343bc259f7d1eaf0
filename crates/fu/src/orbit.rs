//! Orbit files, as a BU writes them in orbit mode (docs/formats.md §6, §7): no file header,
//! orbit after orbit, each orbit the orbit blocks of every source. An FU unpacks such a file into
//! the FRD records of its events, as CMSSW's DAQ source does in its DTH mode: orbit by orbit
//! (consecutive blocks with the same orbit number), every block's CRC-32C checked, every source's
//! block walked backwards in step, the fragments of one event id making one event. From there on
//! an event of an orbit file is an event like any other: the same checks, the same selection, the
//! same outputs.
//!
//! The FRD record of an orbit event (docs/formats.md §4): version 6, event number the low 32 bits
//! of the event id, run and lumi section the file's, payload the event's SlinkRocket fragments from
//! SR header to SR trailer in block order, flag `FRAGMENT_ERROR` when a fragment's SR trailer
//! carries a status. The records of a file are in file order: orbit by orbit, in each orbit the
//! first event first.
//!
//! An orbit whose CRC-32C fails, or whose events break a rule of the format, is a *bad orbit*:
//! the events that can still be unpacked are processed as error events with the reason; those of
//! its event count that cannot are counted as error events without bytes. An orbit that cannot be
//! delimited (a bad orbit header, a block running past the end of the file, ...) ends the file's
//! reading: it is counted as a bad orbit, and the events the BU's index JSON counts beyond what
//! was read as error events, as for an event file that breaks off.

use std::ops::Range;
use tessera_formats::Result;
use tessera_formats::frd::{FRD_HEADER_BYTES, flags, write_frd_event};
use tessera_formats::orbit::{FileOrbit, OrbitEvent, OrbitFile};
use tessera_formats::raw::{RAW_V2_HEADER_BYTES, RawFileHeader, data_type};

/// An orbit file unpacked into FRD records, its buffers reused from file to file.
#[derive(Debug, Default)]
pub struct UnpackedOrbits {
    /// A RAW_0002 file of the events unpacked (docs/formats.md §5): its header, then one FRD v6
    /// record per event in file order.
    image: Vec<u8>,
    /// Records unpacked.
    records: u32,
    /// Records of bad orbits, by record index, each range with its reason.
    bad_records: Vec<(Range<u32>, String)>,
    /// Events of bad orbits that could not be unpacked.
    lost_events: u64,
    /// Orbits met, the one that could not be delimited included.
    orbits: u64,
    /// Bad orbits among them.
    bad_orbits: u64,
    /// What was wrong with each bad orbit, with its file offset.
    problems: Vec<String>,
    /// Why the file's reading ended before its end, with the file offset.
    broken: Option<String>,
}

impl UnpackedOrbits {
    /// Unpacks the orbit file `bytes` of run `run` and lumi section `lumi_section` (the file's, from
    /// its name), replacing what this held. Never fails: what cannot be read is counted and said.
    pub fn unpack(&mut self, bytes: &[u8], run: u32, lumi_section: u32) {
        self.image.clear();
        self.image.resize(RAW_V2_HEADER_BYTES, 0);
        self.records = 0;
        self.bad_records.clear();
        self.lost_events = 0;
        self.orbits = 0;
        self.bad_orbits = 0;
        self.problems.clear();
        self.broken = None;
        let mut events: Vec<OrbitEvent<'_>> = Vec::new();
        for orbit in OrbitFile::new(bytes) {
            self.orbits += 1;
            let orbit = match orbit {
                Ok(orbit) => orbit,
                Err(e) => {
                    self.bad_orbits += 1;
                    self.broken = Some(format!("an orbit that cannot be read: {e}"));
                    break;
                }
            };
            let first = self.records;
            let problem = self.unpack_orbit(&orbit, run, lumi_section, &mut events);
            if let Some(problem) = problem {
                let reason = format!("orbit {} at byte {}: {problem}", orbit.orbit(), orbit.offset());
                self.bad_orbits += 1;
                self.lost_events += u64::from(orbit.event_count()).saturating_sub(u64::from(self.records - first));
                self.bad_records.push((first..self.records, reason.clone()));
                self.problems.push(reason);
            }
        }
        let header = RawFileHeader::v2(data_type::FRD_EVENTS, self.records, run, lumi_section, self.image.len() as u64);
        self.image[..RAW_V2_HEADER_BYTES].copy_from_slice(&header.to_bytes());
    }

    /// Appends the records of `orbit`'s events (walked into `events`, last first, then written
    /// first first); what is wrong with the orbit, if anything.
    fn unpack_orbit<'a>(
        &mut self,
        orbit: &FileOrbit<'a>,
        run: u32,
        lumi_section: u32,
        events: &mut Vec<OrbitEvent<'a>>,
    ) -> Option<String> {
        let mut problem = orbit.check_crcs().err().map(|e| e.to_string());
        events.clear();
        for event in orbit.events() {
            match event {
                Ok(event) => events.push(event),
                Err(e) => {
                    problem.get_or_insert_with(|| e.to_string());
                    break;
                }
            }
        }
        for event in events.iter().rev() {
            if let Err(e) = self.push_record(event, run, lumi_section) {
                problem.get_or_insert_with(|| format!("event {}: {e}", event.event_id));
            }
        }
        problem
    }

    /// Appends the FRD record of `event`.
    fn push_record(&mut self, event: &OrbitEvent<'_>, run: u32, lumi_section: u32) -> Result<()> {
        let fragments: Vec<&[u8]> = event.fragments.iter().map(|f| f.as_bytes()).collect();
        let payload: usize = fragments.iter().map(|f| f.len()).sum();
        let status = event.fragments.iter().any(|f| f.status() != 0);
        let at = self.image.len();
        self.image.resize(at + FRD_HEADER_BYTES + payload, 0);
        let flags = if status { flags::FRAGMENT_ERROR } else { 0 };
        // The FRD event number is the low 32 bits of the event id.
        match write_frd_event(&mut self.image[at..], flags, run, lumi_section, event.event_id as u32, &fragments) {
            Ok(_) => {
                self.records += 1;
                Ok(())
            }
            Err(e) => {
                self.image.truncate(at);
                Err(e)
            }
        }
    }

    /// The unpacked events as a RAW_0002 file: header, then their FRD records.
    pub fn image(&self) -> &[u8] {
        &self.image
    }

    /// Why record `index` of [`UnpackedOrbits::image`] is an error event (its orbit is bad), if it
    /// is one.
    pub fn bad_record(&self, index: usize) -> Option<&str> {
        let index = u32::try_from(index).ok()?;
        self.bad_records.iter().find(|(records, _)| records.contains(&index)).map(|(_, reason)| reason.as_str())
    }

    /// Events of bad orbits that could not be unpacked (error events without bytes).
    pub fn lost_events(&self) -> u64 {
        self.lost_events
    }

    /// Orbits met in the file, bad ones included.
    pub fn orbits(&self) -> u64 {
        self.orbits
    }

    /// Bad orbits: a CRC-32C that fails, a rule broken, or an orbit that cannot be read.
    pub fn bad_orbits(&self) -> u64 {
        self.bad_orbits
    }

    /// What was wrong with each bad orbit that was read, with its file offset.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Why the reading ended before the end of the file (an orbit that cannot be read), with the
    /// file offset; the events beyond it are unknown.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }
}
