//! What a configuration says about the emulated front ends: each FED's fragment sizes
//! ([`SizeModel`], [`FedSpec`]), the emulated trigger ([`ClockSpec`]) and the faults to inject
//! ([`FaultSpec`]), with their parsing and their bounds. The emulator (`tessera-emu`) generates
//! the streams from these descriptions; the system file and the command line describe them.
//!
//! A [`FaultSpec`] reads `NAME@EVENT` (at that 64-bit event number), or `NAME:P` (each event with
//! probability `P`, drawn from the emulator's seed, the FED and the event number, so a run
//! repeats exactly), either optionally followed by `/FED` to hit one FED only. What each fault
//! does to the bytes is documented on [`Fault`] and in docs/formats.md. The DTH emulator's
//! [`OrbitFaultSpec`] reads the same forms with an orbit number for the event and a source id for
//! the FED ([`OrbitFault`]).

use std::fmt;
use std::str::FromStr;
use tessera_formats::fed::{BX_PER_ORBIT, MAX_FED_ID, MIN_FRAGMENT_BYTES, ORBIT_SECONDS, WORD_BYTES};
use tessera_formats::seeded::{SplitMix64, payload_seed};
use tessera_formats::tcds::{ORBITS_PER_LUMI_SECTION, TCDS_FED_ID, TCDS_FED_IDS};

/// Largest fragment the size model gives (1 MiB): the clamp of its draws, well below what the
/// 24-bit length field of a FED trailer allows.
pub const MAX_FRAGMENT_BYTES: usize = 1 << 20;
/// Most FED streams one emulator process sends (one thread each), and one RU reads.
pub const MAX_STREAMS: usize = 512;

/// A description of emulated front ends outside its bounds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EmulationError {
    /// A FED id that the emulator cannot send.
    #[error("FED id {fed}: {reason}")]
    BadFedId {
        /// The id.
        fed: u32,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A size model outside the emulator's bounds.
    #[error("fragment size: {0}")]
    BadSize(String),
    /// A trigger clock setting outside its bounds.
    #[error("trigger clock: {0}")]
    BadClock(String),
    /// A fault specification that cannot be read.
    #[error("fault {spec:?}: {reason}")]
    BadFault {
        /// The specification as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl EmulationError {
    /// What is wrong, without the prefix that names the setting (`fragment size: `): for callers
    /// that name the key or the option themselves.
    pub fn reason(&self) -> String {
        match self {
            EmulationError::BadFault { reason, .. }
            | EmulationError::BadSize(reason)
            | EmulationError::BadClock(reason) => reason.clone(),
            EmulationError::BadFedId { reason, .. } => (*reason).to_owned(),
        }
    }
}

/// How big a FED's fragments are, header and trailer included.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeModel {
    /// Every fragment has this many bytes.
    Fixed(usize),
    /// Sizes drawn from a log-normal distribution with this mean and standard deviation in
    /// bytes, as the CMS FEROL emulator draws them.
    LogNormal {
        /// Mean fragment size in bytes.
        mean_bytes: f64,
        /// Standard deviation in bytes.
        sigma_bytes: f64,
    },
}

impl SizeModel {
    /// The mean fragment the model gives, in bytes (a fixed size rounded up to whole 8-byte
    /// words, as the emulator sends it).
    pub fn mean_bytes(&self) -> f64 {
        match *self {
            SizeModel::Fixed(b) => b.next_multiple_of(8) as f64,
            SizeModel::LogNormal { mean_bytes, .. } => mean_bytes,
        }
    }

    /// Checks the model's parameters: sizes within [16, 2^20] bytes, a finite sigma ≥ 0.
    pub fn validate(&self) -> Result<(), EmulationError> {
        let range = MIN_FRAGMENT_BYTES as f64..=MAX_FRAGMENT_BYTES as f64;
        match *self {
            SizeModel::Fixed(b) if !range.contains(&(b as f64)) => Err(EmulationError::BadSize(format!(
                "{b} bytes is outside {MIN_FRAGMENT_BYTES}..={MAX_FRAGMENT_BYTES}"
            ))),
            SizeModel::LogNormal { mean_bytes, .. } if !range.contains(&mean_bytes) => Err(EmulationError::BadSize(
                format!("mean {mean_bytes} bytes is outside {MIN_FRAGMENT_BYTES}..={MAX_FRAGMENT_BYTES}"),
            )),
            SizeModel::LogNormal { sigma_bytes, .. } if !(sigma_bytes.is_finite() && sigma_bytes >= 0.0) => {
                Err(EmulationError::BadSize(format!("sigma {sigma_bytes} bytes is not a finite number ≥ 0")))
            }
            _ => Ok(()),
        }
    }

