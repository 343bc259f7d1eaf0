//! The engine over loopback: topologies moved end to end, bounds refused, strangers counted.

use super::{Assignment, Engine, Figures, Mode, ServerPart, Transport};
use crate::config::Policy;
use crate::wire::{HEADER_BYTES, Header};
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

fn assignment(mode: Mode, clients: u32, servers: u32) -> Assignment {
    Assignment {
        session: 7,
        mode,
        clients,
        servers,
        message_bytes: 3000,
        buffer_bytes: 256 << 10,
        burst: 4,
        threads: 2,
        affinity: Vec::new(),
        policy: Policy::BestEffort,
        fair_window: 2,
        checksum: true,
        client: None,
        server: None,
        transport: Transport::Tcp,
        ucx_transports: None,
    }
}

/// Runs a topology of `instances` for a moment, over TCP or UCX as they say; the figures of
/// each.
fn run(instances: Vec<Assignment>) -> Vec<Figures> {
    let mut engines: Vec<Engine> = instances.into_iter().map(|a| Engine::configure(a).unwrap()).collect();
    let servers: Vec<SocketAddr> = engines.iter().filter_map(Engine::data_address).collect();
    let ucx_servers: Vec<Vec<Vec<u8>>> = engines
        .iter()
        .filter(|e| e.assignment().server.is_some())
        .map(Engine::ucx_addresses)
        .filter(|a| !a.is_empty())
        .collect();
    std::thread::scope(|scope| {
        for e in &mut engines {
            let (servers, ucx_servers) = (servers.clone(), ucx_servers.clone());
            scope.spawn(move || e.connect_over(&servers, &ucx_servers, Duration::from_secs(10)).unwrap());
        }
    });
    engines.iter().for_each(Engine::start);
    std::thread::sleep(Duration::from_millis(300));
    for e in &engines {
        e.stop(Duration::from_secs(10)).unwrap();
    }
    for e in &engines {
        assert_eq!(e.error(), None);
    }
    engines.iter().map(|e| e.counters().figures()).collect()
}

fn server(index: u32) -> Option<ServerPart> {
    Some(ServerPart { index, listen: "127.0.0.1:0".into(), client_hosts: vec!["127.0.0.1".into()] })
}

#[test]
fn a_2x2_moves_messages_and_every_one_sent_is_received_once_and_sound() {
    for (policy, mode) in
        [(Policy::BestEffort, Mode::Pipestream), (Policy::Fair, Mode::Pipestream), (Policy::BestEffort, Mode::RawTcp)]
    {
        let mut instances = Vec::new();
        for i in 0..2 {
            instances.push(Assignment { client: Some(i), policy, ..assignment(mode, 2, 2) });
        }
        for j in 0..2 {
            instances.push(Assignment { server: server(j), policy, ..assignment(mode, 2, 2) });
        }
        let f = run(instances);
        let sent: u64 = f.iter().map(|f| f.messages_sent).sum();
        let completed: u64 = f.iter().map(|f| f.messages_completed).sum();
        let received: u64 = f.iter().map(|f| f.messages_received).sum();
        let bytes: u64 = f.iter().map(|f| f.bytes_received).sum();
        assert!(sent > 100, "{policy:?} {mode:?}: {f:?}");
        assert_eq!((sent, completed), (received, received), "{policy:?} {mode:?}: {f:?}");
        assert_eq!(bytes, received * 3000);
        assert_eq!(f.iter().map(Figures::errors).sum::<u64>(), 0);
    }
}

#[test]
fn a_folded_2x2_runs_in_two_instances() {
    let instances = (0..2)
        .map(|i| Assignment { client: Some(i), server: server(i), ..assignment(Mode::Pipestream, 2, 2) })
        .collect();
    let f = run(instances);
    assert!(f.iter().all(|f| f.messages_received > 10 && f.messages_sent > 10), "{f:?}");
    assert_eq!(f.iter().map(|f| f.messages_sent).sum::<u64>(), f.iter().map(|f| f.messages_received).sum::<u64>());
}

#[cfg(feature = "ucx")]
#[test]
fn a_2x2_over_ucx_tcp_and_shared_memory_moves_every_message_once_and_sound() {
    for transports in ["tcp", "sm,self"] {
        for folded in [false, true] {
            let ucx =
                |a: Assignment| Assignment { transport: Transport::Ucx, ucx_transports: Some(transports.into()), ..a };
            let instances: Vec<Assignment> = if folded {
                (0..2)
                    .map(|i| {
                        ucx(Assignment { client: Some(i), server: server(i), ..assignment(Mode::Pipestream, 2, 2) })
                    })
                    .collect()
            } else {
                (0..2)
                    .map(|i| ucx(Assignment { client: Some(i), ..assignment(Mode::Pipestream, 2, 2) }))
                    .chain((0..2).map(|j| ucx(Assignment { server: server(j), ..assignment(Mode::Pipestream, 2, 2) })))
                    .collect()
            };
            let f = run(instances);
            let sent: u64 = f.iter().map(|f| f.messages_sent).sum();
            let received: u64 = f.iter().map(|f| f.messages_received).sum();
            assert!(sent > 100, "{transports} folded {folded}: {f:?}");
            assert_eq!(sent, received, "{transports} folded {folded}: {f:?}");
            assert_eq!(f.iter().map(|f| f.messages_completed).sum::<u64>(), received);
            assert_eq!(f.iter().map(|f| f.bytes_received).sum::<u64>(), received * 3000);
            assert_eq!(f.iter().map(Figures::errors).sum::<u64>(), 0, "{transports}: {f:?}");
        }
    }
}

#[test]
fn an_assignment_out_of_bounds_is_refused_naming_the_key() {
    for (a, key) in [
        (Assignment { threads: 0, ..assignment(Mode::Pipestream, 1, 1) }, "threads 0"),
        (Assignment { burst: 1 << 20, ..assignment(Mode::Pipestream, 1, 1) }, "burst 1048576"),
        (Assignment { client: Some(1), ..assignment(Mode::Pipestream, 1, 1) }, "beyond the topology"),
    ] {
        let e = Engine::configure(a).err().unwrap().to_string();
        assert!(e.contains(key), "{e}");
    }
}

#[test]
fn a_caller_with_a_wrong_session_is_refused_and_counted_and_the_server_waits_on() {
    let mut server = Engine::configure(Assignment { server: server(0), ..assignment(Mode::Pipestream, 1, 1) }).unwrap();
    let addr = server.data_address().unwrap();
    let counters = server.counters();
    let waiting = std::thread::spawn(move || server.connect(&[], Duration::from_millis(800)).map(|()| server));
    let mut stranger = std::net::TcpStream::connect(addr).unwrap();
    stranger.write_all(&Header::hello(0, 8).encode()).unwrap();
    let mut garbage = std::net::TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0x55; HEADER_BYTES]).unwrap();
    let e = waiting.join().unwrap().err().unwrap();
    assert!(e.to_string().contains("clients [0] did not connect in time"), "{e}");
    assert_eq!(counters.figures().refused, 2);
}
