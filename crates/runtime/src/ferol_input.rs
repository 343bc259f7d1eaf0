//! The receive side of one FEROL stream in an RU: bytes read from the socket go into chunks of a
//! bounded, pre-touched pool, and each complete fragment stays where it was received, named by a
//! [`FragmentHandle`], until its event is committed and the RU releases it. When every chunk
//! holds unreleased fragments the buffer has no room: the reader stops reading its socket, and
//! TCP carries the back-pressure to the front end.

use std::collections::VecDeque;
use tessera_formats::FormatError;
use tessera_formats::fed::{CrcCheck, FedHeader, FedTrailer};
use tessera_formats::ferol::{FerolFragment, HEADER_BYTES};

/// Where a received fragment is: its FEROL blocks, headers included, in one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentHandle {
    /// The chunk.
    pub chunk: u32,
    /// Offset of the first block header in the chunk.
    pub offset: u32,
    /// Bytes of the blocks, headers included.
    pub wire_len: u32,
}

/// A fragment taken off the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Where it is.
    pub handle: FragmentHandle,
    /// Byte offset of its first block in the stream.
    pub stream_offset: u64,
    /// Its FED header.
    pub header: FedHeader,
    /// Its FED trailer.
    pub trailer: FedTrailer,
    /// Fragment bytes, header to trailer, without block headers.
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

/// The receive memory of one FEROL stream.
pub struct StreamBuffer {
    fed: u16,
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

    /// Checks the CRC-16 of the fragments `check` says (every one by default).
    pub fn with_crc_check(mut self, check: CrcCheck) -> Self {
        self.crc_check = check;
        self
    }

    /// The next complete fragment, `None` when more bytes are needed, or the error that ends the
    /// stream (nothing more is read from it after that).
    pub fn next_fragment(&mut self) -> Option<Result<Received, StreamError>> {
        if self.failed || self.start == self.end {
            return None;
        }
        let cur = self.current as usize;
        let bytes = &self.chunks[cur].data[self.start..self.end];
        // The blocks frame the fragment: a FED header naming another FED is a fault of the
        // fragment, passed on flagged, not of the stream.
        let (fragment, wrong_id) = match FerolFragment::parse_framed(bytes) {
            Ok(f) => f,
            Err(e) if e.is_truncated() => return None,
            Err(error) => {
                self.failed = true;
                let at = self.stream_offset + error.offset().unwrap_or(0) as u64;
                let error = error.shifted(self.stream_offset as usize);
                return Some(Err(StreamError { fed: self.fed, stream_offset: at, error }));
            }
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
        self.fragments += 1;
        let received = Received {
            handle: FragmentHandle {
                chunk: self.current,
                offset: self.start as u32,
                wire_len: fragment.wire_len() as u32,
            },
            stream_offset: self.stream_offset,
            header: fragment.header,
            trailer: fragment.trailer,
            fragment_len: fragment.fragment_len(),
            problem: problem.map(|p| p.shifted(self.stream_offset as usize)),
        };
        self.start += fragment.wire_len();
        self.stream_offset += fragment.wire_len() as u64;
        self.chunks[cur].live += 1;
        Some(Ok(received))
    }

    /// The fragment's bytes, header to trailer, as the data of its FEROL blocks (one piece per
    /// block): what a BU writes, without a copy.
    pub fn segments(&self, handle: FragmentHandle) -> impl Iterator<Item = &[u8]> {
        let data = self.chunks.get(handle.chunk as usize).map(|c| &c.data[..]).unwrap_or_default();
        // A `wire_len` past the chunk's end means "as long as the fragment is".
        let end = (handle.offset as usize).saturating_add(handle.wire_len as usize).min(data.len());
        let blocks = data.get(handle.offset as usize..end).unwrap_or_default();
        FerolFragment::parse_framed(blocks).into_iter().flat_map(|(f, _)| f.segments())
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
