//! The protocol cores running into real files: a 2×2 system builds seeded events across the
//! 24-bit LV1 wrap, its BUs write run directories, and `tessera verify` accepts every one of
//! them byte for byte, each event being in exactly one of them. Run once with messages handed
//! over as they are, and once through the wire format, fragment bytes and all.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use tessera_evb::msg::{BufferRef, FragmentRef, Message, TriggerInfo};
use tessera_evb::types::{BuId, FileId, Peer};
use tessera_evb::unit::BuiltEvent;
use tessera_evb::wire::{DEFAULT_MAX_BODY_BYTES, Frame, encode, encode_data_header};
use tessera_formats::fed::{LV1_MASK, event_type};
use tessera_formats::raw::RawFile;
use tessera_formats::seeded::write_seeded_fragment;
use tessera_formats::tcds::{TCDS_FED_ID, TcdsRecord, orbit_in_lumi_section};
use tessera_inspect::event::EventChecks;
use tessera_inspect::verify::verify_run_dir;
use tessera_runtime::bu_files::{BuFiles, FragmentBytes};
use tessera_runtime::conn::ReceivedFrame;
use tessera_runtime::frame_store::FrameStore;
use tessera_sim::ideal::{Effects, IdealSystem};
use tessera_sim::scenario::Topology;

const RUN: u32 = 4242;
const EVENTS_PER_LS: u64 = 100;

#[derive(Default)]
struct Buffers(HashMap<BufferRef, Vec<u8>>);

impl FragmentBytes for Buffers {
    fn bytes(&self, fragment: &FragmentRef) -> Option<&[u8]> {
        self.0.get(&fragment.buffer).map(Vec::as_slice)
    }
}

/// The BUs' disks, and, with `stores`, the wire: every message is encoded and decoded, data
/// frames carry the fragments' bytes, and each BU keeps what it received in its frame store.
struct Disk {
    bus: Vec<BuFiles>,
    buffers: Rc<RefCell<Buffers>>,
    stores: Option<Vec<FrameStore>>,
}

impl Effects for Disk {
    fn write(&mut self, bu: BuId, file: FileId, events: &[BuiltEvent]) {
        let b = usize::from(bu);
        match &mut self.stores {
            Some(stores) => {
                self.bus[b].write(file, events, &stores[b]).unwrap();
                stores[b].written(events.iter().flat_map(|e| &e.parts).flat_map(|p| &p.fragments));
            }
            None => {
                self.bus[b].write(file, events, &*self.buffers.borrow()).unwrap();
            }
        }
    }
    fn carry(&mut self, _from: Peer, to: Peer, msg: Message) -> Message {
        let Some(stores) = &mut self.stores else { return msg };
        let mut frame = Vec::new();
        match &msg {
            Message::Data { ru, epoch, parts, commits } => {
                let buffers = self.buffers.borrow();
                let slices: Vec<&[u8]> =
                    parts.iter().flat_map(|p| &p.fragments).map(|f| buffers.bytes(f).unwrap()).collect();
                encode_data_header(*ru, *epoch, parts, commits, &slices, &mut frame).unwrap();
                for s in slices {
                    frame.extend_from_slice(s);
                }
            }
            other => encode(other, &mut frame).unwrap(),
        }
        let decoded = Frame::parse(&frame, DEFAULT_MAX_BODY_BYTES).unwrap().expect("one whole frame").decode().unwrap();
        match to {
            Peer::Bu(b) => stores[usize::from(b)].insert(decoded, ReceivedFrame::from_wire(frame)).unwrap(),
            _ => decoded.message,
        }
    }
    fn publish(&mut self, bu: BuId, file: FileId) {
        self.bus[usize::from(bu)].publish(file).unwrap();
    }
    fn end_lumi(&mut self, bu: BuId, lumi_section: u32, events: u64) {
        self.bus[usize::from(bu)].end_lumi(lumi_section, events, 0).unwrap();
    }
    fn end_run(&mut self, bu: BuId, last_lumi_section: u32, lumi_sections: u32) {
        self.bus[usize::from(bu)].end_run(last_lumi_section, lumi_sections).unwrap();
    }
}

#[test]
fn a_2x2_system_writes_run_directories_that_verify_byte_for_byte() {
    run_2x2(false);
}

#[test]
fn the_same_over_the_wire_format_with_the_bus_frame_stores() {
    run_2x2(true);
}

fn run_2x2(wire: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let topology = Topology { n_ru: 2, feds_per_ru: 3, n_bu: 2 };
    let first_event = (1 << 24) - 150;
    let events = 4 * EVENTS_PER_LS;
    let buffers = Rc::new(RefCell::new(Buffers::default()));
    let bus = (0..topology.n_bu)
        .map(|b| BuFiles::create(&tmp.path().join(format!("bu{b}")), RUN, &format!("bu-{b}"), true, false).unwrap())
        .collect();
    let stores = wire.then(|| (0..topology.n_bu).map(|_| FrameStore::new(64 << 20)).collect());
    let mut system = IdealSystem::new(topology, first_event, Disk { bus, buffers: buffers.clone(), stores });
    let mut next_buffer = 0u32;
    system.run(events, |_, fed, event| {
        let index = event - first_event;
        let ls = (index / EVENTS_PER_LS) as u32 + 1;
        let bx = (event % 3564) as u16;
        let mut bytes = vec![0u8; 4096];
        let trigger = (fed == TCDS_FED_ID).then_some(TriggerInfo { lumi_section: ls, orbit: 0, bx });
        let len = if fed == TCDS_FED_ID {
            let record = TcdsRecord {
                run: RUN,
                lumi_section: ls,
                orbit: orbit_in_lumi_section(ls, index % EVENTS_PER_LS),
                bx,
                event_number: event,
                trigger_count: event,
                ..TcdsRecord::default()
            };
            record.write(&mut bytes, event_type::PHYSICS).unwrap()
        } else {
            write_seeded_fragment(&mut bytes, RUN, fed, event, bx, 64 + 8 * (event % 50) as usize).unwrap()
        };
        bytes.truncate(len);
        next_buffer += 1;
        let buffer = BufferRef { offset: next_buffer, len: len as u32, ..BufferRef::default() };
        buffers.borrow_mut().0.insert(buffer, bytes);
        FragmentRef { fed, lv1: (event as u32) & LV1_MASK, bytes: len as u32, corrupt: false, buffer, trigger }
    });
    let mut seen = BTreeSet::new();
    let disk = system.into_files();
    for store in disk.stores.iter().flatten() {
        assert_eq!((store.frames(), store.held()), (0, 0), "every frame freed once written");
    }
    for bu in disk.bus {
        let dir = bu.path().to_owned();
        let violations = verify_run_dir(&dir, EventChecks::default()).unwrap();
        assert!(violations.is_empty(), "{}: {violations:#?}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|x| x == "raw") {
                let bytes = std::fs::read(&path).unwrap();
                for ev in RawFile::parse(&bytes).unwrap().events() {
                    let (_, ev) = ev.unwrap();
                    assert!(seen.insert(ev.header.event), "event {} in two files", ev.header.event);
                }
            }
        }
    }
    let expected: BTreeSet<u32> = (first_event..first_event + events).map(|e| e as u32).collect();
    assert_eq!(seen, expected, "every event in exactly one file");
}
