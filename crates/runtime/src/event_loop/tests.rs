//! The event loop on its own, with a toy unit on loopback: it accepts a protocol caller and
//! opens its link, hands the unit what the caller sends, hands the unit's own source its event,
//! ticks the unit's core when its time-out is due, closes a caller that breaks its link, and
//! ends when run control aborts.

use super::*;
use crate::conn::NoPieces;
use crate::link::{CHALLENGE_BYTES, LinkKey, answer_challenge};
use std::io::{Read, Write};
use std::sync::Mutex;
use tessera_evb::msg::Message;
use tessera_evb::wire::encode;

const RUN: u32 = 7;
/// How long after its first pass the toy core wants its tick.
const TICK_AFTER: Nanos = 30_000_000;
const OWN: Token = Token(UNIT_TOKENS);

/// What the toy unit saw, shared with the test.
#[derive(Debug, Default)]
struct Seen {
    /// When each tick came, with when it was due.
    ticks: Vec<(Nanos, Nanos)>,
    /// Peers whose link opened.
    linked: Vec<Peer>,
    /// Messages read, by sender.
    messages: Vec<(Peer, Message)>,
    /// Connections closed, with why.
    closed: Vec<Option<String>>,
    /// Events on the unit's own listener.
    own_events: usize,
}

struct Toy {
    io: EventLoop,
    own: TcpListener,
    due: Option<Nanos>,
    seen: Arc<Mutex<Seen>>,
}

impl Unit for Toy {
    type Report = ();

    fn event_loop(&mut self) -> &mut EventLoop {
        &mut self.io
    }

    fn aborted(&self) -> NodeError {
        NodeError::Aborted("the toy".into())
    }

    fn prepare(&mut self) -> Result<(), NodeError> {
        if self.due.is_none() && self.seen.lock().unwrap().ticks.is_empty() {
            self.due = Some(self.io.now() + TICK_AFTER);
        }
        Ok(())
    }

    fn next_timeout(&self) -> Option<Nanos> {
        self.due
    }

    fn tick(&mut self, now: Nanos) {
        let due = self.due.take().expect("ticked only when due");
        self.seen.lock().unwrap().ticks.push((now, due));
    }

    fn step(&mut self, _now: Nanos) -> Result<bool, NodeError> {
        Ok(false)
    }

    fn read_conn(&mut self, token: Token, _now: Nanos) -> Result<bool, NodeError> {
        let mut messages = Vec::new();
        let Some(pass) = self.io.read(token, |peer, decoded, _| messages.push((peer, decoded.message))) else {
            return Ok(false);
        };
        {
            let mut seen = self.seen.lock().unwrap();
            seen.linked.extend(pass.linked);
            seen.messages.extend(messages);
        }
        if let Some(why) = pass.closed {
            self.close_conn(token, why.map(|e| e.to_string()))?;
        }
        Ok(pass.more)
    }

    fn close_conn(&mut self, token: Token, why: Option<String>) -> Result<(), NodeError> {
        if self.io.close(token).is_some() {
            self.seen.lock().unwrap().closed.push(why);
        }
        Ok(())
    }

    fn settle(&mut self) -> Result<(), NodeError> {
        Ok(())
    }

    fn flush_conns(&mut self) -> Result<(), NodeError> {
        for (token, line) in self.io.flush(&NoPieces, |_, _, _| {}) {
            self.close_conn(token, Some(line))?;
        }
        Ok(())
    }

    fn publish_stats(&mut self) {}

    fn done(&mut self) -> Result<Option<()>, NodeError> {
        Ok(None)
    }

    fn on_event(&mut self, token: Token, _event: &Event) -> Result<(), NodeError> {
        assert_eq!(token, OWN, "only the unit's own tokens come to it");
        while self.own.accept().is_ok() {
            self.seen.lock().unwrap().own_events += 1;
        }
        Ok(())
    }
}

