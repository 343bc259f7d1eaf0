//! Protocol messages over a TCP connection, in the frames of `tessera_evb::wire`: a reader thread
//! per connection hands whole decoded frames to its unit through a bounded channel (a full
//! channel stops the reading, and TCP carries the back-pressure to the sender), and writers send
//! each message as one frame, a data message with one vectored write straight from where its
//! fragments are.

use std::io::{self, IoSlice, Read, Write};
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;
use tessera_evb::msg::{Message, SuperFragment};
use tessera_evb::types::{Epoch, FileId, RuId};
use tessera_evb::wire::{Decoded, FrameDecoder, WireError, encode, encode_data_header};

/// What a reader thread hands to its unit.
#[derive(Debug)]
pub enum Incoming {
    /// A frame: the decoded message and, for a data message, the body its fragment ranges point
    /// into.
    Frame {
        /// The decoded message and fragment ranges.
        decoded: Decoded,
        /// The frame's body as received (empty for other messages).
        body: Vec<u8>,
    },
    /// The connection ended: closed by the peer (`None`), or broken by an I/O or framing error,
    /// which names the byte offset in the stream.
    Closed(Option<String>),
}

/// Reads frames from `stream` until it ends, sending each to `to` tagged with `tag`; the last
/// item sent is always [`Incoming::Closed`]. Frames are refused past `max_body_bytes`.
pub fn spawn_reader<S, T>(mut stream: S, tag: T, to: SyncSender<(T, Incoming)>, max_body_bytes: u32) -> JoinHandle<()>
where
    S: Read + Send + 'static,
    T: Clone + Send + 'static,
{
    std::thread::spawn(move || {
        let mut decoder = FrameDecoder::with_max_body_bytes(max_body_bytes);
        let mut chunk = vec![0u8; 256 * 1024];
        let end = loop {
            let n = match stream.read(&mut chunk) {
                Ok(0) => break (decoder.buffered() > 0).then(|| "connection closed inside a frame".to_string()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Some(e.to_string()),
            };
            match feed(&mut decoder, &chunk[..n], &tag, &to) {
                Ok(true) => {}
                Ok(false) => return, // the unit is gone
                Err(e) => break Some(e.to_string()),
            }
        };
        let _ = to.send((tag, Incoming::Closed(end)));
    })
}

/// Pushes `bytes` through the decoder, sending every complete frame. `Ok(false)` when the
/// receiving unit has gone away.
fn feed<T: Clone>(
    decoder: &mut FrameDecoder,
    mut bytes: &[u8],
    tag: &T,
    to: &SyncSender<(T, Incoming)>,
) -> Result<bool, WireError> {
    loop {
        let taken = decoder.push(bytes);
        bytes = &bytes[taken..];
        while let Some(frame) = decoder.next_frame()? {
            let decoded = frame.decode()?;
            let body = if decoded.fragments.is_empty() { Vec::new() } else { frame.body().to_vec() };
            if to.send((tag.clone(), Incoming::Frame { decoded, body })).is_err() {
                return Ok(false);
            }
        }
        if bytes.is_empty() {
            return Ok(true);
        }
    }
}

/// Sends a message that carries no fragments as one frame.
pub fn write_message(out: &mut impl Write, msg: &Message, scratch: &mut Vec<u8>) -> io::Result<()> {
    scratch.clear();
    encode(msg, scratch).map_err(io::Error::other)?;
    out.write_all(scratch)
}

/// Sends a data message as one frame: header and descriptors, then `fragments` (the bytes of every
/// fragment of `parts`, in order) by vectored writes, without copying them.
pub fn write_data(
    out: &mut impl Write,
    ru: RuId,
    epoch: Epoch,
    parts: &[SuperFragment],
    commits: &[FileId],
    fragments: &[&[u8]],
    scratch: &mut Vec<u8>,
) -> io::Result<()> {
    scratch.clear();
    encode_data_header(ru, epoch, parts, commits, fragments, scratch).map_err(io::Error::other)?;
    let mut slices: Vec<IoSlice<'_>> =
        std::iter::once(IoSlice::new(scratch)).chain(fragments.iter().map(|f| IoSlice::new(f))).collect();
    let mut slices = &mut slices[..];
    while !slices.is_empty() {
        match out.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
