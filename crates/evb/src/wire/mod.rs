//! The wire format of the event-building protocol: how a [`Message`] travels over a byte stream
//! such as a TCP connection, so that the sans-IO units can run on a network. Pure code: no sockets;
//! the driver reads and writes, this module only turns messages into bytes and back.
//!
//! Every message is one frame: a 16-byte header (magic `"TSRA"`, version, message type, body
//! length, CRC-32C of the body), then the body. All integers are little-endian. Bodies hold the
//! message's fields in declaration order; vectors are a u32 count and the items, an `Option` a u8
//! tag (0 none, 1 some) and the value. docs/formats.md ("Event-building wire protocol") gives
//! every layout.
//!
//! A [`Message::Data`] frame also carries the bytes of its fragments, after the descriptors.
//! [`encode_data_header`] writes the frame header and the descriptors only, with the CRC computed
//! over the fragments too, so that a sender can hand header, descriptors and the fragments in its
//! receive buffers to one vectored write. The receiver's [`Frame::decode`] returns the byte range
//! of each fragment within the frame body, so nothing is copied there either.
//!
//! [`FrameDecoder`] cuts frames out of a stream that arrives in pieces of any size. Every header
//! field is checked as soon as the header is complete, so a frame longer than the bound is refused
//! before any of its body is buffered; every count is checked against the bytes actually present
//! before anything is allocated for it. Errors name the structure, the field and the byte offset
//! from the start of the stream; after one, the stream cannot be trusted to be back in step, so
//! the decoder keeps returning it and the connection should be dropped.

use std::ops::{Deref, Range};

use tessera_formats::Value;
use tessera_formats::crc::crc32c;

use crate::msg::{BufferRef, BuiltFile, FragmentRef, Message, SuperFragment, TriggerInfo};
use crate::spare::Spare;
use crate::types::{BuId, Epoch, EventNumber, EventRange, FedId, FileId, RuId};

mod body;
#[cfg(test)]
mod tests;
use body::{Field, Reader, Wire, get_body, locate_fragments, put_control_body, put_data_descriptors};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"TSRA";

/// The version of the wire format this module reads and writes. Version 2: a data frame's CRC
/// covers its descriptors only (see [`encode_data_header_pieces`]).
pub const VERSION: u16 = 2;

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 16;

/// Default bound on a frame's body length: 64 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u32 = 64 << 20;

/// The bytes [`encode`] makes room for at once: most control frames fit.
const CONTROL_FRAME_BYTES: usize = 256;

/// The message type field of a frame header: one code per [`Message`] variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// [`Message::Hello`], code 1.
    Hello = 1,
    /// [`Message::Welcome`], code 2.
    Welcome = 2,
    /// [`Message::Request`], code 3.
    Request = 3,
    /// [`Message::Assign`], code 4.
    Assign = 4,
    /// [`Message::Data`], code 5.
    Data = 5,
    /// [`Message::Commit`], code 6.
    Commit = 6,
    /// [`Message::Release`], code 7.
    Release = 7,
    /// [`Message::Drain`], code 8.
    Drain = 8,
    /// [`Message::EndOfLumi`], code 9.
    EndOfLumi = 9,
    /// [`Message::EndOfRun`], code 10.
    EndOfRun = 10,
    /// [`Message::Exclude`], code 11.
    Exclude = 11,
    /// [`Message::Progress`], code 12.
    Progress = 12,
    /// [`Message::StreamsConnected`], code 13.
    StreamsConnected = 13,
    /// [`Message::Start`], code 14.
    Start = 14,
}

impl MessageType {
    const ALL: [MessageType; 14] = [
        MessageType::Hello,
        MessageType::Welcome,
        MessageType::Request,
        MessageType::Assign,
        MessageType::Data,
        MessageType::Commit,
        MessageType::Release,
        MessageType::Drain,
        MessageType::EndOfLumi,
        MessageType::EndOfRun,
        MessageType::Exclude,
        MessageType::Progress,
        MessageType::StreamsConnected,
        MessageType::Start,
    ];

