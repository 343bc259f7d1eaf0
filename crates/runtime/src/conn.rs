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
//!
//! A link whose class travels on UCX (`transport`, internal) then trades UCX hellos on the TCP
//! stream, and its frames go as UCX messages: sent from the same queue, received whole into
//! memory of their own, read in the order they came; the TCP stream stays open, silent, to say
//! when the peer goes.

use crate::link::{
    CHALLENGE_BYTES, LINK_BYTES, LinkKey, SIGNED_LINK_BYTES, answer_challenge, check_link, new_challenge, parse_link,
};
use crate::transport::{Channel, Fabric, ReachError, SendFailure, TransportError, UcxHello, frame_header, uses_ucx};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::time::{Duration, Instant};
use tessera_evb::msg::{BufferRef, FragmentRef};
use tessera_evb::spare::Spare;
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
    /// Bytes of the link's opening, always on the TCP stream: a challenge, a signed opening, a
    /// UCX hello.
    Link(Vec<u8>),
    Owned(Vec<u8>),
    Data {
        header: Vec<u8>,
        fragments: Vec<BufferRef>,
    },
}

/// Most slices handed to one vectored write (the kernel's limit is 1024).
const MAX_SLICES: usize = 512;
/// Most bytes read from one connection before the loop turns to the others.
const READ_TURN_BYTES: usize = 4 << 20;

/// How long a link whose UCX endpoint failed waits for its TCP stream's end before the failure
/// ends it: longer than a closing peer's flush of its UCX sends
/// ([`CLOSE_TIMEOUT`](crate::transport::CLOSE_TIMEOUT)).
const UCX_FAILURE_GRACE: Duration = Duration::from_secs(3);

/// What a unit's connections need to open: who the unit is, its run, the run's link key, and
/// what each class of link travels on.
#[derive(Debug, Clone)]
pub struct LinkSide {
    /// The unit.
    pub me: Peer,
    /// Its run.
    pub run: u32,
    /// The run's link key.
    pub key: LinkKey,
    /// What its links travel on, per class.
    pub transport: tessera_config::TransportSection,
}

/// What a linked connection's frames travel on.
enum Path {
    /// The TCP stream.
    Tcp,
    /// UCX, once the peer's hello is read: `got` bytes of it so far, in `bytes` (its fixed part,
    /// then the whole of it).
    Hello { got: usize, bytes: Vec<u8> },
    /// UCX: the channel to the peer's worker, and the header that names this connection there.
    Ucx { channel: Channel, header: [u8; 16] },
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
    /// The poller said readable and the last read did not say it would block (or UCX brought
    /// frames).
    pub readable: bool,
    /// What its frames travel on once linked.
    path: Path,
    /// Frames that came over UCX, whole and in order, not yet read. Bounded by what the peer
    /// sends unasked: a BU's data come only for events it requested, within its budget.
    inbox: VecDeque<Vec<u8>>,
    /// Why UCX ended the connection (a failed endpoint or send), once it did, and when.
    ucx_failed: Option<(String, Instant)>,
    /// The peer ended the TCP stream: a close needs no flush of UCX sends.
    peer_ended: bool,
    /// What every UCX frame header to this connection carries beside its token.
    nonce: u64,
    /// Bytes the transport took (written to the stream, or sends UCX finished) since
    /// [`Conn::take_moved`].
    moved: usize,
}

impl Conn {
    /// A connection accepted by this unit: it sends its challenge; the caller's signed opening
    /// must come before any frame. Fails only if the system has no random bytes for the
    /// challenge.
    pub(crate) fn accepted(stream: TcpStream, token: Token, side: &LinkSide, max_body_bytes: u32) -> io::Result<Self> {
        let challenge = new_challenge().map_err(io::Error::other)?;
        let mut conn = Conn::new(
            stream,
            token,
            side,
            Handshake::Challenged { challenge, got: 0, bytes: [0; SIGNED_LINK_BYTES] },
            max_body_bytes,
        );
        conn.queued_bytes += CHALLENGE_BYTES;
        conn.out.push_back((OutFrame::Link(challenge.to_vec()), CHALLENGE_BYTES));
        Ok(conn)
    }

