//! The protocol of pipestream without sockets: which connection a client's next message goes
//! to ([`Sender`]), what a server makes of the bytes of one connection ([`Receiver`]), and the
//! acknowledgements a client reads ([`AckReader`]). The I/O threads of [`crate::engine`] drive
//! them; the tests drive them with bytes of their own.

use crate::config::Policy;
use crate::wire::{HEADER_BYTES, Header, Kind, WireError};
use tessera_formats::crc::{Crc32c, crc32c, crc32c_combine};

/// One connection of a client, as its sender sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendConn {
    /// Messages sent (queued to the connection).
    pub sent: u64,
    /// Messages the server has acknowledged.
    pub acked: u64,
    /// The fewest messages the server has from any one client, as it last said.
    pub floor: u64,
}

/// Why an acknowledgement cannot be true.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// It acknowledges messages never sent.
    #[error("acknowledges {received} messages, {sent} were sent")]
    Ahead {
        /// What it says.
        received: u64,
        /// What was sent.
        sent: u64,
    },
    /// It acknowledges fewer than an earlier one did.
    #[error("acknowledges {received} messages after {acked}")]
    Backwards {
        /// What it says.
        received: u64,
        /// What an earlier one said.
        acked: u64,
    },
}

/// The sender of the connections of one client that one thread services: it picks the
/// connection of each next message, in turn over the servers, within each connection's burst
/// and, under the fair policy, within the window of the slowest client.
#[derive(Debug, Clone)]
pub struct Sender {
    conns: Vec<SendConn>,
    turn: usize,
    policy: Policy,
    burst: u64,
    fair_window: u64,
    stopping: bool,
}

impl Sender {
    /// A sender over `conns` connections (one per server, in the order of the turn).
    pub fn new(conns: usize, policy: Policy, burst: u32, fair_window: u32) -> Sender {
        Sender {
            conns: vec![SendConn::default(); conns],
            turn: 0,
            policy,
            burst: u64::from(burst.max(1)),
            fair_window: u64::from(fair_window.max(1)),
            stopping: false,
        }
    }

    /// Starts the turn at connection `first`: clients start at different servers, as an event
    /// builder's readout units do, so that they do not all send to one server at once.
    pub fn start_at(&mut self, first: usize) {
        self.turn = if self.conns.is_empty() { 0 } else { first % self.conns.len() };
    }

    /// The connections.
    pub fn conns(&self) -> &[SendConn] {
        &self.conns
    }

    /// Whether connection `i` may take another message now.
    pub fn may_send(&self, i: usize) -> bool {
        let c = &self.conns[i];
        !self.stopping
            && c.sent - c.acked < self.burst
            && (self.policy == Policy::BestEffort || c.sent < c.floor + self.fair_window)
    }

    /// The connection the next message would go to, if one may go now; `writable(i)` says
    /// whether connection `i` can queue it. Best effort takes the next connection in turn that
    /// can; fair waits for the one whose turn it is.
    pub fn ready(&self, writable: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.conns.len();
        let tries = match self.policy {
            Policy::BestEffort => n,
            Policy::Fair => n.min(1),
        };
        (0..tries).map(|k| (self.turn + k) % n).find(|&i| self.may_send(i) && writable(i))
    }

    /// The connection and sequence number of the next message ([`Sender::ready`]), counted as
    /// sent.
    pub fn next(&mut self, writable: impl Fn(usize) -> bool) -> Option<(usize, u64)> {
        let i = self.ready(writable)?;
        self.turn = (i + 1) % self.conns.len();
        let c = &mut self.conns[i];
        c.sent += 1;
        Some((i, c.sent - 1))
    }

    /// Connection `i`'s server acknowledged `received` messages, with the fair `floor`.
    pub fn on_ack(&mut self, i: usize, received: u64, floor: u64) -> Result<(), AckError> {
        let c = &mut self.conns[i];
        if received > c.sent {
            return Err(AckError::Ahead { received, sent: c.sent });
        }
        if received < c.acked {
            return Err(AckError::Backwards { received, acked: c.acked });
        }
        c.acked = received;
        c.floor = c.floor.max(floor);
        Ok(())
    }

