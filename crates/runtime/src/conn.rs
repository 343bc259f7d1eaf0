//! One protocol connection of a unit's event loop: a non-blocking TCP stream, the frames read
//! from it, and the frames waiting to be written to it.
//!
//! Nothing here blocks. A unit's loop reads a connection when the poller says it is readable and
//! writes when it has frames queued. Reads take only bytes whose place is known, so that a frame
//! lands straight in memory of its own, kept as it is ([`ReceivedFrame`]): the BU writes its
//! fragments into files from there, no byte copied after the kernel's copy. Writes: a write that would block leaves the rest queued and asks the
//! poller for writability. Data frames are queued as a header and the handles of their
//! fragments, and written with vectored writes straight from the memory the fragments were
//! received into (a [`PieceSource`]), which holds them until the event is committed.
//!
//! Every connection opens with the link of [`crate::link`]: the side that accepted it sends a
//! challenge and reads the caller's signed opening before any frame; the side that called it
//! waits for the challenge and answers it before any of its queued frames leaves.

use crate::link::{
    CHALLENGE_BYTES, LINK_BYTES, LinkKey, SIGNED_LINK_BYTES, answer_challenge, check_link, new_challenge, parse_link,
};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::time::{Duration, Instant};
use tessera_evb::msg::BufferRef;
use tessera_evb::types::Peer;
use tessera_evb::wire::{Decoded, Frame, HEADER_BYTES, WireError};

/// Where the bytes of a queued fragment are.
pub trait PieceSource {
    /// Appends the pieces of the fragment at `buffer`, in order, to `out`.
    fn pieces<'a>(&'a self, buffer: BufferRef, out: &mut Vec<&'a [u8]>);
}

/// A source that holds no fragments: for connections that carry control messages only.
pub struct NoPieces;

impl PieceSource for NoPieces {
    fn pieces<'a>(&'a self, _: BufferRef, _: &mut Vec<&'a [u8]>) {}
}

enum OutFrame {
    Owned(Vec<u8>),
    Data { header: Vec<u8>, fragments: Vec<BufferRef> },
}

/// Most slices handed to one vectored write (the kernel's limit is 1024).
const MAX_SLICES: usize = 512;
/// Most bytes read from one connection before the loop turns to the others.
const READ_TURN_BYTES: usize = 4 << 20;

/// What a unit's connections need to open: who the unit is, its run, and the run's link key.
#[derive(Debug, Clone)]
pub struct LinkSide {
    /// The unit.
    pub me: Peer,
    /// Its run.
    pub run: u32,
    /// The run's link key.
    pub key: LinkKey,
}

/// Where a connection is in its link opening.
enum Handshake {
    /// Accepted: the challenge is queued; the caller's signed opening is being read.
    Challenged { challenge: [u8; CHALLENGE_BYTES], got: usize, bytes: [u8; SIGNED_LINK_BYTES] },
    /// Called: the callee's challenge is being read; nothing is written until it is answered.
    Calling { got: usize, challenge: [u8; CHALLENGE_BYTES] },
    /// Opened: frames flow.
    Linked,
}

/// What a read pass produced.
#[derive(Debug, Default)]
pub struct ReadPass {
    /// The connection may have more bytes: read it again (when the unit can take them).
    pub more: bool,
    /// The peer named itself with its link opening in this pass.
    pub linked: Option<Peer>,
    /// The connection ended: `None` when the peer closed it between frames, otherwise what broke
    /// it.
    pub closed: Option<Option<ConnError>>,
}

/// A protocol connection.
pub struct Conn {
    stream: TcpStream,
    token: Token,
    /// Who is at the other end, once known.
    pub peer: Option<Peer>,
    /// Address of the other end, for messages.
    pub address: String,
    /// The other end's IP address, if known.
    pub ip: Option<std::net::IpAddr>,
    side: LinkSide,
    handshake: Handshake,
    /// When the connection was accepted or opened.
    since: Instant,
    /// The next frame's header, `head_got` bytes of it so far (while no body is being read).
    head: [u8; HEADER_BYTES],
    head_got: usize,
    /// The frame whose body is being read.
    body: Option<Body>,
    /// Largest frame body accepted.
    max_body_bytes: u32,
    /// Bytes of the frames taken so far, for errors.
    position: u64,
    out: VecDeque<(OutFrame, usize)>,
    /// Bytes of the front frame already written.
    out_offset: usize,
    queued_bytes: usize,
    want_write: bool,
    /// The fragments of the data frames written, kept for the unit when it asks
    /// ([`Conn::track_written`]): a push RU releases a fragment's memory only then.
    written: Option<Vec<BufferRef>>,
    /// The poller said readable and the last read did not say it would block.
    pub readable: bool,
}

