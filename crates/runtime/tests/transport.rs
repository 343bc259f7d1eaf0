//! Protocol messages over real loopback TCP: what one end writes, the other's reader thread hands
//! over decoded, fragment bytes and all; an ended or garbled connection says so.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::sync_channel;
use tessera_evb::msg::{FragmentRef, Message, SuperFragment};
use tessera_evb::types::{EventRange, FileId};
use tessera_runtime::transport::{Incoming, spawn_reader, write_data, write_message};

fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

fn fragment(fed: u16, bytes: u32, buffer: u64) -> FragmentRef {
    FragmentRef { fed, lv1: 9, bytes, corrupt: false, buffer, trigger: None }
}

#[test]
fn messages_and_data_cross_a_tcp_connection() {
    let (mut client, server) = pair();
    let (tx, rx) = sync_channel(4);
    let reader = spawn_reader(server, "ru 1", tx, 1 << 20);
    let request = Message::Request {
        bu: 1,
        epoch: 2,
        credits: 128,
        built: vec![],
        published: vec![FileId { bu: 1, lumi_section: 3, index: 4 }],
        lumis_done: vec![2],
    };
    let bytes: Vec<Vec<u8>> = vec![vec![1; 24], vec![2; 4096], vec![3; 80_000]];
    let parts = vec![
        SuperFragment { event: 9, fragments: vec![fragment(5, 24, 100), fragment(6, 4096, 101)], missing: vec![7] },
        SuperFragment { event: 10, fragments: vec![fragment(5, 80_000, 102)], missing: vec![] },
    ];
    let mut scratch = Vec::new();
    write_message(&mut client, &request, &mut scratch).unwrap();
    let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    write_data(&mut client, 1, 2, &parts, &[], &slices, &mut scratch).unwrap();
    write_message(&mut client, &Message::Release { events: vec![EventRange { first: 9, count: 2 }] }, &mut scratch)
        .unwrap();
    drop(client);

    let (tag, first) = rx.recv().unwrap();
    assert_eq!(tag, "ru 1");
    let Incoming::Frame { decoded, .. } = first else { panic!("{first:?}") };
    assert_eq!(decoded.message, request);
    let (_, second) = rx.recv().unwrap();
    let Incoming::Frame { decoded, body } = second else { panic!("{second:?}") };
    let Message::Data { parts: got, .. } = &decoded.message else { panic!("{:?}", decoded.message) };
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].missing, vec![7]);
    for (i, range) in decoded.fragments.iter().enumerate() {
        assert_eq!(body[range.clone()], bytes[i][..], "fragment {i}");
    }
    let (_, third) = rx.recv().unwrap();
    assert!(matches!(third, Incoming::Frame { decoded, .. } if matches!(decoded.message, Message::Release { .. })));
    let (_, end) = rx.recv().unwrap();
    assert!(matches!(end, Incoming::Closed(None)), "{end:?}");
    reader.join().unwrap();
}

#[test]
fn garbage_ends_the_connection_with_a_reason() {
    let (mut client, server) = pair();
    let (tx, rx) = sync_channel(4);
    let reader = spawn_reader(server, 0u8, tx, 1 << 20);
    client.write_all(b"GARBAGE GARBAGE GARBAGE").unwrap();
    let (_, end) = rx.recv().unwrap();
    let Incoming::Closed(Some(reason)) = end else { panic!("{end:?}") };
    assert!(reason.contains("magic") && reason.contains("byte 0"), "{reason}");
    reader.join().unwrap();
}

#[test]
fn a_frame_cut_short_is_reported() {
    let (mut client, server) = pair();
    let (tx, rx) = sync_channel(4);
    let reader = spawn_reader(server, 0u8, tx, 1 << 20);
    let mut frame = Vec::new();
    tessera_evb::wire::encode(&Message::Drain { last_event: Some(5) }, &mut frame).unwrap();
    client.write_all(&frame[..frame.len() - 3]).unwrap();
    drop(client);
    let (_, end) = rx.recv().unwrap();
    assert!(matches!(&end, Incoming::Closed(Some(r)) if r.contains("inside a frame")), "{end:?}");
    reader.join().unwrap();
}