    /// The size of `fed`'s fragment for `event`, in bytes: drawn deterministically from
    /// `payload_seed(run, fed, event)` (so any stage can recompute it), clamped to
    /// [16, 2^20] and rounded up to whole 8-byte words.
    pub fn fragment_bytes(&self, run: u32, fed: u16, event: u64) -> usize {
        let bytes = match *self {
            SizeModel::Fixed(b) => b,
            SizeModel::LogNormal { mean_bytes, sigma_bytes } => {
                // Log-normal with the given mean m and deviation s of the size itself:
                // mu = ln(m² / sqrt(m² + s²)), sigma² = ln(1 + s²/m²).
                let var = (1.0 + (sigma_bytes / mean_bytes).powi(2)).ln();
                let mu = mean_bytes.ln() - var / 2.0;
                let mut rng = SplitMix64::new(payload_seed(run, fed, event));
                let u1 = 1.0 - rng.unit(); // (0, 1]
                let u2 = rng.unit();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let drawn = (mu + var.sqrt() * z).exp().ceil();
                // `as` saturates: NaN gives 0 and infinity usize::MAX, both clamped below.
                drawn as usize
            }
        };
        bytes.clamp(MIN_FRAGMENT_BYTES, MAX_FRAGMENT_BYTES).div_ceil(WORD_BYTES) * WORD_BYTES
    }
}

/// One FED stream's source: its id and size model (ignored for the trigger FED 1024, whose
/// fragment is always the 952-byte TCDS record).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FedSpec {
    /// FED id, 0..=4095, not 1025..=1099 (trigger ids other than Tessera's 1024).
    pub fed: u16,
    /// Fragment sizes.
    pub size: SizeModel,
}

impl FedSpec {
    /// Checks the FED id and the size model.
    pub fn validate(&self) -> Result<(), EmulationError> {
        self.validate_id()?;
        self.size.validate()
    }

    /// Checks the FED id alone: at most 4095, and no trigger id but Tessera's 1024.
    pub fn validate_id(&self) -> Result<(), EmulationError> {
        if self.fed > MAX_FED_ID {
            return Err(EmulationError::BadFedId { fed: self.fed.into(), reason: "above 4095" });
        }
        if TCDS_FED_IDS.contains(&self.fed) && self.fed != TCDS_FED_ID {
            return Err(EmulationError::BadFedId {
                fed: self.fed.into(),
                reason: "1025..=1099 are trigger FED ids; the emulator's trigger is 1024",
            });
        }
        Ok(())
    }

    /// Whether this stream carries the trigger fragments.
    pub fn is_trigger(&self) -> bool {
        self.fed == TCDS_FED_ID
    }
}

/// The emulated trigger: Poisson arrivals at `rate_hz` from `seed`, and how orbits group into
/// lumi sections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockSpec {
    /// Mean trigger rate in Hz. A free-running sender does not wait for these times but still
    /// stamps orbits, BXs and lumi sections from them.
    pub rate_hz: f64,
    /// Seed of the arrival times.
    pub seed: u64,
    /// Orbits per lumi section, 1..=2^18 (2^18 for real data).
    pub orbits_per_lumi_section: u64,
}

impl Default for ClockSpec {
    /// 100 kHz (the CMS L1 rate), seed 1, real lumi sections.
    fn default() -> Self {
        ClockSpec { rate_hz: 100_000.0, seed: 1, orbits_per_lumi_section: ORBITS_PER_LUMI_SECTION }
    }
}

