//! Message bodies: each field in declaration order, little-endian, with the reader that checks
//! every count against the bytes present before allocating for it.

use super::*;

/// Names a field for errors: the structure and the field.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    pub(super) what: &'static str,
    pub(super) name: &'static str,
}

/// Shorthand for a [`Field`].
pub(super) const fn at(what: &'static str, name: &'static str) -> Field {
    Field { what, name }
}

/// Reads fields in order from a body.
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) at: usize,
    /// Stream offset of `buf[0]`.
    pub(super) base: u64,
}

impl Reader<'_> {
    pub(super) fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    pub(super) fn left(&self) -> usize {
        self.buf.len() - self.at
    }

    pub(super) fn array<const N: usize>(&mut self, f: Field) -> Result<[u8; N], WireError> {
        let bytes: [u8; N] =
            self.buf.get(self.at..self.at + N).and_then(|s| s.try_into().ok()).ok_or(WireError::Truncated {
                what: f.what,
                field: f.name,
                offset: self.offset(),
                needed: N as u64,
                available: self.left() as u64,
            })?;
        self.at += N;
        Ok(bytes)
    }

    pub(super) fn bad(&self, f: Field, offset: u64, expected: Value, found: Value) -> WireError {
        WireError::BadField { what: f.what, field: f.name, offset, expected, found }
    }

    /// A 0/1 tag (a bool, or whether an `Option` holds a value).
    pub(super) fn tag(&mut self, f: Field, expected: &str) -> Result<bool, WireError> {
        let offset = self.offset();
        match u8::get(self, f)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad(f, offset, Value::Text(expected.to_owned()), Value::Dec(v.into()))),
        }
    }
}

/// The encoding of one type, in one place: `put` appends it, `get` reads it back.
pub(super) trait Wire: Sized {
    /// Bytes of the shortest encoding, against which a vector's count is checked.
    const MIN_BYTES: usize;

    /// Appends the value. `f` names it, for a vector whose count does not fit.
    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError>;

    /// Reads a value. `f` names it, for the errors of integers, tags and vector counts.
    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError>;
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const MIN_BYTES: usize = size_of::<$t>();

            fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
                out.extend_from_slice(&self.to_le_bytes());
                Ok(())
            }

            fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
                r.array(f).map(<$t>::from_le_bytes)
            }
        }
    )*};
}

wire_int!(u8, u16, u32, u64);

/// A bool is a u8, 0 or 1.
impl Wire for bool {
    const MIN_BYTES: usize = 1;

    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
        u8::from(*self).put(out, f)
    }

    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
        r.tag(f, "0 (false) or 1 (true)")
    }
}

/// An `Option` is a u8 tag, 0 (none) or 1 (some), then the value if there is one.
impl<T: Wire> Wire for Option<T> {
    const MIN_BYTES: usize = 1;

    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
        self.is_some().put(out, f)?;
        self.as_ref().map_or(Ok(()), |v| v.put(out, f))
    }

    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
        if r.tag(f, "0 (none) or 1 (some)")? { T::get(r, f).map(Some) } else { Ok(None) }
    }
}

/// A vector is a u32 count, then the items. The count is checked against the bytes left before
/// anything is allocated.
impl<T: Wire> Wire for Vec<T> {
    const MIN_BYTES: usize = 4;

    fn put(&self, out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
        put_slice(self, out, f)
    }

    fn get(r: &mut Reader<'_>, f: Field) -> Result<Self, WireError> {
        let mut items = Vec::new();
        get_vec_into(r, f, &mut items, |r| T::get(r, f))?;
        Ok(items)
    }
}

