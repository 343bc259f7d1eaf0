//! Orbit files, as a BU writes them in orbit mode and CMSSW's DAQ source reads them in its DTH
//! mode (docs/formats.md §6–§7): no file header, a sequence of orbits, each orbit the orbit blocks
//! of every source one after another. [`OrbitFile`] groups the blocks into orbits, [`FileOrbit`]
//! checks their CRC-32Cs and walks their fragments in step into events. Zero-copy, no I/O; every
//! error's offset counts from the start of the file.

use super::*;
use crate::error::{FormatError, Result, dec, hex};

/// Largest fragment, SR header and trailer included, a reader takes: 1,048,575 bytes and more
/// are refused, as CMSSW's DTH reader refuses them.
pub const MAX_FILE_FRAGMENT_BYTES: usize = 1_048_574;

/// True when `head` (a file's first bytes) starts an orbit file ("HO"), not a RAW_0002 file.
pub fn is_orbit_file(head: &[u8]) -> bool {
    head.starts_with(&ORBIT_MARKER)
}

/// The orbits of an orbit file, in file order, as CMSSW's DTH-mode reader groups them: each
/// orbit is the consecutive blocks with the same orbit number. Yields an error and stops at the
/// first orbit that breaks a rule: a bad orbit header, a block whose run differs from the file's
/// first, blocks of one orbit with different event counts, an orbit with no events, an orbit
/// number not above the previous orbit's, a block running past the end of the file.
#[derive(Debug, Clone)]
pub struct OrbitFile<'a> {
    bytes: &'a [u8],
    /// Where the unread part of the file starts.
    pos: usize,
    /// The run of the file's first block.
    run: Option<u32>,
    /// The orbit number of the last orbit read.
    last_orbit: Option<u32>,
    done: bool,
}

impl<'a> OrbitFile<'a> {
    /// A reader of the orbit file held in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        OrbitFile { bytes, pos: 0, run: None, last_orbit: None, done: false }
    }

    /// Reads the block at `offset`; errors carry file offsets.
    fn block_at(&self, offset: usize) -> Result<OrbitBlock<'a>> {
        OrbitBlock::parse(self.bytes.get(offset..).unwrap_or_default()).map_err(|e| e.shifted(offset))
    }

    /// Reads the orbit that starts at `self.pos`.
    fn read_orbit(&self) -> Result<FileOrbit<'a>> {
        let offset = self.pos;
        let first = self.block_at(offset)?;
        let header = first.header;
        let run = self.run.unwrap_or(header.run);
        if header.run != run {
            return Err(FormatError::bad("orbit header", "run", offset, dec(run), dec(header.run)));
        }
        if let Some(last) = self.last_orbit
            && header.orbit <= last
        {
            return Err(FormatError::bad("orbit header", "orbit", offset, format!("above {last}"), dec(header.orbit)));
        }
        if header.event_count == 0 {
            return Err(FormatError::bad("orbit header", "event count", offset, "at least 1", dec(0)));
        }
        let mut blocks = vec![first];
        let mut offsets = vec![offset];
        let mut end = offset + first.wire_len();
        // The next block joins this orbit when its header names the same orbit.
        while OrbitHeader::parse(self.bytes, end).is_ok_and(|next| next.orbit == header.orbit) {
            let block = self.block_at(end)?;
            if block.header.run != run {
                return Err(FormatError::bad("orbit header", "run", end, dec(run), dec(block.header.run)));
            }
            if block.header.event_count != header.event_count {
                return Err(FormatError::bad(
                    "orbit header",
                    "event count",
                    end,
                    dec(header.event_count),
                    dec(block.header.event_count),
                ));
            }
            blocks.push(block);
            offsets.push(end);
            end += block.wire_len();
        }
        Ok(FileOrbit { offset, wire_len: end - offset, header, blocks, offsets })
    }
}

impl<'a> Iterator for OrbitFile<'a> {
    type Item = Result<FileOrbit<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.bytes.len() {
            return None;
        }
        let orbit = self.read_orbit();
        match &orbit {
            Ok(o) => {
                self.pos += o.wire_len;
                self.run = Some(o.run());
                self.last_orbit = Some(o.orbit());
            }
            Err(_) => self.done = true,
        }
        Some(orbit)
    }
}

/// One orbit of an orbit file: consecutive blocks with the same orbit number, run and event count.
#[derive(Debug, Clone)]
pub struct FileOrbit<'a> {
    offset: usize,
    wire_len: usize,
    /// The first block's header.
    header: OrbitHeader,
    blocks: Vec<OrbitBlock<'a>>,
    /// File offset of each block.
    offsets: Vec<usize>,
}