impl ClockSpec {
    /// Checks the clock: a rate finite, positive and at most one trigger per bunch crossing, and
    /// lumi sections of 1..=2^18 orbits.
    pub fn validate(&self) -> Result<(), EmulationError> {
        let max_rate = f64::from(BX_PER_ORBIT) / ORBIT_SECONDS;
        if !(self.rate_hz.is_finite() && self.rate_hz > 0.0 && self.rate_hz <= max_rate) {
            return Err(EmulationError::BadClock(format!("rate {} Hz is outside (0, {max_rate:.0}]", self.rate_hz)));
        }
        if !(1..=ORBITS_PER_LUMI_SECTION).contains(&self.orbits_per_lumi_section) {
            return Err(EmulationError::BadClock(format!(
                "{} orbits per lumi section is outside 1..={ORBITS_PER_LUMI_SECTION}",
                self.orbits_per_lumi_section
            )));
        }
        Ok(())
    }
}

/// What goes wrong with one event of one FED stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The fragment is sealed with its correct CRC-16, then bit 0 of its first payload byte
    /// (fragment byte 8) is flipped; a fragment without payload has bit 0 of its CRC field
    /// (fragment byte `len − 6`) flipped instead. Blocks as usual.
    BadCrc,
    /// The FED header's source id is the FED id XOR 0x800 and the fragment is resealed (correct
    /// CRC-16 for what is sent), while the FEROL block headers carry the original FED id, as a
    /// misconfigured board would send.
    WrongFedId,
    /// Nothing is sent for the event: the stream's LV1 ids have a gap.
    SkipEvent,
    /// Only the first `max(1, words / 2)` words of the fragment are sent (its FED header and the
    /// start of its payload, never its trailer), in blocks whose data lengths add up to what is
    /// sent and whose last block has the last-block flag.
    Truncate,
    /// 64 bytes from SplitMix64 (seeded from the emulator's seed, the FED and the event) are sent
    /// instead of the fragment's blocks; should they start with the block signature `47 5A`,
    /// their first byte is XORed with 0xFF so that a reader always sees a bad signature.
    Garbage,
    /// The stream ends before the event: the I/O layer closes the connection or capture file.
    Disconnect,
    /// The stream sends nothing from the event on, its connection left open: a front end that
    /// hangs. It ends when its receiver closes the connection, at the run's stop, or at its time
    /// limit. Its RU's events wait for it (the trigger is held) until it is masked.
    Stall,
}

impl Fault {
    /// Every fault, in the order of their names in messages.
    pub const ALL: [Fault; 7] = [
        Fault::BadCrc,
        Fault::WrongFedId,
        Fault::SkipEvent,
        Fault::Truncate,
        Fault::Garbage,
        Fault::Disconnect,
        Fault::Stall,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::BadCrc => "bad-crc",
            Fault::WrongFedId => "wrong-fed-id",
            Fault::SkipEvent => "skip",
            Fault::Truncate => "truncate",
            Fault::Garbage => "garbage",
            Fault::Disconnect => "disconnect",
            Fault::Stall => "stall",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FaultWhen {
    /// At the event with this 64-bit event number.
    At(u64),
    /// Each event independently with this probability, in `[0, 1]`.
    Probability(f64),
}

/// One `--fault` specification.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSpec {
    /// What goes wrong.
    pub fault: Fault,
    /// When.
    pub when: FaultWhen,
    /// The only FED it hits; every FED when `None`.
    pub fed: Option<u16>,
}

impl FaultSpec {
    /// Whether this fault hits `event` of `fed`. Specification `index` (its position in the list)
    /// is mixed into probability draws so that two specifications draw independently.
    pub fn strikes(&self, seed: u64, index: usize, run: u32, fed: u16, event: u64) -> bool {
        if self.fed.is_some_and(|f| f != fed) {
            return false;
        }
        match self.when {
            FaultWhen::At(n) => n == event,
            FaultWhen::Probability(p) => {
                let key = payload_seed(run, fed, event) ^ seed.rotate_left(17) ^ (index as u64).wrapping_mul(0xA5A5);
                SplitMix64::new(key).unit() < p
            }
        }
    }
}

impl FromStr for FaultSpec {
    type Err = EmulationError;

