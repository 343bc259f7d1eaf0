//! Messages between units. Each carries many events: requests, assignments and data are batched,
//! and commits and buffer releases ride on messages that are sent anyway.

use crate::types::{BuId, Epoch, EventNumber, EventRange, FedId, FileId, RuId};

/// Trigger information that the EVM's RU reads from the trigger fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerInfo {
    /// Lumi section of the event.
    pub lumi_section: u32,
    /// Orbit number.
    pub orbit: u64,
    /// Bunch crossing.
    pub bx: u16,
}

/// Where a fragment's bytes are, in the memory of the unit that holds them: each field as the
/// unit's driver placed it, so that nothing is packed into bits and nothing parsed again to find
/// them. The protocol only carries it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferRef {
    /// Which memory: at an RU, the index of the FED stream in its list; at a BU, the number of
    /// the received frame.
    pub area: u32,
    /// Which chunk of it: at an RU, the chunk of the stream's receive memory; 0 where memory is
    /// not chunked.
    pub chunk: u32,
    /// Where in it: at an RU, the byte offset of the fragment's first FEROL block in the chunk;
    /// at a BU, the fragment's index in the frame.
    pub offset: u32,
    /// The bytes it takes there: at an RU, its FEROL blocks, headers included.
    pub len: u32,
    /// Where its data starts in those bytes when they hold it in one piece: at an RU, the block
    /// header's length for a fragment that came in one block; 0 when the driver must read its
    /// framing to find the pieces.
    pub head: u32,
}

/// A fragment held by an RU, as the protocol sees it: its bytes stay in the RU's buffer, named by
/// `buffer`, until the event is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRef {
    /// FED id.
    pub fed: FedId,
    /// LV1 id as received (24 bits).
    pub lv1: u32,
    /// Size in bytes.
    pub bytes: u32,
    /// The fragment failed a check (CRC, length, source id) and is passed on as received.
    pub corrupt: bool,
    /// Where its bytes are, meaningful to the driver only.
    pub buffer: BufferRef,
    /// Trigger information, for the trigger fragment.
    pub trigger: Option<TriggerInfo>,
}

/// One RU's part of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperFragment {
    /// The event.
    pub event: EventNumber,
    /// The fragments the RU holds for it.
    pub fragments: Vec<FragmentRef>,
    /// FEDs of this RU that gave no fragment in time.
    pub missing: Vec<FedId>,
}

impl SuperFragment {
    /// Its fragments' bytes.
    pub fn bytes(&self) -> usize {
        self.fragments.iter().map(|f| f.bytes as usize).sum()
    }
}

/// `parts`, in order, cut into the batches that data messages carry: at most `max_parts`
/// super-fragments and `max_bytes` fragment bytes each (a super-fragment larger than that goes
/// alone).
pub fn data_batches(
    parts: Vec<SuperFragment>,
    max_parts: usize,
    max_bytes: usize,
) -> impl Iterator<Item = Vec<SuperFragment>> {
    let max_parts = max_parts.max(1);
    let fits = parts.len() <= max_parts && parts.iter().map(SuperFragment::bytes).sum::<usize>() <= max_bytes;
    // The common case, every part in one message: the list itself, not a copy of it.
    let (mut whole, rest) = if fits { (Some(parts).filter(|p| !p.is_empty()), Vec::new()) } else { (None, parts) };
    let mut parts = rest.into_iter().peekable();
    std::iter::from_fn(move || {
        if let Some(whole) = whole.take() {
            return Some(whole);
        }
        parts.peek()?;
        let (mut batch, mut bytes) = (Vec::with_capacity(max_parts.min(parts.len())), 0usize);
        while let Some(p) = parts.peek() {
            let b = p.bytes();
            if !batch.is_empty() && (batch.len() >= max_parts || bytes + b > max_bytes) {
                break;
            }
            bytes += b;
            batch.push(parts.next().expect("peeked"));
        }
        Some(batch)
    })
}

/// A file a BU has written and closed, reported to the EVM so that it can be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltFile {
    /// The file.
    pub file: FileId,
    /// The events in it.
    pub events: Vec<EventRange>,
}