    /// No message is started any more.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// Whether every message sent has been acknowledged.
    pub fn drained(&self) -> bool {
        self.conns.iter().all(|c| c.acked == c.sent)
    }

    /// Messages acknowledged over every connection.
    pub fn completed(&self) -> u64 {
        self.conns.iter().map(|c| c.acked).sum()
    }
}

/// The checksum a message carries: CRC-32C of its sequence number (8 bytes, little endian)
/// and its payload, from the payload's own CRC-32C (computed once: every message of a run
/// has the same payload).
pub fn message_checksum(sequence: u64, payload_crc: u32, payload_bytes: u32) -> u32 {
    crc32c_combine(crc32c(&sequence.to_le_bytes()), payload_crc, u64::from(payload_bytes))
}

/// What a server found wrong on one connection, by kind; the stream goes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Errors {
    /// Messages missing: a sequence number jumped ahead by this many.
    pub lost: u64,
    /// Messages whose sequence number was below the next expected (a duplicate or a late one).
    pub out_of_order: u64,
    /// Messages whose checksum did not match.
    pub corrupt: u64,
}

impl Errors {
    /// Every error.
    pub fn total(&self) -> u64 {
        self.lost + self.out_of_order + self.corrupt
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &Errors) {
        self.lost += other.lost;
        self.out_of_order += other.out_of_order;
        self.corrupt += other.corrupt;
    }
}

enum ReadState {
    Header { bytes: [u8; HEADER_BYTES], got: usize },
    Payload { header: Header, left: u32 },
}

/// What a server makes of the bytes of one client connection (after its hello): the frames,
/// the checks, the counts and the acknowledgements.
pub struct Receiver {
    state: ReadState,
    /// The checksum of the message being read, when it carries one.
    digest: Option<Crc32c>,
    max_length: u32,
    expected: u64,
    received: u64,
    bytes: u64,
    errors: Errors,
    acked: u64,
    floor_said: u64,
}

impl Receiver {
    /// A receiver of messages of at most `max_length` payload bytes.
    pub fn new(max_length: u32) -> Receiver {
        Receiver {
            state: ReadState::Header { bytes: [0; HEADER_BYTES], got: 0 },
            digest: None,
            max_length,
            expected: 0,
            received: 0,
            bytes: 0,
            errors: Errors::default(),
            acked: 0,
            floor_said: 0,
        }
    }