impl<'a> FileOrbit<'a> {
    /// File offset of its first block.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bytes of all its blocks.
    pub fn wire_len(&self) -> usize {
        self.wire_len
    }

    /// The orbit number.
    pub fn orbit(&self) -> u32 {
        self.header.orbit
    }

    /// The run number.
    pub fn run(&self) -> u32 {
        self.header.run
    }

    /// Events in the orbit, the same in every block.
    pub fn event_count(&self) -> u16 {
        self.header.event_count
    }

    /// Its blocks, one per source, in file order. Offsets inside a block (its fragments') count
    /// from the block's start; [`FileOrbit::block_offsets`] gives where each block starts.
    pub fn blocks(&self) -> &[OrbitBlock<'a>] {
        &self.blocks
    }

    /// File offset of each block, in the order of [`FileOrbit::blocks`].
    pub fn block_offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Checks every block's CRC-32C; the first bad one's error, at its file offset.
    pub fn check_crcs(&self) -> Result<()> {
        self.blocks.iter().zip(&self.offsets).try_for_each(|(block, &at)| block.check_crc().map_err(|e| e.shifted(at)))
    }

    /// The events, last first: every block walked backwards in step, one fragment per block per
    /// step. Yields an error and stops at the first malformed fragment, a fragment with a non-zero
    /// trailer flag or of [`MAX_FILE_FRAGMENT_BYTES`] bytes or more, event ids that differ across
    /// blocks in one step, or a block with more or fewer fragments than its header says.
    pub fn events(&self) -> FileOrbitEvents<'a> {
        FileOrbitEvents {
            walks: self.blocks.iter().map(OrbitBlock::fragments).collect(),
            offsets: self.offsets.clone(),
            remaining: self.header.event_count,
            done: false,
        }
    }
}

/// One event of an orbit: one fragment per block (block order), all with the same event id.
/// The fragments' offsets count from the start of their block.
#[derive(Debug, Clone)]
pub struct OrbitEvent<'a> {
    /// The event id.
    pub event_id: u64,
    /// The bunch crossing of the first block's fragment.
    pub bx: u16,
    /// One fragment per block, in block order.
    pub fragments: Vec<OrbitFragment<'a>>,
}

/// Iterator over the events of a [`FileOrbit`], last first.
#[derive(Debug, Clone)]
pub struct FileOrbitEvents<'a> {
    walks: Vec<OrbitFragments<'a>>,
    /// File offset of each block.
    offsets: Vec<usize>,
    remaining: u16,
    done: bool,
}

impl<'a> FileOrbitEvents<'a> {
    /// Reads the next fragment of every block and checks them against each other.
    fn step(&mut self) -> Result<OrbitEvent<'a>> {
        let mut fragments = Vec::with_capacity(self.walks.len());
        for (walk, &at) in self.walks.iter_mut().zip(&self.offsets) {
            // A block walk ends with an error, never early, while its header's count is not reached.
            let fragment = walk
                .next()
                .unwrap_or_else(|| {
                    Err(FormatError::bad("orbit block", "fragments", 0, "as many as its header's event count", "fewer"))
                })
                .map_err(|e| e.shifted(at))?;
            check_fragment(&fragment, at)?;
            if let Some(first) = fragments.first().map(OrbitFragment::event_id)
                && fragment.event_id() != first
            {
                return Err(FormatError::bad(
                    "SlinkRocket header",
                    "event id",
                    at + fragment.offset(),
                    dec(first),
                    dec(fragment.event_id()),
                ));
            }
            fragments.push(fragment);
        }
        let (event_id, bx) = fragments.first().map(|f| (f.event_id(), f.bx())).unwrap_or_default();
        Ok(OrbitEvent { event_id, bx, fragments })
    }

    /// After the last step: every block walk must end at its header.
    fn finish(&mut self) -> Result<()> {
        for (walk, &at) in self.walks.iter_mut().zip(&self.offsets) {
            // A fragment left over: walk on to the walk's own error (a malformed fragment, or its
            // count of fragments against the header's).
            if let Some(Err(e)) = walk.find(Result::is_err) {
                return Err(e.shifted(at));
            }
        }
        Ok(())
    }
}

