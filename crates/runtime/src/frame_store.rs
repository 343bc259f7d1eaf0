//! The data a BU has received: each data frame kept whole, in the memory its connection read it
//! into ([`ReceivedFrame`]), until every fragment it carries has been written into a file.
//! Fragments are named by (frame, index), so the core's super-fragments point straight into the
//! frames and writing them needs no copy.

use crate::bu_files::FragmentBytes;
use crate::conn::ReceivedFrame;
pub use crate::error::StoreFull;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use tessera_evb::msg::{BufferRef, FragmentRef, Message};
use tessera_evb::unit::BuiltEvent;
use tessera_evb::wire::Decoded;

/// A frame's bytes as received and where its fragments are in them; shared with the writer
/// threads that write the fragments into files.
struct FrameBytes {
    frame: ReceivedFrame,
    /// Where each fragment is in the frame's body.
    ranges: Vec<Range<usize>>,
}

impl FrameBytes {
    fn fragment(&self, buffer: BufferRef) -> Option<&[u8]> {
        let range = self.ranges.get(buffer.offset as usize)?;
        self.frame.body().get(range.clone())
    }
}

struct StoredFrame {
    bytes: Arc<FrameBytes>,
    /// Fragments not yet written.
    live: usize,
}

/// Received data frames, by frame number.
pub struct FrameStore {
    frames: HashMap<u32, StoredFrame>,
    next: u32,
    held: usize,
    budget: usize,
}

impl FrameStore {
    /// A store that holds at most `budget` bytes of frames.
    pub fn new(budget: usize) -> Self {
        FrameStore { frames: HashMap::new(), next: 0, held: 0, budget }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether a frame of `bytes` would fit beside what is held.
    pub fn has_room_for(&self, bytes: usize) -> bool {
        self.held.saturating_add(bytes) <= self.budget
    }

    /// Frames held now.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// Keeps a decoded data frame (`received` as its connection read it) and returns its message with every
    /// fragment's `buffer` naming its bytes in the store. Other messages pass through, their
    /// frame dropped.
    pub fn insert(&mut self, decoded: Decoded, received: ReceivedFrame) -> Result<Message, StoreFull> {
        let Decoded { mut message, fragments } = decoded;
        let Message::Data { parts, .. } = &mut message else { return Ok(message) };
        let bytes = received.bytes().len();
        if !self.has_room_for(bytes) {
            return Err(StoreFull { held: self.held, frame: bytes, budget: self.budget });
        }
        let frame = self.next;
        self.next = self.next.wrapping_add(1);
        for fragment in parts.iter_mut().flat_map(|p| p.fragments.iter_mut()) {
            // The decoder numbered the fragments 0, 1, 2... within the frame.
            fragment.buffer = BufferRef { area: frame, ..fragment.buffer };
        }
        self.held += bytes;
        let live = fragments.len();
        let stored = FrameBytes { frame: received, ranges: fragments };
        self.frames.insert(frame, StoredFrame { live, bytes: Arc::new(stored) });
        if self.frames[&frame].live == 0 {
            self.free(frame);
        }
        Ok(message)
    }

    /// Marks fragments as written; a frame whose fragments are all written is freed.
    pub fn written<'a>(&mut self, fragments: impl IntoIterator<Item = &'a FragmentRef>) {
        for f in fragments {
            let frame = f.buffer.area;
            let Some(stored) = self.frames.get_mut(&frame) else { continue };
            stored.live = stored.live.saturating_sub(1);
            if stored.live == 0 {
                self.free(frame);
            }
        }
    }

    fn free(&mut self, frame: u32) {
        if let Some(stored) = self.frames.remove(&frame) {
            self.held -= stored.bytes.frame.bytes().len();
        }
    }

    /// The frames that hold the fragments of `events`, shared, for a writer thread: they stay
    /// alive until it drops them, even once the store has freed them.
    pub fn share(&self, events: &[BuiltEvent]) -> SharedFrames {
        let mut frames = HashMap::new();
        for f in events.iter().flat_map(|e| &e.parts).flat_map(|p| &p.fragments) {
            let frame = f.buffer.area;
            if let Some(stored) = self.frames.get(&frame) {
                frames.entry(frame).or_insert_with(|| stored.bytes.clone());
            }
        }
        SharedFrames(frames)
    }
}

impl FragmentBytes for FrameStore {
    fn bytes(&self, fragment: &FragmentRef) -> Option<&[u8]> {
        self.frames.get(&fragment.buffer.area)?.bytes.fragment(fragment.buffer)
    }
}

/// Frames of the store shared with a writer thread (see [`FrameStore::share`]).
pub struct SharedFrames(HashMap<u32, Arc<FrameBytes>>);

impl FragmentBytes for SharedFrames {
    fn bytes(&self, fragment: &FragmentRef) -> Option<&[u8]> {
        self.0.get(&fragment.buffer.area)?.fragment(fragment.buffer)
    }
}