/// A protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// BU → EVM, when the BU (re)starts: the complete files it holds unpublished.
    Hello {
        /// The BU.
        bu: BuId,
        /// Its new incarnation.
        epoch: Epoch,
        /// Files written and closed but not published before the restart.
        unpublished: Vec<FileId>,
    },
    /// EVM → BU, answering Hello: which of its unpublished files to publish (committed before the
    /// restart) and which to discard (their events were given to others).
    Welcome {
        /// The incarnation this answers.
        epoch: Epoch,
        /// Committed: publish them.
        publish: Vec<FileId>,
        /// Not committed: discard them.
        discard: Vec<FileId>,
    },
    /// BU → EVM: ask for `credits` more events, report built files and acknowledge published
    /// ones.
    Request {
        /// The BU.
        bu: BuId,
        /// Its incarnation.
        epoch: Epoch,
        /// Events it can take now.
        credits: u32,
        /// Files written and closed since the last request.
        built: Vec<BuiltFile>,
        /// Files published since the last request.
        published: Vec<FileId>,
        /// Lumi sections whose end-of-lumi record the BU has written since the last request.
        lumis_done: Vec<u32>,
    },
    /// EVM → RU: send these events to `bu`; release the buffers of `release` (committed).
    Assign {
        /// Destination BU.
        bu: BuId,
        /// Its incarnation.
        epoch: Epoch,
        /// Events to send it.
        events: Vec<EventRange>,
        /// Events committed since the last message: their buffers can be reused.
        release: Vec<EventRange>,
    },
    /// RU → BU: super-fragments, many events per message. From the EVM's node it also carries
    /// the commits for that BU.
    Data {
        /// The sending RU.
        ru: RuId,
        /// The BU incarnation the events were assigned to.
        epoch: Epoch,
        /// The super-fragments.
        parts: Vec<SuperFragment>,
        /// Files committed (EVM node only).
        commits: Vec<FileId>,
    },
    /// EVM → BU, when no data message is due: files committed.
    Commit {
        /// The BU incarnation.
        epoch: Epoch,
        /// Files committed.
        files: Vec<FileId>,
    },
    /// EVM → RU, when no assignment is due: buffers to release.
    Release {
        /// Events committed.
        events: Vec<EventRange>,
    },
    /// EVM → everyone: no more triggers; BUs close their files once their events are built.
    Drain {
        /// The last event that will be assigned, if any was triggered.
        last_event: Option<EventNumber>,
    },
    /// EVM → BU: a lumi section is over and every one of its events is committed; this BU was
    /// given `events` of them. The BU writes its end-of-lumi record once it has published them
    /// all, and acknowledges it on a request.
    EndOfLumi {
        /// The lumi section.
        lumi_section: u32,
        /// Events of it committed to this BU.
        events: u64,
    },
    /// EVM → BU: the run is over and every lumi section closed; the BU writes its end-of-run
    /// record once its end-of-lumi records are written.
    EndOfRun {
        /// The last lumi section of the run.
        last_lumi_section: u32,
        /// Lumi sections in the run.
        lumi_sections: u32,
    },
    /// Push: RU 0's node → every RU and BU: `bu` is lost, and no event from `from_event` on goes
    /// to it. Every RU applies it at that event, so all agree on each event's destination.
    Exclude {
        /// The BU excluded.
        bu: BuId,
        /// The first event it no longer receives.
        from_event: EventNumber,
    },
    /// Push, between RU 0's node and each other RU, both ways: every FED still sending of the
    /// sender has delivered every event before `through`. A FED stream more than the push
    /// window ahead of the slowest RU waits, so that the RUs stay within a window of event
    /// numbers of each other and the trigger holds for the slowest.
    Progress {
        /// The first event some FED of the sender has not delivered yet.
        through: EventNumber,
    },
    /// RU → RU 0's node (the EVM's under pull), once: every FED stream of `ru` is connected
    /// and has named its FED. The trigger is enabled only once every RU has said it (the run's
    /// start barrier).
    StreamsConnected {
        /// The RU whose streams are all there.
        ru: RuId,
    },
    /// Push: RU 0's node → every other RU, once: every stream of every RU is connected, so
    /// events may go to their BUs. Before it an RU keeps what its streams bring.
    Start,
}

impl Message {
    /// True for messages that carry no event data: requests, assignments, commits, releases and
    /// the rest. The protocol's cost is counted in these per event.
    pub fn is_control(&self) -> bool {
        !matches!(self, Message::Data { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn part(event: EventNumber, bytes: &[u32]) -> SuperFragment {
        let fragments = bytes
            .iter()
            .enumerate()
            .map(|(i, &bytes)| FragmentRef {
                fed: i as FedId,
                lv1: event as u32,
                bytes,
                corrupt: false,
                buffer: BufferRef { offset: event as u32, ..BufferRef::default() },
                trigger: None,
            })
            .collect();
        SuperFragment { event, fragments, missing: Vec::new() }
    }

    proptest! {
        /// Every super-fragment goes, once and in order; no message holds more than its bounds
        /// unless it holds one super-fragment alone.
        #[test]
        fn data_batches_keep_order_and_bounds(
            sizes in proptest::collection::vec(proptest::collection::vec(0u32..5000, 0..4), 0..60),
            max_parts in 0usize..8,
            max_bytes in 1usize..12_000,
        ) {
            let parts: Vec<SuperFragment> =
                sizes.iter().enumerate().map(|(e, b)| part(e as EventNumber, b)).collect();
            let mut seen = Vec::new();
            for batch in data_batches(parts.clone(), max_parts, max_bytes) {
                prop_assert!(!batch.is_empty());
                let bytes: usize = batch.iter().map(SuperFragment::bytes).sum();
                if batch.len() > 1 {
                    prop_assert!(batch.len() <= max_parts.max(1));
                    prop_assert!(bytes <= max_bytes, "{bytes} > {max_bytes}");
                }
                seen.extend(batch);
            }
            prop_assert_eq!(seen, parts);
        }
    }
}
