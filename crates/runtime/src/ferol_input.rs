//! The receive side of one front-end stream in an RU: bytes read from the socket go into chunks
//! of a bounded, pre-touched pool, and each complete fragment stays where it was received, named
//! by a [`FragmentHandle`], until its event is committed and the RU releases it. When every chunk
//! holds unreleased fragments the buffer has no room: the reader stops reading its socket, and
//! TCP carries the back-pressure to the front end.
//!
//! A stream is a FEROL stream of FED fragments or, in orbit mode, a DTH stream of orbit blocks
//! ([`Framing`]). Of an orbit block the RU reads the stream blocks' headers and the orbit header
//! only, and its CRC-32C when asked: it never walks the fragments inside. To the protocol an
//! orbit block is one fragment, its orbit's index in the run its event number.

use std::collections::VecDeque;
use tessera_formats::FormatError;
use tessera_formats::fed::{CrcCheck, LV1_MASK};
use tessera_formats::ferol::{FerolFragment, HEADER_BYTES};
use tessera_formats::orbit::{DTH_HEADER_BYTES, DthOrbit, OrbitHeader};
use tessera_formats::tcds::orbit_index;

/// What a stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// FED fragments in FEROL blocks (docs/formats.md §2).
    Ferol,
    /// Orbit blocks in DTH stream blocks (docs/formats.md §6), of a run whose lumi sections have
    /// this many orbits: an orbit's index in the run is its event number.
    Dth {
        /// Orbits per lumi section (`run.orbits_per_lumi_section`).
        orbits_per_lumi_section: u64,
    },
}

/// Most bytes one read of a FEROL stream takes: its fragments are parsed and their CRC-16
/// checked right after the read. Fewer, larger reads cost less CPU per fragment (BENCHMARKS.md:
/// 32 KiB, 128 KiB, 512 KiB and 1 MiB tried); 512 KiB still fits a core's L2 cache.
pub const FEROL_READ_BYTES: usize = 512 << 10;

/// Most bytes one read of a DTH stream takes: the RU reads only headers of it, and an orbit
/// block's CRC-32C runs at tens of GB/s, so larger reads (fewer system calls) pay.
pub const DTH_READ_BYTES: usize = 512 << 10;

impl Framing {
    /// Most bytes one read of a stream takes.
    pub fn read_bytes(&self) -> usize {
        match self {
            Framing::Ferol => FEROL_READ_BYTES,
            Framing::Dth { .. } => DTH_READ_BYTES,
        }
    }
}

/// Where a received fragment is: its FEROL blocks, headers included, in one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentHandle {
    /// The chunk.
    pub chunk: u32,
    /// Offset of the first block header in the chunk.
    pub offset: u32,
    /// Bytes of the blocks, headers included.
    pub wire_len: u32,
    /// [`HEADER_BYTES`] when the fragment (or orbit block) came in one block, its data then the
    /// rest of `wire_len`; 0 when it came in several, whose headers say where the data is.
    pub head: u32,
}

/// A fragment taken off the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Where it is.
    pub handle: FragmentHandle,
    /// Byte offset of its first block in the stream.
    pub stream_offset: u64,
    /// The source it names: its FED header's source id, or its orbit header's.
    pub source_id: u32,
    /// Its LV1 id (24 bits): of a FED fragment its header's, of an orbit block the low 24 bits
    /// of its orbit's index in the run.
    pub lv1: u32,
    /// Its FED header's BX (0 for an orbit block).
    pub bx: u16,
    /// An orbit block's header.
    pub orbit: Option<OrbitHeader>,
    /// Fragment bytes, header to trailer (for an orbit block, the block), without block headers.
    pub fragment_len: usize,
    /// What is wrong with it, if anything (a CRC-16 mismatch, an unexpected FED id): the fragment
    /// is kept and passed on flagged.
    pub problem: Option<FormatError>,
}

/// A stream that cannot be read on: the bytes at `stream_offset` are no FEROL block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("FED {fed} stream, byte {stream_offset}: {error}")]
pub struct StreamError {
    /// The FED the stream was configured for.
    pub fed: u16,
    /// Byte offset in the stream.
    pub stream_offset: u64,
    /// What is there, its offsets counted from the start of the stream.
    pub error: FormatError,
}

