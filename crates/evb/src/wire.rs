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

use crate::msg::{BuiltFile, FragmentRef, Message, SuperFragment, TriggerInfo};
use crate::types::{BuId, Epoch, EventNumber, EventRange, FedId, FileId, RuId};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"TSRA";

/// The version of the wire format this module reads and writes. Version 2: a data frame's CRC
/// covers its descriptors only (see [`encode_data_header_pieces`]).
pub const VERSION: u16 = 2;

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 16;

/// Default bound on a frame's body length: 64 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u32 = 64 << 20;

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
}

impl MessageType {
    const ALL: [MessageType; 10] = [
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
        }
    }
}

/// What went wrong while reading or writing a frame.
///
/// Offsets count bytes from the start of the stream a [`FrameDecoder`] was fed, or from the start
/// of the buffer given to [`Frame::parse`]; they point at the field in question.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
        let mut r = Reader { buf: self.body, at: 0, base: self.offset + HEADER_BYTES as u64 };
        let what = self.kind.name();
        let mut message = get_body(self.kind, &mut r)?;
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

// ---- Bodies ----------------------------------------------------------------------------------

/// Names a field for errors: the structure and the field.
#[derive(Debug, Clone, Copy)]
struct Field {
    what: &'static str,
    name: &'static str,
}

/// Shorthand for a [`Field`].
const fn at(what: &'static str, name: &'static str) -> Field {
    Field { what, name }
}

/// Reads fields in order from a body.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
}

impl Reader<'_> {
    fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    fn left(&self) -> usize {
        self.buf.len() - self.at
    }

    fn array<const N: usize>(&mut self, f: Field) -> Result<[u8; N], WireError> {
        let bytes: [u8; N] =
            self.buf.get(self.at..self.at + N).and_then(|s| s.try_into().ok()).ok_or(WireError::Truncated {
                what: f.what,
                field: f.name,
                offset: self.offset(),
                needed: N as u64,
                available: self.left() as u64,
            })?;
        self.at += N;
        Ok(bytes)
    }

    fn bad(&self, f: Field, offset: u64, expected: Value, found: Value) -> WireError {
        WireError::BadField { what: f.what, field: f.name, offset, expected, found }
    }

    /// A 0/1 tag (a bool, or whether an `Option` holds a value).
    fn tag(&mut self, f: Field, expected: &str) -> Result<bool, WireError> {
        let offset = self.offset();
        match u8::get(self, f)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad(f, offset, Value::Text(expected.to_owned()), Value::Dec(v.into()))),
        }
    }
}

/// The encoding of one type, in one place: `put` appends it, `get` reads it back.
trait Wire: Sized {
    /// Bytes of the shortest encoding, against which a vector's count is checked.
    const MIN_BYTES: usize;

    /// Appends the value. `f` names it, for a vector whose count does not fit.
    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError>;

    /// Reads a value. `f` names it, for the errors of integers, tags and vector counts.
    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError>;
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const MIN_BYTES: usize = size_of::<$t>();

            fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
                out.extend_from_slice(&self.to_le_bytes());
                Ok(())
            }

            fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
                r.array(f).map(<$t>::from_le_bytes)
            }
        }
    )*};
}

wire_int!(u8, u16, u32, u64);

/// A bool is a u8, 0 or 1.
impl Wire for bool {
    const MIN_BYTES: usize = 1;

    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
        u8::from(*self).put(out, f)
    }

    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
        r.tag(f, "0 (false) or 1 (true)")
    }
}

/// An `Option` is a u8 tag, 0 (none) or 1 (some), then the value if there is one.
impl<T: Wire> Wire for Option<T> {
    const MIN_BYTES: usize = 1;

    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
        self.is_some().put(out, f)?;
        self.as_ref().map_or(Ok(()), |v| v.put(out, f))
    }

    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
        if r.tag(f, "0 (none) or 1 (some)")? { T::get(r, f).map(Some) } else { Ok(None) }
    }
}

/// A vector is a u32 count, then the items. The count is checked against the bytes left before
/// anything is allocated.
impl<T: Wire> Wire for Vec<T> {
    const MIN_BYTES: usize = 4;

    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
        put_slice(self, out, f)
    }

    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
        let offset = r.offset();
        let count = u32::get(r, f)? as usize;
        let fits = r.left() / T::MIN_BYTES;
        if count > fits {
            let expected = format!("at most {fits} items ({} bytes left, {} or more per item)", r.left(), T::MIN_BYTES);
            return Err(r.bad(f, offset, Value::Text(expected), Value::Dec(count as u64)));
        }
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(T::get(r, f)?);
        }
        Ok(items)
    }
}

