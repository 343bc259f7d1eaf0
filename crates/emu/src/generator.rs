//! The pure generator: for event *n* of one FED, the fragment and its FEROL blocks. No I/O, no
//! clock, no thread; the same configuration gives the same bytes on every host.

use crate::error::EmuError;
use tessera_config::emulation::{ClockSpec, Fault, FaultSpec, FedSpec};
use tessera_formats::fed::{
    self, BX_PER_ORBIT, FedHeader, FedTrailer, MIN_FRAGMENT_BYTES, ORBIT_SECONDS, WORD_BYTES, event_type,
};
use tessera_formats::ferol::{FerolBlockHeader, FerolBlocks, HEADER_BYTES, MAX_DATA_BYTES};
use tessera_formats::seeded::SplitMix64;
use tessera_formats::seeded::{payload_seed, write_seeded_fragment};
use tessera_formats::tcds::{TCDS_FRAGMENT_BYTES, TcdsRecord, orbit_in_lumi_section};

/// Bytes sent instead of a fragment by [`Fault::Garbage`].
pub const GARBAGE_BYTES: usize = 64;

/// One trigger: when it fired and what the TCDS says about it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trigger {
    /// Triggers before this one since the start of the run (0 for the first).
    pub index: u64,
    /// Seconds since the start of the run.
    pub time_seconds: f64,
    /// Orbits since the start of the run.
    pub orbit_count: u64,
    /// Orbit number as written, keeping CMSSW's rule `ls = orbit / 2^18 + 1`
    /// ([`orbit_in_lumi_section`]).
    pub orbit: u64,
    /// Bunch crossing in the orbit, 0..3563.
    pub bx: u16,
    /// Lumi section, from 1.
    pub lumi_section: u32,
}

/// The trigger clock: a deterministic sequence of [`Trigger`]s.
#[derive(Debug, Clone)]
pub struct TriggerClock {
    spec: ClockSpec,
    rng: SplitMix64,
    time_seconds: f64,
    index: u64,
}

impl TriggerClock {
    /// A clock for `spec`; refuses what [`ClockSpec::validate`] refuses.
    pub fn new(spec: ClockSpec) -> Result<Self, EmuError> {
        spec.validate()?;
        Ok(TriggerClock { spec, rng: SplitMix64::new(spec.seed), time_seconds: 0.0, index: 0 })
    }

    /// The next trigger: an exponential wait after the previous one.
    pub fn next_trigger(&mut self) -> Trigger {
        let wait = -(1.0 - self.rng.unit()).ln() / self.spec.rate_hz;
        self.time_seconds += wait;
        let bx_count = (self.time_seconds / ORBIT_SECONDS * f64::from(BX_PER_ORBIT)) as u64;
        let orbit_count = bx_count / u64::from(BX_PER_ORBIT);
        let per_ls = self.spec.orbits_per_lumi_section;
        let lumi_section = u32::try_from(orbit_count / per_ls + 1).unwrap_or(u32::MAX);
        let trigger = Trigger {
            index: self.index,
            time_seconds: self.time_seconds,
            orbit_count,
            orbit: orbit_in_lumi_section(lumi_section, orbit_count % per_ls),
            bx: (bx_count % u64::from(BX_PER_ORBIT)) as u16,
            lumi_section,
        };
        self.index += 1;
        trigger
    }
}

/// Everything one FED stream's generator needs.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamConfig {
    /// Run number.
    pub run: u32,
    /// The FED and its sizes.
    pub fed: FedSpec,
    /// Event number of the first event (the LV1 id is its low 24 bits).
    pub first_event: u64,
    /// The trigger clock, the same for every FED of a run.
    pub clock: ClockSpec,
    /// Faults to inject; the first that strikes an event wins.
    pub faults: Vec<FaultSpec>,
    /// Seed of fault draws and garbage bytes.
    pub seed: u64,
}