impl Conn {
    /// A connection accepted by this unit: it sends its challenge; the caller's signed opening
    /// must come before any frame. Fails only if the system has no random bytes for the
    /// challenge.
    pub fn accepted(stream: TcpStream, token: Token, side: &LinkSide, max_body_bytes: u32) -> io::Result<Self> {
        let challenge = new_challenge().map_err(io::Error::other)?;
        let mut conn = Conn::new(
            stream,
            token,
            side,
            Handshake::Challenged { challenge, got: 0, bytes: [0; SIGNED_LINK_BYTES] },
            max_body_bytes,
        );
        conn.queue(challenge.to_vec());
        Ok(conn)
    }

    /// A connection this unit opened to `peer`: frames may be queued at once, but they leave
    /// only after the unit's signed opening, which answers `peer`'s challenge.
    pub fn opened(stream: TcpStream, token: Token, peer: Peer, side: &LinkSide, max_body_bytes: u32) -> Self {
        let handshake = Handshake::Calling { got: 0, challenge: [0; CHALLENGE_BYTES] };
        let mut conn = Conn::new(stream, token, side, handshake, max_body_bytes);
        conn.peer = Some(peer);
        conn
    }

    fn new(stream: TcpStream, token: Token, side: &LinkSide, handshake: Handshake, max_body_bytes: u32) -> Self {
        let peer = stream.peer_addr().ok();
        let address = peer.map_or_else(|| "?".into(), |a| a.to_string());
        Conn {
            stream,
            token,
            peer: None,
            address,
            ip: peer.map(|a| a.ip()),
            side: side.clone(),
            handshake,
            since: Instant::now(),
            head: [0; HEADER_BYTES],
            head_got: 0,
            body: None,
            max_body_bytes,
            position: 0,
            out: VecDeque::new(),
            written: None,
            out_offset: 0,
            queued_bytes: 0,
            want_write: false,
            readable: true,
        }
    }

    /// Why the connection must close, if its link opening is not done `timeout` after it began
    /// or after `not_before` (when the unit's loop started reading, so that time spent waiting
    /// to be enabled does not count), whichever is later.
    pub fn link_overdue(&self, timeout: Duration, not_before: Instant) -> Option<ConnError> {
        let waiting = match self.handshake {
            Handshake::Linked => return None,
            Handshake::Challenged { .. } => "link opening",
            Handshake::Calling { .. } => "link challenge",
        };
        (self.since.max(not_before).elapsed() > timeout).then(|| ConnError::LinkOverdue {
            address: self.address.clone(),
            waiting,
            seconds: timeout.as_secs_f64(),
        })
    }

    /// Registers the stream with the poller for reading.
    pub fn register(&mut self, registry: &Registry) -> io::Result<()> {
        registry.register(&mut self.stream, self.token, Interest::READABLE)
    }

