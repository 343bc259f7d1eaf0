//! The pure DTH generator: for orbit after orbit of one source, the stream blocks (`47 5A`) of
//! that source's orbit block. No I/O, no clock, no thread; the same configuration gives the same
//! bytes on every host.
//!
//! Every source of a run agrees on each orbit's events without talking to the others: the
//! orbit's event count (a Poisson draw whose mean is the L1 rate over the LHC orbit rate) and the
//! events' BXs (distinct, sorted) are drawn from SplitMix64 seeded with [`orbit_seed`]`(seed, run,
//! orbit)`, which does not name the source, and event numbers run on from one orbit to the next.
//! A fragment's payload size comes from the source's [`SizeModel`] and its bytes from
//! `payload_seed(run, source, event)`, as the FEROL generator's do, so every byte can be
//! recomputed downstream. docs/formats.md §12 gives the rules.

use crate::error::EmuError;
use tessera_config::emulation::{EmulationError, OrbitFault, OrbitFaultSpec, SizeModel};
use tessera_formats::fed::{BX_PER_ORBIT, ORBIT_SECONDS, event_type};
use tessera_formats::orbit::{
    DTH_HEADER_BYTES, DTH_SIGNATURE, FragmentInfo, ORBIT_HEADER_BYTES, OrbitBlockWriter, UNIT_BYTES, dth_wire_len,
    orbit_fragment_len, write_dth_blocks,
};
use tessera_formats::seeded::{SplitMix64, fill_payload, mix};
use tessera_formats::tcds::{orbit_index, orbit_number};

/// The LHC orbit rate in Hz (one orbit every 88.924 µs): 11.245 kHz.
pub const LHC_ORBIT_HZ: f64 = 1.0 / ORBIT_SECONDS;
/// The HL-LHC L1 trigger rate the DTH emulator draws events for unless told otherwise.
pub const DEFAULT_L1_RATE_HZ: f64 = 750_000.0;
/// Bytes sent instead of an orbit by [`OrbitFault::Garbage`].
pub const GARBAGE_BYTES: usize = 64;
/// Largest Poisson mean drawn in one piece: `exp(-mean)` stays a normal f64 well below it.
const POISSON_PIECE: f64 = 500.0;

/// The seed of orbit `orbit`'s draws (event count, then BXs), the same for every source.
pub fn orbit_seed(seed: u64, run: u32, orbit: u32) -> u64 {
    mix(mix(mix(seed) ^ u64::from(run)) ^ u64::from(orbit))
}

/// The events of one orbit, shared by every source: how many, and the BX of each, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrbitEvents {
    /// The orbit number.
    pub orbit: u32,
    /// Event number of the orbit's first event (of the next orbit's when there is none).
    pub first_event: u64,
    /// The BX of each event in order: distinct and increasing, 0..3564.
    pub bxs: Vec<u16>,
}

impl OrbitEvents {
    /// Draws orbit `orbit`'s events: a count from a Poisson law of mean `mean_events` (at most
    /// 3564, one event per BX), then that many distinct BXs, all from SplitMix64 seeded with
    /// [`orbit_seed`].
    pub fn draw(seed: u64, run: u32, orbit: u32, first_event: u64, mean_events: f64) -> Self {
        let mut rng = SplitMix64::new(orbit_seed(seed, run, orbit));
        let count = poisson(&mut rng, mean_events).min(u64::from(BX_PER_ORBIT)) as u16;
        // Floyd's sampling of `count` distinct BXs, kept sorted.
        let mut bxs: Vec<u16> = Vec::with_capacity(count.into());
        for j in BX_PER_ORBIT - count..BX_PER_ORBIT {
            let t = (rng.next_u64() % (u64::from(j) + 1)) as u16;
            let pick = if bxs.binary_search(&t).is_ok() { j } else { t };
            if let Err(at) = bxs.binary_search(&pick) {
                bxs.insert(at, pick);
            }
        }
        OrbitEvents { orbit, first_event, bxs }
    }

    /// Number of events.
    pub fn count(&self) -> u16 {
        self.bxs.len() as u16
    }

    /// Event number and BX of each event.
    pub fn events(&self) -> impl Iterator<Item = (u64, u16)> + '_ {
        self.bxs.iter().enumerate().map(|(i, &bx)| (self.first_event.wrapping_add(i as u64), bx))
    }
}

/// A Poisson draw of mean `mean` by inversion, in pieces of mean at most 500 (a sum of Poisson
/// draws is one).
fn poisson(rng: &mut SplitMix64, mean: f64) -> u64 {
    let pieces = (mean / POISSON_PIECE).ceil().max(1.0);
    let piece = mean / pieces;
    let mut total = 0;
    for _ in 0..pieces as u64 {
        let u = rng.unit();
        let mut p = (-piece).exp();
        let mut cdf = p;
        let mut k = 0u64;
        while u >= cdf && p > 0.0 {
            k += 1;
            p *= piece / k as f64;
            cdf += p;
        }
        total += k;
    }
    total
}