/// Reads a vector into `items`, an empty list whose memory is reused: its count, checked against
/// the bytes left before anything is allocated, then each item with `get`.
fn get_vec_into<T: Wire>(
    r: &mut Reader<'_>,
    f: Field,
    items: &mut Vec<T>,
    mut get: impl FnMut(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<(), WireError> {
    let offset = r.offset();
    let count = u32::get(r, f)? as usize;
    let fits = r.left() / T::MIN_BYTES;
    if count > fits {
        let expected = format!("at most {fits} items ({} bytes left, {} or more per item)", r.left(), T::MIN_BYTES);
        return Err(r.bad(f, offset, Value::Text(expected), Value::Dec(count as u64)));
    }
    items.reserve_exact(count);
    for _ in 0..count {
        items.push(get(r)?);
    }
    Ok(())
}

/// (u16 bu, u32 lumi section, u32 index).
impl Wire for FileId {
    const MIN_BYTES: usize = 10;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.bu.put(out, at("FileId", "bu"))?;
        self.lumi_section.put(out, at("FileId", "lumi_section"))?;
        self.index.put(out, at("FileId", "index"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(FileId {
            bu: BuId::get(r, at("FileId", "bu"))?,
            lumi_section: u32::get(r, at("FileId", "lumi_section"))?,
            index: u32::get(r, at("FileId", "index"))?,
        })
    }
}

/// (u64 first, u32 count); a count of 0 is refused.
impl Wire for EventRange {
    const MIN_BYTES: usize = 12;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.first.put(out, at("EventRange", "first"))?;
        self.count.put(out, at("EventRange", "count"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        let first = EventNumber::get(r, at("EventRange", "first"))?;
        let offset = r.offset();
        let count = u32::get(r, at("EventRange", "count"))?;
        if count == 0 {
            return Err(r.bad(at("EventRange", "count"), offset, Value::Text("at least 1".into()), Value::Dec(0)));
        }
        Ok(EventRange { first, count })
    }
}

/// (u32 lumi_section, u64 orbit, u16 bx).
impl Wire for TriggerInfo {
    const MIN_BYTES: usize = 14;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.lumi_section.put(out, at("TriggerInfo", "lumi_section"))?;
        self.orbit.put(out, at("TriggerInfo", "orbit"))?;
        self.bx.put(out, at("TriggerInfo", "bx"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(TriggerInfo {
            lumi_section: u32::get(r, at("TriggerInfo", "lumi_section"))?,
            orbit: u64::get(r, at("TriggerInfo", "orbit"))?,
            bx: u16::get(r, at("TriggerInfo", "bx"))?,
        })
    }
}

/// (u16 fed, u32 lv1, u32 bytes, u8 corrupt, option trigger). `buffer` is local to the sender and
/// not sent: it reads back as 0, and [`Frame::decode`] sets it to the fragment's index.
impl Wire for FragmentRef {
    const MIN_BYTES: usize = 12;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.fed.put(out, at("FragmentRef", "fed"))?;
        self.lv1.put(out, at("FragmentRef", "lv1"))?;
        self.bytes.put(out, at("FragmentRef", "bytes"))?;
        self.corrupt.put(out, at("FragmentRef", "corrupt"))?;
        self.trigger.put(out, at("FragmentRef", "trigger"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(FragmentRef {
            fed: FedId::get(r, at("FragmentRef", "fed"))?,
            lv1: u32::get(r, at("FragmentRef", "lv1"))?,
            bytes: u32::get(r, at("FragmentRef", "bytes"))?,
            corrupt: bool::get(r, at("FragmentRef", "corrupt"))?,
            buffer: BufferRef::default(),
            trigger: Option::get(r, at("FragmentRef", "trigger"))?,
        })
    }
}

/// (u64 event, vector of fragments, vector of u16 missing FEDs).
impl Wire for SuperFragment {
    const MIN_BYTES: usize = 16;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.event.put(out, at("SuperFragment", "event"))?;
        self.fragments.put(out, at("SuperFragment", "fragments"))?;
        self.missing.put(out, at("SuperFragment", "missing"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        get_super_fragment(r, &mut Spare::default())
    }
}

/// Reads a super-fragment, its fragments into a list taken from `lists`.
fn get_super_fragment(r: &mut Reader<'_>, lists: &mut Spare<FragmentRef>) -> Result<SuperFragment, WireError> {
    let event = EventNumber::get(r, at("SuperFragment", "event"))?;
    let mut fragments = lists.take();
    let f = at("SuperFragment", "fragments");
    get_vec_into(r, f, &mut fragments, |r| FragmentRef::get(r, f))?;
    Ok(SuperFragment { event, fragments, missing: Vec::get(r, at("SuperFragment", "missing"))? })
}

/// (file id, vector of event ranges).
impl Wire for BuiltFile {
    const MIN_BYTES: usize = FileId::MIN_BYTES + 4;

    fn put(&self, out: &mut Vec<u8>, _f: Field) -> Result<(), WireError> {
        self.file.put(out, at("BuiltFile", "file"))?;
        self.events.put(out, at("BuiltFile", "events"))
    }

    fn get(r: &mut Reader<'_>, _f: Field) -> Result<Self, WireError> {
        Ok(BuiltFile {
            file: FileId::get(r, at("BuiltFile", "file"))?,
            events: Vec::get(r, at("BuiltFile", "events"))?,
        })
    }
}

/// The body of a message other than Data: its fields in declaration order.
pub(super) fn put_control_body(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    match msg {
        Message::Hello { bu, epoch, unpublished } => {
            bu.put(out, at("Hello", "bu"))?;
            epoch.put(out, at("Hello", "epoch"))?;
            unpublished.put(out, at("Hello", "unpublished"))
        }
        Message::Welcome { epoch, publish, discard } => {
            epoch.put(out, at("Welcome", "epoch"))?;
            publish.put(out, at("Welcome", "publish"))?;
            discard.put(out, at("Welcome", "discard"))
        }
        Message::Request { bu, epoch, credits, built, published, lumis_done } => {
            bu.put(out, at("Request", "bu"))?;
            epoch.put(out, at("Request", "epoch"))?;
            credits.put(out, at("Request", "credits"))?;
            built.put(out, at("Request", "built"))?;
            published.put(out, at("Request", "published"))?;
            lumis_done.put(out, at("Request", "lumis_done"))
        }
        Message::Assign { bu, epoch, events, release } => {
            bu.put(out, at("Assign", "bu"))?;
            epoch.put(out, at("Assign", "epoch"))?;
            events.put(out, at("Assign", "events"))?;
            release.put(out, at("Assign", "release"))
        }
        Message::Data { .. } => Err(WireError::DataWithoutFragments),
        Message::Commit { epoch, files } => {
            epoch.put(out, at("Commit", "epoch"))?;
            files.put(out, at("Commit", "files"))
        }
        Message::Release { events } => events.put(out, at("Release", "events")),
        Message::Drain { last_event } => last_event.put(out, at("Drain", "last_event")),
        Message::EndOfLumi { lumi_section, events } => {
            lumi_section.put(out, at("EndOfLumi", "lumi_section"))?;
            events.put(out, at("EndOfLumi", "events"))
        }
        Message::EndOfRun { last_lumi_section, lumi_sections } => {
            last_lumi_section.put(out, at("EndOfRun", "last_lumi_section"))?;
            lumi_sections.put(out, at("EndOfRun", "lumi_sections"))
        }
        Message::Exclude { bu, from_event } => {
            bu.put(out, at("Exclude", "bu"))?;
            from_event.put(out, at("Exclude", "from_event"))
        }
        Message::Progress { through } => through.put(out, at("Progress", "through")),
        Message::StreamsConnected { ru } => ru.put(out, at("StreamsConnected", "ru")),
        Message::Start => Ok(()),
    }
}

/// Reads the fields of a body of type `kind`: for a data message, the descriptors only, each
/// super-fragment's fragments into a list taken from `lists`.
pub(super) fn get_body(
    kind: MessageType,
    r: &mut Reader<'_>,
    lists: &mut Spare<FragmentRef>,
) -> Result<Message, WireError> {
    Ok(match kind {
        MessageType::Hello => Message::Hello {
            bu: BuId::get(r, at("Hello", "bu"))?,
            epoch: Epoch::get(r, at("Hello", "epoch"))?,
            unpublished: Vec::get(r, at("Hello", "unpublished"))?,
        },
        MessageType::Welcome => Message::Welcome {
            epoch: Epoch::get(r, at("Welcome", "epoch"))?,
            publish: Vec::get(r, at("Welcome", "publish"))?,
            discard: Vec::get(r, at("Welcome", "discard"))?,
        },
        MessageType::Request => Message::Request {
            bu: BuId::get(r, at("Request", "bu"))?,
            epoch: Epoch::get(r, at("Request", "epoch"))?,
            credits: u32::get(r, at("Request", "credits"))?,
            built: Vec::get(r, at("Request", "built"))?,
            published: Vec::get(r, at("Request", "published"))?,
            lumis_done: Vec::get(r, at("Request", "lumis_done"))?,
        },
        MessageType::Assign => Message::Assign {
            bu: BuId::get(r, at("Assign", "bu"))?,
            epoch: Epoch::get(r, at("Assign", "epoch"))?,
            events: Vec::get(r, at("Assign", "events"))?,
            release: Vec::get(r, at("Assign", "release"))?,
        },
        MessageType::Data => get_data_descriptors(r, lists)?,
        MessageType::Commit => {
            Message::Commit { epoch: Epoch::get(r, at("Commit", "epoch"))?, files: Vec::get(r, at("Commit", "files"))? }
        }
        MessageType::Release => Message::Release { events: Vec::get(r, at("Release", "events"))? },
        MessageType::Drain => Message::Drain { last_event: Option::get(r, at("Drain", "last_event"))? },
        MessageType::EndOfLumi => Message::EndOfLumi {
            lumi_section: u32::get(r, at("EndOfLumi", "lumi_section"))?,
            events: u64::get(r, at("EndOfLumi", "events"))?,
        },
        MessageType::EndOfRun => Message::EndOfRun {
            last_lumi_section: u32::get(r, at("EndOfRun", "last_lumi_section"))?,
            lumi_sections: u32::get(r, at("EndOfRun", "lumi_sections"))?,
        },
        MessageType::Progress => Message::Progress { through: u64::get(r, at("Progress", "through"))? },
        MessageType::StreamsConnected => Message::StreamsConnected { ru: RuId::get(r, at("StreamsConnected", "ru"))? },
        MessageType::Start => Message::Start,
        MessageType::Exclude => Message::Exclude {
            bu: u16::get(r, at("Exclude", "bu"))?,
            from_event: u64::get(r, at("Exclude", "from_event"))?,
        },
    })
}

/// The descriptors of a data message: its fields in declaration order.
pub(super) fn put_data_descriptors(
    ru: RuId,
    epoch: Epoch,
    parts: &[SuperFragment],
    commits: &[FileId],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    ru.put(out, at("Data", "ru"))?;
    epoch.put(out, at("Data", "epoch"))?;
    put_slice(parts, out, at("Data", "parts"))?;
    put_slice(commits, out, at("Data", "commits"))
}

/// A slice written as a vector: u32 count, then the items.
pub(super) fn put_slice<T: Wire>(items: &[T], out: &mut Vec<u8>, f: Field) -> Result<(), WireError> {
    let length = items.len() as u64;
    let count = u32::try_from(length).map_err(|_| WireError::TooLarge { what: f.what, field: f.name, length })?;
    count.put(out, f)?;
    items.iter().try_for_each(|item| item.put(out, f))
}

/// Reads the descriptors of a data message, each super-fragment's fragments into a list taken
/// from `lists`; fragment `buffer`s are 0.
fn get_data_descriptors(r: &mut Reader<'_>, lists: &mut Spare<FragmentRef>) -> Result<Message, WireError> {
    let ru = RuId::get(r, at("Data", "ru"))?;
    let epoch = Epoch::get(r, at("Data", "epoch"))?;
    let mut parts = Vec::new();
    get_vec_into(r, at("Data", "parts"), &mut parts, |r| get_super_fragment(r, lists))?;
    Ok(Message::Data { ru, epoch, parts, commits: Vec::get(r, at("Data", "commits"))? })
}

/// Takes the fragment bytes that follow a data message's descriptors: the range of each within
/// the body, and its index as its `buffer`'s offset (the receiver names the frame). The bytes the descriptors declare must be there.
pub(super) fn locate_fragments(
    r: &mut Reader<'_>,
    parts: &mut [SuperFragment],
) -> Result<Vec<Range<usize>>, WireError> {
    let declared = parts.iter().flat_map(|p| &p.fragments).map(|f| u64::from(f.bytes)).sum::<u64>();
    if declared > r.left() as u64 {
        return Err(WireError::Truncated {
            what: "Data",
            field: "fragment bytes",
            offset: r.offset(),
            needed: declared,
            available: r.left() as u64,
        });
    }
    let mut ranges = Vec::with_capacity(parts.iter().map(|p| p.fragments.len()).sum());
    for fragment in parts.iter_mut().flat_map(|p| &mut p.fragments) {
        fragment.buffer = BufferRef { offset: ranges.len() as u32, ..BufferRef::default() };
        let end = r.at + fragment.bytes as usize;
        ranges.push(r.at..end);
        r.at = end;
    }
    Ok(ranges)
}