/// The pool's shape is impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A chunk smaller than the largest fragment could never hold it.
    #[error("chunk of {chunk_bytes} bytes is smaller than the largest fragment on the wire ({max_wire_bytes} bytes)")]
    ChunkTooSmall {
        /// Chunk size asked for.
        chunk_bytes: usize,
        /// Largest fragment, FEROL block headers included.
        max_wire_bytes: usize,
    },
    /// At least two chunks are needed: one being filled, one whose fragments wait for release.
    #[error("{0} chunks: at least 2 are needed")]
    TooFewChunks(usize),
}

struct Chunk {
    data: Box<[u8]>,
    live: u32,
}

/// The pieces of a fragment or of an orbit block: one iterator type for both framings, so that
/// sending a fragment allocates nothing.
enum Segments<'a, F, D> {
    One(std::option::IntoIter<&'a [u8]>),
    Ferol(F),
    Dth(D),
}

impl<'a, F: Iterator<Item = &'a [u8]>, D: Iterator<Item = &'a [u8]>> Iterator for Segments<'a, F, D> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match self {
            Segments::One(one) => one.next(),
            Segments::Ferol(f) => f.next(),
            Segments::Dth(d) => d.next(),
        }
    }
}

/// The receive memory of one front-end stream.
pub struct StreamBuffer {
    fed: u16,
    framing: Framing,
    chunks: Vec<Chunk>,
    free: VecDeque<u32>,
    current: u32,
    /// Parse position and fill level in the current chunk.
    start: usize,
    end: usize,
    /// Stream offset of `start`.
    stream_offset: u64,
    failed: bool,
    /// Which fragments' CRC-16 is checked, and how many fragments came so far.
    crc_check: CrcCheck,
    fragments: u64,
}

impl StreamBuffer {
    /// A buffer for FED `fed`'s stream of `chunks` chunks of `chunk_bytes`, allocated and
    /// touched now (first touch of fresh memory is slow: pay it before the run). Every fragment
    /// must fit in a chunk, FEROL block headers included: `max_wire_bytes` says how large one
    /// may be.
    pub fn new(fed: u16, chunk_bytes: usize, chunks: usize, max_wire_bytes: usize) -> Result<Self, ConfigError> {
        if chunk_bytes < max_wire_bytes {
            return Err(ConfigError::ChunkTooSmall { chunk_bytes, max_wire_bytes });
        }
        if chunks < 2 {
            return Err(ConfigError::TooFewChunks(chunks));
        }
        // vec! of zeros may map lazily; filling with a non-zero byte touches every page.
        let chunks: Vec<Chunk> =
            (0..chunks).map(|_| Chunk { data: vec![0xA5u8; chunk_bytes].into_boxed_slice(), live: 0 }).collect();
        Ok(StreamBuffer {
            fed,
            framing: Framing::Ferol,
            free: (1..chunks.len() as u32).collect(),
            chunks,
            current: 0,
            start: 0,
            end: 0,
            stream_offset: 0,
            failed: false,
            crc_check: CrcCheck::Always,
            fragments: 0,
        })
    }

    /// Room to read into, or `None` when every chunk holds unreleased fragments (stop reading the
    /// socket until some are released). Moving on to a new chunk copies the unparsed tail of the
    /// current one, at most one incomplete fragment.
    pub fn spare(&mut self) -> Option<&mut [u8]> {
        let cur = self.current as usize;
        if self.end == self.chunks[cur].data.len() {
            let next = self.free.pop_front()?;
            let tail = self.end - self.start;
            let (a, b) = (cur.min(next as usize), cur.max(next as usize));
            let (left, right) = self.chunks.split_at_mut(b);
            let (from, to) = if cur < next as usize { (&left[a], &mut right[0]) } else { (&right[0], &mut left[a]) };
            to.data[..tail].copy_from_slice(&from.data[self.start..self.end]);
            crate::copies::copied(crate::copies::Unit::Ru, tail);
            if self.chunks[cur].live == 0 {
                self.free.push_back(self.current);
            }
            self.current = next;
            self.start = 0;
            self.end = tail;
        }
        let cur = self.current as usize;
        Some(&mut self.chunks[cur].data[self.end..])
    }

    /// Records that `n` bytes were read into [`StreamBuffer::spare`].
    pub fn filled(&mut self, n: usize) {
        let cur = self.current as usize;
        self.end = (self.end + n).min(self.chunks[cur].data.len());
    }

    /// Checks the CRC of the fragments `check` says (every one by default): a FED fragment's
    /// CRC-16, an orbit block's CRC-32C.
    pub fn with_crc_check(mut self, check: CrcCheck) -> Self {
        self.crc_check = check;
        self
    }