    fn from_str(spec: &str) -> Result<Self, EmulationError> {
        let form = FaultForm::parse(spec, "FED", "EVENT", MAX_FED_ID)?;
        let fault = form.named(&Fault::ALL, Fault::name)?;
        Ok(FaultSpec { fault, when: form.when, fed: form.source })
    }
}

/// The shared form of the FEROL and DTH fault specifications: `NAME@N` or `NAME:P`, optionally
/// followed by `/SOURCE`.
struct FaultForm<'a> {
    spec: &'a str,
    name: &'a str,
    when: FaultWhen,
    source: Option<u16>,
}

impl<'a> FaultForm<'a> {
    /// Splits `spec`; `source` names what follows `/` (FED, source) and `unit` what follows `@`
    /// (EVENT, ORBIT) in messages; a source above `max_source` is refused.
    fn parse(spec: &'a str, source_name: &str, unit: &str, max_source: u16) -> Result<Self, EmulationError> {
        let bad = |reason: String| EmulationError::BadFault { spec: spec.to_owned(), reason };
        let (body, source) = match spec.split_once('/') {
            Some((body, id)) => {
                let n: u16 = id.parse().map_err(|_| bad(format!("{source_name} {id:?} is not a number")))?;
                if n > max_source {
                    return Err(bad(format!("{source_name} {n} is above {max_source}")));
                }
                (body, Some(n))
            }
            None => (spec, None),
        };
        let (name, when) = if let Some((name, at)) = body.split_once('@') {
            let n = at.parse().map_err(|_| bad(format!("{} {at:?} is not a number", unit.to_lowercase())))?;
            (name, FaultWhen::At(n))
        } else if let Some((name, p)) = body.split_once(':') {
            let p: f64 = p.parse().map_err(|_| bad(format!("probability {p:?} is not a number")))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(bad(format!("probability {p} is outside [0, 1]")));
            }
            (name, FaultWhen::Probability(p))
        } else {
            let source = source_name.to_uppercase();
            return Err(bad(format!("expected NAME@{unit} or NAME:PROBABILITY, optionally followed by /{source}")));
        };
        Ok(FaultForm { spec, name, when, source })
    }

    /// The fault of `all` whose name is this form's.
    fn named<F: Copy>(&self, all: &[F], name: fn(F) -> &'static str) -> Result<F, EmulationError> {
        all.iter().copied().find(|&f| name(f) == self.name).ok_or_else(|| {
            let known: Vec<&str> = all.iter().map(|&f| name(f)).collect();
            EmulationError::BadFault {
                spec: self.spec.to_owned(),
                reason: format!("unknown fault {:?}; known: {}", self.name, known.join(", ")),
            }
        })
    }
}

/// What goes wrong with one orbit of one DTH source stream (`tessera dth`); docs/formats.md §12
/// gives the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrbitFault {
    /// The orbit block is written with its correct CRC-32C, then bit 0 of the orbit header's CRC
    /// field (block byte 28) is flipped.
    BadCrc,
    /// The orbit header and every SlinkRocket header carry the source id XOR 0x800 (CRCs right
    /// for what is sent), while the stream block headers carry the original id, as a
    /// misconfigured board would send.
    WrongSourceId,
    /// The orbit's last event is left out of this source's block (every other source has it): an
    /// event-count mismatch between sources. Nothing changes in an orbit without events.
    DropEvent,
    /// One fragment more than the other sources send: the event after the orbit's last (its
    /// number, the last event's BX, a seeded payload), appended to this source's block.
    ExtraEvent,
    /// Only the first half of the orbit's stream bytes (in 16-byte units, at least one) is sent,
    /// then the stream ends: it stops inside the orbit.
    Truncate,
    /// 64 bytes from SplitMix64 instead of the orbit's stream blocks; should they start with the
    /// block signature `47 5A`, their first byte is XORed with 0xFF.
    Garbage,
    /// The stream ends before the orbit.
    Disconnect,
    /// Nothing is sent for the orbit (its events included): the stream's orbit numbers have a
    /// gap.
    SkipOrbit,
}