/// (u16 bu, u32 lumi section, u32 index).
impl Wire for FileId {
    const MIN_BYTES: usize = 10;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.bu.put(out, at("FileId", "bu"))?;
        self.lumi_section.put(out, at("FileId", "lumi_section"))?;
        self.index.put(out, at("FileId", "index"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(FileId {
            bu: BuId::get(r, at("FileId", "bu"))?,
            lumi_section: u32::get(r, at("FileId", "lumi_section"))?,
            index: u32::get(r, at("FileId", "index"))?,
        })
    }
}

/// (u64 first, u32 count); a count of 0 is refused.
impl Wire for EventRange {
    const MIN_BYTES: usize = 12;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.first.put(out, at("EventRange", "first"))?;
        self.count.put(out, at("EventRange", "count"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        let first = EventNumber::get(r, at("EventRange", "first"))?;
        let offset = r.offset();
        let count = u32::get(r, at("EventRange", "count"))?;
        if count == 0 {
            return Err(r.bad(at("EventRange", "count"), offset, Value::Text("at least 1".into()), Value::Dec(0)));
        }
        Ok(EventRange { first, count })
    }
}

/// (u32 lumi_section, u64 orbit, u16 bx).
impl Wire for TriggerInfo {
    const MIN_BYTES: usize = 14;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.lumi_section.put(out, at("TriggerInfo", "lumi_section"))?;
        self.orbit.put(out, at("TriggerInfo", "orbit"))?;
        self.bx.put(out, at("TriggerInfo", "bx"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(TriggerInfo {
            lumi_section: u32::get(r, at("TriggerInfo", "lumi_section"))?,
            orbit: u64::get(r, at("TriggerInfo", "orbit"))?,
            bx: u16::get(r, at("TriggerInfo", "bx"))?,
        })
    }
}

/// (u16 fed, u32 lv1, u32 bytes, u8 corrupt, option trigger). `buffer` is local to the sender and
/// not sent: it reads back as 0, and [`Frame::decode`] sets it to the fragment's index.
impl Wire for FragmentRef {
    const MIN_BYTES: usize = 12;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.fed.put(out, at("FragmentRef", "fed"))?;
        self.lv1.put(out, at("FragmentRef", "lv1"))?;
        self.bytes.put(out, at("FragmentRef", "bytes"))?;
        self.corrupt.put(out, at("FragmentRef", "corrupt"))?;
        self.trigger.put(out, at("FragmentRef", "trigger"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(FragmentRef {
            fed: FedId::get(r, at("FragmentRef", "fed"))?,
            lv1: u32::get(r, at("FragmentRef", "lv1"))?,
            bytes: u32::get(r, at("FragmentRef", "bytes"))?,
            corrupt: bool::get(r, at("FragmentRef", "corrupt"))?,
            buffer: 0,
            trigger: Option::get(r, at("FragmentRef", "trigger"))?,
        })
    }
}

/// (u64 event, vector of fragments, vector of u16 missing FEDs).
impl Wire for SuperFragment {
    const MIN_BYTES: usize = 16;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.event.put(out, at("SuperFragment", "event"))?;
        self.fragments.put(out, at("SuperFragment", "fragments"))?;
        self.missing.put(out, at("SuperFragment", "missing"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(SuperFragment {
            event: EventNumber::get(r, at("SuperFragment", "event"))?,
            fragments: Vec::get(r, at("SuperFragment", "fragments"))?,
            missing: Vec::get(r, at("SuperFragment", "missing"))?,
        })
    }
}

/// (file id, vector of event ranges).
impl Wire for BuiltFile {
    const MIN_BYTES: usize = FileId::MIN_BYTES + 4;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.file.put(out, at("BuiltFile", "file"))?;
        self.events.put(out, at("BuiltFile", "events"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(BuiltFile {
            file: FileId::get(r, at("BuiltFile", "file"))?,
            events: Vec::get(r, at("BuiltFile", "events"))?,
        })
    }
}

/// The body of a message other than Data: its fields in declaration order.
fn put_control_body(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    match msg {
        Message::Hello { bu, epoch, unpublished } => {
            bu.put(out, at("Hello", "bu"))?;
            epoch.put(out, at("Hello", "epoch"))?;
            unpublished.put(out, at("Hello", "unpublished"))
        }
        Message::Welcome { epoch, publish, discard } => {
            epoch.put(out, at("Welcome", "epoch"))?;
            publish.put(out, at("Welcome", "publish"))?;
            discard.put(out, at("Welcome", "discard"))
        }
        Message::Request { bu, epoch, credits, built, published, lumis_done } => {
            bu.put(out, at("Request", "bu"))?;
            epoch.put(out, at("Request", "epoch"))?;
            credits.put(out, at("Request", "credits"))?;
            built.put(out, at("Request", "built"))?;
            published.put(out, at("Request", "published"))?;
            lumis_done.put(out, at("Request", "lumis_done"))
        }
        Message::Assign { bu, epoch, events, release } => {
            bu.put(out, at("Assign", "bu"))?;
            epoch.put(out, at("Assign", "epoch"))?;
            events.put(out, at("Assign", "events"))?;
            release.put(out, at("Assign", "release"))
        }
        Message::Data { .. } => Err(WireError::DataWithoutFragments),
        Message::Commit { epoch, files } => {
            epoch.put(out, at("Commit", "epoch"))?;
            files.put(out, at("Commit", "files"))
        }
        Message::Release { events } => events.put(out, at("Release", "events")),
        Message::Drain { last_event } => last_event.put(out, at("Drain", "last_event")),
        Message::EndOfLumi { lumi_section, events } => {
            lumi_section.put(out, at("EndOfLumi", "lumi_section"))?;
            events.put(out, at("EndOfLumi", "events"))
        }
        Message::EndOfRun { last_lumi_section, lumi_sections } => {
            last_lumi_section.put(out, at("EndOfRun", "last_lumi_section"))?;
            lumi_sections.put(out, at("EndOfRun", "lumi_sections"))
        }
    }
}

/// Reads the fields of a body of type `kind`: for a data message, the descriptors only.
fn get_body(kind: MessageType, r: &mut Reader<'_>) -> Result<Message, WireError> {
    Ok(match kind {
        MessageType::Hello => Message::Hello {
            bu: BuId::get(r, at("Hello", "bu"))?,
            epoch: Epoch::get(r, at("Hello", "epoch"))?,
            unpublished: Vec::get(r, at("Hello", "unpublished"))?,
        },
        MessageType::Welcome => Message::Welcome {
            epoch: Epoch::get(r, at("Welcome", "epoch"))?,
            publish: Vec::get(r, at("Welcome", "publish"))?,
            discard: Vec::get(r, at("Welcome", "discard"))?,
        },
        MessageType::Request => Message::Request {
            bu: BuId::get(r, at("Request", "bu"))?,
            epoch: Epoch::get(r, at("Request", "epoch"))?,
            credits: u32::get(r, at("Request", "credits"))?,
            built: Vec::get(r, at("Request", "built"))?,
            published: Vec::get(r, at("Request", "published"))?,
            lumis_done: Vec::get(r, at("Request", "lumis_done"))?,
        },
        MessageType::Assign => Message::Assign {
            bu: BuId::get(r, at("Assign", "bu"))?,
            epoch: Epoch::get(r, at("Assign", "epoch"))?,
            events: Vec::get(r, at("Assign", "events"))?,
            release: Vec::get(r, at("Assign", "release"))?,
        },
        MessageType::Data => get_data_descriptors(r)?,
        MessageType::Commit => {
            Message::Commit { epoch: Epoch::get(r, at("Commit", "epoch"))?, files: Vec::get(r, at("Commit", "files"))? }
        }
        MessageType::Release => Message::Release { events: Vec::get(r, at("Release", "events"))? },
        MessageType::Drain => Message::Drain { last_event: Option::get(r, at("Drain", "last_event"))? },
        MessageType::EndOfLumi => Message::EndOfLumi {
            lumi_section: u32::get(r, at("EndOfLumi", "lumi_section"))?,
            events: u64::get(r, at("EndOfLumi", "events"))?,
        },
        MessageType::EndOfRun => Message::EndOfRun {
            last_lumi_section: u32::get(r, at("EndOfRun", "last_lumi_section"))?,
            lumi_sections: u32::get(r, at("EndOfRun", "lumi_sections"))?,
        },
    })
}

/// The descriptors of a data message: its fields in declaration order.
fn put_data_descriptors(
    ru: RuId,
    epoch: Epoch,
    parts: &[SuperFragment],
    commits: &[FileId],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    ru.put(out, at("Data", "ru"))?;
    epoch.put(out, at("Data", "epoch"))?;
    put_slice(parts, out, at("Data", "parts"))?;
    put_slice(commits, out, at("Data", "commits"))
}

/// A slice written as a vector: u32 count, then the items.
fn put_slice<T: Wire>(items: &[T], out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
    let length = items.len() as u64;
    let count = u32::try_from(length).map_err(|_| WireError::TooLarge { what: f.what, field: f.name, length })?;
    count.put(out, f)?;
    items.iter().try_for_each(|item| item.put(out, f))
}

/// Reads the descriptors of a data message; fragment `buffer`s are 0.
fn get_data_descriptors(r: &mut Reader<'_>) -> Result<Message, WireError> {
    Ok(Message::Data {
        ru: RuId::get(r, at("Data", "ru"))?,
        epoch: Epoch::get(r, at("Data", "epoch"))?,
        parts: Vec::get(r, at("Data", "parts"))?,
        commits: Vec::get(r, at("Data", "commits"))?,
    })
}

/// Takes the fragment bytes that follow a data message's descriptors: the range of each within
/// the body, and its index as its `buffer`. The bytes the descriptors declare must be there.
fn locate_fragments(r: &mut Reader<'_>, parts: &mut [SuperFragment]) -> Result<Vec<Range<usize>>, WireError> {
    let declared = parts.iter().flat_map(|p| &p.fragments).map(|f| u64::from(f.bytes)).sum::<u64>();
    if declared > r.left() as u64 {
        return Err(WireError::Truncated {
            what: "Data",
            field: "fragment bytes",
            offset: r.offset(),
            needed: declared,
            available: r.left() as u64,
        });
    }
    let mut ranges = Vec::with_capacity(parts.iter().map(|p| p.fragments.len()).sum());
    for fragment in parts.iter_mut().flat_map(|p| &mut p.fragments) {
        fragment.buffer = ranges.len() as u64;
        let end = r.at + fragment.bytes as usize;
        ranges.push(r.at..end);
        r.at = end;
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// A frame with a correct header around `body`.
    fn frame(code: u16, body: &[u8]) -> Vec<u8> {
        frame_with_crc(code, body, crc32c(body))
    }

    fn frame_with_crc(code: u16, body: &[u8], crc: u32) -> Vec<u8> {
        let mut out = vec![0; HEADER_BYTES];
        out[..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&code.to_le_bytes());
        out[8..12].copy_from_slice(&(body.len() as u32).to_le_bytes());
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    /// Appends the frame of `msg`, with `fragments` as the bytes of a data message's fragments,
    /// the way a sender does: header and descriptors, then the fragment slices.
    fn encode_any(msg: &Message, fragments: &[Vec<u8>], out: &mut Vec<u8>) {
        match msg {
            Message::Data { ru, epoch, parts, commits } => {
                encode_data_header(*ru, *epoch, parts, commits, fragments, out).unwrap();
                fragments.iter().for_each(|f| out.extend_from_slice(f));
            }
            _ => encode(msg, out).unwrap(),
        }
    }

    /// What the receiver decodes for `msg`: fragment buffers become their indices.
    fn as_received(msg: &Message) -> Message {
        let mut msg = msg.clone();
        if let Message::Data { parts, .. } = &mut msg {
            for (i, f) in parts.iter_mut().flat_map(|p| &mut p.fragments).enumerate() {
                f.buffer = i as u64;
            }
        }
        msg
    }

    /// A decoded frame encoded again, from its own body's fragment bytes.
    fn reencode(decoded: &Decoded, body: &[u8]) -> Vec<u8> {
        let fragments: Vec<&[u8]> = decoded.fragments.iter().map(|r| &body[r.clone()]).collect();
        let mut out = Vec::new();
        match &decoded.message {
            Message::Data { ru, epoch, parts, commits } => {
                encode_data_header(*ru, *epoch, parts, commits, &fragments, &mut out).unwrap();
                fragments.iter().for_each(|f| out.extend_from_slice(f));
            }
            msg => encode(msg, &mut out).unwrap(),
        }
        out
    }

    type Received = (Message, Vec<Vec<u8>>);

    /// Takes every complete frame out of the decoder.
    fn drain(decoder: &mut FrameDecoder, into: &mut Vec<Received>) -> Result<(), WireError> {
        while let Some(frame) = decoder.next_frame()? {
            let decoded = frame.decode()?;
            let bytes = decoded.fragments.iter().map(|r| frame.body()[r.clone()].to_vec()).collect();
            into.push((decoded.message, bytes));
        }
        Ok(())
    }

    /// Decodes a stream given in `chunks`.
    fn decode_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<Received>, WireError> {
        let mut decoder = FrameDecoder::new();
        let mut got = Vec::new();
        for chunk in chunks {
            let mut rest = chunk;
            while !rest.is_empty() {
                let taken = decoder.push(rest);
                rest = &rest[taken..];
                drain(&mut decoder, &mut got)?;
            }
        }
        drain(&mut decoder, &mut got)?;
        assert_eq!(decoder.buffered(), 0, "bytes left over");
        Ok(got)
    }

    fn fragment(fed: FedId, bytes: u32, trigger: Option<TriggerInfo>) -> FragmentRef {
        FragmentRef { fed, lv1: 0xAB_CDEF, bytes, corrupt: fed % 2 == 1, buffer: 1000 + u64::from(fed), trigger }
    }

    /// One message of every type, with the fragment bytes of the data message.
    fn examples() -> Vec<Received> {
        let file = |bu, index| FileId { bu, lumi_section: 3, index };
        let range = |first, count| EventRange { first, count };
        let trigger = TriggerInfo { lumi_section: 3, orbit: 1 << 40, bx: 3563 };
        let parts = vec![
            SuperFragment {
                event: 7,
                fragments: vec![fragment(1, 5, Some(trigger)), fragment(2, 0, None)],
                missing: vec![3, 4],
            },
            SuperFragment { event: 8, fragments: vec![fragment(1, 3, None)], missing: vec![] },
        ];
        vec![
            (Message::Hello { bu: 2, epoch: 3, unpublished: vec![file(2, 9), file(2, 10)] }, vec![]),
            (Message::Welcome { epoch: 3, publish: vec![file(2, 9)], discard: vec![] }, vec![]),
            (
                Message::Request {
                    bu: 1,
                    epoch: 4,
                    credits: 100,
                    built: vec![BuiltFile { file: file(1, 5), events: vec![range(10, 4), range(20, 1)] }],
                    published: vec![file(1, 4)],
                    lumis_done: vec![1, 2],
                },
                vec![],
            ),
            (Message::Assign { bu: 1, epoch: 4, events: vec![range(1, 50)], release: vec![range(0, 1)] }, vec![]),
            (
                Message::Data { ru: 3, epoch: 4, parts, commits: vec![file(1, 5)] },
                vec![b"abcde".to_vec(), vec![], b"xyz".to_vec()],
            ),
            (Message::Commit { epoch: 4, files: vec![file(1, 5), file(1, 6)] }, vec![]),
            (Message::Release { events: vec![] }, vec![]),
            (Message::Drain { last_event: Some(u64::MAX) }, vec![]),
            (Message::Drain { last_event: None }, vec![]),
            (Message::EndOfLumi { lumi_section: 7, events: 123_456 }, vec![]),
            (Message::EndOfRun { last_lumi_section: 9, lumi_sections: 8 }, vec![]),
        ]
    }

    fn example_stream() -> (Vec<u8>, Vec<Received>) {
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        for (msg, fragments) in examples() {
            encode_any(&msg, &fragments, &mut stream);
            expected.push((as_received(&msg), fragments));
        }
        (stream, expected)
    }

    #[test]
    fn every_type_code_round_trips() {
        for (code, kind) in (1..).zip(MessageType::ALL) {
            assert_eq!(kind.code(), code);
            assert_eq!(MessageType::from_code(code), Some(kind));
        }
        assert_eq!(MessageType::from_code(0), None);
        assert_eq!(MessageType::from_code(11), None);
        let kinds: Vec<_> = examples().iter().map(|(m, _)| MessageType::of(m)).collect();
        assert!(MessageType::ALL.iter().all(|k| kinds.contains(k)), "examples cover every type");
    }

    #[test]
    fn layout_is_as_documented() {
        let msg = Message::Hello {
            bu: 0x0102,
            epoch: 0x0304_0506,
            unpublished: vec![FileId { bu: 7, lumi_section: 0x1122_3344, index: 0x5566_7788 }],
        };
        let mut out = Vec::new();
        encode(&msg, &mut out).unwrap();
        let body = [
            0x02, 0x01, // bu
            0x06, 0x05, 0x04, 0x03, // epoch
            0x01, 0x00, 0x00, 0x00, // count of unpublished
            0x07, 0x00, 0x44, 0x33, 0x22, 0x11, 0x88, 0x77, 0x66, 0x55, // FileId (bu, lumi section, index)
        ];
        let mut header = b"TSRA".to_vec();
        header.extend_from_slice(&[2, 0, 1, 0, 20, 0, 0, 0]);
        header.extend_from_slice(&crc32c(&body).to_le_bytes());
        assert_eq!(out[..HEADER_BYTES], header[..]);
        assert_eq!(out[HEADER_BYTES..], body[..]);
    }

    #[test]
    fn examples_round_trip() {
        let (stream, expected) = example_stream();
        assert_eq!(decode_chunks([&stream[..]]).unwrap(), expected);
    }

    #[test]
    fn data_frame_is_header_descriptors_and_fragment_slices_in_order() {
        let (msg, fragments) = examples().into_iter().find(|(m, _)| !m.is_control()).unwrap();
        let Message::Data { ru, epoch, parts, commits } = &msg else { unreachable!() };
        let slices: Vec<&[u8]> = fragments.iter().map(Vec::as_slice).collect();
        let mut head = Vec::new();
        encode_data_header(*ru, *epoch, parts, commits, &slices, &mut head).unwrap();
        // What one vectored write sends: the head, then every fragment straight from its buffer.
        let wire: Vec<u8> = std::iter::once(&head[..]).chain(slices.iter().copied()).flatten().copied().collect();
        let frame = Frame::parse(&wire, DEFAULT_MAX_BODY_BYTES).unwrap().unwrap();
        assert_eq!(frame.kind(), MessageType::Data);
        assert_eq!(frame.frame_bytes(), wire.len());
        let decoded = frame.decode().unwrap();
        assert_eq!(decoded.message, as_received(&msg));
        let descriptors = head.len() - HEADER_BYTES;
        assert_eq!(
            decoded.fragments,
            vec![descriptors..descriptors + 5, descriptors + 5..descriptors + 5, descriptors + 5..descriptors + 8]
        );
        for (range, bytes) in decoded.fragments.iter().zip(&fragments) {
            assert_eq!(&frame.body()[range.clone()], &bytes[..]);
            // The range is a view into the received bytes: nothing was copied.
            assert!(std::ptr::eq(frame.body()[range.clone()].as_ptr(), wire[HEADER_BYTES + range.start..].as_ptr()));
        }
        assert_eq!(reencode(&decoded, frame.body()), wire);
    }

    #[test]
    fn data_fragment_slices_must_match_the_descriptors() {
        let (msg, fragments) = examples().into_iter().find(|(m, _)| !m.is_control()).unwrap();
        let Message::Data { ru, epoch, parts, commits } = &msg else { unreachable!() };
        let mut out = vec![0xEE];
        let too_few = &fragments[..2];
        assert_eq!(
            encode_data_header(*ru, *epoch, parts, commits, too_few, &mut out),
            Err(WireError::FragmentCount { declared: 3, given: 2 })
        );
        let mut wrong = fragments.clone();
        wrong[2].push(0);
        assert_eq!(
            encode_data_header(*ru, *epoch, parts, commits, &wrong, &mut out),
            Err(WireError::FragmentLength { index: 2, declared: 3, given: 4 })
        );
        assert_eq!(encode(&msg, &mut out), Err(WireError::DataWithoutFragments));
        assert_eq!(out, vec![0xEE], "output untouched on error");
    }

    #[test]
    fn split_at_every_byte_decodes_the_same() {
        let (stream, expected) = example_stream();
        for cut in 0..=stream.len() {
            assert_eq!(decode_chunks([&stream[..cut], &stream[cut..]]).unwrap(), expected, "cut at {cut}");
        }
        assert_eq!(decode_chunks(stream.chunks(1)).unwrap(), expected);
    }

    #[test]
    fn truncated_frame_waits_for_more() {
        let (stream, _) = example_stream();
        let mut decoder = FrameDecoder::new();
        let first = Frame::parse(&stream, DEFAULT_MAX_BODY_BYTES).unwrap().unwrap().frame_bytes();
        decoder.push(&stream[..first - 1]);
        assert_eq!(decoder.next_frame(), Ok(None));
        assert_eq!(Frame::parse(&stream[..first - 1], DEFAULT_MAX_BODY_BYTES), Ok(None));
        assert_eq!(Frame::parse(&stream[..3], DEFAULT_MAX_BODY_BYTES), Ok(None));
        decoder.push(&stream[first - 1..first]);
        assert!(decoder.next_frame().unwrap().is_some());
        assert_eq!(decoder.next_frame(), Ok(None));
    }

    #[test]
    fn decoder_buffer_is_bounded() {
        // Frames of up to 100 body bytes: the decoder never buffers more than one of them.
        let mut decoder = FrameDecoder::with_max_body_bytes(100);
        assert_eq!(decoder.capacity(), 116);
        let big = frame(MessageType::Release.code(), &[&2u32.to_le_bytes()[..], &[1; 24]].concat());
        let stream: Vec<u8> = big.iter().chain(&big).chain(&big).copied().collect();
        let mut frames = 0;
        let mut rest = &stream[..];
        while !rest.is_empty() {
            let taken = decoder.push(rest);
            assert!(decoder.buffered() <= decoder.capacity());
            rest = &rest[taken..];
            while let Some(f) = decoder.next_frame().unwrap() {
                f.decode().unwrap();
                frames += 1;
            }
        }
        assert_eq!(frames, 3);
    }

    /// The error of decoding `stream` whole.
    fn error_of(stream: &[u8]) -> WireError {
        decode_chunks([stream]).expect_err("garbage must be refused")
    }

    fn bad(what: &'static str, field: &'static str, offset: u64, expected: Value, found: Value) -> WireError {
        WireError::BadField { what, field, offset, expected, found }
    }

    fn text(s: &str) -> Value {
        Value::Text(s.to_owned())
    }

    #[test]
    fn header_garbage_is_refused_with_its_field() {
        let good = frame(MessageType::Drain.code(), &[0]);
        let mut magic = good.clone();
        magic[0] = b'X';
        assert_eq!(error_of(&magic), bad("frame header", "magic", 0, text("\"TSRA\""), text("\"XSRA\"")));
        let mut version = good.clone();
        version[4] = 1;
        assert_eq!(error_of(&version), bad("frame header", "version", 4, Value::Dec(2), Value::Dec(1)));
        for code in [0, 11, 0xFFFF] {
            assert_eq!(
                error_of(&frame(code, &[0])),
                bad("frame header", "message type", 6, text("1..=10"), Value::Dec(code.into()))
            );
        }
        let mut crc = good.clone();
        crc[16] = 1; // the body now says Some, with its value missing; the CRC catches it first
        assert_eq!(
            error_of(&crc),
            WireError::Checksum { what: "Drain", offset: 12, stored: crc32c(&[0]), computed: crc32c(&[1]) }
        );
    }

    #[test]
    fn body_over_the_bound_is_refused_from_its_header_alone() {
        let mut header = frame(MessageType::Release.code(), &[])[..HEADER_BYTES].to_vec();
        header[8..12].copy_from_slice(&(DEFAULT_MAX_BODY_BYTES + 1).to_le_bytes());
        let mut decoder = FrameDecoder::new();
        assert_eq!(decoder.push(&header), HEADER_BYTES);
        let error = bad(
            "frame header",
            "body length",
            8,
            text("at most 67108864"),
            Value::Dec(u64::from(DEFAULT_MAX_BODY_BYTES) + 1),
        );
        assert_eq!(decoder.next_frame(), Err(error.clone()));
        assert_eq!(decoder.buffered(), HEADER_BYTES, "nothing of the body was waited for");
        // The stream stays failed.
        assert_eq!(decoder.push(&[0; 4]), 0);
        assert_eq!(decoder.next_frame(), Err(error));
        header[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Frame::parse(&header, 1000),
            Err(WireError::BadField { field: "body length", offset: 8, .. })
        ));
    }

    #[test]
    fn body_garbage_is_refused_with_its_field_and_offset() {
        let drain = MessageType::Drain.code();
        // Shorter than its fields.
        assert_eq!(
            error_of(&frame(MessageType::Hello.code(), &[1, 0, 2])),
            WireError::Truncated { what: "Hello", field: "epoch", offset: 18, needed: 4, available: 1 }
        );
        assert_eq!(
            error_of(&frame(drain, &[1, 5, 0, 0])),
            WireError::Truncated { what: "Drain", field: "last_event", offset: 17, needed: 8, available: 3 }
        );
        // Longer than its fields.
        assert_eq!(
            error_of(&frame(drain, &[0, 0xAA])),
            WireError::TrailingBytes { what: "Drain", offset: 17, extra: 1 }
        );
        assert_eq!(
            error_of(&frame(drain, &[])),
            WireError::Truncated { what: "Drain", field: "last_event", offset: 16, needed: 1, available: 0 }
        );
        // Tags other than 0 and 1.
        assert_eq!(
            error_of(&frame(drain, &[2])),
            bad("Drain", "last_event", 16, text("0 (none) or 1 (some)"), Value::Dec(2))
        );
        // A count larger than the body could hold.
        let release: Vec<u8> = [&1_000_000u32.to_le_bytes()[..], &[1; 12]].concat();
        assert_eq!(
            error_of(&frame(MessageType::Release.code(), &release)),
            bad(
                "Release",
                "events",
                16,
                text("at most 1 items (12 bytes left, 12 or more per item)"),
                Value::Dec(1_000_000)
            )
        );
        // An empty event range.
        let release: Vec<u8> = [&1u32.to_le_bytes()[..], &5u64.to_le_bytes(), &0u32.to_le_bytes()].concat();
        assert_eq!(
            error_of(&frame(MessageType::Release.code(), &release)),
            bad("EventRange", "count", 28, text("at least 1"), Value::Dec(0))
        );
    }

    /// The body of a data message from RU 1 with one fragment of `bytes` bytes whose `corrupt`
    /// byte is `corrupt`, followed by `payload`.
    fn data_body(corrupt: u8, bytes: u32, payload: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&1u16.to_le_bytes()); // ru
        body.extend_from_slice(&2u32.to_le_bytes()); // epoch
        body.extend_from_slice(&1u32.to_le_bytes()); // parts
        body.extend_from_slice(&9u64.to_le_bytes()); // event
        body.extend_from_slice(&1u32.to_le_bytes()); // fragments
        body.extend_from_slice(&[0x20, 0x00]); // fed
        body.extend_from_slice(&9u32.to_le_bytes()); // lv1
        body.extend_from_slice(&bytes.to_le_bytes()); // bytes
        body.push(corrupt); // at body offset 32
        body.push(0); // trigger
        body.extend_from_slice(&0u32.to_le_bytes()); // missing
        body.extend_from_slice(&0u32.to_le_bytes()); // commits
        body.extend_from_slice(payload); // at body offset 42
        body
    }

    #[test]
    fn data_garbage_is_refused_with_its_field_and_offset() {
        // A data frame's CRC covers its descriptors, the first 42 bytes of these bodies.
        let frame = |code, body: &[u8]| frame_with_crc(code, body, crc32c(&body[..42]));
        let data = MessageType::Data.code();
        let good = decode_chunks([&frame(data, &data_body(1, 4, b"abcd"))[..]]).unwrap();
        assert_eq!(good[0].1, vec![b"abcd".to_vec()]);
        let mut flipped = frame(data, &data_body(1, 4, b"abcd"));
        flipped[HEADER_BYTES + 26] ^= 1; // the fragment's LV1: a descriptor
        assert!(matches!(error_of(&flipped), WireError::Checksum { what: "Data", offset: 12, .. }));
        let mut payload = frame(data, &data_body(1, 4, b"abcd"));
        payload[HEADER_BYTES + 42] ^= 1; // a fragment byte: its own CRC-16 guards it, not the frame's
        assert_eq!(decode_chunks([&payload[..]]).unwrap()[0].1, vec![b"`bcd".to_vec()]);
        assert_eq!(
            error_of(&frame(data, &data_body(7, 4, b"abcd"))),
            bad("FragmentRef", "corrupt", 48, text("0 (false) or 1 (true)"), Value::Dec(7))
        );
        assert_eq!(
            error_of(&frame(data, &data_body(0, 4, b"ab"))),
            WireError::Truncated { what: "Data", field: "fragment bytes", offset: 58, needed: 4, available: 2 }
        );
        assert_eq!(
            error_of(&frame(data, &data_body(0, 4, b"abcde"))),
            WireError::TrailingBytes { what: "Data", offset: 62, extra: 1 }
        );
        // A declared length of 4 GiB against a short body.
        assert_eq!(
            error_of(&frame(data, &data_body(0, u32::MAX, b"ab"))),
            WireError::Truncated {
                what: "Data",
                field: "fragment bytes",
                offset: 58,
                needed: u32::MAX.into(),
                available: 2
            }
        );
    }

    #[test]
    fn offsets_count_from_the_start_of_the_stream() {
        let (mut stream, _) = example_stream();
        let before = stream.len() as u64;
        stream.extend(frame(MessageType::Drain.code(), &[3]));
        assert_eq!(
            error_of(&stream),
            bad("Drain", "last_event", before + 16, text("0 (none) or 1 (some)"), Value::Dec(3))
        );
    }

    #[test]
    fn errors_read_well() {
        let e = error_of(&frame(MessageType::Drain.code(), &[2]));
        assert_eq!(e.to_string(), "Drain: bad last_event at byte 16: expected 0 (none) or 1 (some), found 2");
    }

    // ---- Properties ----------------------------------------------------------------------------

    fn file_id() -> impl Strategy<Value = FileId> {
        (any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(bu, lumi_section, index)| FileId {
            bu,
            lumi_section,
            index,
        })
    }

    fn range() -> impl Strategy<Value = EventRange> {
        (any::<u64>(), 1..=u32::MAX).prop_map(|(first, count)| EventRange { first, count })
    }

    fn files() -> impl Strategy<Value = Vec<FileId>> {
        vec(file_id(), 0..5)
    }

    fn ranges() -> impl Strategy<Value = Vec<EventRange>> {
        vec(range(), 0..5)
    }

    fn control_message() -> impl Strategy<Value = Message> {
        let built = vec((file_id(), ranges()).prop_map(|(file, events)| BuiltFile { file, events }), 0..4);
        prop_oneof![
            (any::<u16>(), any::<u32>(), files()).prop_map(|(bu, epoch, unpublished)| Message::Hello {
                bu,
                epoch,
                unpublished
            }),
            (any::<u32>(), files(), files()).prop_map(|(epoch, publish, discard)| Message::Welcome {
                epoch,
                publish,
                discard
            }),
            (any::<u16>(), any::<u32>(), any::<u32>(), built, files(), vec(any::<u32>(), 0..4)).prop_map(
                |(bu, epoch, credits, built, published, lumis_done)| Message::Request {
                    bu,
                    epoch,
                    credits,
                    built,
                    published,
                    lumis_done
                }
            ),
            (any::<u16>(), any::<u32>(), ranges(), ranges())
                .prop_map(|(bu, epoch, events, release)| { Message::Assign { bu, epoch, events, release } }),
            (any::<u32>(), files()).prop_map(|(epoch, files)| Message::Commit { epoch, files }),
            ranges().prop_map(|events| Message::Release { events }),
            any::<Option<u64>>().prop_map(|last_event| Message::Drain { last_event }),
            (any::<u32>(), any::<u64>()).prop_map(|(lumi_section, events)| Message::EndOfLumi { lumi_section, events }),
            (any::<u32>(), any::<u32>())
                .prop_map(|(last_lumi_section, lumi_sections)| Message::EndOfRun { last_lumi_section, lumi_sections }),
        ]
    }

    fn fragment_with_bytes() -> impl Strategy<Value = (FragmentRef, Vec<u8>)> {
        let trigger = (any::<u32>(), any::<u64>(), any::<u16>()).prop_map(|(lumi_section, orbit, bx)| TriggerInfo {
            lumi_section,
            orbit,
            bx,
        });
        (
            any::<u16>(),
            any::<u32>(),
            any::<bool>(),
            any::<u64>(),
            proptest::option::of(trigger),
            vec(any::<u8>(), 0..40),
        )
            .prop_map(|(fed, lv1, corrupt, buffer, trigger, bytes)| {
                (FragmentRef { fed, lv1, bytes: bytes.len() as u32, corrupt, buffer, trigger }, bytes)
            })
    }

    fn data_message() -> impl Strategy<Value = Received> {
        let part = (any::<u64>(), vec(fragment_with_bytes(), 0..4), vec(any::<u16>(), 0..4));
        (any::<u16>(), any::<u32>(), vec(part, 0..4), files()).prop_map(|(ru, epoch, parts, commits)| {
            let mut all_bytes = Vec::new();
            let parts = parts
                .into_iter()
                .map(|(event, fragments, missing)| {
                    let (fragments, bytes): (Vec<_>, Vec<_>) = fragments.into_iter().unzip();
                    all_bytes.extend(bytes);
                    SuperFragment { event, fragments, missing }
                })
                .collect();
            (Message::Data { ru, epoch, parts, commits }, all_bytes)
        })
    }

    fn any_message() -> impl Strategy<Value = Received> {
        prop_oneof![control_message().prop_map(|m| (m, vec![])), data_message()]
    }

    /// Decodes `stream` pushed in `chunks`-byte pieces into a decoder bounded at `max`; checks
    /// that every frame decoded re-encodes to its own bytes.
    fn decode_checked(stream: &[u8], chunk: usize, max: u32) {
        let mut decoder = FrameDecoder::with_max_body_bytes(max);
        for piece in stream.chunks(chunk) {
            let mut rest = piece;
            while !rest.is_empty() {
                let taken = decoder.push(rest);
                rest = &rest[taken..];
                loop {
                    match decoder.next_frame() {
                        Ok(Some(frame)) => {
                            if let Ok(decoded) = frame.decode() {
                                let at = frame.offset() as usize;
                                assert_eq!(reencode(&decoded, frame.body()), &stream[at..at + frame.frame_bytes()]);
                            }
                        }
                        Ok(None) => break,
                        Err(_) => return,
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn every_message_round_trips(msgs in vec(any_message(), 1..6), chunk in 1usize..200) {
            let mut stream = Vec::new();
            let mut expected = Vec::new();
            for (msg, fragments) in &msgs {
                encode_any(msg, fragments, &mut stream);
                expected.push((as_received(msg), fragments.clone()));
            }
            prop_assert_eq!(decode_chunks(stream.chunks(chunk)).unwrap(), expected);
            // The first frame parses alone from the start of the buffer too.
            let frame = Frame::parse(&stream, DEFAULT_MAX_BODY_BYTES).unwrap().unwrap();
            prop_assert_eq!(frame.decode().unwrap().message, as_received(&msgs[0].0));
        }

        #[test]
        fn random_bytes_never_panic(stream in vec(any::<u8>(), 0..600), chunk in 1usize..64, max in 0u32..300) {
            decode_checked(&stream, chunk, max);
        }

        #[test]
        fn random_bodies_never_panic(code in 0u16..10, body in vec(any::<u8>(), 0..300)) {
            // A correct header, so that the body reaches the field decoders.
            decode_checked(&frame(code, &body), 7, DEFAULT_MAX_BODY_BYTES);
        }

        #[test]
        fn mutated_frames_never_panic(msg in any_message(), at in any::<usize>(), byte in any::<u8>()) {
            let mut encoded = Vec::new();
            encode_any(&msg.0, &msg.1, &mut encoded);
            let code = u16::from_le_bytes([encoded[6], encoded[7]]);
            let mut body = encoded[HEADER_BYTES..].to_vec();
            if !body.is_empty() {
                let i = at % body.len();
                body[i] = byte;
            }
            decode_checked(&frame(code, &body), 5, DEFAULT_MAX_BODY_BYTES);
        }
    }
}