    /// Removes the stream from the poller.
    pub fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(&mut self.stream);
    }

    /// The poller's token of this connection.
    pub fn token(&self) -> Token {
        self.token
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Queues an encoded frame.
    pub fn queue(&mut self, frame: Vec<u8>) {
        self.queued_bytes += frame.len();
        let len = frame.len();
        self.out.push_back((OutFrame::Owned(frame), len));
    }

    /// Queues a data frame: `header` from `encode_data_header_pieces`, then the pieces of
    /// `fragments` (where the [`PieceSource`] given to [`Conn::flush`] holds them),
    /// `fragment_bytes` in all.
    pub fn queue_data(&mut self, header: Vec<u8>, fragments: Vec<BufferRef>, fragment_bytes: usize) {
        let len = header.len() + fragment_bytes;
        self.queued_bytes += len;
        self.out.push_back((OutFrame::Data { header, fragments }, len));
    }

    /// From now on, keeps the fragments of each data frame once it is written, for
    /// [`Conn::take_written`].
    pub fn track_written(&mut self) {
        self.written.get_or_insert_with(Vec::new);
    }

    /// The fragments of the data frames written since the last call (with
    /// [`Conn::track_written`]).
    pub fn take_written(&mut self) -> Vec<BufferRef> {
        self.written.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The connection is done with: the fragments of every data frame it still held, written
    /// or not (with [`Conn::track_written`]), for their memory to be released.
    pub fn into_unwritten(mut self) -> Vec<BufferRef> {
        let mut all = self.take_written();
        for (frame, _) in self.out.drain(..) {
            if let OutFrame::Data { fragments, .. } = frame {
                all.extend(fragments);
            }
        }
        all
    }

    /// Writes what is queued until done or the socket would block; then asks the poller for
    /// writability (or stops asking once done). On a connection this unit opened, nothing is
    /// written before the peer's challenge is answered.
    pub fn flush(&mut self, source: &impl PieceSource, registry: &Registry) -> io::Result<()> {
        if matches!(self.handshake, Handshake::Calling { .. }) {
            return Ok(());
        }
        while !self.out.is_empty() {
            let mut pieces: Vec<&[u8]> = Vec::new();
            let mut frames = 0;
            for (frame, _) in &self.out {
                match frame {
                    OutFrame::Owned(bytes) => pieces.push(bytes),
                    OutFrame::Data { header, fragments } => {
                        pieces.push(header);
                        for &f in fragments {
                            source.pieces(f, &mut pieces);
                        }
                    }
                }
                frames += 1;
                if pieces.len() >= MAX_SLICES {
                    break;
                }
            }
            let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
            let mut view = &mut slices[..];
            IoSlice::advance_slices(&mut view, self.out_offset);
            let result = (&self.stream).write_vectored(view);
            drop(slices);
            drop(pieces);
            let written = match result {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.queued_bytes -= written;
            let mut done = self.out_offset + written;
            for _ in 0..frames {
                let len = self.out.front().expect("counted").1;
                if done < len {
                    break;
                }
                done -= len;
                let (frame, _) = self.out.pop_front().expect("counted");
                if let (Some(written), OutFrame::Data { fragments, .. }) = (&mut self.written, frame) {
                    written.extend(fragments);
                }
            }
            self.out_offset = done;
        }
        let want = !self.out.is_empty();
        if want != self.want_write {
            let interest = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            registry.reregister(&mut self.stream, self.token, interest)?;
            self.want_write = want;
        }
        Ok(())
    }

    /// Reads from the stream and hands every complete frame to `on_frame`, for at most a turn's
    /// worth of bytes. The link opening comes first: a caller's that fails closes the connection
    /// before any of its frames is read.
    ///
    /// Every read takes only bytes whose place is known: the rest of the link opening, the next
    /// frame header, or the rest of the frame body being read, straight into the
    /// [`ReceivedFrame`] that keeps it. No byte is copied after the kernel's copy; a small frame's
    /// body is read together with the next header (one system call a frame), a large one on its
    /// own into memory that is not cleared first.
    pub fn read(&mut self, mut on_frame: impl FnMut(Peer, Decoded, ReceivedFrame)) -> ReadPass {
        let mut pass = ReadPass::default();
        let mut taken = 0;
        while taken < READ_TURN_BYTES {
            let n = match self.read_some() {
                Ok(0) => {
                    let broken = match self.handshake {
                        Handshake::Challenged { got, .. } if got > 0 => {
                            Some(ConnError::ClosedInOpening { address: self.address.clone(), got })
                        }
                        Handshake::Calling { .. } => Some(ConnError::ClosedBeforeChallenge(self.address.clone())),
                        _ if self.head_got > 0 || self.body.is_some() => {
                            Some(ConnError::ClosedInFrame(self.address.clone()))
                        }
                        _ => None,
                    };
                    pass.closed = Some(broken);
                    self.readable = false;
                    return pass;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return pass;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    pass.closed = Some(Some(ConnError::Io { address: self.address.clone(), source: e }));
                    self.readable = false;
                    return pass;
                }
            };
            taken += n;
            match &mut self.handshake {
                Handshake::Linked => {}
                Handshake::Calling { got, challenge } => {
                    *got += n;
                    if *got < CHALLENGE_BYTES {
                        continue;
                    }
                    let side = &self.side;
                    let peer = self.peer.expect("a connection this unit opened names its peer");
                    let signed = answer_challenge(&side.key, side.me, side.run, peer, challenge);
                    // Ahead of the frames queued meanwhile, none of which was written.
                    self.queued_bytes += signed.len();
                    self.out.push_front((OutFrame::Owned(signed.to_vec()), signed.len()));
                    self.handshake = Handshake::Linked;
                    continue;
                }
                Handshake::Challenged { challenge, got, bytes: signed } => {
                    let before = *got;
                    *got += n;
                    let side = &self.side;
                    // The opening is checked as soon as it is in: a stray client or an older
                    // build is refused without waiting for a tag it will not send.
                    if before < LINK_BYTES && *got >= LINK_BYTES {
                        let opening = signed[..LINK_BYTES].try_into().expect("16 bytes");
                        if let Err(e) = parse_link(opening, side.run) {
                            pass.closed = Some(Some(ConnError::Link { address: self.address.clone(), source: e }));
                            return pass;
                        }
                    }
                    if *got < SIGNED_LINK_BYTES {
                        continue;
                    }
                    match check_link(&side.key, signed, challenge, side.me, side.run) {
                        Ok(peer) => {
                            // The unit vets the peer before any of its frames is read.
                            self.handshake = Handshake::Linked;
                            self.peer = Some(peer);
                            pass.linked = Some(peer);
                            pass.more = true;
                            return pass;
                        }
                        Err(e) => {
                            pass.closed = Some(Some(ConnError::Link { address: self.address.clone(), source: e }));
                            return pass;
                        }
                    }
                }
            }
            let peer = self.peer.expect("a linked connection names its peer");
            if let Err(e) = self.take_frames(peer, n, &mut on_frame) {
                pass.closed = Some(Some(e));
                return pass;
            }
        }
        pass.more = true;
        pass
    }

    /// One read of the bytes whose place is known (see [`Conn::read`]).
    fn read_some(&mut self) -> io::Result<usize> {
        match &mut self.handshake {
            Handshake::Calling { got, challenge } => return (&self.stream).read(&mut challenge[*got..]),
            Handshake::Challenged { got, bytes, .. } => {
                // The opening first, on its own, so that it is checked before its tag is read.
                let end = if *got < LINK_BYTES { LINK_BYTES } else { SIGNED_LINK_BYTES };
                return (&self.stream).read(&mut bytes[*got..end]);
            }
            Handshake::Linked => {}
        }
        match &mut self.body {
            None => (&self.stream).read(&mut self.head[self.head_got..]),
            Some(body) if body.cleared => {
                let mut slices = [IoSliceMut::new(&mut body.bytes[body.got..]), IoSliceMut::new(&mut self.head[..])];
                (&self.stream).read_vectored(&mut slices)
            }
            Some(body) => {
                rustix::io::read(&self.stream, rustix::buffer::spare_capacity(&mut body.bytes)).map_err(io::Error::from)
            }
        }
    }

    /// Takes the `n` bytes just read: into the frame being read, then into the next header.
    fn take_frames(
        &mut self,
        peer: Peer,
        mut n: usize,
        on_frame: &mut impl FnMut(Peer, Decoded, ReceivedFrame),
    ) -> Result<(), ConnError> {
        if let Some(body) = &mut self.body {
            let into_body = n.min(body.length - body.got);
            body.got += into_body;
            n -= into_body;
            if body.got < body.length {
                return Ok(());
            }
            let Body { bytes, .. } = self.body.take().expect("a frame being read");
            self.deliver(peer, ReceivedFrame::new(bytes), on_frame)?;
        }
        // What a read took after a body went into the next header.
        self.head_got += n;
        if self.head_got < HEADER_BYTES {
            return Ok(());
        }
        self.head_got = 0;
        let length = match Frame::parse(&self.head, self.max_body_bytes) {
            Ok(Some(_)) => return self.deliver(peer, ReceivedFrame::new(self.head.to_vec()), on_frame),
            Ok(None) => HEADER_BYTES + u32::from_le_bytes(self.head[8..12].try_into().expect("4 bytes")) as usize,
            Err(source) => return Err(self.frame_error(source)),
        };
        let mut bytes = Vec::with_capacity(length);
        // Exact, as `Vec::with_capacity` promises: the uncleared read fills the spare capacity.
        let cleared = length <= CLEARED_FRAME_BYTES || bytes.capacity() != length;
        bytes.extend_from_slice(&self.head);
        if cleared {
            bytes.resize(length, 0);
        }
        self.body = Some(Body { bytes, got: HEADER_BYTES, length, cleared });
        Ok(())
    }

    /// Decodes a whole frame and hands it to `on_frame`.
    fn deliver(
        &mut self,
        peer: Peer,
        frame: ReceivedFrame,
        on_frame: &mut impl FnMut(Peer, Decoded, ReceivedFrame),
    ) -> Result<(), ConnError> {
        let decoded = match Frame::parse(frame.bytes(), self.max_body_bytes) {
            Ok(Some(f)) => f.decode(),
            Ok(None) => unreachable!("a frame is delivered whole"),
            Err(e) => Err(e),
        };
        let decoded = decoded.map_err(|source| self.frame_error(source))?;
        self.position += frame.bytes().len() as u64;
        on_frame(peer, decoded, frame);
        Ok(())
    }

    /// A wire error of the frame that starts at this connection's `position`.
    fn frame_error(&self, source: WireError) -> ConnError {
        ConnError::Frame { address: self.address.clone(), at: self.position, source }
    }
}

/// A frame being read: its memory, its header in place, and how much of it is in.
struct Body {
    /// As long as the whole frame (cleared), or with exactly its capacity (uncleared).
    bytes: Vec<u8>,
    /// Bytes of it read so far, header included.
    got: usize,
    /// Bytes of the whole frame.
    length: usize,
    /// Its memory was cleared and is read into with the next header; otherwise it is read into
    /// the vector's spare capacity on its own.
    cleared: bool,
}

/// Frames up to this size are read into cleared memory, together with the next header (one
/// system call a frame); larger ones on their own, into memory that is not cleared first
/// (clearing it would cost a pass over every byte).
const CLEARED_FRAME_BYTES: usize = 16 << 10;

/// A frame as it was read from its connection, header first, kept in the memory the socket
/// read put it in: its bytes are nowhere else in user space, and nothing writes into them after.
pub struct ReceivedFrame {
    bytes: Vec<u8>,
}

impl ReceivedFrame {
    fn new(bytes: Vec<u8>) -> Self {
        crate::copies::received(&bytes);
        ReceivedFrame { bytes }
    }

    /// A whole frame, header first, received otherwise than by a [`Conn`] (a wire of a test's
    /// own): its memory counts as where it was received.
    pub fn from_wire(frame: Vec<u8>) -> Self {
        ReceivedFrame::new(frame)
    }

    /// The whole frame, header first.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The frame's body: a decoded data frame's fragment ranges are within it.
    pub fn body(&self) -> &[u8] {
        &self.bytes[HEADER_BYTES..]
    }
}

impl Drop for ReceivedFrame {
    fn drop(&mut self) {
        crate::copies::forgotten(&self.bytes);
    }
}

/// What ends a connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The peer closed inside its link opening.
    #[error("{address}: closed inside its link opening, after {got} bytes")]
    ClosedInOpening {
        /// The peer's address.
        address: String,
        /// Bytes of the opening it sent.
        got: usize,
    },
    /// The callee closed before it sent its challenge.
    #[error("{0}: closed before its link challenge")]
    ClosedBeforeChallenge(String),
    /// The peer closed inside a frame.
    #[error("{0}: connection closed inside a frame")]
    ClosedInFrame(String),
    /// The link opening was refused.
    #[error("{address}: {source}")]
    Link {
        /// The peer's address.
        address: String,
        /// Why.
        source: crate::link::LinkError,
    },
    /// A frame that is not one.
    #[error("{address}: frame at byte {at} of the connection: {source}")]
    Frame {
        /// The peer's address.
        address: String,
        /// Offset of the frame's header among the frames the connection carried.
        at: u64,
        /// What is wrong with it (its offsets count from the frame's header).
        source: WireError,
    },
    /// The socket failed.
    #[error("{address}: {source}")]
    Io {
        /// The peer's address.
        address: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The link opening took too long.
    #[error("{address}: no {waiting} within {seconds:.1} s")]
    LinkOverdue {
        /// The peer's address.
        address: String,
        /// What did not come: "link opening" or "link challenge".
        waiting: &'static str,
        /// The time-out, in seconds.
        seconds: f64,
    },
}

/// The connections of `conns` whose link opening is overdue ([`Conn::link_overdue`]), with why:
/// a caller that never proves itself is refused, a callee that never challenges is lost.
pub fn overdue_links(conns: &BTreeMap<Token, Conn>, timeout: Duration, not_before: Instant) -> Vec<(Token, ConnError)> {
    conns.iter().filter_map(|(t, c)| c.link_overdue(timeout, not_before).map(|why| (*t, why))).collect()
}