impl OrbitFault {
    /// Every orbit fault, in the order of their names in messages.
    pub const ALL: [OrbitFault; 8] = [
        OrbitFault::BadCrc,
        OrbitFault::WrongSourceId,
        OrbitFault::DropEvent,
        OrbitFault::ExtraEvent,
        OrbitFault::Truncate,
        OrbitFault::Garbage,
        OrbitFault::Disconnect,
        OrbitFault::SkipOrbit,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            OrbitFault::BadCrc => "bad-crc",
            OrbitFault::WrongSourceId => "wrong-source-id",
            OrbitFault::DropEvent => "drop-event",
            OrbitFault::ExtraEvent => "extra-event",
            OrbitFault::Truncate => "truncate",
            OrbitFault::Garbage => "garbage",
            OrbitFault::Disconnect => "disconnect",
            OrbitFault::SkipOrbit => "skip-orbit",
        }
    }
}

impl fmt::Display for OrbitFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One `tessera dth --fault` specification: `NAME@ORBIT` (at that orbit number) or `NAME:P`
/// (each orbit with probability `P`), optionally followed by `/SOURCE`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrbitFaultSpec {
    /// What goes wrong.
    pub fault: OrbitFault,
    /// When: [`FaultWhen::At`] holds an orbit number.
    pub when: FaultWhen,
    /// The only source it hits; every source when `None`.
    pub source: Option<u16>,
}

impl OrbitFaultSpec {
    /// Whether this fault hits `orbit` of `source`; a probability draw is that of
    /// [`FaultSpec::strikes`] with the source for the FED and the orbit for the event.
    pub fn strikes(&self, seed: u64, index: usize, run: u32, source: u16, orbit: u32) -> bool {
        let as_fed = FaultSpec { fault: Fault::Garbage, when: self.when, fed: self.source };
        as_fed.strikes(seed, index, run, source, orbit.into())
    }
}

impl FromStr for OrbitFaultSpec {
    type Err = EmulationError;

