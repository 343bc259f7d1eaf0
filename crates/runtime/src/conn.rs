//! One protocol connection of a unit's event loop: a non-blocking TCP stream, the frames read
//! from it, and the frames waiting to be written to it.
//!
//! Nothing here blocks. A unit's loop reads a connection when the poller says it is readable and
//! writes when it has frames queued; a write that would block leaves the rest queued and asks the
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
use std::io::{self, IoSlice, Read, Write};
use std::time::{Duration, Instant};
use tessera_evb::types::Peer;
use tessera_evb::wire::{Decoded, FrameDecoder};

/// Where the bytes of a queued fragment are.
pub trait PieceSource {
    /// Appends the pieces of the fragment named by `handle`, in order, to `out`.
    fn pieces<'a>(&'a self, handle: u64, out: &mut Vec<&'a [u8]>);
}

/// A source that holds no fragments: for connections that carry control messages only.
pub struct NoPieces;

impl PieceSource for NoPieces {
    fn pieces<'a>(&'a self, _: u64, _: &mut Vec<&'a [u8]>) {}
}

enum OutFrame {
    Owned(Vec<u8>),
    Data { header: Vec<u8>, fragments: Vec<u64> },
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
    pub closed: Option<Option<String>>,
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
    decoder: FrameDecoder,
    out: VecDeque<(OutFrame, usize)>,
    /// Bytes of the front frame already written.
    out_offset: usize,
    queued_bytes: usize,
    want_write: bool,
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
            decoder: FrameDecoder::with_max_body_bytes(max_body_bytes),
            out: VecDeque::new(),
            out_offset: 0,
            queued_bytes: 0,
            want_write: false,
            readable: true,
        }
    }

    /// Whether the link opening is done (a connection this unit accepted names its peer from
    /// then on).
    fn linked(&self) -> bool {
        matches!(self.handshake, Handshake::Linked)
    }

    /// Why the connection must close, if its link opening is not done `timeout` after it began
    /// or after `not_before` (when the unit's loop started reading, so that time spent waiting
    /// to be enabled does not count), whichever is later.
    pub fn link_overdue(&self, timeout: Duration, not_before: Instant) -> Option<String> {
        let waiting = match self.handshake {
            Handshake::Linked => return None,
            Handshake::Challenged { .. } => "link opening",
            Handshake::Calling { .. } => "link challenge",
        };
        (self.since.max(not_before).elapsed() > timeout)
            .then(|| format!("{}: no {waiting} within {:.1} s", self.address, timeout.as_secs_f64()))
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
    /// `fragments` (handles for the [`PieceSource`] given to [`Conn::flush`]), `fragment_bytes`
    /// in all.
    pub fn queue_data(&mut self, header: Vec<u8>, fragments: Vec<u64>, fragment_bytes: usize) {
        let len = header.len() + fragment_bytes;
        self.queued_bytes += len;
        self.out.push_back((OutFrame::Data { header, fragments }, len));
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
                self.out.pop_front();
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

    /// Reads from the stream into `scratch` and hands every complete frame to `on_frame`, for at
    /// most a turn's worth of bytes. The link opening comes first: a caller's that fails closes
    /// the connection before any of its frames is decoded.
    pub fn read(&mut self, scratch: &mut [u8], mut on_frame: impl FnMut(Peer, Decoded, &[u8])) -> ReadPass {
        let mut pass = ReadPass::default();
        // Frames that arrived with the link opening wait in the decoder for this pass.
        if let Some(peer) = self.peer
            && self.linked()
            && let Err(e) = self.decode(peer, &[], &mut on_frame)
        {
            pass.closed = Some(Some(e));
            return pass;
        }
        let mut taken = 0;
        while taken < READ_TURN_BYTES {
            let n = match self.stream.read(scratch) {
                Ok(0) => {
                    let broken = match self.handshake {
                        Handshake::Challenged { got, .. } if got > 0 => {
                            Some(format!("{}: closed inside its link opening, after {got} bytes", self.address))
                        }
                        Handshake::Calling { .. } => {
                            Some(format!("{}: closed before its link challenge", self.address))
                        }
                        _ if self.decoder.buffered() > 0 => {
                            Some(format!("{}: connection closed inside a frame", self.address))
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
                    pass.closed = Some(Some(format!("{}: {e}", self.address)));
                    self.readable = false;
                    return pass;
                }
            };
            taken += n;
            let mut bytes = &scratch[..n];
            match &mut self.handshake {
                Handshake::Linked => {}
                Handshake::Calling { got, challenge } => {
                    let k = bytes.len().min(CHALLENGE_BYTES - *got);
                    challenge[*got..*got + k].copy_from_slice(&bytes[..k]);
                    *got += k;
                    bytes = &bytes[k..];
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
                }
                Handshake::Challenged { challenge, got, bytes: signed } => {
                    let before = *got;
                    let k = bytes.len().min(SIGNED_LINK_BYTES - *got);
                    signed[*got..*got + k].copy_from_slice(&bytes[..k]);
                    *got += k;
                    bytes = &bytes[k..];
                    let side = &self.side;
                    // The opening is checked as soon as it is in: a stray client or an older
                    // build is refused without waiting for a tag it will not send.
                    if before < LINK_BYTES && *got >= LINK_BYTES {
                        let opening = signed[..LINK_BYTES].try_into().expect("16 bytes");
                        if let Err(e) = parse_link(opening, side.run) {
                            pass.closed = Some(Some(format!("{}: {e}", self.address)));
                            return pass;
                        }
                    }
                    if *got < SIGNED_LINK_BYTES {
                        continue;
                    }
                    match check_link(&side.key, signed, challenge, side.me, side.run) {
                        Ok(peer) => {
                            // The unit vets the peer before any of its frames is decoded: what
                            // came with the opening waits in the decoder for the next pass.
                            self.handshake = Handshake::Linked;
                            self.peer = Some(peer);
                            pass.linked = Some(peer);
                            let kept = self.decoder.push(bytes);
                            debug_assert_eq!(kept, bytes.len(), "a read fits in an empty decoder");
                            pass.more = true;
                            return pass;
                        }
                        Err(e) => {
                            pass.closed = Some(Some(format!("{}: {e}", self.address)));
                            return pass;
                        }
                    }
                }
            }
            let Some(peer) = self.peer else { continue };
            if let Err(e) = self.decode(peer, bytes, &mut on_frame) {
                pass.closed = Some(Some(e));
                return pass;
            }
        }
        pass.more = true;
        pass
    }

    /// Pushes `bytes` through the decoder and hands every complete frame to `on_frame`.
    fn decode(
        &mut self,
        peer: Peer,
        mut bytes: &[u8],
        on_frame: &mut impl FnMut(Peer, Decoded, &[u8]),
    ) -> Result<(), String> {
        loop {
            let pushed = self.decoder.push(bytes);
            bytes = &bytes[pushed..];
            loop {
                match self.decoder.next_frame() {
                    Ok(Some(frame)) => match frame.decode() {
                        Ok(decoded) => on_frame(peer, decoded, frame.body()),
                        Err(e) => return Err(format!("{}: {e}", self.address)),
                    },
                    Ok(None) => break,
                    Err(e) => return Err(format!("{}: {e}", self.address)),
                }
            }
            if bytes.is_empty() {
                return Ok(());
            }
        }
    }
}

/// The connections of `conns` whose link opening is overdue ([`Conn::link_overdue`]), with why:
/// a caller that never proves itself is refused, a callee that never challenges is lost.
pub fn overdue_links(conns: &BTreeMap<Token, Conn>, timeout: Duration, not_before: Instant) -> Vec<(Token, String)> {
    conns.iter().filter_map(|(t, c)| c.link_overdue(timeout, not_before).map(|why| (*t, why))).collect()
}