/// The rules CMSSW's reader adds to a block walk: no trailer flag set, no fragment of 1,048,575
/// bytes or more.
fn check_fragment(fragment: &OrbitFragment, block_at: usize) -> Result<()> {
    if fragment.flags() != 0 {
        return Err(FormatError::bad(
            "fragment trailer",
            "flags",
            block_at + fragment.trailer_offset(),
            hex(0u16),
            hex(fragment.flags()),
        ));
    }
    let len = fragment.as_bytes().len();
    if len > MAX_FILE_FRAGMENT_BYTES {
        return Err(FormatError::bad(
            "SlinkRocket fragment",
            "size (bytes)",
            block_at + fragment.offset(),
            format!("at most {MAX_FILE_FRAGMENT_BYTES}"),
            dec(len),
        ));
    }
    Ok(())
}

impl<'a> Iterator for FileOrbitEvents<'a> {
    type Item = Result<OrbitEvent<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.remaining == 0 {
            self.done = true;
            return self.finish().err().map(Err);
        }
        let event = self.step();
        match event {
            Ok(_) => self.remaining -= 1,
            Err(_) => self.done = true,
        }
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orbit::test_support::{RUN, reseal};
    use proptest::prelude::*;

    /// One orbit to write: its number and its events' ids, BXs and payload lengths.
    type Spec = (u32, Vec<(u64, u16, usize)>);

    const SOURCES: [u32; 3] = [1024, 5, 7];

