//! Two workers in one process, their addresses exchanged in memory, under the transports `tcp`
//! and `sm,self` each: an active message of three pieces from mapped memory, a 4 MiB rendezvous
//! message into the receiver's buffer, many messages in flight in order per endpoint, what each
//! side sees when the other goes, the event file descriptor waking a mio poller, and the error
//! of an unknown transport. Every wait is bounded.

#![cfg(feature = "ucx")]

#[path = "../../cli/tests/common/require.rs"]
mod require;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tessera_ucx::{
    CloseMode, Context, Endpoint, Error, ErrorHandling, Event, MemRegion, Message, SendToken, Status, Worker,
};

/// The active-message id of these tests.
const AM: u16 = 7;

/// The bound of every wait for something that must happen.
const BOUND: Duration = Duration::from_secs(10);

/// A context for `transports`, or `None` (the test skips, or fails under CI) when UCX cannot
/// start with them here.
fn context(transports: &str) -> Option<Context> {
    let context = Context::new(Some(transports));
    let why = context.as_ref().err().map(ToString::to_string).unwrap_or_default();
    require::require(&format!("UCX with transports {transports:?}: {why}"), context.is_ok()).then(|| context.unwrap())
}

/// Two workers of one context, each with a handler for [`AM`] that gives a zeroed buffer.
fn two_workers(context: &Context) -> (Worker, Worker) {
    let a = Worker::new(context).expect("worker a");
    let b = Worker::new(context).expect("worker b");
    for worker in [&a, &b] {
        worker.set_am_handler(AM, |_, length| vec![0; length]).expect("a handler");
    }
    (a, b)
}

/// The error handling to connect with under `transports`: peer-failure detection where UCX
/// 1.13 has it (not over shared memory alone).
fn mode(transports: &str) -> ErrorHandling {
    if transports == "tcp" { ErrorHandling::Peer } else { ErrorHandling::None }
}

/// Progresses every worker, collecting their events, until `done` holds or `timeout` passes
/// (then panics saying `what`).
fn pump(
    workers: &[&Worker],
    events: &mut [Vec<Event>],
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(&[Vec<Event>]) -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let mut progressed = 0;
        for (worker, events) in workers.iter().zip(events.iter_mut()) {
            progressed += worker.progress();
            events.extend(worker.take_events());
        }
        if done(events) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}; events so far: {events:#?}");
        if progressed == 0 {
            std::thread::yield_now();
        }
    }
}

/// Progresses every worker for `time`, collecting their events.
fn pump_for(workers: &[&Worker], events: &mut [Vec<Event>], time: Duration) {
    let deadline = Instant::now() + time;
    pump(workers, events, time + BOUND, "pumping", |_| Instant::now() >= deadline);
}

/// The messages among `events`.
fn received(events: &[Event]) -> Vec<&Message> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Received(message) => Some(message),
            _ => None,
        })
        .collect()
}

/// How many sends finished among `events`, and how many of them failed.
fn sent(events: &[Event]) -> (usize, usize) {
    let finished: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            Event::Sent { result, .. } => Some(result),
            _ => None,
        })
        .collect();
    (finished.len(), finished.iter().filter(|result| result.is_err()).count())
}

/// Bytes that differ from one place to the next.
fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8).collect()
}

/// Connects a to b and b to a, and has one message go each way, so that both are wired up.
fn connected(transports: &str, a: &Worker, b: &Worker) -> (Endpoint, Endpoint) {
    let ab = a.connect(b.address(), mode(transports)).expect("a -> b");
    let ba = b.connect(a.address(), mode(transports)).expect("b -> a");
    let tokens = (ab.send(AM, b"hello b", Vec::<Vec<u8>>::new()), ba.send(AM, b"hello a", Vec::<Vec<u8>>::new()));
    let mut events = [Vec::new(), Vec::new()];
    pump(&[a, b], &mut events, BOUND, "the greetings", |events| {
        received(&events[0]).len() == 1 && received(&events[1]).len() == 1
    });
    assert!(tokens.0.is_finished() && tokens.1.is_finished());
    (ab, ba)
}

