//! Event-building wire frames: `FrameDecoder` over arbitrary bytes, and `Frame::decode` over
//! arbitrary bodies behind a correct header. Whatever decodes must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_evb::msg::Message;
use tessera_evb::wire::{Decoded, FrameDecoder, HEADER_BYTES, MAGIC, VERSION, encode, encode_data_header};
use tessera_formats::crc::crc32c;

fuzz_target!(|data: &[u8]| {
    // The input as a stream, fed in pieces whose size its first byte chooses, to a decoder
    // bounded by its second.
    let chunk = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let max = u32::from(data.get(1).copied().unwrap_or(0)) * 64;
    decode_stream(data, chunk, max);

    // The input as a message type (two bytes) and a body, behind a correct header: random bytes
    // almost never pass the magic and CRC checks, so this is what reaches the field decoders.
    if data.len() >= 2 {
        let body = &data[2..];
        let mut frame = Vec::with_capacity(HEADER_BYTES + body.len());
        frame.extend_from_slice(&MAGIC);
        frame.extend_from_slice(&VERSION.to_le_bytes());
        frame.extend_from_slice(&data[..2]);
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32c(body).to_le_bytes());
        frame.extend_from_slice(body);
        decode_stream(&frame, 4096, u32::MAX);
    }
});

fn decode_stream(stream: &[u8], chunk: usize, max: u32) {
    let mut decoder = FrameDecoder::with_max_body_bytes(max);
    for piece in stream.chunks(chunk) {
        let mut rest = piece;
        while !rest.is_empty() {
            let taken = decoder.push(rest);
            rest = &rest[taken..];
            loop {
                match decoder.next_frame() {
                    Ok(Some(frame)) => {
                        let at = frame.offset() as usize;
                        let bytes = &stream[at..at + frame.frame_bytes()];
                        assert_eq!(&bytes[HEADER_BYTES..], frame.body());
                        match frame.decode() {
                            Ok(decoded) => assert_eq!(reencode(&decoded, frame.body()), bytes),
                            Err(e) => {
                                let _ = e.to_string();
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = e.to_string();
                        assert_eq!(decoder.push(b"more"), 0, "a failed stream takes no more bytes");
                        assert!(decoder.next_frame().is_err(), "a failed stream stays failed");
                        return;
                    }
                }
            }
        }
    }
}

fn reencode(decoded: &Decoded, body: &[u8]) -> Vec<u8> {
    let fragments: Vec<&[u8]> = decoded.fragments.iter().map(|r| &body[r.clone()]).collect();
    let mut out = Vec::new();
    match &decoded.message {
        Message::Data { ru, epoch, parts, commits } => {
            let buffers = parts.iter().flat_map(|p| &p.fragments).map(|f| u64::from(f.buffer.offset));
            assert!(buffers.eq(0..fragments.len() as u64), "buffer offsets are the fragments' indices");
            encode_data_header(*ru, *epoch, parts, commits, &fragments, &mut out)
                .expect("a decoded data message encodes");
            fragments.iter().for_each(|f| out.extend_from_slice(f));
        }
        msg => encode(msg, &mut out).expect("a decoded message encodes"),
    }
    out
}
