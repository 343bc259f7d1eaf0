//! Connections that pretend to be units of the run (docs/formats.md §13), sent to the 2×2
//! system on loopback while it builds: the opening of link version 1, which proved nothing; a
//! version-2 opening signed with another key; a genuine signature made for another connection's
//! challenge. Each is refused, counted and said once with its address, and no unit's state or
//! core sees it: the unit it names goes on, and every event is built.

mod common;

use common::{RUN, Setup, plan, violations};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_control::system::{RunningSystem, SystemPlan};
use tessera_evb::types::Peer;
use tessera_runtime::link::{CHALLENGE_BYTES, LinkKey, answer_challenge, encode_link};
use tessera_runtime::state::UnitState;
use tessera_runtime::stats::UnitStats;

const WAIT: Duration = Duration::from_secs(30);

/// The 16 bytes of a link version 1 opening naming `peer` in the run: what the spoof
/// sent.
fn version_1_opening(peer: Peer) -> Vec<u8> {
    let mut bytes = encode_link(peer, RUN);
    bytes[4..6].copy_from_slice(&1u16.to_le_bytes());
    bytes.to_vec()
}

/// Connects to `to`, sends `bytes` at once and closes; the caller's address.
fn send_and_close(to: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(to).unwrap();
    s.write_all(bytes).unwrap();
    s.local_addr().unwrap().to_string()
}

/// Connects to `to`, reads its challenge, sends `answer(challenge)` and closes; the caller's
/// address.
fn answer_and_close(to: SocketAddr, answer: impl FnOnce([u8; CHALLENGE_BYTES]) -> Vec<u8>) -> String {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut challenge = [0u8; CHALLENGE_BYTES];
    s.read_exact(&mut challenge).unwrap();
    s.write_all(&answer(challenge)).unwrap();
    s.local_addr().unwrap().to_string()
}