/// (a) An active message whose data is three pieces of mapped memory arrives whole and equal,
/// and the send gives its pieces back.
fn three_pieces_from_mapped_memory(transports: &str) {
    let Some(context) = context(transports) else { return };
    let (a, b) = two_workers(&context);
    let ab = a.connect(b.address(), mode(transports)).expect("connect");
    let region = Rc::new(MemRegion::new(&context, pattern(64 * 1024, 1)).expect("mapping"));
    let pieces = vec![region.slice(0..1000), region.slice(5000..9000), region.slice(20_000..20_100)];
    let mut expected = Vec::new();
    for piece in &pieces {
        expected.extend_from_slice(piece.as_ref());
    }
    let token = ab.send(AM, b"three pieces", pieces);
    let mut events = [Vec::new(), Vec::new()];
    pump(&[&a, &b], &mut events, BOUND, "the message of three pieces", |events| {
        !received(&events[1]).is_empty() && sent(&events[0]).0 == 1
    });
    let messages = received(&events[1]);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].am_id, AM);
    assert_eq!(messages[0].header, b"three pieces");
    assert_eq!(messages[0].data.len(), 5100);
    assert!(messages[0].data == expected, "the data differs from the three pieces");
    assert_eq!(sent(&events[0]), (1, 0));
    let (pieces, result) = token.into_pieces().expect("the send finished");
    assert_eq!((pieces.len(), result), (3, Ok(())));
    eprintln!("{transports}: 3 pieces, 5100 bytes, rendezvous: {}", messages[0].rendezvous);
    drop((pieces, ab));
    // The region is unmapped once its last slice is gone, and gives its bytes back.
    let region = Rc::try_unwrap(region).expect("no slice left");
    assert_eq!(region.into_vec(), pattern(64 * 1024, 1));
}

#[test]
fn tcp_an_am_of_three_mapped_pieces_arrives_whole() {
    three_pieces_from_mapped_memory("tcp");
}

#[test]
fn sm_an_am_of_three_mapped_pieces_arrives_whole() {
    three_pieces_from_mapped_memory("sm,self");
}

/// (b) A 4 MiB message goes by rendezvous, into the buffer the receiver's closure gives.
fn rendezvous_into_the_receivers_buffer(transports: &str) {
    let Some(context) = context(transports) else { return };
    let (a, b) = two_workers(&context);
    let asked = Rc::new(std::cell::RefCell::new(Vec::new()));
    let record = Rc::clone(&asked);
    b.set_am_handler(AM, move |header, length| {
        record.borrow_mut().push((header.to_vec(), length));
        Vec::with_capacity(length)
    })
    .expect("the handler");
    let ab = a.connect(b.address(), mode(transports)).expect("connect");
    let data = pattern(4 << 20, 2);
    let token: SendToken<Vec<u8>> = ab.send(AM, b"big", vec![data.clone()]);
    let mut events = [Vec::new(), Vec::new()];
    pump(&[&a, &b], &mut events, BOUND, "the 4 MiB message", |events| {
        !received(&events[1]).is_empty() && sent(&events[0]).0 == 1
    });
    assert_eq!(*asked.borrow(), [(b"big".to_vec(), 4 << 20)], "the buffer closure's calls");
    let message = received(&events[1])[0];
    assert!(message.rendezvous, "a 4 MiB message went eagerly");
    assert_eq!(message.header, b"big");
    assert!(message.data == data, "the 4 MiB differ");
    assert_eq!(token.result(), Some(Ok(())));
}

#[test]
fn tcp_4_mib_go_by_rendezvous_into_the_receivers_buffer() {
    rendezvous_into_the_receivers_buffer("tcp");
}

#[test]
fn sm_4_mib_go_by_rendezvous_into_the_receivers_buffer() {
    rendezvous_into_the_receivers_buffer("sm,self");
}

/// (c) Many messages in flight on two endpoints (sent before any progress) all finish, and
/// arrive in order per endpoint.
fn many_in_flight_in_order(transports: &str) {
    const PER_ENDPOINT: u32 = 2000;
    let Some(context) = context(transports) else { return };
    let (a, b) = two_workers(&context);
    let endpoints = [
        a.connect(b.address(), mode(transports)).expect("ep 0"),
        a.connect(b.address(), mode(transports)).expect("ep 1"),
    ];
    let mut tokens = Vec::new();
    for seq in 0..PER_ENDPOINT {
        for (index, endpoint) in endpoints.iter().enumerate() {
            let header = [index as u8].into_iter().chain(seq.to_le_bytes()).collect::<Vec<u8>>();
            // Sizes from 0 to ~16 KiB, two pieces each.
            let size = (seq as usize * 37) % 8192;
            tokens.push(endpoint.send(AM, &header, vec![pattern(size, seq as u8), pattern(size, index as u8)]));
        }
    }
    let total = tokens.len();
    let mut events = [Vec::new(), Vec::new()];
    pump(&[&a, &b], &mut events, BOUND * 3, "every message", |events| {
        received(&events[1]).len() == total && sent(&events[0]).0 == total
    });
    assert_eq!(sent(&events[0]), (total, 0), "sends finished, failed");
    let mut next = [0u32; 2];
    for message in received(&events[1]) {
        let index = message.header[0] as usize;
        let seq = u32::from_le_bytes(message.header[1..5].try_into().unwrap());
        assert_eq!(seq, next[index], "endpoint {index}: message {seq} came where {} was due", next[index]);
        next[index] += 1;
        let size = (seq as usize * 37) % 8192;
        assert_eq!(message.data.len(), 2 * size);
        assert!(message.data[..size] == pattern(size, seq as u8) && message.data[size..] == pattern(size, index as u8));
    }
    assert_eq!(next, [PER_ENDPOINT; 2]);
    let rendezvous = received(&events[1]).iter().filter(|message| message.rendezvous).count();
    eprintln!("{transports}: {total} messages of 0 to 16 KiB in order, {rendezvous} of them by rendezvous");
    for token in tokens {
        let (pieces, result) = token.into_pieces().expect("finished");
        assert_eq!((pieces.len(), result), (2, Ok(())));
    }
}