    fn from_str(spec: &str) -> Result<Self, EmulationError> {
        let form = FaultForm::parse(spec, "source", "ORBIT", u16::MAX)?;
        let fault = form.named(&OrbitFault::ALL, OrbitFault::name)?;
        Ok(OrbitFaultSpec { fault, when: form.when, source: form.source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_clamped_and_whole_words() {
        assert_eq!(SizeModel::Fixed(4096).fragment_bytes(1, 2, 3), 4096);
        assert_eq!(SizeModel::Fixed(1001).fragment_bytes(1, 2, 3), 1008);
        let wide = SizeModel::LogNormal { mean_bytes: 64.0, sigma_bytes: 1e6 };
        for e in 0..2000 {
            let n = wide.fragment_bytes(1, 2, e);
            assert!((MIN_FRAGMENT_BYTES..=MAX_FRAGMENT_BYTES).contains(&n) && n.is_multiple_of(8), "{n}");
        }
        assert!(SizeModel::Fixed(8).validate().is_err());
        assert!(SizeModel::LogNormal { mean_bytes: 100.0, sigma_bytes: -1.0 }.validate().is_err());
    }

    #[test]
    fn clock_refuses_bad_settings() {
        let bad = |spec: ClockSpec| spec.validate().unwrap_err().to_string();
        assert_eq!(
            bad(ClockSpec { rate_hz: 0.0, ..ClockSpec::default() }),
            "trigger clock: rate 0 Hz is outside (0, 40079169]"
        );
        assert!(bad(ClockSpec { orbits_per_lumi_section: 0, ..ClockSpec::default() }).contains("1..=262144"));
        assert!(ClockSpec::default().validate().is_ok());
    }

    #[test]
    fn fed_ids_are_checked() {
        let spec = |fed| FedSpec { fed, size: SizeModel::Fixed(64) };
        assert!(spec(4095).validate().is_ok() && spec(1024).validate().is_ok());
        assert_eq!(spec(4096).validate().unwrap_err().to_string(), "FED id 4096: above 4095");
        assert!(spec(1030).validate().unwrap_err().to_string().contains("trigger FED ids"));
    }

    #[test]
    fn faults_parse_every_form() {
        let s: FaultSpec = "bad-crc@1000".parse().unwrap();
        assert_eq!(s, FaultSpec { fault: Fault::BadCrc, when: FaultWhen::At(1000), fed: None });
        let s: FaultSpec = "garbage:0.25/1024".parse().unwrap();
        assert_eq!(s, FaultSpec { fault: Fault::Garbage, when: FaultWhen::Probability(0.25), fed: Some(1024) });
        for f in Fault::ALL {
            assert_eq!(format!("{f}@1").parse::<FaultSpec>().unwrap().fault, f);
        }
    }

    #[test]
    fn fault_errors_name_the_spec_and_the_problem() {
        let msg = |s: &str| s.parse::<FaultSpec>().unwrap_err().to_string();
        assert_eq!(
            msg("bogus@3"),
            "fault \"bogus@3\": unknown fault \"bogus\"; known: bad-crc, wrong-fed-id, skip, truncate, garbage, disconnect, stall"
        );
        assert_eq!(msg("skip:1.5"), "fault \"skip:1.5\": probability 1.5 is outside [0, 1]");
        assert_eq!(msg("skip@x"), "fault \"skip@x\": event \"x\" is not a number");
        assert_eq!(msg("skip@1/5000"), "fault \"skip@1/5000\": FED 5000 is above 4095");
        assert_eq!(msg("skip"), "fault \"skip\": expected NAME@EVENT or NAME:PROBABILITY, optionally followed by /FED");
        assert_eq!("skip:1.5".parse::<FaultSpec>().unwrap_err().reason(), "probability 1.5 is outside [0, 1]");
    }

    #[test]
    fn fault_probability_draws_are_seeded_and_near_p() {
        let s: FaultSpec = "skip:0.1".parse().unwrap();
        let hits = |seed| (0..20_000u64).filter(|&e| s.strikes(seed, 0, 1, 3, e)).count();
        assert_eq!(hits(7), hits(7));
        assert!((1_700..2_300).contains(&hits(7)), "{}", hits(7));
        let only: FaultSpec = "skip@5/2".parse().unwrap();
        assert!(only.strikes(0, 0, 1, 2, 5));
        assert!(!only.strikes(0, 0, 1, 3, 5));
        assert!(!only.strikes(0, 0, 1, 2, 6));
    }

    #[test]
    fn orbit_faults_parse_every_form_and_name_orbits_and_sources() {
        let s: OrbitFaultSpec = "skip-orbit@12/7".parse().unwrap();
        assert_eq!(s, OrbitFaultSpec { fault: OrbitFault::SkipOrbit, when: FaultWhen::At(12), source: Some(7) });
        for f in OrbitFault::ALL {
            assert_eq!(format!("{f}:0.5").parse::<OrbitFaultSpec>().unwrap().fault, f);
        }
        let msg = |s: &str| s.parse::<OrbitFaultSpec>().unwrap_err().to_string();
        assert_eq!(
            msg("skip@1"),
            "fault \"skip@1\": unknown fault \"skip\"; known: bad-crc, wrong-source-id, drop-event, extra-event, truncate, garbage, disconnect, skip-orbit"
        );
        assert_eq!(msg("truncate@x"), "fault \"truncate@x\": orbit \"x\" is not a number");
        assert_eq!(msg("truncate@1/70000"), "fault \"truncate@1/70000\": source \"70000\" is not a number");
        assert_eq!(
            msg("garbage"),
            "fault \"garbage\": expected NAME@ORBIT or NAME:PROBABILITY, optionally followed by /SOURCE"
        );
        // A FEROL name that is not an orbit fault, and the other way round.
        assert!("wrong-fed-id@1".parse::<OrbitFaultSpec>().is_err());
        assert!("skip-orbit@1".parse::<FaultSpec>().is_err());
    }

    #[test]
    fn orbit_fault_draws_hit_one_source_only_when_asked() {
        let only: OrbitFaultSpec = "garbage@5/2".parse().unwrap();
        assert!(only.strikes(0, 0, 1, 2, 5) && !only.strikes(0, 0, 1, 3, 5) && !only.strikes(0, 0, 1, 2, 6));
        let p: OrbitFaultSpec = "garbage:0.2".parse().unwrap();
        let hits = (0..10_000u32).filter(|&o| p.strikes(9, 0, 1, 3, o)).count();
        assert!((1_700..2_300).contains(&hits), "{hits}");
    }
}