/// Waits until `until` holds, for at most [`WAIT`].
fn wait_for(what: &str, until: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !until() {
        assert!(Instant::now() < deadline, "waited {WAIT:?} for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The ports a spoof may call.
struct Ports {
    evm: SocketAddr,
    bu_data: Vec<SocketAddr>,
}

/// What a spoof did: the addresses it called from, and the connections it keeps open.
type Spoofs = (Vec<String>, Vec<TcpStream>);

/// Runs the 2×2 system (after `configure`) without an event limit; once BU 0 has built events,
/// `attack` calls the system's ports (with the run's link key at hand, as a recording of a
/// genuine unit would be); once `refusing` has counted every caller, the run is stopped. Checks
/// that the run ends clean with every event built, that each caller was said once, as refused,
/// and that no unit failed; returns the refusing unit's refusals, the other units', and the
/// connections the attack kept.
fn spoofed_run(
    refusing: fn(&RunningSystem) -> &Arc<UnitStats>,
    configure: fn(&mut SystemPlan),
    attack: impl FnOnce(Ports, &LinkKey) -> Spoofs,
) -> (u64, u64, Vec<TcpStream>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut plan = plan(tmp.path(), &Setup::new(1, 1));
    for e in &mut plan.emulators {
        e.limits.events = None;
    }
    for r in &mut plan.rus {
        r.event_limit = None;
    }
    configure(&mut plan);
    let key = plan.rus[0].link_key.clone();
    let ports = Ports {
        evm: plan.rus[0].control_listener.local_addr().unwrap(),
        bu_data: plan.bus.iter().map(|b| b.data_listener.local_addr().unwrap()).collect(),
    };
    let system = RunningSystem::start(plan).unwrap();
    let all: Vec<Arc<UnitStats>> = system.ru_stats.iter().chain(&system.bu_stats).cloned().collect();
    let bu0 = system.bu_stats[0].clone();
    wait_for("BU 0 to build events", || bu0.events_built.get() > 0);
    let (callers, kept) = attack(ports, &key);
    let refused = refusing(&system).clone();
    wait_for("the spoofs to be refused", || refused.links_refused.get() >= callers.len() as u64);
    let last = system.stop();
    let outcome = system.wait(WAIT);
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.built_incomplete, c.holds), (last, last, 0, true), "{c:?}");
    assert!(c.per_bu.iter().all(|&n| n > 0), "both BUs built events: {c:?}");
    assert!(violations(tmp.path()).is_empty());
    assert!(all.iter().all(|s| !s.failed() && s.state() == UnitState::Halted));
    for caller in &callers {
        let said: Vec<&String> = outcome.problems.iter().filter(|p| p.contains(caller.as_str())).collect();
        assert!(said.len() == 1 && said[0].contains("refused a connection"), "{caller}: {:#?}", outcome.problems);
    }
    let others = all.iter().map(|s| s.links_refused.get()).sum::<u64>() - refused.links_refused.get();
    (refused.links_refused.get(), others, kept)
}

#[test]
fn openings_naming_bu_0_on_the_evm_port_are_refused_and_bu_0_builds_to_the_end() {
    let (refused, others, _) = spoofed_run(
        |s| &s.ru_stats[0],
        |_| {},
        |ports, key| {
            let evm = ports.evm;
            let callers = vec![
                // The spoof: BU 0's version-1 opening, then a close.
                send_and_close(evm, &version_1_opening(Peer::Bu(0))),
                // A version-2 opening of BU 0, answering the challenge with another key.
                answer_and_close(evm, |c| {
                    answer_challenge(&LinkKey::generate().unwrap(), Peer::Bu(0), RUN, Peer::Evm, &c).to_vec()
                }),
                // BU 0's genuine answer to another connection's challenge, replayed.
                answer_and_close(evm, |mut c| {
                    c[0] ^= 1;
                    answer_challenge(key, Peer::Bu(0), RUN, Peer::Evm, &c).to_vec()
                }),
                // The opening alone, no tag.
                answer_and_close(evm, |_| encode_link(Peer::Bu(0), RUN).to_vec()),
            ];
            (callers, Vec::new())
        },
    );
    assert_eq!((refused, others), (4, 0));
}

#[test]
fn openings_naming_ru_1_on_a_bu_data_port_are_refused_and_the_run_goes_on() {
    let (refused, others, _) = spoofed_run(
        |s| &s.bu_stats[0],
        |_| {},
        |ports, key| {
            let bu0 = ports.bu_data[0];
            let callers = vec![
                send_and_close(bu0, &version_1_opening(Peer::Ru(1))),
                answer_and_close(bu0, |c| {
                    answer_challenge(&LinkKey::generate().unwrap(), Peer::Ru(1), RUN, Peer::Bu(0), &c).to_vec()
                }),
                // RU 1's genuine answer, made for BU 1: the label names the unit called.
                answer_and_close(bu0, |c| answer_challenge(key, Peer::Ru(1), RUN, Peer::Bu(1), &c).to_vec()),
            ];
            (callers, Vec::new())
        },
    );
    assert_eq!((refused, others), (3, 0));
}

#[test]
fn a_caller_that_never_sends_its_opening_is_closed_after_the_connect_time_out_and_counted() {
    let (refused, others, kept) = spoofed_run(
        |s| &s.bu_stats[1],
        |plan| plan.bus[1].connect_timeout = Duration::from_secs(1),
        |ports, _| {
            let silent = TcpStream::connect(ports.bu_data[1]).unwrap();
            (vec![silent.local_addr().unwrap().to_string()], vec![silent])
        },
    );
    assert_eq!((refused, others), (1, 0));
    // BU 1 sent its challenge, then closed the connection.
    let mut got = Vec::new();
    let mut silent = &kept[0];
    silent.set_read_timeout(Some(WAIT)).unwrap();
    silent.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), CHALLENGE_BYTES);
}