    /// Takes the bytes a read brought, in any pieces. A frame that is not a message ends the
    /// connection's use: the stream has lost its place.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), WireError> {
        while !bytes.is_empty() {
            match &mut self.state {
                ReadState::Header { bytes: head, got } => {
                    let take = (HEADER_BYTES - *got).min(bytes.len());
                    head[*got..*got + take].copy_from_slice(&bytes[..take]);
                    *got += take;
                    bytes = &bytes[take..];
                    if *got == HEADER_BYTES {
                        let header = Header::decode(head)?;
                        if header.kind != Kind::Message {
                            return Err(WireError::Direction(header.kind));
                        }
                        if header.length > self.max_length {
                            return Err(WireError::Length { length: header.length, limit: self.max_length });
                        }
                        self.digest = (header.flags & crate::wire::FLAG_CHECKSUM != 0).then(|| {
                            let mut d = Crc32c::new();
                            d.update(&header.number.to_le_bytes());
                            d
                        });
                        self.state = ReadState::Payload { header, left: header.length };
                        self.complete_if_empty();
                    }
                }
                ReadState::Payload { left, .. } => {
                    let take = (*left as usize).min(bytes.len());
                    if let Some(d) = &mut self.digest {
                        d.update(&bytes[..take]);
                    }
                    *left -= take as u32;
                    bytes = &bytes[take..];
                    self.complete_if_empty();
                }
            }
        }
        Ok(())
    }

    fn complete_if_empty(&mut self) {
        let ReadState::Payload { header, left: 0 } = &self.state else { return };
        let (header, good) = (*header, self.digest.as_ref().is_none_or(|d| d.finish() == header.checksum));
        self.state = ReadState::Header { bytes: [0; HEADER_BYTES], got: 0 };
        self.received += 1;
        self.bytes += u64::from(header.length);
        if !good {
            self.errors.corrupt += 1;
        }
        let seq = header.number;
        if seq < self.expected {
            self.errors.out_of_order += 1;
        } else {
            self.errors.lost += seq - self.expected;
            self.expected = seq + 1;
        }
    }

    /// Messages received whole.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Payload bytes of the messages received whole.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// What was found wrong.
    pub fn errors(&self) -> Errors {
        self.errors
    }

    /// The acknowledgement to send now, if it would tell the client something new: more
    /// messages received, or a higher fair `floor`.
    pub fn ack(&mut self, floor: u64) -> Option<Header> {
        if self.received == self.acked && floor <= self.floor_said {
            return None;
        }
        self.acked = self.received;
        self.floor_said = self.floor_said.max(floor);
        Some(Header::ack(self.received, self.floor_said))
    }
}

/// The acknowledgements a client reads from one connection, in any pieces.
#[derive(Debug, Default)]
pub struct AckReader {
    bytes: [u8; HEADER_BYTES],
    got: usize,
}

