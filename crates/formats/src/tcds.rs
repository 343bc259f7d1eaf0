//! The trigger (TCDS) fragment, docs/formats.md §3: one per event, FED id 1024..=1099, 952 bytes.
//!
//! CMSSW takes the event number, orbit, BX and lumi section of an event from this fragment, so
//! every field of the table sits at its exact offset (counted from the start of the fragment, the
//! FED header being at 0). History records that Tessera does not emulate are written as zeros;
//! the "sizes" bytes at offset 8 are not read by CMSSW and are written as zeros too.

use crate::error::{FormatError, Result, dec, le_u16, le_u32, le_u64, need_space};
use crate::fed::{FedHeader, FedTrailer, Fragment, lv1_id, seal_fragment};
use std::ops::RangeInclusive;

/// The FED id Tessera gives the trigger fragment.
pub const TCDS_FED_ID: u16 = 1024;
/// FED ids that identify a trigger fragment.
pub const TCDS_FED_IDS: RangeInclusive<u16> = 1024..=1099;
/// Size of a complete trigger fragment, FED header and trailer included.
pub const TCDS_FRAGMENT_BYTES: usize = 952;
/// Orbits in one lumi section of real data (2^18, about 23.3 s).
pub const ORBITS_PER_LUMI_SECTION: u64 = 1 << 18;

/// True when `source_id` is a trigger fragment's FED id.
pub fn is_tcds_fed(source_id: u16) -> bool {
    TCDS_FED_IDS.contains(&source_id)
}

/// The lumi section CMSSW expects for an orbit: `orbit / 2^18 + 1`.
pub fn lumi_section_of_orbit(orbit: u64) -> u32 {
    u32::try_from(orbit / ORBITS_PER_LUMI_SECTION + 1).unwrap_or(u32::MAX)
}

/// The orbit number to write for the `orbit_in_section`-th orbit of lumi section `ls` (from 1).
///
/// An emulated run with short lumi sections keeps CMSSW's rule by numbering each section's
/// orbits from `(ls − 1) · 2^18` rather than by changing the rule.
pub fn orbit_in_lumi_section(ls: u32, orbit_in_section: u64) -> u64 {
    u64::from(ls.saturating_sub(1)) * ORBITS_PER_LUMI_SECTION + orbit_in_section.min(ORBITS_PER_LUMI_SECTION - 1)
}

/// The number of a run's `index`-th orbit (from 0, the first orbit of lumi section 1) when its
/// lumi sections have `orbits_per_lumi_section` orbits: the identity for real data (2^18), and
/// [`orbit_in_lumi_section`]'s numbering for shorter sections.
pub fn orbit_number(index: u64, orbits_per_lumi_section: u64) -> u64 {
    let per_ls = orbits_per_lumi_section.clamp(1, ORBITS_PER_LUMI_SECTION);
    let ls = u32::try_from(index / per_ls + 1).unwrap_or(u32::MAX);
    orbit_in_lumi_section(ls, index % per_ls)
}

/// The index of orbit `orbit` in a run of `orbits_per_lumi_section` orbits per lumi section,
/// [`orbit_number`]'s inverse; `None` for a number that run never gives (its place in its
/// section past the section's orbits).
pub fn orbit_index(orbit: u64, orbits_per_lumi_section: u64) -> Option<u64> {
    let per_ls = orbits_per_lumi_section.clamp(1, ORBITS_PER_LUMI_SECTION);
    let in_section = orbit % ORBITS_PER_LUMI_SECTION;
    (in_section < per_ls).then(|| orbit / ORBITS_PER_LUMI_SECTION * per_ls + in_section)
}

/// Field offsets from the start of the fragment.
mod offset {
    pub const MAC: usize = 16;
    pub const SOFTWARE_VERSION: usize = 24;
    pub const FIRMWARE_VERSION: usize = 28;
    pub const RECORD_VERSION: usize = 36;
    pub const RUN: usize = 40;
    pub const ACTIVE_PARTITIONS_2: usize = 48;
    pub const BST_STATUS: usize = 52;
    pub const ACTIVE_PARTITIONS_0: usize = 56;
    pub const ACTIVE_PARTITIONS_1: usize = 60;
    pub const NIBBLE: usize = 64;
    pub const LUMI_SECTION: usize = 68;
    pub const NIBBLES_PER_LS: usize = 72;
    pub const TRIGGER_TYPE_FLAGS: usize = 74;
    pub const INPUTS: usize = 78;
    pub const BX: usize = 80;
    pub const ORBIT_LOW: usize = 82;
    pub const ORBIT_HIGH: usize = 84;
    pub const TRIGGER_COUNT: usize = 88;
    pub const EVENT_NUMBER: usize = 96;
    pub const GPS_TIME: usize = 360;
    pub const LHC_FILL: usize = 382;
}