    /// A connection this unit opened to `peer`: frames may be queued at once, but they leave
    /// only after the unit's signed opening, which answers `peer`'s challenge.
    pub(crate) fn opened(stream: TcpStream, token: Token, peer: Peer, side: &LinkSide, max_body_bytes: u32) -> Self {
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
            path: Path::Tcp,
            inbox: VecDeque::new(),
            ucx_failed: None,
            peer_ended: false,
            // Not a secret (the link is the proof): it keeps a stray or late message from being
            // taken for this connection's.
            moved: 0,
            nonce: std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), (token.0, Instant::now())),
        }
    }

    /// Why the connection must close, if its link opening is not done `timeout` after it began
    /// or after `not_before` (when the unit's loop started reading, so that time spent waiting
    /// to be enabled does not count), whichever is later.
    pub fn link_overdue(&self, timeout: Duration, not_before: Instant) -> Option<ConnError> {
        let waiting = match self.handshake {
            Handshake::Linked if matches!(self.path, Path::Hello { .. }) => "UCX hello",
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

    /// Whether this is a caller's connection that has yet to open its link (answer the challenge).
    pub fn in_opening(&self) -> bool {
        matches!(self.handshake, Handshake::Challenged { .. })
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

    /// Bytes the transport took since the last call: written to the stream, or sent by UCX (whose
    /// sends end between flushes, as the worker is pumped).
    pub fn take_moved(&mut self) -> usize {
        std::mem::take(&mut self.moved)
    }

    /// Queues an encoded frame.
    pub fn queue(&mut self, frame: Vec<u8>) {
        self.queued_bytes += frame.len();
        let len = frame.len();
        self.out.push_back((OutFrame::Owned(frame), len));
    }

    /// Queues a data frame: `header` from `encode_data_header_pieces`, then the pieces of
    /// `fragments` (where the [`PieceSource`] given to `Conn::flush` holds them),
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
    /// written before the peer's challenge is answered. On UCX, the link's bytes go on the TCP
    /// stream and the frames to the peer's worker, as many as may be in flight.
    pub(crate) fn flush(
        &mut self,
        source: &impl PieceSource,
        registry: &Registry,
        fabric: Option<&mut Fabric>,
    ) -> io::Result<()> {
        if matches!(self.handshake, Handshake::Calling { .. }) {
            return Ok(());
        }
        let link_only = !matches!(self.path, Path::Tcp);
        self.write_stream(source, link_only)?;
        if let (Path::Ucx { channel, header }, Some(fabric)) = (&mut self.path, fabric) {
            // One list of a frame's pieces for the whole flush, not one per frame.
            let mut pieces = Vec::new();
            while channel.has_room() && self.out.front().is_some_and(|(f, _)| !matches!(f, OutFrame::Link(_))) {
                let (frame, length) = self.out.pop_front().expect("looked at");
                let bytes = match frame {
                    OutFrame::Owned(bytes) => bytes,
                    OutFrame::Data { header: frame_head, fragments } => {
                        // UCX takes memory it owns until the send ends: the fragments are copied
                        // out of the receive memory, which the RU reuses (docs/design.md).
                        let mut bytes = Vec::with_capacity(length);
                        bytes.extend_from_slice(&frame_head);
                        pieces.clear();
                        for &f in &fragments {
                            source.pieces(f, &mut pieces);
                        }
                        for p in &pieces {
                            bytes.extend_from_slice(p);
                        }
                        crate::copies::copied(crate::copies::Unit::Ru, length - frame_head.len());
                        if let Some(written) = &mut self.written {
                            written.extend(fragments);
                        }
                        bytes
                    }
                    OutFrame::Link(_) => unreachable!("only frames are sent on UCX"),
                };
                channel.send(fabric, self.token.0, header, bytes);
            }
        }
        let want = self.out.front().is_some_and(|(f, _)| !link_only || matches!(f, OutFrame::Link(_)));
        if want != self.want_write {
            let interest = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            registry.reregister(&mut self.stream, self.token, interest)?;
            self.want_write = want;
        }
        Ok(())
    }

    /// Writes the queue's front to the TCP stream until done or it would block: every frame, or
    /// with `link_only` only the link's bytes.
    fn write_stream(&mut self, source: &impl PieceSource, link_only: bool) -> io::Result<()> {
        let on_stream = |f: &OutFrame| !link_only || matches!(f, OutFrame::Link(_));
        while self.out.front().is_some_and(|(f, _)| on_stream(f)) {
            // Sized for the frames taken below, a piece per frame and per fragment (more for a
            // fragment of several blocks), so that it does not grow piece by piece.
            let mut room = 0;
            for (frame, _) in self.out.iter().take_while(|(f, _)| on_stream(f)) {
                room += if let OutFrame::Data { fragments, .. } = frame { 1 + fragments.len() } else { 1 };
                if room >= MAX_SLICES {
                    break;
                }
            }
            let mut pieces: Vec<&[u8]> = Vec::with_capacity(room);
            let mut frames = 0;
            for (frame, _) in self.out.iter().take_while(|(f, _)| on_stream(f)) {
                match frame {
                    OutFrame::Link(bytes) | OutFrame::Owned(bytes) => pieces.push(bytes),
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
            self.moved += written;
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
        Ok(())
    }

    /// The link is open with `peer`: a link of a class that travels on UCX queues this side's
    /// hello on the stream, after the link's own bytes and before any frame, and reads the
    /// peer's next.
    fn linked(&mut self, peer: Peer, fabric: Option<&mut Fabric>) {
        let Some(fabric) = fabric else { return };
        if !uses_ucx(&self.side.transport, self.side.me, peer) {
            return;
        }
        let hello = UcxHello { token: self.token.0 as u64, nonce: self.nonce, address: fabric.address().to_vec() };
        let bytes = hello.encode();
        // After the link's bytes queued (a partly written front among them), before any frame.
        let at = self.out.iter().take_while(|(f, _)| matches!(f, OutFrame::Link(_))).count();
        self.queued_bytes += bytes.len();
        let length = bytes.len();
        self.out.insert(at, (OutFrame::Link(bytes), length));
        self.path = Path::Hello { got: 0, bytes: vec![0; UcxHello::FIXED_BYTES] };
    }

    /// A frame that came over UCX for this connection, with the nonce its header carried: kept
    /// to be read in turn. False (and dropped) when the nonce is not this connection's.
    pub(crate) fn arrived(&mut self, nonce: u64, frame: Vec<u8>) -> bool {
        if nonce != self.nonce {
            return false;
        }
        self.inbox.push_back(frame);
        self.readable = true;
        true
    }

    /// Sends of this connection finished on UCX (`Err`: one failed, and the link with it).
    pub(crate) fn sent(&mut self, result: Result<(), SendFailure>) {
        if let Path::Ucx { channel, .. } = &mut self.path {
            let finished = channel.finished();
            self.queued_bytes -= finished;
            self.moved += finished;
        }
        if let Err(why) = result {
            self.transport_failed(format!("a UCX send failed: {why}"));
        }
    }

    /// UCX ended the link (`why`): said at the next read.
    pub(crate) fn transport_failed(&mut self, why: String) {
        self.ucx_failed.get_or_insert((why, Instant::now()));
        self.readable = true;
    }

    /// Ends the connection's UCX channel, if it has one: its frames in flight reach the peer
    /// first (within `timeout`) unless the peer has gone or ended the link.
    pub(crate) fn close_transport(
        &mut self,
        fabric: Option<&mut Fabric>,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let Some(fabric) = fabric else { return Ok(()) };
        match std::mem::replace(&mut self.path, Path::Tcp) {
            Path::Ucx { channel, .. } => {
                let graceful = self.ucx_failed.is_none() && !self.peer_ended;
                channel.close(fabric, graceful, timeout)
            }
            _ => Ok(()),
        }
    }

    /// Reads from the stream and hands every complete frame to `on_frame`, for at most a turn's
    /// worth of bytes. The link opening comes first: a caller's that fails closes the connection
    /// before any of its frames is read.
    ///
    /// Every read takes only bytes whose place is known: the rest of the link opening, the next
    /// frame header, or the rest of the frame body being read, straight into the
    /// [`ReceivedFrame`] that keeps it. No byte is copied after the kernel's copy; a small frame's
    /// body is read together with the next header (one system call a frame), a large one on its
    /// own into memory that is not cleared first. The super-fragments of data frames are decoded
    /// into fragment lists taken from `lists`.
    pub(crate) fn read(
        &mut self,
        mut fabric: Option<&mut Fabric>,
        lists: &mut Spare<FragmentRef>,
        mut on_frame: impl FnMut(Peer, Decoded, ReceivedFrame),
    ) -> ReadPass {
        let mut pass = ReadPass::default();
        let mut taken = 0;
        while taken < READ_TURN_BYTES {
            if !matches!(self.path, Path::Tcp) {
                return self.read_ucx(fabric, pass, lists, on_frame);
            }
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
                    self.peer_ended = true;
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
                    self.peer_ended = true;
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
                    self.out.push_front((OutFrame::Link(signed.to_vec()), signed.len()));
                    self.handshake = Handshake::Linked;
                    self.linked(peer, fabric.as_deref_mut());
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
                            self.linked(peer, fabric.as_deref_mut());
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
            if let Err(e) = self.take_frames(peer, n, lists, &mut on_frame) {
                pass.closed = Some(Some(e));
                return pass;
            }
        }
        pass.more = true;
        pass
    }

    /// A read of a link on UCX: the frames that came, in order, for at most a turn's worth of
    /// bytes; then the TCP stream, for the peer's hello or its end (which is said only once
    /// every frame before it is read).
    fn read_ucx(
        &mut self,
        fabric: Option<&mut Fabric>,
        mut pass: ReadPass,
        lists: &mut Spare<FragmentRef>,
        mut on_frame: impl FnMut(Peer, Decoded, ReceivedFrame),
    ) -> ReadPass {
        let peer = self.peer.expect("a linked connection names its peer");
        let mut taken = 0;
        while taken < READ_TURN_BYTES
            && let Some(bytes) = self.inbox.pop_front()
        {
            taken += bytes.len();
            if let Err(e) = self.take_message(peer, bytes, lists, &mut on_frame) {
                pass.closed = Some(Some(e));
                return pass;
            }
        }
        if !self.inbox.is_empty() {
            pass.more = true;
            return pass;
        }
        self.readable = false;
        loop {
            let result = match &mut self.path {
                Path::Hello { got, bytes } => (&self.stream).read(&mut bytes[*got..]),
                _ => (&self.stream).read(&mut [0u8; 64]),
            };
            match result {
                Ok(0) => {
                    self.peer_ended = true;
                    let broken = matches!(self.path, Path::Hello { got, .. } if got > 0)
                        .then(|| ConnError::ClosedInFrame(self.address.clone()));
                    pass.closed = Some(broken);
                    return pass;
                }
                Ok(n) => match &mut self.path {
                    Path::Hello { got, bytes } => {
                        *got += n;
                        if *got < bytes.len() {
                            continue;
                        }
                        let hello = if *got == UcxHello::FIXED_BYTES {
                            match UcxHello::length(bytes) {
                                Ok(length) => {
                                    bytes.resize(length, 0);
                                    continue;
                                }
                                Err(e) => Err(e),
                            }
                        } else {
                            UcxHello::decode(bytes)
                        };
                        let channel = hello.map_err(ReachError::from).and_then(|hello| {
                            let fabric = fabric.expect("a link on UCX has its unit's fabric");
                            let header = frame_header(hello.token, hello.nonce);
                            fabric
                                .connect(hello.address, self.token.0)
                                .map(|channel| (channel, header))
                                .map_err(ReachError::from)
                        });
                        match channel {
                            Ok((channel, header)) => {
                                self.path = Path::Ucx { channel, header };
                                pass.more = true;
                            }
                            Err(e) => {
                                pass.closed = Some(Some(ConnError::Transport {
                                    address: self.address.clone(),
                                    what: e.to_string(),
                                }))
                            }
                        }
                        return pass;
                    }
                    _ => {
                        pass.closed = Some(Some(ConnError::Transport {
                            address: self.address.clone(),
                            what: format!("{n} bytes on the TCP stream of a link whose frames travel on UCX"),
                        }));
                        return pass;
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The TCP stream is the link's lifeline: a peer that ends the link closes
                    // its UCX endpoint and then the stream, so UCX may report the endpoint gone
                    // first. The stream's end decides (a clean end, as over TCP) unless it stays
                    // open past the grace: then UCX's report ends the link.
                    if let Some((why, since)) = &self.ucx_failed {
                        if since.elapsed() >= UCX_FAILURE_GRACE {
                            pass.closed =
                                Some(Some(ConnError::Transport { address: self.address.clone(), what: why.clone() }));
                        } else {
                            // Looked at again on the loop's next pass, within its longest sleep.
                            self.readable = true;
                        }
                    }
                    return pass;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.peer_ended = true;
                    pass.closed = Some(Some(ConnError::Io { address: self.address.clone(), source: e }));
                    return pass;
                }
            }
        }
    }

    /// A whole frame that came as one UCX message: its length must be the frame's own.
    fn take_message(
        &mut self,
        peer: Peer,
        bytes: Vec<u8>,
        lists: &mut Spare<FragmentRef>,
        on_frame: &mut impl FnMut(Peer, Decoded, ReceivedFrame),
    ) -> Result<(), ConnError> {
        let length = match bytes.get(..HEADER_BYTES).map(|h| Frame::parse(h, self.max_body_bytes)) {
            None => None,
            Some(Ok(Some(_))) => Some(HEADER_BYTES),
            Some(Ok(None)) => {
                Some(HEADER_BYTES + u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize)
            }
            Some(Err(source)) => return Err(self.frame_error(source)),
        };
        if length != Some(bytes.len()) {
            return Err(ConnError::Transport {
                address: self.address.clone(),
                what: format!(
                    "a UCX message of {} bytes at byte {} of the link is not one whole frame",
                    bytes.len(),
                    self.position
                ),
            });
        }
        self.deliver(peer, ReceivedFrame::new(bytes), lists, on_frame)
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
        lists: &mut Spare<FragmentRef>,
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
            self.deliver(peer, ReceivedFrame::new(bytes), lists, on_frame)?;
        }
        // What a read took after a body went into the next header.
        self.head_got += n;
        if self.head_got < HEADER_BYTES {
            return Ok(());
        }
        self.head_got = 0;
        let length = match Frame::parse(&self.head, self.max_body_bytes) {
            Ok(Some(_)) => return self.deliver(peer, ReceivedFrame::new(self.head.to_vec()), lists, on_frame),
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

    /// Decodes a whole frame, its super-fragments into lists taken from `lists`, and hands it to
    /// `on_frame`.
    fn deliver(
        &mut self,
        peer: Peer,
        frame: ReceivedFrame,
        lists: &mut Spare<FragmentRef>,
        on_frame: &mut impl FnMut(Peer, Decoded, ReceivedFrame),
    ) -> Result<(), ConnError> {
        let decoded = match Frame::parse(frame.bytes(), self.max_body_bytes) {
            Ok(Some(f)) => f.decode_with(lists),
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
#[non_exhaustive]
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
    /// The link's UCX transport failed: a bad hello or message, a peer UCX lost, a send that
    /// failed.
    #[error("{address}: {what}")]
    Transport {
        /// The peer's address.
        address: String,
        /// What happened.
        what: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_received_frame_notes_its_memory_while_it_lives() {
        if crate::copies::copied_bytes(crate::copies::Unit::Bu).is_none() {
            let why = "received memory is noted in debug builds only; this is a release build";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("skipped: {why}");
            return;
        }
        let frame = ReceivedFrame::from_wire((0..100u8).collect());
        let start = frame.bytes().as_ptr();
        assert!(crate::copies::noted(start), "a frame notes its memory as received");
        drop(frame);
        assert!(!crate::copies::noted(start), "a dropped frame is forgotten");
    }
}