    /// Reads the stream as `framing` says (FEROL by default).
    pub fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// The stream cannot be read on: nothing more is taken from it.
    fn fail(&mut self, error: FormatError) -> Option<Result<Received, StreamError>> {
        self.failed = true;
        let at = self.stream_offset + error.offset().unwrap_or(0) as u64;
        let error = error.shifted(self.stream_offset as usize);
        Some(Err(StreamError { fed: self.fed, stream_offset: at, error }))
    }

    /// Takes `received` off the stream: its bytes stay in the chunk until released.
    fn take(&mut self, mut received: Received) -> Option<Result<Received, StreamError>> {
        received.problem = received.problem.map(|p| p.shifted(self.stream_offset as usize));
        self.fragments += 1;
        self.start += received.handle.wire_len as usize;
        self.stream_offset += u64::from(received.handle.wire_len);
        self.chunks[self.current as usize].live += 1;
        Some(Ok(received))
    }

    /// The next orbit block of a DTH stream: its stream block headers and orbit header read,
    /// its CRC-32C checked when asked; its fragments are not looked at.
    fn next_orbit(&mut self, orbits_per_lumi_section: u64) -> Option<Result<Received, StreamError>> {
        let cur = self.current as usize;
        let bytes = &self.chunks[cur].data[self.start..self.end];
        let whole_chunk = self.start == 0 && self.end == self.chunks[cur].data.len();
        let orbit = match DthOrbit::parse(bytes) {
            Ok(o) => o,
            Err(e) if e.is_truncated() && !whole_chunk => return None,
            // A chunk that holds nothing but the start of this orbit never holds all of it.
            Err(e) if e.is_truncated() => {
                let chunk = self.chunks[cur].data.len();
                return self.fail(FormatError::bad(
                    "DTH orbit",
                    "length on the wire",
                    0,
                    format!("at most a chunk of receive memory, {chunk} bytes (ru.chunk_bytes)"),
                    format!("more than {chunk} bytes"),
                ));
            }
            Err(e) => return self.fail(e),
        };
        let header = orbit.header;
        // An orbit number this run's numbering never gives has no place in the run: the stream
        // cannot be read on (24 bits of LV1 id could not say "none" to the core).
        let Some(index) = orbit_index(header.orbit.into(), orbits_per_lumi_section) else {
            return self.fail(FormatError::bad(
                "orbit header",
                "orbit",
                DTH_HEADER_BYTES,
                format!("an orbit within the first {orbits_per_lumi_section} of its lumi section"),
                tessera_formats::Value::Dec(header.orbit.into()),
            ));
        };
        let problem = if let Err(e) = orbit.check_source_id(Some(self.fed.into())) {
            Some(e)
        } else if self.crc_check.checks(self.fragments) {
            orbit.check_crc().err()
        } else {
            None
        };
        let received = Received {
            handle: FragmentHandle {
                chunk: self.current,
                offset: self.start as u32,
                wire_len: orbit.wire_len() as u32,
                head: one_block_head(orbit.wire_len(), orbit.orbit_len()),
            },
            stream_offset: self.stream_offset,
            source_id: header.source_id,
            lv1: index as u32 & LV1_MASK,
            bx: 0,
            orbit: Some(header),
            fragment_len: orbit.orbit_len(),
            problem,
        };
        self.take(received)
    }

    /// The next complete fragment, `None` when more bytes are needed, or the error that ends the
    /// stream (nothing more is read from it after that).
    pub fn next_fragment(&mut self) -> Option<Result<Received, StreamError>> {
        if self.failed || self.start == self.end {
            return None;
        }
        if let Framing::Dth { orbits_per_lumi_section } = self.framing {
            return self.next_orbit(orbits_per_lumi_section);
        }
        let cur = self.current as usize;
        let bytes = &self.chunks[cur].data[self.start..self.end];
        // The blocks frame the fragment: a FED header naming another FED is a fault of the
        // fragment, passed on flagged, not of the stream.
        let (fragment, wrong_id) = match FerolFragment::parse_framed(bytes) {
            Ok(f) => f,
            Err(e) if e.is_truncated() => return None,
            Err(error) => return self.fail(error),
        };
        let problem = if fragment.header.source_id != self.fed {
            Some(FormatError::BadField {
                what: "FED header",
                field: "source id",
                offset: HEADER_BYTES,
                expected: tessera_formats::Value::Dec(self.fed.into()),
                found: tessera_formats::Value::Dec(fragment.header.source_id.into()),
            })
        } else {
            let checked = self.crc_check.checks(self.fragments);
            wrong_id.or_else(|| if checked { fragment.check_crc().err() } else { None })
        };
        let received = Received {
            handle: FragmentHandle {
                chunk: self.current,
                offset: self.start as u32,
                wire_len: fragment.wire_len() as u32,
                head: one_block_head(fragment.wire_len(), fragment.fragment_len()),
            },
            stream_offset: self.stream_offset,
            source_id: fragment.header.source_id.into(),
            lv1: fragment.header.lv1_id,
            bx: fragment.header.bx_id,
            orbit: None,
            fragment_len: fragment.fragment_len(),
            problem,
        };
        self.take(received)
    }