/// The fields of a trigger fragment that Tessera writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcdsRecord {
    /// MAC address of the trigger board.
    pub mac_address: u64,
    /// Software version.
    pub software_version: u32,
    /// Firmware version.
    pub firmware_version: u32,
    /// Record version.
    pub record_version: u32,
    /// Run number.
    pub run: u32,
    /// Active partitions, words 0, 1 and 2.
    pub active_partitions: [u32; 3],
    /// BST reception status.
    pub bst_status: u32,
    /// Lumi nibble.
    pub nibble: u32,
    /// Lumi section (the EVM reads it here).
    pub lumi_section: u32,
    /// Lumi nibbles per lumi section.
    pub nibbles_per_lumi_section: u16,
    /// Trigger type flags.
    pub trigger_type_flags: u16,
    /// Trigger inputs.
    pub inputs: u16,
    /// Bunch crossing of the trigger.
    pub bx: u16,
    /// Orbit number (48 bits: low 16 at offset 82, high 32 at offset 84).
    pub orbit: u64,
    /// Trigger count.
    pub trigger_count: u64,
    /// Event number.
    pub event_number: u64,
    /// GPS time from the BST record.
    pub gps_time: u64,
    /// LHC fill number from the BST record.
    pub lhc_fill: u32,
}

impl TcdsRecord {
    /// Reads a trigger fragment: a valid FED fragment of exactly 952 bytes with a trigger FED id.
    /// The CRC is not checked here (see [`Fragment::check_crc`]).
    pub fn parse(bytes: &[u8]) -> Result<(Self, Fragment<'_>)> {
        const WHAT: &str = "trigger fragment";
        let fragment = Fragment::parse(bytes)?;
        let source = fragment.header.source_id;
        if !is_tcds_fed(source) {
            return Err(FormatError::bad(WHAT, "FED id", 0, "1024..=1099", dec(source)));
        }
        if bytes.len() != TCDS_FRAGMENT_BYTES {
            return Err(FormatError::bad(WHAT, "size", 0, dec(TCDS_FRAGMENT_BYTES), dec(bytes.len())));
        }
        let orbit_low = le_u16(bytes, offset::ORBIT_LOW, WHAT)?;
        let orbit_high = le_u32(bytes, offset::ORBIT_HIGH, WHAT)?;
        let record = TcdsRecord {
            mac_address: le_u64(bytes, offset::MAC, WHAT)?,
            software_version: le_u32(bytes, offset::SOFTWARE_VERSION, WHAT)?,
            firmware_version: le_u32(bytes, offset::FIRMWARE_VERSION, WHAT)?,
            record_version: le_u32(bytes, offset::RECORD_VERSION, WHAT)?,
            run: le_u32(bytes, offset::RUN, WHAT)?,
            active_partitions: [
                le_u32(bytes, offset::ACTIVE_PARTITIONS_0, WHAT)?,
                le_u32(bytes, offset::ACTIVE_PARTITIONS_1, WHAT)?,
                le_u32(bytes, offset::ACTIVE_PARTITIONS_2, WHAT)?,
            ],
            bst_status: le_u32(bytes, offset::BST_STATUS, WHAT)?,
            nibble: le_u32(bytes, offset::NIBBLE, WHAT)?,
            lumi_section: le_u32(bytes, offset::LUMI_SECTION, WHAT)?,
            nibbles_per_lumi_section: le_u16(bytes, offset::NIBBLES_PER_LS, WHAT)?,
            trigger_type_flags: le_u16(bytes, offset::TRIGGER_TYPE_FLAGS, WHAT)?,
            inputs: le_u16(bytes, offset::INPUTS, WHAT)?,
            bx: le_u16(bytes, offset::BX, WHAT)?,
            orbit: u64::from(orbit_low) | (u64::from(orbit_high) << 16),
            trigger_count: le_u64(bytes, offset::TRIGGER_COUNT, WHAT)?,
            event_number: le_u64(bytes, offset::EVENT_NUMBER, WHAT)?,
            gps_time: le_u64(bytes, offset::GPS_TIME, WHAT)?,
            lhc_fill: le_u32(bytes, offset::LHC_FILL, WHAT)?,
        };
        Ok((record, fragment))
    }

