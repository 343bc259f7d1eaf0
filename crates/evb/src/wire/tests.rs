//! Round trips, refusals and fuzzing of the wire format.

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
            f.buffer = BufferRef { offset: i as u32, ..BufferRef::default() };
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
    FragmentRef {
        fed,
        lv1: 0xAB_CDEF,
        bytes,
        corrupt: fed % 2 == 1,
        buffer: BufferRef { offset: 1000 + u32::from(fed), ..BufferRef::default() },
        trigger,
    }
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
        (Message::Exclude { bu: 3, from_event: 1 << 40 }, vec![]),
        (Message::Progress { through: (1 << 40) + 7 }, vec![]),
        (Message::StreamsConnected { ru: 513 }, vec![]),
        (Message::Start, vec![]),
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
    assert_eq!(MessageType::from_code(15), None);
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

/// `decode_with` decodes as `decode` does, each super-fragment's fragments into a list it was
/// given: the memory of the list kept is the first super-fragment's.
#[test]
fn a_data_frame_is_decoded_into_the_fragment_lists_given() {
    let (msg, fragments) = examples().into_iter().find(|(m, _)| !m.is_control()).unwrap();
    let mut wire = Vec::new();
    encode_any(&msg, &fragments, &mut wire);
    let frame = Frame::parse(&wire, DEFAULT_MAX_BODY_BYTES).unwrap().unwrap();
    let list = Vec::with_capacity(8);
    let at = list.as_ptr();
    let mut lists = Spare::new(1);
    lists.keep(list);
    let decoded = frame.decode_with(&mut lists).unwrap();
    assert_eq!(decoded, frame.decode().unwrap());
    let Message::Data { parts, .. } = &decoded.message else { unreachable!() };
    assert!(std::ptr::eq(parts[0].fragments.as_ptr(), at));
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
    for code in [0, 15, 0xFFFF] {
        assert_eq!(
            error_of(&frame(code, &[0])),
            bad("frame header", "message type", 6, text("1..=14"), Value::Dec(code.into()))
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
    assert!(matches!(Frame::parse(&header, 1000), Err(WireError::BadField { field: "body length", offset: 8, .. })));
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
    assert_eq!(error_of(&frame(drain, &[0, 0xAA])), WireError::TrailingBytes { what: "Drain", offset: 17, extra: 1 });
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
    assert_eq!(error_of(&stream), bad("Drain", "last_event", before + 16, text("0 (none) or 1 (some)"), Value::Dec(3)));
}

#[test]
fn errors_read_well() {
    let e = error_of(&frame(MessageType::Drain.code(), &[2]));
    assert_eq!(e.to_string(), "Drain: bad last_event at byte 16: expected 0 (none) or 1 (some), found 2");
}

// ---- Properties ----------------------------------------------------------------------------

fn file_id() -> impl Strategy<Value = FileId> {
    (any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(bu, lumi_section, index)| FileId { bu, lumi_section, index })
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
        (any::<u16>(), any::<u64>()).prop_map(|(bu, from_event)| Message::Exclude { bu, from_event }),
        any::<u64>().prop_map(|through| Message::Progress { through }),
        any::<u16>().prop_map(|ru| Message::StreamsConnected { ru }),
        Just(Message::Start),
    ]
}

fn fragment_with_bytes() -> impl Strategy<Value = (FragmentRef, Vec<u8>)> {
    let trigger = (any::<u32>(), any::<u64>(), any::<u16>()).prop_map(|(lumi_section, orbit, bx)| TriggerInfo {
        lumi_section,
        orbit,
        bx,
    });
    (any::<u16>(), any::<u32>(), any::<bool>(), any::<u32>(), proptest::option::of(trigger), vec(any::<u8>(), 0..40))
        .prop_map(|(fed, lv1, corrupt, offset, trigger, bytes)| {
            let buffer = BufferRef { offset, ..BufferRef::default() };
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