    /// The code written in the frame header.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The type of a header's code, if it is one.
    pub fn from_code(code: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The type of a message.
    pub fn of(msg: &Message) -> Self {
        match msg {
            Message::Hello { .. } => MessageType::Hello,
            Message::Welcome { .. } => MessageType::Welcome,
            Message::Request { .. } => MessageType::Request,
            Message::Assign { .. } => MessageType::Assign,
            Message::Data { .. } => MessageType::Data,
            Message::Commit { .. } => MessageType::Commit,
            Message::Release { .. } => MessageType::Release,
            Message::Drain { .. } => MessageType::Drain,
            Message::EndOfLumi { .. } => MessageType::EndOfLumi,
            Message::EndOfRun { .. } => MessageType::EndOfRun,
            Message::Exclude { .. } => MessageType::Exclude,
            Message::Progress { .. } => MessageType::Progress,
            Message::StreamsConnected { .. } => MessageType::StreamsConnected,
            Message::Start => MessageType::Start,
        }
    }

    /// The variant's name, as errors show it.
    pub fn name(self) -> &'static str {
        match self {
            MessageType::Hello => "Hello",
            MessageType::Welcome => "Welcome",
            MessageType::Request => "Request",
            MessageType::Assign => "Assign",
            MessageType::Data => "Data",
            MessageType::Commit => "Commit",
            MessageType::Release => "Release",
            MessageType::Drain => "Drain",
            MessageType::EndOfLumi => "EndOfLumi",
            MessageType::EndOfRun => "EndOfRun",
            MessageType::Exclude => "Exclude",
            MessageType::Progress => "Progress",
            MessageType::StreamsConnected => "StreamsConnected",
            MessageType::Start => "Start",
        }
    }
}

/// What went wrong while reading or writing a frame.
///
/// Offsets count bytes from the start of the stream a [`FrameDecoder`] was fed, or from the start
/// of the buffer given to [`Frame::parse`]; they point at the field in question.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The frame body ends before the fields it must hold (the frame itself is complete: its
    /// header's length says so).
    #[error("{what}: body ends inside {field} at byte {offset}: needs {needed} bytes, {available} left")]
    Truncated {
        /// The structure being read, e.g. "FileId" or "Data".
        what: &'static str,
        /// The field, e.g. "seq".
        field: &'static str,
        /// Byte offset of the field.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the body from `offset`.
        available: u64,
    },
    /// A field holds a value the format does not allow, or a count larger than the bytes left.
    #[error("{what}: bad {field} at byte {offset}: expected {expected}, found {found}")]
    BadField {
        /// The structure being read, e.g. "frame header" or "FragmentRef".
        what: &'static str,
        /// The field, e.g. "magic" or "fragments" (the count of a vector).
        field: &'static str,
        /// Byte offset of the field.
        offset: u64,
        /// What the format allows.
        expected: Value,
        /// What the input holds.
        found: Value,
    },
    /// The body's CRC-32C does not match the one in the header.
    #[error("{what}: CRC-32C mismatch at byte {offset}: stored {stored:#x}, computed {computed:#x}")]
    Checksum {
        /// The message type of the frame, e.g. "Hello".
        what: &'static str,
        /// Byte offset of the header's CRC field.
        offset: u64,
        /// CRC in the header.
        stored: u32,
        /// CRC of the body as received.
        computed: u32,
    },
    /// The body goes on after its last field.
    #[error("{what}: {extra} bytes after the last field, at byte {offset}")]
    TrailingBytes {
        /// The message type of the frame.
        what: &'static str,
        /// Byte offset of the first extra byte.
        offset: u64,
        /// Number of extra bytes.
        extra: u64,
    },
    /// [`encode`] was given a data message, whose fragment bytes only [`encode_data_header`] can
    /// take.
    #[error("Data: a data message carries fragment bytes: encode it with encode_data_header")]
    DataWithoutFragments,
    /// [`encode_data_header`] was given more or fewer slices than the message has fragments.
    #[error("Data: {given} fragment slices given for {declared} fragments")]
    FragmentCount {
        /// Fragments in the message's super-fragments.
        declared: usize,
        /// Slices given.
        given: usize,
    },
    /// A fragment slice given to [`encode_data_header`] is not as long as its descriptor says.
    #[error("Data: fragment {index} is declared {declared} bytes long, its slice holds {given}")]
    FragmentLength {
        /// Index of the fragment within the message (super-fragments in order, their fragments
        /// in order).
        index: usize,
        /// Its `bytes` field.
        declared: u32,
        /// Length of its slice.
        given: usize,
    },
    /// The pieces given to [`encode_data_header_pieces`] do not add up to the fragments' sizes.
    #[error("Data: the fragments are declared {declared} bytes long, the pieces hold {given}")]
    PieceBytes {
        /// Sum of the fragments' `bytes` fields.
        declared: u64,
        /// Sum of the pieces' lengths.
        given: u64,
    },
    /// A count or length does not fit the u32 the wire gives it.
    #[error("{what}: {field} of {length} does not fit in 32 bits")]
    TooLarge {
        /// The structure being written.
        what: &'static str,
        /// The vector, or "body length".
        field: &'static str,
        /// Its length.
        length: u64,
    },
}