    /// Checks CMSSW's rule `lumi section == orbit / 2^18 + 1`.
    pub fn check_lumi_section(&self) -> Result<()> {
        let expected = lumi_section_of_orbit(self.orbit);
        if self.lumi_section != expected {
            return Err(FormatError::bad(
                "trigger fragment",
                "lumi section (orbit / 2^18 + 1)",
                offset::LUMI_SECTION,
                dec(expected),
                dec(self.lumi_section),
            ));
        }
        Ok(())
    }

    /// Writes the complete 952-byte trigger fragment (FED id [`TCDS_FED_ID`], LV1 id and BX from
    /// the record, CRC-16 computed) at the start of `out`; returns its length.
    pub fn write(&self, out: &mut [u8], event_type: u8) -> Result<usize> {
        need_space(out, TCDS_FRAGMENT_BYTES, "trigger fragment")?;
        let frag = &mut out[..TCDS_FRAGMENT_BYTES];
        frag.fill(0);
        let mut put = |at: usize, bytes: &[u8]| frag[at..at + bytes.len()].copy_from_slice(bytes);
        put(offset::MAC, &self.mac_address.to_le_bytes());
        put(offset::SOFTWARE_VERSION, &self.software_version.to_le_bytes());
        put(offset::FIRMWARE_VERSION, &self.firmware_version.to_le_bytes());
        put(offset::RECORD_VERSION, &self.record_version.to_le_bytes());
        put(offset::RUN, &self.run.to_le_bytes());
        put(offset::ACTIVE_PARTITIONS_0, &self.active_partitions[0].to_le_bytes());
        put(offset::ACTIVE_PARTITIONS_1, &self.active_partitions[1].to_le_bytes());
        put(offset::ACTIVE_PARTITIONS_2, &self.active_partitions[2].to_le_bytes());
        put(offset::BST_STATUS, &self.bst_status.to_le_bytes());
        put(offset::NIBBLE, &self.nibble.to_le_bytes());
        put(offset::LUMI_SECTION, &self.lumi_section.to_le_bytes());
        put(offset::NIBBLES_PER_LS, &self.nibbles_per_lumi_section.to_le_bytes());
        put(offset::TRIGGER_TYPE_FLAGS, &self.trigger_type_flags.to_le_bytes());
        put(offset::INPUTS, &self.inputs.to_le_bytes());
        put(offset::BX, &self.bx.to_le_bytes());
        put(offset::ORBIT_LOW, &(self.orbit as u16).to_le_bytes());
        put(offset::ORBIT_HIGH, &((self.orbit >> 16) as u32).to_le_bytes());
        put(offset::TRIGGER_COUNT, &self.trigger_count.to_le_bytes());
        put(offset::EVENT_NUMBER, &self.event_number.to_le_bytes());
        put(offset::GPS_TIME, &self.gps_time.to_le_bytes());
        put(offset::LHC_FILL, &self.lhc_fill.to_le_bytes());
        let header = FedHeader {
            event_type,
            lv1_id: lv1_id(self.event_number),
            bx_id: self.bx,
            source_id: TCDS_FED_ID,
            format_version: 0,
            more_headers: false,
        };
        seal_fragment(frag, &header, &FedTrailer::default())?;
        Ok(TCDS_FRAGMENT_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fed::event_type;
    use proptest::prelude::*;

    proptest! {
        /// Orbit numbers and indices map one to one, each orbit in the lumi section CMSSW's rule
        /// gives it, its index's section (of the sections a u32 numbers).
        #[test]
        fn orbit_numbers_and_indices_map_one_to_one(
            section in 0u64..u64::from(u32::MAX),
            per_ls in 1u64..=1 << 18,
            place in any::<u64>(),
        ) {
            let index = section * per_ls + place % per_ls;
            let orbit = orbit_number(index, per_ls);
            prop_assert_eq!(orbit_index(orbit, per_ls), Some(index));
            prop_assert_eq!(u64::from(lumi_section_of_orbit(orbit)), index / per_ls + 1);
        }
    }

    #[test]
    fn an_orbit_number_past_its_short_section_has_no_index() {
        assert_eq!(orbit_index(5, 4), None);
        assert_eq!(orbit_index((1 << 18) + 3, 4), Some(7));
        assert_eq!(orbit_number(7, 4), (1 << 18) + 3);
        assert_eq!(orbit_number(123_456_789, 1 << 18), 123_456_789);
    }

    fn record() -> TcdsRecord {
        TcdsRecord {
            run: 123_456,
            lumi_section: 3,
            orbit: orbit_in_lumi_section(3, 77),
            bx: 1234,
            event_number: 0x1_0000_0005,
            trigger_count: 99,
            gps_time: 0x0102_0304_0506_0708,
            lhc_fill: 9000,
            ..TcdsRecord::default()
        }
    }

    #[test]
    fn fields_sit_at_their_offsets() {
        let mut out = vec![0u8; TCDS_FRAGMENT_BYTES];
        assert_eq!(record().write(&mut out, event_type::PHYSICS).unwrap(), 952);
        assert_eq!(&out[40..44], &123_456u32.to_le_bytes());
        assert_eq!(&out[68..72], &3u32.to_le_bytes());
        assert_eq!(&out[80..82], &1234u16.to_le_bytes());
        let orbit = 2 * (1u64 << 18) + 77;
        assert_eq!(&out[82..84], &(orbit as u16).to_le_bytes());
        assert_eq!(&out[84..88], &((orbit >> 16) as u32).to_le_bytes());
        assert_eq!(&out[96..104], &0x1_0000_0005u64.to_le_bytes());
        assert_eq!(&out[360..368], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&out[382..386], &9000u32.to_le_bytes());
        let (back, frag) = TcdsRecord::parse(&out).unwrap();
        assert_eq!(back, record());
        assert_eq!(frag.header.source_id, TCDS_FED_ID);
        assert_eq!(frag.header.lv1_id, 5, "LV1 id is the event number's low 24 bits");
        frag.check_crc().unwrap();
        back.check_lumi_section().unwrap();
    }

    #[test]
    fn lumi_rule_is_checked() {
        let r = TcdsRecord { lumi_section: 2, ..record() };
        let err = r.check_lumi_section().unwrap_err();
        assert_eq!(
            err.to_string(),
            "trigger fragment: bad lumi section (orbit / 2^18 + 1) at byte 68: expected 3, found 2"
        );
    }

    #[test]
    fn wrong_fed_id_and_size_are_refused() {
        let mut out = vec![0u8; TCDS_FRAGMENT_BYTES];
        record().write(&mut out, event_type::PHYSICS).unwrap();
        let mut short = out[..TCDS_FRAGMENT_BYTES - 16].to_vec();
        let n = short.len();
        short[n - 8..].copy_from_slice(&out[TCDS_FRAGMENT_BYTES - 8..]);
        // Trailer length no longer matches the buffer.
        assert!(TcdsRecord::parse(&short).is_err());
        let mut other = out.clone();
        let mut header = FedHeader::from_word(u64::from_le_bytes(other[..8].try_into().unwrap()), 0).unwrap();
        header.source_id = 700;
        other[..8].copy_from_slice(&header.to_word().to_le_bytes());
        let err = TcdsRecord::parse(&other).unwrap_err();
        assert_eq!(err.to_string(), "trigger fragment: bad FED id at byte 0: expected 1024..=1099, found 700");
    }

    proptest! {
        #[test]
        fn round_trip(run: u32, ls in 1u32..100_000, orbit_in in 0u64..(1 << 18), bx in 0u16..3564, ev: u64, fill: u32) {
            let r = TcdsRecord { run, lumi_section: ls, orbit: orbit_in_lumi_section(ls, orbit_in), bx,
                event_number: ev, lhc_fill: fill, ..TcdsRecord::default() };
            let mut out = vec![0u8; TCDS_FRAGMENT_BYTES];
            r.write(&mut out, event_type::PHYSICS).unwrap();
            let (back, frag) = TcdsRecord::parse(&out).unwrap();
            prop_assert_eq!(back, r);
            prop_assert!(frag.check_crc().is_ok());
            prop_assert!(back.check_lumi_section().is_ok());
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            let _ = TcdsRecord::parse(&bytes);
        }
    }
}