/// What the I/O layer sends for one event; the bytes are [`Event::bytes`].
#[derive(Debug, Clone)]
pub enum Wire {
    /// The bytes are a fragment: send it in these FEROL blocks (headers from the plan, data
    /// ranges into the fragment), e.g. with vectored writes.
    Blocks(FerolBlocks),
    /// The bytes go on the wire as they are (a truncated fragment's blocks, or garbage).
    Raw,
    /// Send nothing for this event.
    Nothing,
    /// Close the stream before this event.
    Disconnect,
    /// Send nothing from this event on, the stream left open (see
    /// [`tessera_config::emulation::Fault::Stall`]).
    Stall,
}

/// One generated event of one FED stream.
#[derive(Debug)]
pub struct Event<'a> {
    /// 64-bit event number.
    pub number: u64,
    /// The trigger, shared by every FED of the event.
    pub trigger: Trigger,
    /// The fault injected, if any.
    pub fault: Option<Fault>,
    /// What to send.
    pub wire: Wire,
    /// The fragment ([`Wire::Blocks`]), the raw wire bytes ([`Wire::Raw`]), or nothing.
    pub bytes: &'a [u8],
}

impl Event<'_> {
    /// Bytes this event puts on the wire.
    pub fn wire_len(&self) -> usize {
        match &self.wire {
            Wire::Blocks(blocks) => blocks.wire_len(),
            Wire::Raw => self.bytes.len(),
            Wire::Nothing | Wire::Disconnect | Wire::Stall => 0,
        }
    }

    /// Appends the event's wire bytes to `out` (the copying form of [`Wire::Blocks`]).
    pub fn append_wire_bytes(&self, out: &mut Vec<u8>) {
        match &self.wire {
            Wire::Blocks(blocks) => {
                for block in blocks.clone() {
                    out.extend_from_slice(&block.header_bytes());
                    out.extend_from_slice(&self.bytes[block.data]);
                }
            }
            Wire::Raw => out.extend_from_slice(self.bytes),
            Wire::Nothing | Wire::Disconnect | Wire::Stall => {}
        }
    }
}

/// The generator of one FED's stream: event after event, each with its trigger, fragment, fault
/// and blocks. Owns one buffer, grown to the largest event's bytes (at most 1 MiB and its block
/// headers) and reused.
#[derive(Debug, Clone)]
pub struct StreamGenerator {
    config: StreamConfig,
    clock: TriggerClock,
    next_index: u64,
    buf: Vec<u8>,
}

impl StreamGenerator {
    /// A generator for `config`, whose FED, sizes and clock are checked.
    pub fn new(config: StreamConfig) -> Result<Self, EmuError> {
        config.fed.validate()?;
        let clock = TriggerClock::new(config.clock)?;
        Ok(StreamGenerator { config, clock, next_index: 0, buf: Vec::new() })
    }

    /// The FED id.
    pub fn fed(&self) -> u16 {
        self.config.fed.fed
    }

    /// The event number the next call to [`StreamGenerator::next_event`] generates.
    pub fn next_event_number(&self) -> u64 {
        self.config.first_event.wrapping_add(self.next_index)
    }