#[test]
fn tcp_many_messages_in_flight_finish_in_order_per_endpoint() {
    many_in_flight_in_order("tcp");
}

#[test]
fn sm_many_messages_in_flight_finish_in_order_per_endpoint() {
    many_in_flight_in_order("sm,self");
}

/// (d) Over TCP, dropping one side's worker (with its endpoint) fails the other side's endpoint
/// at its next progress: an event, the endpoint's failure, sends after it fail at once. Dropping
/// only the peer's endpoint (its worker alive) fails nothing: its worker still receives.
#[test]
fn tcp_a_peer_that_goes_fails_the_endpoint_to_it() {
    let Some(context) = context("tcp") else { return };
    let (a, b) = two_workers(&context);
    let (ab, ba) = connected("tcp", &a, &b);
    let mut events = [Vec::new(), Vec::new()];

    // b drops its endpoint only: a's endpoint to b still works.
    drop(ba);
    pump_for(&[&a, &b], &mut events, Duration::from_millis(500));
    let still = ab.send(AM, b"still there", Vec::<Vec<u8>>::new());
    pump(&[&a, &b], &mut events, BOUND, "a message after b closed its endpoint", |events| {
        received(&events[1]).iter().any(|message| message.header == b"still there")
    });
    assert!(ab.failure().is_none() && still.result() == Some(Ok(())));
    assert!(!events[0].iter().any(|event| matches!(event, Event::EndpointFailed { .. })));

    // b's worker goes: a's endpoint fails.
    drop(b);
    let started = Instant::now();
    let mut events = [Vec::new()];
    pump(&[&a], &mut events, BOUND, "the failure of a's endpoint", |events| {
        events[0].iter().any(|event| matches!(event, Event::EndpointFailed { .. }))
    });
    let seen_after = started.elapsed();
    let failures: Vec<_> = events[0]
        .iter()
        .filter_map(|event| match event {
            Event::EndpointFailed { endpoint, status } => Some((*endpoint, *status)),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 1, "one failure event: {failures:?}");
    assert_eq!(failures[0].0, ab.id());
    assert_eq!(ab.failure(), Some(failures[0].1));
    eprintln!("tcp: a's endpoint failed {seen_after:?} after b's worker went, with {}", failures[0].1);
    // A send on it ends at once, in error, with its event.
    let late = ab.send(AM, b"too late", vec![vec![1u8; 100]]);
    assert!(matches!(late.result(), Some(Err(_))), "{late:?}");
    assert!(matches!(a.next_event(), Some(Event::Sent { id, result: Err(_) }) if id == late.id()));
    // A failed endpoint closes (forced, whatever was asked).
    ab.close(CloseMode::Flush, BOUND).expect("closing the failed endpoint");
}

/// (d) Over shared memory UCX 1.13 cannot detect a peer's failure: an endpoint with peer-failure
/// handling cannot be made, and one without it to a worker that is gone reports nothing: its sends
/// finish while the gone peer's FIFO has room, then stay in flight; a forced close cancels them.
#[test]
fn sm_cannot_detect_a_peer_that_goes_and_says_so() {
    let Some(context) = context("sm,self") else { return };
    let (a, b) = two_workers(&context);
    let refused = a.connect(b.address(), ErrorHandling::Peer).expect_err("peer-failure handling over sm");
    assert!(
        matches!(refused, Error::Connect { mode: ErrorHandling::Peer, status: Status::UNREACHABLE }),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(text.contains("ErrorHandling::None") && text.contains("shared-memory"), "{text}");

    let (ab, ba) = connected("sm,self", &a, &b);
    drop(ba);
    drop(b);
    let mut tokens = Vec::new();
    let mut events = [Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        if tokens.len() < 500 {
            tokens.push(ab.send(AM, b"into the void", vec![vec![0u8; 64]]));
        }
        pump_for(&[&a], &mut events, Duration::from_millis(1));
    }
    let (finished, failed) = sent(&events[0]);
    let in_flight = tokens.iter().filter(|token| !token.is_finished()).count();
    eprintln!("sm, peer gone: {finished} sends finished ({failed} failed), {in_flight} in flight after 1 s");
    assert!(ab.failure().is_none());
    assert!(!events[0].iter().any(|event| matches!(event, Event::EndpointFailed { .. })));
    assert_eq!(failed, 0);
    assert!(in_flight > 0 && finished + in_flight == tokens.len(), "{finished} finished, {in_flight} in flight");
    // Nothing ends them: UCX refuses a forced close without peer-failure handling, and a flush
    // waits for them. The close goes on in the worker, whose drop (after the tokens', which hand
    // their memory to it) ends everything.
    let (ba, _) = connected_again(&context, &a);
    let forced = ba.close(CloseMode::Force, BOUND).expect_err("a forced close without peer-failure handling");
    assert!(matches!(forced, Error::Call { status: Status::INVALID_PARAM, .. }), "{forced:?}");
    let flushed = ab.close(CloseMode::Flush, Duration::from_millis(300)).expect_err("a flush to a worker gone");
    assert!(matches!(flushed, Error::TimedOut { .. }), "{flushed:?}");
    assert!(tokens.iter().skip(finished).all(|token| !token.is_finished()));
    drop(tokens);
    drop(a);
}

/// A new worker connected to `a` (both ways), for a test whose first peer is gone.
fn connected_again(context: &Context, a: &Worker) -> (Endpoint, Worker) {
    let c = Worker::new(context).expect("worker c");
    c.set_am_handler(AM, |_, length| vec![0; length]).expect("a handler");
    let (ca, _ac) = connected("sm,self", &c, a);
    (ca, c)
}

/// The event file descriptor, registered with mio, wakes the poller when a message arrives.
fn the_event_fd_wakes_a_mio_poller(transports: &str) {
    let Some(context) = context(transports) else { return };
    let (a, b) = two_workers(&context);
    let (ab, _ba) = connected(transports, &a, &b);
    let mut poll = Poll::new().expect("a poller");
    poll.registry().register(&mut SourceFd(&b.event_fd()), Token(1), Interest::READABLE).expect("registered");
    let mut mio_events = Events::with_capacity(4);
    // b idle and armed: no wake-up.
    let deadline = Instant::now() + BOUND;
    let mut busy = 0;
    loop {
        while b.progress() > 0 {}
        if b.arm().expect("arm") {
            break;
        }
        busy += 1;
        assert!(Instant::now() < deadline, "b would not arm: busy {busy} times");
    }
    eprintln!("{transports}: an idle worker armed after {busy} busy answers");
    assert!(b.take_events().is_empty());
    poll.poll(&mut mio_events, Some(Duration::from_millis(100))).expect("poll");
    assert!(mio_events.is_empty(), "woken with nothing to do");
    // A message to b wakes it.
    let _token = ab.send(AM, b"wake up", vec![vec![5u8; 10]]);
    let deadline = Instant::now() + BOUND;
    while mio_events.is_empty() {
        assert!(Instant::now() < deadline, "b's event fd did not wake the poller");
        a.progress();
        poll.poll(&mut mio_events, Some(Duration::from_millis(10))).expect("poll");
    }
    let mut events = [Vec::new()];
    pump(&[&b], &mut events, BOUND, "the message after the wake-up", |events| !received(&events[0]).is_empty());
    assert_eq!(received(&events[0])[0].header, b"wake up");
}

#[test]
fn tcp_the_event_fd_wakes_a_mio_poller() {
    the_event_fd_wakes_a_mio_poller("tcp");
}

#[test]
fn sm_the_event_fd_wakes_a_mio_poller() {
    the_event_fd_wakes_a_mio_poller("sm,self");
}

/// (e) UCX started with a transport that does not exist fails, naming the transports it finds.
#[test]
fn an_unknown_transport_fails_naming_the_transports_found() {
    let available = Context::available_transports().expect("the transports of this machine");
    eprintln!("UCX {} finds: {}", Context::ucx_version(), available.join(", "));
    let error = Context::new(Some("nosuch")).err().expect("UCX started with the transport \"nosuch\"");
    let Error::Init { asked, from, status, available: named, .. } = &error else { panic!("{error:?}") };
    assert_eq!((asked.as_str(), *from, *status), ("nosuch", "as configured", Status::NO_DEVICE));
    assert_eq!(*named, available);
    let text = error.to_string();
    eprintln!("{text}");
    assert!(text.contains("\"nosuch\"") && text.contains("No such device"), "{text}");
    if !require::require(&format!("a transport UCX finds here (it found {available:?})"), !available.is_empty()) {
        return;
    }
    for found in &available {
        assert!(text.contains(found.as_str()), "{text} does not name {found}");
    }
    assert!(available.iter().any(|name| name.starts_with("self/")), "{available:?}");
}

/// A value UCX cannot parse is refused, naming the setting. A name UCX 1.13 does not know is
/// not: `ucp_config_modify` keeps any unknown name for the transports' own settings.
#[test]
fn a_bad_setting_is_refused_by_name_and_an_unknown_name_is_not() {
    let error = Context::with_config(None, &[("RNDV_THRESH", "lots")]).err().expect("RNDV_THRESH=lots");
    assert!(matches!(&error, Error::Config { name, .. } if name == "RNDV_THRESH"), "{error:?}");
    assert!(error.to_string().contains("RNDV_THRESH=\"lots\""), "{error}");
    assert!(Context::with_config(None, &[("NO_SUCH_SETTING", "1")]).is_ok());
}

/// Single-pair active-message throughput at 1 MiB messages, each worker on a thread of its own
/// (`cargo test -p tessera-ucx --features ucx --release -- --ignored --nocapture throughput`).
/// Printed, not asserted.
#[test]
#[ignore = "a measurement: run it on its own, with --release"]
fn throughput_of_1_mib_messages() {
    for transports in ["tcp", "sm,self"] {
        const SIZE: usize = 1 << 20;
        const WINDOW: usize = 8;
        let seconds = 2.0;
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let receiver = std::thread::spawn(move || {
            let context = Context::new(Some(transports)).expect("context");
            let worker = Worker::new(&context).expect("worker");
            let buffers = Rc::new(std::cell::RefCell::new(Vec::<Vec<u8>>::new()));
            let pool = Rc::clone(&buffers);
            worker
                .set_am_handler(AM, move |_, length| pool.borrow_mut().pop().unwrap_or_else(|| vec![0; length]))
                .expect("handler");
            address_tx.send(worker.address().clone()).unwrap();
            let (mut bytes, mut messages) = (0usize, 0usize);
            let (mut first, mut last) = (None, Instant::now());
            while done_rx.try_recv().is_err() {
                worker.progress();
                while let Some(event) = worker.next_event() {
                    if let Event::Received(message) = event {
                        last = Instant::now();
                        if first.is_none() {
                            // Timed from the first message's arrival: it is not counted.
                            first = Some(last);
                            continue;
                        }
                        bytes += message.data.len();
                        messages += 1;
                        buffers.borrow_mut().push(message.data);
                    }
                }
            }
            (bytes, messages, first.map(|first| last - first).unwrap_or_default())
        });
        let context = Context::new(Some(transports)).expect("context");
        let worker = Worker::new(&context).expect("worker");
        let address = address_rx.recv().unwrap();
        let endpoint = worker.connect(&address, mode(transports)).expect("connect");
        let data: Rc<[u8]> = pattern(SIZE, 3).into();
        let mut in_flight = std::collections::VecDeque::new();
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < end {
            while in_flight.len() < WINDOW {
                in_flight.push_back(endpoint.send(AM, b"", vec![Rc::clone(&data)]));
            }
            worker.progress();
            while worker.next_event().is_some() {}
            while in_flight.front().is_some_and(SendToken::is_finished) {
                in_flight.pop_front();
            }
        }
        while !in_flight.iter().all(SendToken::is_finished) {
            worker.progress();
        }
        std::thread::sleep(Duration::from_millis(200));
        done_tx.send(()).unwrap();
        let (bytes, messages, elapsed) = receiver.join().unwrap();
        println!(
            "{transports}: {messages} messages of 1 MiB in {elapsed:.2?}: {:.2} GB/s ({:.0} messages/s), \
             window {WINDOW}",
            bytes as f64 / elapsed.as_secs_f64() / 1e9,
            messages as f64 / elapsed.as_secs_f64()
        );
        drop(endpoint);
    }
}