/// Writes `msg` as one frame at the end of `out`. Data messages are refused
/// ([`WireError::DataWithoutFragments`]): use [`encode_data_header`]. On error `out` is left as it
/// was.
///
/// The frame is not checked against the receiver's bound on body length: senders keep their
/// messages within it (control messages are small).
pub fn encode(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    // Room for most control frames at once (a request that reports a few files, an assignment of
    // a few ranges), rather than growing into it field by field; a larger one grows from there.
    out.reserve(CONTROL_FRAME_BYTES);
    out.extend_from_slice(&[0; HEADER_BYTES]);
    let result = put_control_body(msg, out).and_then(|()| {
        let body = &out[start + HEADER_BYTES..];
        let length = body_length(body.len() as u64)?;
        let crc = crc32c(body);
        write_header(&mut out[start..start + HEADER_BYTES], MessageType::of(msg), length, crc);
        Ok(())
    });
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Writes the frame of a data message at the end of `out`, all of it but the fragment bytes: the
/// frame header, then the descriptors (`ru`, `epoch`, `parts`, `commits`). The header's length and
/// CRC-32C cover the descriptors and `fragments`, the bytes of every fragment of `parts` in order
/// (super-fragments in order, their fragments in order), so that the frame on the wire is `out`'s
/// new bytes followed by every slice of `fragments`: one vectored write, straight from the
/// buffers the fragments were received into.
///
/// The fragments' `buffer` fields are not sent. On error (a slice count or length that does not
/// match the descriptors, or a body longer than 4 GiB) `out` is left as it was.
pub fn encode_data_header<S: Deref<Target = [u8]>>(
    ru: RuId,
    epoch: Epoch,
    parts: &[SuperFragment],
    commits: &[FileId],
    fragments: &[S],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let declared = parts.iter().map(|p| p.fragments.len()).sum::<usize>();
    if declared != fragments.len() {
        return Err(WireError::FragmentCount { declared, given: fragments.len() });
    }
    let refs = parts.iter().flat_map(|p| &p.fragments);
    for (index, (fragment, slice)) in refs.zip(fragments).enumerate() {
        if usize::try_from(fragment.bytes).ok() != Some(slice.len()) {
            return Err(WireError::FragmentLength { index, declared: fragment.bytes, given: slice.len() });
        }
    }
    encode_data_header_pieces(ru, epoch, parts, commits, fragments, out)
}

/// As [`encode_data_header`], for fragments held in pieces (a fragment received in several FEROL
/// blocks): `pieces` are the bytes of every fragment of `parts`, in order, cut anywhere; only
/// their total length is checked against the fragments' declared sizes.
///
/// The header's CRC-32C covers the descriptors only. Each fragment carries its own CRC-16, which
/// the RU checks on arrival and `tessera verify` checks in the files, and each built event gets
/// a CRC-32C of its own; a third checksum over the fragment bytes in transit, on top of TCP's,
/// cost the RU a seventh of its CPU time.
pub fn encode_data_header_pieces<S: Deref<Target = [u8]>>(
    ru: RuId,
    epoch: Epoch,
    parts: &[SuperFragment],
    commits: &[FileId],
    pieces: &[S],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let declared = parts.iter().flat_map(|p| &p.fragments).map(|f| u64::from(f.bytes)).sum::<u64>();
    let given = pieces.iter().map(|s| s.len() as u64).sum::<u64>();
    if declared != given {
        return Err(WireError::PieceBytes { declared, given });
    }
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    let result = put_data_descriptors(ru, epoch, parts, commits, out).and_then(|()| {
        let descriptors = &out[start + HEADER_BYTES..];
        let length = body_length(descriptors.len() as u64 + given)?;
        let crc = crc32c(descriptors);
        write_header(&mut out[start..start + HEADER_BYTES], MessageType::Data, length, crc);
        Ok(())
    });
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// A body length as the header holds it.
fn body_length(length: u64) -> Result<u32, WireError> {
    u32::try_from(length).map_err(|_| WireError::TooLarge { what: "frame", field: "body length", length })
}

fn write_header(header: &mut [u8], kind: MessageType, length: u32, crc: u32) {
    header[0..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&VERSION.to_le_bytes());
    header[6..8].copy_from_slice(&kind.code().to_le_bytes());
    header[8..12].copy_from_slice(&length.to_le_bytes());
    header[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// One complete frame, its header checked and its body's CRC-32C verified; the body is not decoded
/// yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    kind: MessageType,
    body: &'a [u8],
    offset: u64,
    /// The header's CRC, checked here for data frames, whose descriptors' end is known only
    /// once they are decoded.
    crc: u32,
}

impl<'a> Frame<'a> {
    /// The frame at the start of `buf`, if `buf` holds all of it (`Ok(None)` if it holds less:
    /// wait for more bytes). Header errors are reported as soon as `buf` holds the header, so a
    /// body longer than `max_body_bytes` is refused without waiting for it.
    pub fn parse(buf: &'a [u8], max_body_bytes: u32) -> Result<Option<Frame<'a>>, WireError> {
        Ok(frame_at(buf, max_body_bytes, 0)?.map(|(kind, length, crc)| Frame {
            kind,
            body: &buf[HEADER_BYTES..HEADER_BYTES + length],
            offset: 0,
            crc,
        }))
    }

    /// The message type.
    pub fn kind(&self) -> MessageType {
        self.kind
    }

    /// The body (for a data message, descriptors and fragment bytes).
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// Byte offset of the frame's header in the stream or buffer it was cut from.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of the whole frame, header included.
    pub fn frame_bytes(&self) -> usize {
        HEADER_BYTES + self.body.len()
    }

    /// Decodes the body. For a data message, [`Decoded::fragments`] gives the range of each
    /// fragment's bytes within [`Frame::body`], and each [`FragmentRef::buffer`] is set to that
    /// fragment's index in it (the sender's buffer handles are not sent).
    pub fn decode(&self) -> Result<Decoded, WireError> {
        self.decode_with(&mut Spare::default())
    }

    /// Decodes the body as [`Frame::decode`] does, each super-fragment of a data message into a
    /// fragment list taken from `lists`: a BU that keeps the lists of the events it has written
    /// allocates none per super-fragment.
    pub fn decode_with(&self, lists: &mut Spare<FragmentRef>) -> Result<Decoded, WireError> {
        let mut r = Reader { buf: self.body, at: 0, base: self.offset + HEADER_BYTES as u64 };
        let what = self.kind.name();
        let mut message = get_body(self.kind, &mut r, lists)?;
        let fragments = match &mut message {
            Message::Data { parts, .. } => {
                // The CRC covers the descriptors, whose end is known now.
                let computed = crc32c(&self.body[..r.at]);
                if computed != self.crc {
                    return Err(WireError::Checksum { what, offset: self.offset + 12, stored: self.crc, computed });
                }
                locate_fragments(&mut r, parts)?
            }
            _ => Vec::new(),
        };
        if r.left() > 0 {
            return Err(WireError::TrailingBytes { what, offset: r.offset(), extra: r.left() as u64 });
        }
        Ok(Decoded { message, fragments })
    }
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The message. In a data message, each fragment's `buffer` is its index in `fragments`.
    pub message: Message,
    /// For a data message, the byte range of each fragment within the frame's body, in order
    /// (super-fragments in order, their fragments in order); empty for other messages.
    pub fragments: Vec<Range<usize>>,
}

/// Checks the header at the start of `buf` and returns the frame's type and body length if `buf`
/// holds the whole frame, verifying its CRC. Offsets in errors are moved by `base`.
/// The frame at the start of `buf`: its type, body length and header CRC. The CRC of every body
/// but a data frame's is checked here.
fn frame_at(buf: &[u8], max_body_bytes: u32, base: u64) -> Result<Option<(MessageType, usize, u32)>, WireError> {
    let Some(header) = buf.get(..HEADER_BYTES) else {
        return Ok(None);
    };
    let what = "frame header";
    let mut r = Reader { buf: header, at: 0, base };
    let magic: [u8; 4] = r.array(Field { what, name: "magic" })?;
    if magic != MAGIC {
        let text = |m: [u8; 4]| Value::Text(format!("\"{}\"", m.escape_ascii()));
        return Err(r.bad(Field { what, name: "magic" }, base, text(MAGIC), text(magic)));
    }
    let version = u16::get(&mut r, Field { what, name: "version" })?;
    if version != VERSION {
        return Err(r.bad(
            Field { what, name: "version" },
            base + 4,
            Value::Dec(VERSION.into()),
            Value::Dec(version.into()),
        ));
    }
    let code = u16::get(&mut r, Field { what, name: "message type" })?;
    let Some(kind) = MessageType::from_code(code) else {
        let expected = Value::Text(format!("1..={}", MessageType::ALL.len()));
        return Err(r.bad(Field { what, name: "message type" }, base + 6, expected, Value::Dec(code.into())));
    };
    let length = u32::get(&mut r, Field { what, name: "body length" })?;
    if length > max_body_bytes {
        let expected = Value::Text(format!("at most {max_body_bytes}"));
        return Err(r.bad(Field { what, name: "body length" }, base + 8, expected, Value::Dec(length.into())));
    }
    let stored = u32::get(&mut r, Field { what, name: "body CRC-32C" })?;
    let length = length as usize;
    let Some(body) = buf.get(HEADER_BYTES..HEADER_BYTES + length) else {
        return Ok(None);
    };
    if kind != MessageType::Data {
        let computed = crc32c(body);
        if computed != stored {
            return Err(WireError::Checksum { what: kind.name(), offset: base + 12, stored, computed });
        }
    }
    Ok(Some((kind, length, stored)))
}

/// Cuts frames out of a byte stream that arrives in pieces, in a buffer of its own that never
/// holds more than one frame of the largest allowed size (header and `max_body_bytes`).
///
/// Feed it with [`FrameDecoder::push`], then take frames with [`FrameDecoder::next_frame`] until it
/// returns `Ok(None)`; push what `push` did not take, and so on:
///
/// ```
/// # use tessera_evb::wire::{FrameDecoder, WireError};
/// # fn handle(received: &[u8], decoder: &mut FrameDecoder) -> Result<(), WireError> {
/// let mut rest = received;
/// while !rest.is_empty() {
///     let taken = decoder.push(rest);
///     rest = &rest[taken..];
///     while let Some(frame) = decoder.next_frame()? {
///         let decoded = frame.decode()?;
///         // ... hand decoded.message (and, for data, the fragment bytes) to the unit
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    /// Received bytes; those before `start` belong to frames already taken.
    buf: Vec<u8>,
    start: usize,
    /// Stream offset of `buf[start]`.
    position: u64,
    max_body_bytes: u32,
    /// The error that stopped the stream, returned again on every call.
    failed: Option<WireError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder that accepts bodies up to [`DEFAULT_MAX_BODY_BYTES`].
    pub fn new() -> Self {
        Self::with_max_body_bytes(DEFAULT_MAX_BODY_BYTES)
    }

    /// A decoder that refuses frames whose body is longer than `max_body_bytes`.
    pub fn with_max_body_bytes(max_body_bytes: u32) -> Self {
        FrameDecoder { buf: Vec::new(), start: 0, position: 0, max_body_bytes, failed: None }
    }

    /// The most bytes the decoder buffers: one frame of the largest allowed size.
    pub fn capacity(&self) -> usize {
        HEADER_BYTES.saturating_add(self.max_body_bytes as usize)
    }

    /// Bytes received and not yet taken as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Takes as many of `bytes` as fit in the buffer and returns how many it took. It takes at
    /// least one byte of a non-empty `bytes` unless a complete frame waits for
    /// [`FrameDecoder::next_frame`] or the stream has failed. Frames taken before are dropped
    /// from the buffer here: a [`Frame`] borrows the decoder until then.
    pub fn push(&mut self, bytes: &[u8]) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let taken = bytes.len().min(self.capacity() - self.buf.len());
        let wanted = self.buf.len() + taken;
        if wanted > self.buf.capacity() {
            // Grow as bytes arrive (never by a length read from the stream), at most to the bound.
            let target = wanted.max(self.buf.capacity().saturating_mul(2)).min(self.capacity());
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(&bytes[..taken]);
        taken
    }

    /// The next complete frame, if the buffer holds one; `Ok(None)` when more bytes are needed.
    /// An error names the field and its offset in the stream; it is returned again by every later
    /// call, since the stream is no longer known to be in step.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, WireError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        match frame_at(&self.buf[self.start..], self.max_body_bytes, self.position) {
            Ok(None) => Ok(None),
            Ok(Some((kind, length, crc))) => {
                let at = self.start;
                let offset = self.position;
                self.start += HEADER_BYTES + length;
                self.position += (HEADER_BYTES + length) as u64;
                Ok(Some(Frame { kind, body: &self.buf[at + HEADER_BYTES..self.start], offset, crc }))
            }
            Err(error) => {
                self.failed = Some(error.clone());
                Err(error)
            }
        }
    }
}