/// Everything one DTH source stream's generator needs.
#[derive(Debug, Clone, PartialEq)]
pub struct OrbitStreamConfig {
    /// Run number.
    pub run: u32,
    /// Source id (in the orbit, SlinkRocket and stream block headers, and the payload seed).
    pub source: u16,
    /// Payload sizes: the model's draw for (run, source, event) is the payload's length in bytes,
    /// before the zero padding to 16.
    pub size: SizeModel,
    /// Number of the first orbit.
    pub first_orbit: u32,
    /// Orbits per lumi section, 1..=2^18: orbits are numbered as `tcds::orbit_number` says, so
    /// that each is in the lumi section CMSSW's rule gives it (2^18, real data, numbers them on).
    pub orbits_per_lumi_section: u64,
    /// Event number of the first event (44 bits on the wire).
    pub first_event: u64,
    /// Mean L1 rate in Hz: events per orbit are Poisson of mean `l1_rate_hz / LHC_ORBIT_HZ`.
    pub l1_rate_hz: f64,
    /// Seed of the orbits' draws, fault draws and garbage bytes; the same for every source.
    pub seed: u64,
    /// Faults to inject; the first that strikes an orbit wins.
    pub faults: Vec<OrbitFaultSpec>,
    /// Largest stream block, header included (`orbit::DEFAULT_MAX_BLOCK_BYTES` by default).
    pub max_block_bytes: usize,
}

impl OrbitStreamConfig {
    /// Checks the sizes and the L1 rate: finite, positive, at most one event per BX.
    pub fn validate(&self) -> Result<(), EmulationError> {
        self.size.validate()?;
        let max_rate = f64::from(BX_PER_ORBIT) * LHC_ORBIT_HZ;
        if !(self.l1_rate_hz.is_finite() && self.l1_rate_hz > 0.0 && self.l1_rate_hz <= max_rate) {
            return Err(EmulationError::BadClock(format!(
                "L1 rate {} Hz is outside (0, {max_rate:.0}]",
                self.l1_rate_hz
            )));
        }
        Ok(())
    }

    /// Mean events per orbit.
    pub fn mean_events(&self) -> f64 {
        self.l1_rate_hz / LHC_ORBIT_HZ
    }
}

/// One generated orbit of one source stream.
#[derive(Debug)]
pub struct Orbit<'a> {
    /// The orbit's events, as every source draws them (what this source sends may differ under a
    /// fault).
    pub events: &'a OrbitEvents,
    /// The fault injected, if any.
    pub fault: Option<OrbitFault>,
    /// The bytes to send for the orbit: its stream blocks, or what a fault puts instead (nothing
    /// for a skipped orbit or a disconnect).
    pub bytes: &'a [u8],
    /// The stream ends after `bytes` (a truncation or a disconnect).
    pub ends_stream: bool,
}

/// The generator of one source's DTH stream: orbit after orbit. Owns its buffers, grown to the
/// largest orbit and reused.
#[derive(Debug, Clone)]
pub struct OrbitGenerator {
    config: OrbitStreamConfig,
    /// The next orbit's index in the run (`tcds::orbit_index` of its number).
    next_index: u64,
    next_event: u64,
    events: OrbitEvents,
    block: Vec<u8>,
    wire: Vec<u8>,
    payload: Vec<u8>,
}

impl OrbitGenerator {
    /// A generator for `config`, whose sizes and rate are checked.
    pub fn new(config: OrbitStreamConfig) -> Result<Self, EmuError> {
        config.validate()?;
        let events = OrbitEvents { orbit: config.first_orbit, first_event: config.first_event, bxs: Vec::new() };
        let next_index = orbit_index(config.first_orbit.into(), config.orbits_per_lumi_section).ok_or_else(|| {
            EmulationError::BadClock(format!(
                "first orbit {} is past the {} orbits of its lumi section",
                config.first_orbit, config.orbits_per_lumi_section
            ))
        })?;
        Ok(OrbitGenerator {
            next_index,
            next_event: config.first_event,
            config,
            events,
            block: Vec::new(),
            wire: Vec::new(),
            payload: Vec::new(),
        })
    }

    /// The source id.
    pub fn source(&self) -> u16 {
        self.config.source
    }