    /// The payload of `source`'s fragment of `event_id`: distinct for every source and event.
    fn payload(source: u32, event_id: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64).wrapping_mul(7) as u8 ^ (event_id as u8) ^ (source as u8).rotate_left(3)).collect()
    }

    /// The block of `source` for one orbit, every fragment with `flags`.
    fn block(source: u32, run: u32, orbit: u32, events: &[(u64, u16, usize)], flags: u16) -> Vec<u8> {
        let mut out = vec![0; 32 + events.iter().map(|e| orbit_fragment_len(e.2)).sum::<usize>()];
        let mut w = OrbitBlockWriter::new(&mut out, source, run, orbit).unwrap();
        for &(event_id, bx, len) in events {
            let info = FragmentInfo { event_id, bx, flags, ..FragmentInfo::default() };
            w.push_fragment(&info, &payload(source, event_id, len)).unwrap();
        }
        assert_eq!(w.finish().unwrap(), out.len());
        out
    }

    /// An orbit file: every orbit's block from every source, in source order.
    fn file(orbits: &[Spec], sources: &[u32]) -> Vec<u8> {
        orbits
            .iter()
            .flat_map(|(orbit, events)| sources.iter().flat_map(|&s| block(s, RUN, *orbit, events, 0)))
            .collect()
    }

    /// Checks that `bytes` reads back as `orbits` from `sources`, orbit by orbit and event by event.
    fn assert_reads_back(bytes: &[u8], orbits: &[Spec], sources: &[u32]) {
        assert!(is_orbit_file(bytes));
        let read: Vec<FileOrbit> = OrbitFile::new(bytes).map(Result::unwrap).collect();
        assert_eq!(read.len(), orbits.len());
        let mut at = 0;
        for (o, (orbit, events)) in read.iter().zip(orbits) {
            assert_eq!((o.offset(), o.orbit(), o.run()), (at, *orbit, RUN));
            assert_eq!(usize::from(o.event_count()), events.len());
            assert_eq!(o.blocks().len(), sources.len());
            assert_eq!(o.blocks().iter().map(|b| b.header.source_id).collect::<Vec<_>>(), sources);
            let mut block_at = at;
            for (b, &offset) in o.blocks().iter().zip(o.block_offsets()) {
                assert_eq!(offset, block_at);
                assert_eq!(b.as_bytes(), &bytes[offset..offset + b.wire_len()]);
                block_at += b.wire_len();
            }
            assert_eq!(o.wire_len(), block_at - at);
            o.check_crcs().unwrap();
            let read_events: Vec<OrbitEvent> = o.events().map(Result::unwrap).collect();
            assert_eq!(read_events.len(), events.len());
            // Last first.
            for (e, &(event_id, bx, len)) in read_events.iter().zip(events.iter().rev()) {
                assert_eq!((e.event_id, e.bx), (event_id, bx));
                assert_eq!(e.fragments.len(), sources.len());
                for (f, &source) in e.fragments.iter().zip(sources) {
                    assert_eq!((f.source_id(), f.event_id(), f.bx(), f.trailer.orbit), (source, event_id, bx, *orbit));
                    assert_eq!(&f.payload()[..len], &payload(source, event_id, len)[..]);
                    assert!(f.payload()[len..].iter().all(|&b| b == 0));
                    f.check_crc().unwrap();
                }
            }
            at += o.wire_len();
        }
        assert_eq!(at, bytes.len());
    }

    fn good_orbits() -> Vec<Spec> {
        vec![
            (100, vec![(1, 10, 0), (2, 20, 17), (3, 3563, 64)]),
            (101, vec![(4, 0, 5)]),
            (140, vec![(5, 7, 100), (6, 8, 1)]),
        ]
    }

    #[test]
    fn reads_back_orbit_by_orbit_and_event_by_event() {
        let orbits = good_orbits();
        let bytes = file(&orbits, &SOURCES);
        assert_reads_back(&bytes, &orbits, &SOURCES);
        // One source alone is an orbit file as well.
        assert_reads_back(&file(&orbits, &[9]), &orbits, &[9]);
        assert_eq!(OrbitFile::new(&[]).count(), 0);
    }

    #[test]
    fn tells_orbit_files_from_raw_files() {
        assert!(is_orbit_file(b"HO\x01\x00"));
        assert!(is_orbit_file(b"HO"));
        assert!(!is_orbit_file(b"RAW_0002"));
        assert!(!is_orbit_file(b"H"));
        assert!(!is_orbit_file(b""));
    }

    /// The first error the reader gives over the whole file: orbits, CRCs, then events.
    fn first_error(bytes: &[u8]) -> FormatError {
        let read = || -> Result<()> {
            for orbit in OrbitFile::new(bytes) {
                let orbit = orbit?;
                orbit.check_crcs()?;
                for event in orbit.events() {
                    event?;
                }
            }
            Ok(())
        };
        read().expect_err("the file breaks a rule")
    }

    /// File offsets of the good file's blocks, orbit by orbit.
    fn block_offsets(bytes: &[u8]) -> Vec<Vec<usize>> {
        OrbitFile::new(bytes).map(|o| o.unwrap().block_offsets().to_vec()).collect()
    }

    /// The good file with `edit` applied to block `source_index` of orbit `orbit_index`, whose
    /// CRC-32C is then rewritten so that only the edited field is wrong. `edit` gets the block
    /// and the offsets (in the block) of its last fragment's SR header and fragment trailer.
    fn edited(
        orbit_index: usize,
        source_index: usize,
        edit: impl Fn(&mut [u8], usize, usize),
    ) -> (Vec<u8>, usize, usize, usize) {
        let mut bytes = file(&good_orbits(), &SOURCES);
        let orbit = OrbitFile::new(&bytes).nth(orbit_index).unwrap().unwrap();
        let at = orbit.block_offsets()[source_index];
        let block = orbit.blocks()[source_index];
        let last = block.fragments().next().unwrap().unwrap();
        let (sr_at, tf_at, len) = (last.offset(), last.trailer_offset(), block.wire_len());
        let block = &mut bytes[at..at + len];
        edit(block, sr_at, tf_at);
        reseal(block);
        (bytes, at, sr_at, tf_at)
    }

    /// The good orbits with orbit `orbit_index`'s block of `SOURCES[source_index]` replaced.
    fn with_block(orbit_index: usize, source_index: usize, replacement: &[u8]) -> (Vec<u8>, usize) {
        let orbits = good_orbits();
        let mut bytes = Vec::new();
        let mut at = 0;
        for (i, (orbit, events)) in orbits.iter().enumerate() {
            for (j, &source) in SOURCES.iter().enumerate() {
                if (i, j) == (orbit_index, source_index) {
                    at = bytes.len();
                    bytes.extend_from_slice(replacement);
                } else {
                    bytes.extend(block(source, RUN, *orbit, events, 0));
                }
            }
        }
        (bytes, at)
    }

    #[test]
    fn refuses_a_bad_orbit_header_marker_or_version() {
        let good = file(&good_orbits(), &SOURCES);
        let offsets = block_offsets(&good);
        let mut bytes = good.clone();
        let at = offsets[1][0];
        bytes[at] = b'X';
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "marker", at, hex(0x484Fu16), hex(0x584Fu16)));
        // Inside an orbit: the orbit read so far ends there, the bad block is the next read.
        let mut bytes = good.clone();
        let at = offsets[1][2];
        bytes[at + 2] = 2;
        let mut reader = OrbitFile::new(&bytes);
        assert_eq!(reader.next().unwrap().unwrap().blocks().len(), 3);
        assert_eq!(reader.next().unwrap().unwrap().blocks().len(), 2);
        assert_eq!(
            reader.next().unwrap().unwrap_err(),
            FormatError::bad("orbit header", "version", at, dec(1), dec(2))
        );
        assert!(reader.next().is_none(), "the reader stops at its first error");
    }

    #[test]
    fn refuses_a_bad_fragment_trailer_marker() {
        let (bytes, at, _, tf) = edited(1, 1, |b, _, tf| b[tf] = b'X');
        assert_eq!(
            first_error(&bytes),
            FormatError::bad("fragment trailer", "marker", at + tf, hex(0x5446u16), hex(0x5846u16))
        );
    }

    #[test]
    fn refuses_bad_slinkrocket_markers() {
        let (bytes, at, sr, _) = edited(1, 2, |b, sr, _| b[sr + 15] = 0x54);
        assert_eq!(
            first_error(&bytes),
            FormatError::bad("SlinkRocket header", "marker", at + sr, hex(0x55u8), hex(0x54u8))
        );
        let (bytes, at, _, tf) = edited(1, 2, |b, _, tf| b[tf - 1] = 0xAB);
        assert_eq!(
            first_error(&bytes),
            FormatError::bad("SlinkRocket trailer", "marker", at + tf - 16, hex(0xAAu8), hex(0xABu8))
        );
    }

    #[test]
    fn refuses_a_run_that_differs_from_the_files_first() {
        let orbits = good_orbits();
        let (bytes, at) = with_block(1, 1, &block(SOURCES[1], RUN + 1, orbits[1].0, &orbits[1].1, 0));
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "run", at, dec(RUN), dec(RUN + 1)));
        // The first block of an orbit as well.
        let (bytes, at) = with_block(2, 0, &block(SOURCES[0], RUN + 1, orbits[2].0, &orbits[2].1, 0));
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "run", at, dec(RUN), dec(RUN + 1)));
    }

    #[test]
    fn refuses_blocks_of_one_orbit_with_different_event_counts() {
        let (orbit, _) = good_orbits()[1];
        let (bytes, at) = with_block(1, 2, &block(SOURCES[2], RUN, orbit, &[(3, 5, 0), (4, 0, 5)], 0));
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "event count", at, dec(1), dec(2)));
    }

    #[test]
    fn refuses_a_source_with_more_fragments_than_another() {
        // Source 5's block holds one fragment more than its header (and every other block) says.
        let (orbit, _) = good_orbits()[1];
        let mut extra = block(SOURCES[1], RUN, orbit, &[(3, 5, 0), (4, 0, 5)], 0);
        extra[16] = 1;
        reseal(&mut extra);
        let (bytes, at) = with_block(1, 1, &extra);
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "event count", at, dec(2), dec(1)));
    }

    #[test]
    fn refuses_a_source_with_fewer_fragments_than_another() {
        let (orbit, events) = good_orbits().swap_remove(0);
        let mut fewer = block(SOURCES[2], RUN, orbit, &events[1..], 0);
        fewer[16] = 3;
        reseal(&mut fewer);
        let (bytes, at) = with_block(0, 2, &fewer);
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "event count", at, dec(2), dec(3)));
    }

    #[test]
    fn refuses_a_fragment_trailer_flag() {
        let (orbit, events) = good_orbits().swap_remove(2);
        let flagged = block(SOURCES[2], RUN, orbit, &events, trailer_flags::TIMEOUT);
        let (bytes, at) = with_block(2, 2, &flagged);
        let last = OrbitBlock::parse(&flagged).unwrap().fragments().next().unwrap().unwrap();
        assert_eq!(
            first_error(&bytes),
            FormatError::bad("fragment trailer", "flags", at + last.trailer_offset(), hex(0u16), hex(0x20u16))
        );
    }

    #[test]
    fn refuses_an_sr_length_that_differs_from_the_trailers_size() {
        // Orbit 101's only fragment: a 5-byte payload padded to 16, 3 units with SR header and trailer.
        let (bytes, at, _, tf) = edited(1, 0, |b, _, tf| b[tf - 16 + 9] ^= 0x40);
        assert_eq!(
            first_error(&bytes),
            FormatError::bad("SlinkRocket trailer", "length (16-byte units)", at + tf - 16, dec(3), dec(7))
        );
    }

    #[test]
    fn refuses_a_fragment_of_1048575_bytes_or_more() {
        // SR header and trailer take 32 bytes: the largest payload a reader takes is 1,048,528.
        let largest = 1_048_528;
        let ok = block(3, RUN, 1, &[(1, 0, largest)], 0);
        assert_eq!(OrbitFile::new(&ok).next().unwrap().unwrap().events().map(Result::unwrap).count(), 1);
        let too_big = block(3, RUN, 1, &[(1, 0, largest + 1)], 0);
        assert_eq!(
            first_error(&too_big),
            FormatError::bad("SlinkRocket fragment", "size (bytes)", 32, "at most 1048574", dec(largest + 16 + 32))
        );
    }

    #[test]
    fn refuses_event_ids_that_differ_across_blocks() {
        let (orbit, _) = good_orbits()[1];
        let (bytes, at) = with_block(1, 2, &block(SOURCES[2], RUN, orbit, &[(44, 0, 5)], 0));
        assert_eq!(first_error(&bytes), FormatError::bad("SlinkRocket header", "event id", at + 32, dec(4), dec(44)));
    }

    #[test]
    fn refuses_an_orbit_with_no_events() {
        let mut orbits = good_orbits();
        orbits[1].1.clear();
        let bytes = file(&orbits, &SOURCES);
        let at = block_offsets(&file(&good_orbits(), &SOURCES))[1][0];
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "event count", at, "at least 1", dec(0)));
    }

    #[test]
    fn refuses_orbit_numbers_that_do_not_increase() {
        let mut orbits = good_orbits();
        orbits.swap(1, 2);
        let bytes = file(&orbits, &SOURCES);
        let third = OrbitFile::new(&bytes).take(2).map(|o| o.unwrap().wire_len()).sum::<usize>();
        assert_eq!(first_error(&bytes), FormatError::bad("orbit header", "orbit", third, "above 140", dec(101)));
    }

    #[test]
    fn refuses_a_block_running_past_the_end_of_the_file() {
        let good = file(&good_orbits(), &SOURCES);
        let at = *block_offsets(&good).last().unwrap().last().unwrap();
        let n = good.len();
        assert_eq!(
            first_error(&good[..n - 16]),
            FormatError::Truncated { what: "orbit block", offset: at, needed: n - at, available: n - 16 - at }
        );
        assert_eq!(
            first_error(&good[..at + 20]),
            FormatError::Truncated { what: "orbit header", offset: at, needed: 32, available: 20 }
        );
    }

    #[test]
    fn check_crcs_names_the_first_bad_block() {
        let mut bytes = file(&good_orbits(), &SOURCES);
        let at = block_offsets(&bytes)[2][1];
        let stored = u32::from_le_bytes(bytes[at + 28..at + 32].try_into().unwrap());
        bytes[at + 40] ^= 1;
        let computed = crate::crc::crc32c(&bytes[at + 32..block_offsets(&bytes)[2][2]]);
        assert_eq!(
            first_error(&bytes),
            FormatError::Checksum {
                what: "orbit block",
                checksum: "CRC-32C",
                offset: at,
                stored: stored.into(),
                computed: computed.into()
            }
        );
    }

    proptest! {
        #[test]
        fn prop_orbit_files_read_back(
            orbits in proptest::collection::vec(
                (1u32..5000, proptest::collection::vec((1u64..50, 0u16..3564, 0usize..90), 1..5)), 1..6),
            sources in proptest::collection::btree_set(0u32..4096, 1..5),
            first_orbit: u16, first_event in 0u64..(1 << 40),
        ) {
            let mut orbit = u32::from(first_orbit);
            let mut event_id = first_event;
            let specs: Vec<Spec> = orbits
                .into_iter()
                .map(|(step, events)| {
                    orbit += step;
                    let events = events
                        .into_iter()
                        .map(|(id_step, bx, len)| {
                            event_id += id_step;
                            (event_id, bx, len)
                        })
                        .collect();
                    (orbit, events)
                })
                .collect();
            let sources: Vec<u32> = sources.into_iter().collect();
            assert_reads_back(&file(&specs, &sources), &specs, &sources);
        }

        #[test]
        fn prop_corrupted_files_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut bytes = file(&good_orbits(), &SOURCES);
            for (at, v) in flips {
                let n = bytes.len();
                bytes[at % n] ^= v;
            }
            for orbit in OrbitFile::new(&bytes).flatten() {
                let _ = orbit.check_crcs();
                let _ = orbit.events().count();
            }
        }
    }
}
