//! Fault injection: which events of which FED are sent wrong, and how.
//!
//! A [`FaultSpec`] reads `NAME@EVENT` (at that 64-bit event number), or `NAME:P` (each event with
//! probability `P`, drawn from the emulator's seed, the FED and the event number, so a run
//! repeats exactly), either optionally followed by `/FED` to hit one FED only. What each fault
//! does to the bytes is documented on [`Fault`] and in docs/formats.md.

use crate::error::EmuError;
use std::fmt;
use std::str::FromStr;
use tessera_formats::seeded::SplitMix64;
use tessera_formats::seeded::payload_seed;

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
}

impl Fault {
    /// Every fault, in the order of their names in messages.
    pub const ALL: [Fault; 6] =
        [Fault::BadCrc, Fault::WrongFedId, Fault::SkipEvent, Fault::Truncate, Fault::Garbage, Fault::Disconnect];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::BadCrc => "bad-crc",
            Fault::WrongFedId => "wrong-fed-id",
            Fault::SkipEvent => "skip",
            Fault::Truncate => "truncate",
            Fault::Garbage => "garbage",
            Fault::Disconnect => "disconnect",
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
    type Err = EmuError;

    fn from_str(spec: &str) -> Result<Self, EmuError> {
        let bad = |reason: String| EmuError::BadFault { spec: spec.to_owned(), reason };
        let (body, fed) = match spec.split_once('/') {
            Some((body, fed)) => {
                let id: u16 = fed.parse().map_err(|_| bad(format!("FED {fed:?} is not a number")))?;
                if id > 4095 {
                    return Err(bad(format!("FED {id} is above 4095")));
                }
                (body, Some(id))
            }
            None => (spec, None),
        };
        let (name, when) = if let Some((name, event)) = body.split_once('@') {
            let n = event.parse().map_err(|_| bad(format!("event {event:?} is not a number")))?;
            (name, FaultWhen::At(n))
        } else if let Some((name, p)) = body.split_once(':') {
            let p: f64 = p.parse().map_err(|_| bad(format!("probability {p:?} is not a number")))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(bad(format!("probability {p} is outside [0, 1]")));
            }
            (name, FaultWhen::Probability(p))
        } else {
            return Err(bad("expected NAME@EVENT or NAME:PROBABILITY, optionally followed by /FED".into()));
        };
        let fault = Fault::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
            bad(format!("unknown fault {name:?}; known: {}", known.join(", ")))
        })?;
        Ok(FaultSpec { fault, when, fed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let s: FaultSpec = "bad-crc@1000".parse().unwrap();
        assert_eq!(s, FaultSpec { fault: Fault::BadCrc, when: FaultWhen::At(1000), fed: None });
        let s: FaultSpec = "garbage:0.25/1024".parse().unwrap();
        assert_eq!(s, FaultSpec { fault: Fault::Garbage, when: FaultWhen::Probability(0.25), fed: Some(1024) });
        for f in Fault::ALL {
            assert_eq!(format!("{f}@1").parse::<FaultSpec>().unwrap().fault, f);
        }
    }

    #[test]
    fn errors_name_the_spec_and_the_problem() {
        let msg = |s: &str| s.parse::<FaultSpec>().unwrap_err().to_string();
        assert_eq!(
            msg("bogus@3"),
            "fault \"bogus@3\": unknown fault \"bogus\"; known: bad-crc, wrong-fed-id, skip, truncate, garbage, disconnect"
        );
        assert_eq!(msg("skip:1.5"), "fault \"skip:1.5\": probability 1.5 is outside [0, 1]");
        assert_eq!(msg("skip@x"), "fault \"skip@x\": event \"x\" is not a number");
        assert_eq!(msg("skip@1/5000"), "fault \"skip@1/5000\": FED 5000 is above 4095");
        assert!(msg("skip").contains("expected NAME@EVENT"));
    }

    #[test]
    fn probability_draws_are_seeded_and_near_p() {
        let s: FaultSpec = "skip:0.1".parse().unwrap();
        let hits = |seed| (0..20_000u64).filter(|&e| s.strikes(seed, 0, 1, 3, e)).count();
        assert_eq!(hits(7), hits(7));
        assert!((1_700..2_300).contains(&hits(7)), "{}", hits(7));
        let only: FaultSpec = "skip@5/2".parse().unwrap();
        assert!(only.strikes(0, 0, 1, 2, 5));
        assert!(!only.strikes(0, 0, 1, 3, 5));
        assert!(!only.strikes(0, 0, 1, 2, 6));
    }
}