impl AckReader {
    /// Takes the bytes a read brought; calls `on_ack(received, floor)` for each whole
    /// acknowledgement. Anything else ends the connection's use.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_ack: impl FnMut(u64, u64)) -> Result<(), WireError> {
        while !bytes.is_empty() {
            let take = (HEADER_BYTES - self.got).min(bytes.len());
            self.bytes[self.got..self.got + take].copy_from_slice(&bytes[..take]);
            self.got += take;
            bytes = &bytes[take..];
            if self.got == HEADER_BYTES {
                self.got = 0;
                let header = Header::decode(&self.bytes)?;
                if header.kind != Kind::Ack {
                    return Err(WireError::Direction(header.kind));
                }
                on_ack(header.number, header.aux);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(seq: u64, payload: &[u8], checksum: bool) -> Vec<u8> {
        let crc = checksum.then(|| message_checksum(seq, crc32c(payload), payload.len() as u32));
        let mut out = Header::message(seq, payload.len() as u32, crc).encode().to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn best_effort_goes_round_the_servers_and_skips_a_full_one() {
        let mut s = Sender::new(3, Policy::BestEffort, 2, 1);
        s.start_at(1);
        let order: Vec<usize> = (0..6).map_while(|_| s.next(|_| true).map(|(i, _)| i)).collect();
        assert_eq!(order, [1, 2, 0, 1, 2, 0]);
        assert_eq!(s.next(|_| true), None, "every connection has its burst of 2 in flight");
        s.on_ack(2, 1, 0).unwrap();
        assert_eq!(s.next(|_| true), Some((2, 2)), "only server 2 has room");
        assert_eq!(s.next(|i| i != 2), None);
    }

    #[test]
    fn fair_waits_for_the_turn_and_for_the_slowest_client() {
        let mut s = Sender::new(2, Policy::Fair, 8, 2);
        assert_eq!(s.next(|_| true), Some((0, 0)));
        assert_eq!(s.next(|i| i != 1), None, "server 1's turn, and it cannot take one");
        assert_eq!(s.ready(|_| true), Some(1));
        assert_eq!(s.next(|_| true), Some((1, 0)));
        assert_eq!(s.next(|_| true), Some((0, 1)));
        assert_eq!(s.next(|_| true), Some((1, 1)));
        // Two messages each, floor 0: the window of 2 is used up though the burst is not.
        assert_eq!(s.next(|_| true), None);
        s.on_ack(0, 2, 1).unwrap();
        assert_eq!(s.next(|_| true), Some((0, 2)));
        assert_eq!(s.next(|_| true), None, "server 1 still says floor 0");
    }

    #[test]
    fn acks_that_cannot_be_true_are_errors_and_a_stopped_sender_drains() {
        let mut s = Sender::new(1, Policy::BestEffort, 4, 1);
        s.next(|_| true);
        s.next(|_| true);
        assert_eq!(s.on_ack(0, 3, 0), Err(AckError::Ahead { received: 3, sent: 2 }));
        s.on_ack(0, 1, 0).unwrap();
        assert_eq!(s.on_ack(0, 0, 0), Err(AckError::Backwards { received: 0, acked: 1 }));
        s.stop();
        assert_eq!(s.next(|_| true), None);
        assert!(!s.drained());
        s.on_ack(0, 2, 0).unwrap();
        assert!(s.drained() && s.completed() == 2);
    }

    #[test]
    fn a_server_counts_lost_repeated_and_corrupt_messages() {
        let payload = [7u8; 100];
        let mut bytes = Vec::new();
        for seq in [0, 1, 3, 2, 4] {
            bytes.extend(message(seq, &payload, true));
        }
        let mut bad = message(5, &payload, true);
        bad[HEADER_BYTES + 10] ^= 1;
        bytes.extend(bad);
        let mut r = Receiver::new(1 << 20);
        r.feed(&bytes).unwrap();
        assert_eq!(r.received(), 6);
        assert_eq!(r.errors(), Errors { lost: 1, out_of_order: 1, corrupt: 1 });
        assert_eq!(r.ack(0), Some(Header::ack(6, 0)));
        assert_eq!(r.ack(0), None, "nothing new to say");
        assert_eq!(r.ack(4), Some(Header::ack(6, 4)), "a higher floor is news");
    }

    #[test]
    fn garbage_and_frames_from_the_wrong_side_end_the_connection() {
        let mut r = Receiver::new(1 << 20);
        assert_eq!(r.feed(&[0xAB; 40]), Err(WireError::Magic([0xAB; 4])));
        let mut r = Receiver::new(10);
        assert_eq!(r.feed(&message(0, &[0; 11], false)), Err(WireError::Length { length: 11, limit: 10 }));
        let mut r = Receiver::new(10);
        assert_eq!(r.feed(&Header::ack(1, 0).encode()), Err(WireError::Direction(Kind::Ack)));
        let mut a = AckReader::default();
        assert_eq!(a.feed(&message(0, &[], false), |_, _| {}), Err(WireError::Direction(Kind::Message)));
    }

    proptest! {
        /// However a read cuts the stream, the server sees the same messages, all good.
        #[test]
        fn any_cut_of_the_stream_reads_the_same(cuts in proptest::collection::vec(1usize..700, 1..40), checksum: bool) {
            let payload: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
            let stream: Vec<u8> = (0..8).flat_map(|seq| message(seq, &payload, checksum)).collect();
            let mut r = Receiver::new(1 << 20);
            let mut at = 0;
            for cut in cuts.iter().cycle() {
                if at == stream.len() { break; }
                let end = (at + cut).min(stream.len());
                r.feed(&stream[at..end]).unwrap();
                at = end;
            }
            prop_assert_eq!(r.received(), 8);
            prop_assert_eq!(r.bytes(), 8 * 300);
            prop_assert_eq!(r.errors().total(), 0);
            let mut acks = AckReader::default();
            let mut got = Vec::new();
            let ack = Header::ack(5, 2).encode();
            for piece in ack.chunks(cuts[0].min(32)) {
                acks.feed(piece, |n, f| got.push((n, f))).unwrap();
            }
            prop_assert_eq!(got, vec![(5, 2)]);
        }
    }
}