    /// Generates the next event.
    pub fn next_event(&mut self) -> Result<Event<'_>, EmuError> {
        let number = self.next_event_number();
        self.next_index += 1;
        let trigger = self.clock.next_trigger();
        let StreamConfig { run, fed: spec, seed, .. } = self.config;
        let fed = spec.fed;
        let fault = self
            .config
            .faults
            .iter()
            .enumerate()
            .find(|(i, f)| f.strikes(seed, *i, run, fed, number))
            .map(|(_, f)| f.fault);
        let format = |source| EmuError::Format { fed, source };
        match fault {
            Some(Fault::SkipEvent) => return Ok(self.event(number, trigger, fault, Wire::Nothing, 0)),
            Some(Fault::Disconnect) => return Ok(self.event(number, trigger, fault, Wire::Disconnect, 0)),
            Some(Fault::Stall) => return Ok(self.event(number, trigger, fault, Wire::Stall, 0)),
            Some(Fault::Garbage) => {
                self.buf.resize(GARBAGE_BYTES, 0);
                let mut rng = SplitMix64::new(payload_seed(run, fed, number) ^ seed);
                for word in self.buf.chunks_exact_mut(8) {
                    word.copy_from_slice(&rng.next_u64().to_le_bytes());
                }
                if self.buf.starts_with(&[0x47, 0x5A]) {
                    self.buf[0] ^= 0xFF;
                }
                return Ok(self.event(number, trigger, fault, Wire::Raw, GARBAGE_BYTES));
            }
            _ => {}
        }
        let len = self.write_fragment(number, &trigger).map_err(format)?;
        let frag = &mut self.buf[..len];
        let blocks = FerolBlocks::new(frag).map_err(format)?;
        match fault {
            Some(Fault::BadCrc) => {
                let at = if len > MIN_FRAGMENT_BYTES { WORD_BYTES } else { len - 6 };
                frag[at] ^= 1;
            }
            Some(Fault::WrongFedId) => {
                let mut header =
                    FedHeader::from_word(u64::from_le_bytes(frag[..8].try_into().expect("8")), 0).map_err(format)?;
                header.source_id ^= 0x800;
                fed::seal_fragment(frag, &header, &FedTrailer::default()).map_err(format)?;
            }
            Some(Fault::Truncate) => {
                let wire = self.truncate(len, number);
                return Ok(self.event(number, trigger, fault, Wire::Raw, wire));
            }
            _ => {}
        }
        Ok(self.event(number, trigger, fault, Wire::Blocks(blocks), len))
    }

    fn event(&self, number: u64, trigger: Trigger, fault: Option<Fault>, wire: Wire, len: usize) -> Event<'_> {
        Event { number, trigger, fault, wire, bytes: &self.buf[..len] }
    }

    /// Writes the event's fragment at the start of the buffer; returns its length.
    fn write_fragment(&mut self, number: u64, trigger: &Trigger) -> tessera_formats::Result<usize> {
        let StreamConfig { run, fed: spec, .. } = self.config;
        if spec.is_trigger() {
            self.buf.resize(TCDS_FRAGMENT_BYTES, 0);
            let record = TcdsRecord {
                run,
                lumi_section: trigger.lumi_section,
                bx: trigger.bx,
                orbit: trigger.orbit,
                trigger_count: trigger.index + 1,
                event_number: number,
                ..TcdsRecord::default()
            };
            record.write(&mut self.buf, event_type::PHYSICS)
        } else {
            let len = spec.size.fragment_bytes(run, spec.fed, number);
            self.buf.resize(len, 0);
            write_seeded_fragment(&mut self.buf, run, spec.fed, number, trigger.bx, len - MIN_FRAGMENT_BYTES)
        }
    }

    /// Replaces the fragment of `len` bytes at the start of the buffer by the FEROL blocks of
    /// its first `max(1, words / 2)` words; returns their length.
    fn truncate(&mut self, len: usize, number: u64) -> usize {
        let kept = (len / WORD_BYTES / 2).max(1) * WORD_BYTES;
        let blocks = kept.div_ceil(MAX_DATA_BYTES);
        let wire = kept + blocks * HEADER_BYTES;
        // Move the kept bytes out of the way, then lay blocks out from the start.
        self.buf.resize(wire + kept, 0);
        self.buf.copy_within(..kept, wire);
        let mut at = 0;
        for (number_in_fragment, start) in (0..kept).step_by(MAX_DATA_BYTES).enumerate() {
            let end = (start + MAX_DATA_BYTES).min(kept);
            let header = FerolBlockHeader {
                first: start == 0,
                last: end == kept,
                block_number: number_in_fragment as u16,
                data_words: ((end - start) / WORD_BYTES) as u16,
                fed_id: self.config.fed.fed,
                event_number: fed::lv1_id(number),
            };
            self.buf[at..at + HEADER_BYTES].copy_from_slice(&header.to_bytes());
            self.buf.copy_within(wire + start..wire + end, at + HEADER_BYTES);
            at += HEADER_BYTES + end - start;
        }
        wire
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_refuses_what_its_spec_refuses() {
        let err = TriggerClock::new(ClockSpec { rate_hz: 0.0, ..ClockSpec::default() }).unwrap_err();
        assert_eq!(err.to_string(), "trigger clock: rate 0 Hz is outside (0, 40079169]");
        assert!(TriggerClock::new(ClockSpec::default()).is_ok());
    }
}