/// Waits (at most 10 s) until `what` holds of what the toy saw.
fn wait_for(seen: &Mutex<Seen>, what: &str, check: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check(&seen.lock().unwrap()) {
        assert!(Instant::now() < deadline, "the loop never got {what}: {:?}", seen.lock().unwrap());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_loop_accepts_a_caller_hands_over_its_messages_and_own_events_ticks_when_due_and_ends_on_abort() {
    let key = LinkKey::from_bytes([5; 32]);
    let (poll, control) = poller().unwrap();
    let links = Links {
        side: LinkSide { me: Peer::Evm, run: RUN, key: key.clone(), transport: Default::default() },
        max_frame_bytes: 1 << 20,
        connect_timeout: Duration::from_secs(5),
        allowed_peers: None,
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (addresses, at) = std::sync::mpsc::channel();
    let (toy_control, toy_seen) = (control.clone(), seen.clone());
    // The loop is made on its own thread, as a unit's is (a UCX worker stays on its thread).
    let looping = std::thread::spawn(move || {
        let mut io = EventLoop::new(poll, toy_control, Arc::new(UnitStats::default()), 64, links).unwrap();
        let protocol = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        io.listen(&protocol, "protocol listener").unwrap();
        let mut own = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        io.registry().register(&mut own, OWN, Interest::READABLE).unwrap();
        let mut toy = Toy { io, own, due: None, seen: toy_seen };
        addresses.send((protocol.local_addr().unwrap(), toy.own.local_addr().unwrap())).unwrap();
        run(&mut toy)
    });
    let (protocol_at, own_at) = at.recv().unwrap();

    // A BU calls: it answers the loop's challenge, then sends a message.
    let mut bu = std::net::TcpStream::connect(protocol_at).unwrap();
    bu.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut challenge = [0u8; CHALLENGE_BYTES];
    bu.read_exact(&mut challenge).unwrap();
    bu.write_all(&answer_challenge(&key, Peer::Bu(3), RUN, Peer::Evm, &challenge)).unwrap();
    let hello = Message::Hello { bu: 3, epoch: 2, unpublished: vec![] };
    let mut frame = Vec::new();
    encode(&hello, &mut frame).unwrap();
    bu.write_all(&frame).unwrap();
    wait_for(&seen, "the BU's message", |s| !s.messages.is_empty());
    // A caller that opens no link is closed when it goes, with why.
    let mut stray = std::net::TcpStream::connect(protocol_at).unwrap();
    stray.write_all(b"not a link").unwrap();
    drop(stray);
    wait_for(&seen, "the stray caller's close", |s| !s.closed.is_empty());
    let _own_client = std::net::TcpStream::connect(own_at).unwrap();
    wait_for(&seen, "the event on its own listener", |s| s.own_events > 0);
    wait_for(&seen, "its tick", |s| !s.ticks.is_empty());

    control.abort();
    let ended = looping.join().unwrap();
    assert!(matches!(&ended, Err(NodeError::Aborted(what)) if what == "the toy"), "{ended:?}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.linked, [Peer::Bu(3)]);
    assert_eq!(seen.messages.len(), 1);
    assert!(matches!(&seen.messages[0], (Peer::Bu(3), Message::Hello { bu: 3, epoch: 2, .. })), "{seen:?}");
    assert_eq!(seen.closed.len(), 1, "only the stray caller: {seen:?}");
    assert!(seen.closed[0].is_some(), "a caller that breaks its opening says why");
    assert_eq!(seen.own_events, 1);
    assert_eq!(seen.ticks.len(), 1, "one time-out, one tick");
    let (at, due) = seen.ticks[0];
    assert!(at >= due, "ticked at {at} ns, before its time-out at {due} ns");
}

#[test]
fn callers_that_say_nothing_are_held_up_to_the_bound_the_rest_closed_and_counted_and_a_peer_links_after() {
    let key = LinkKey::from_bytes([6; 32]);
    let (poll, control) = poller().unwrap();
    let connect_timeout = Duration::from_secs(30);
    let links = Links {
        side: LinkSide { me: Peer::Evm, run: RUN, key: key.clone(), transport: Default::default() },
        max_frame_bytes: 1 << 20,
        connect_timeout,
        allowed_peers: None,
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stats = Arc::new(UnitStats::default());
    let (addresses, at) = std::sync::mpsc::channel();
    let (toy_control, toy_seen, toy_stats) = (control.clone(), seen.clone(), stats.clone());
    let looping = std::thread::spawn(move || {
        let mut io = EventLoop::new(poll, toy_control, toy_stats, 64, links).unwrap();
        let protocol = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        io.listen(&protocol, "protocol listener").unwrap();
        let mut own = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        io.registry().register(&mut own, OWN, Interest::READABLE).unwrap();
        let mut toy = Toy { io, own, due: None, seen: toy_seen };
        addresses.send(protocol.local_addr().unwrap()).unwrap();
        run(&mut toy)
    });
    let protocol_at = at.recv().unwrap();
    // A stranger's callers, each saying nothing: 200 more than the bound.
    let over = 200;
    let mut silent: Vec<std::net::TcpStream> =
        (0..MAX_OPENINGS + over).map(|_| std::net::TcpStream::connect(protocol_at).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.links_refused.get() < over as u64 {
        assert!(Instant::now() < deadline, "{} refused of {over} over the bound", stats.links_refused.get());
        std::thread::sleep(Duration::from_millis(10));
    }
    // Those over the bound were closed at once, before any byte; the others were challenged
    // and are held until they open their link, go, or are overdue.
    let mut closed_at_once = 0;
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut first = [0u8; 1];
        closed_at_once += usize::from(matches!(s.read(&mut first), Ok(0)));
    }
    assert_eq!(closed_at_once, over);
    assert_eq!(stats.links_refused.get(), over as u64);
    // Once the stranger goes, a peer links as before.
    drop(silent);
    let mut challenge = [0u8; CHALLENGE_BYTES];
    // The loop closes the stranger's connections as it sees them go: until it has, a caller
    // may still find the bound full (bounded: 100 tries).
    let mut bu = (0..100)
        .find_map(|_| {
            let mut bu = std::net::TcpStream::connect(protocol_at).unwrap();
            bu.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            if bu.read_exact(&mut challenge).is_ok() {
                return Some(bu);
            }
            std::thread::sleep(Duration::from_millis(50));
            None
        })
        .expect("a peer is challenged once the stranger is gone");
    bu.write_all(&answer_challenge(&key, Peer::Bu(1), RUN, Peer::Evm, &challenge)).unwrap();
    let hello = Message::Hello { bu: 1, epoch: 1, unpublished: vec![] };
    let mut frame = Vec::new();
    encode(&hello, &mut frame).unwrap();
    bu.write_all(&frame).unwrap();
    wait_for(&seen, "the BU's message", |s| !s.messages.is_empty());
    control.abort();
    let _ = looping.join().unwrap();
    assert_eq!(seen.lock().unwrap().linked, [Peer::Bu(1)]);
}