    /// Generates the next orbit.
    pub fn next_orbit(&mut self) -> Result<Orbit<'_>, EmuError> {
        let OrbitStreamConfig { run, source, seed, .. } = self.config;
        // Orbit numbers are 32 bits on the wire.
        let orbit = orbit_number(self.next_index, self.config.orbits_per_lumi_section) as u32;
        self.events = OrbitEvents::draw(seed, run, orbit, self.next_event, self.config.mean_events());
        self.next_index += 1;
        self.next_event = self.next_event.wrapping_add(self.events.count().into());
        let fault = self
            .config
            .faults
            .iter()
            .enumerate()
            .find(|(i, f)| f.strikes(seed, *i, run, source, orbit))
            .map(|(_, f)| f.fault);
        let (len, ends_stream) = match fault {
            Some(OrbitFault::SkipOrbit) => (0, false),
            Some(OrbitFault::Disconnect) => (0, true),
            Some(OrbitFault::Garbage) => {
                self.wire.resize(GARBAGE_BYTES, 0);
                let mut rng = SplitMix64::new(orbit_seed(seed, run, orbit) ^ u64::from(source));
                for word in self.wire.chunks_exact_mut(8) {
                    word.copy_from_slice(&rng.next_u64().to_le_bytes());
                }
                if self.wire.starts_with(&DTH_SIGNATURE.to_be_bytes()) {
                    self.wire[0] ^= 0xFF;
                }
                (GARBAGE_BYTES, false)
            }
            _ => {
                let len = self.write_orbit(fault).map_err(|e| EmuError::Format { fed: source, source: e })?;
                match fault {
                    Some(OrbitFault::Truncate) => ((len / UNIT_BYTES / 2).max(1) * UNIT_BYTES, true),
                    _ => (len, false),
                }
            }
        };
        Ok(Orbit { events: &self.events, fault, bytes: &self.wire[..len], ends_stream })
    }

    /// Writes the orbit's block and its stream blocks (into `wire`) with what `fault` changes in
    /// them; returns the stream bytes' length.
    fn write_orbit(&mut self, fault: Option<OrbitFault>) -> tessera_formats::Result<usize> {
        let OrbitStreamConfig { run, source, size, max_block_bytes, .. } = self.config;
        let mut fragments: Vec<(u64, u16)> = self.events.events().collect();
        match fault {
            Some(OrbitFault::DropEvent) => {
                fragments.pop();
            }
            Some(OrbitFault::ExtraEvent) => {
                let bx = self.events.bxs.last().copied().unwrap_or(0);
                fragments.push((self.next_event, bx));
            }
            _ => {}
        }
        let block_len = ORBIT_HEADER_BYTES
            + fragments.iter().map(|&(e, _)| orbit_fragment_len(size.fragment_bytes(run, source, e))).sum::<usize>();
        self.block.resize(block_len, 0);
        let block_source =
            if fault == Some(OrbitFault::WrongSourceId) { u32::from(source) ^ 0x800 } else { source.into() };
        let mut writer = OrbitBlockWriter::new(&mut self.block, block_source, run, self.events.orbit)?;
        for (event, bx) in fragments {
            let len = size.fragment_bytes(run, source, event);
            self.payload.resize(len, 0);
            fill_payload(run, source, event, &mut self.payload);
            let info =
                FragmentInfo { event_id: event, bx, physics_type: event_type::PHYSICS, ..FragmentInfo::default() };
            writer.push_fragment(&info, &self.payload)?;
        }
        let len = writer.finish()?;
        if fault == Some(OrbitFault::BadCrc) {
            self.block[28] ^= 1;
        }
        self.wire.resize(dth_wire_len(len, max_block_bytes), 0);
        let wire_len = write_dth_blocks(&self.block[..len], max_block_bytes, &mut self.wire)?;
        if fault == Some(OrbitFault::WrongSourceId) {
            // Stream block headers carry the configured id: word 1, bits 63:32, big-endian.
            let mut at = 0;
            while at < wire_len {
                self.wire[at + 8..at + 12].copy_from_slice(&u32::from(source).to_be_bytes());
                let data = u32::from_be_bytes(self.wire[at + 4..at + 8].try_into().expect("4")) & 0xFF_FFFF;
                at += DTH_HEADER_BYTES + data as usize;
            }
        }
        Ok(wire_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_beyond_one_event_per_bx_are_refused() {
        let config = |l1_rate_hz| OrbitStreamConfig {
            run: 1,
            source: 1,
            size: SizeModel::Fixed(64),
            first_orbit: 1,
            orbits_per_lumi_section: 1 << 18,
            first_event: 1,
            l1_rate_hz,
            seed: 1,
            faults: Vec::new(),
            max_block_bytes: 8192,
        };
        assert!(config(40e6).validate().is_ok());
        let err = OrbitGenerator::new(config(41e6)).unwrap_err().to_string();
        assert_eq!(err, "trigger clock: L1 rate 41000000 Hz is outside (0, 40079169]");
        assert!(config(0.0).validate().is_err() && config(f64::NAN).validate().is_err());
    }

    #[test]
    fn poisson_pieces_keep_large_means_right() {
        let mut rng = SplitMix64::new(3);
        let n = 400;
        let mean = (0..n).map(|_| poisson(&mut rng, 3000.0) as f64).sum::<f64>() / f64::from(n);
        // Standard error sqrt(3000 / 400) ≈ 2.7.
        assert!((mean - 3000.0).abs() < 15.0, "{mean}");
    }
}