    /// The fragment's bytes, header to trailer, as the data of its FEROL blocks (one piece per
    /// block), or the orbit block as the data of its DTH stream blocks: what a BU writes,
    /// without a copy.
    pub fn segments(&self, handle: FragmentHandle) -> impl Iterator<Item = &[u8]> {
        let data = self.chunks.get(handle.chunk as usize).map(|c| &c.data[..]).unwrap_or_default();
        // A `wire_len` past the chunk's end means "as long as the fragment is".
        let end = (handle.offset as usize).saturating_add(handle.wire_len as usize).min(data.len());
        let blocks = data.get(handle.offset as usize..end).unwrap_or_default();
        // Read and checked when received (`next_fragment`). A fragment of one block, the common
        // case, is found without touching its header again: at send time its bytes have long left
        // the caches, and that read cost a miss per fragment (BENCHMARKS.md). One of several
        // blocks has only its block headers' lengths read again, not every check of the framing.
        if handle.head != 0 {
            return Segments::One(blocks.get(handle.head as usize..).into_iter());
        }
        match self.framing {
            Framing::Ferol => Segments::Ferol(FerolFragment::segments_of(blocks)),
            Framing::Dth { .. } => Segments::Dth(DthOrbit::segments_of(blocks)),
        }
    }

    /// Sets the F bit ("unexpected FED id", bit 14 of the trailer word) of a received fragment
    /// whose FED header names another FED than its stream's, as CMS's receiving board does: no
    /// reader can then take it for the other FED's data. Nothing else changes: the CRC-16 does
    /// not cover the F bit.
    pub fn flag_wrong_fed_id(&mut self, handle: FragmentHandle) {
        let Some(chunk) = self.chunks.get_mut(handle.chunk as usize) else { return };
        // The trailer is the last word of the fragment's last block, the last word on the wire.
        let end = handle.offset as usize + handle.wire_len as usize;
        if let Some(byte) = end.checked_sub(7).and_then(|at| chunk.data.get_mut(at)) {
            // Bit 14 of the little-endian word: bit 6 of its second byte.
            *byte |= 0x40;
        }
    }

    /// Releases a fragment: its chunk is reused once all of its fragments are released.
    pub fn release(&mut self, handle: FragmentHandle) {
        let Some(chunk) = self.chunks.get_mut(handle.chunk as usize) else { return };
        chunk.live = chunk.live.saturating_sub(1);
        if chunk.live == 0 && handle.chunk != self.current {
            self.free.push_back(handle.chunk);
        }
    }

    /// Whether [`StreamBuffer::spare`] would give room to read into.
    pub fn has_room(&self) -> bool {
        self.end < self.chunks[self.current as usize].data.len() || !self.free.is_empty()
    }

    /// Bytes received and not yet taken as fragments: a fragment still arriving.
    pub fn pending_bytes(&self) -> usize {
        self.end - self.start
    }

    /// Chunks holding unreleased fragments, of the pool's total: the occupancy to monitor.
    pub fn occupancy(&self) -> (usize, usize) {
        (self.chunks.len() - self.free.len(), self.chunks.len())
    }
}

/// [`FragmentHandle::head`] of what takes `wire_len` bytes on the wire to carry `data_len`: one
/// block's header in front of the data, or 0 for several blocks (FEROL and DTH stream blocks
/// have headers of the same size).
fn one_block_head(wire_len: usize, data_len: usize) -> u32 {
    if wire_len == HEADER_BYTES + data_len { HEADER_BYTES as u32 } else { 0 }
}
