//! A readout unit on real I/O, and the EVM's node (the EVM with RU 0) on the same loop.
//!
//! **One thread** runs the unit: it reads every FEROL stream into that stream's receive memory,
//! offers each fragment to the core, hands the core the messages of its peers, and writes the
//! core's messages, data frames straight from the receive memory. Everything is non-blocking and
//! driven by one poller, so a slow BU delays only the frames queued for it, and back-pressure is
//! the core refusing fragments: the loop stops reading those streams and TCP stops the front
//! end. Two cores of a laptop are better spent on one such thread per unit than on a thread per
//! stream that would hand fragments across.
//!
//! The loop's machinery (poller, clock, protocol connections, run control, the order of its
//! steps) is the event loop every unit shares (`crate::event_loop`); this module plugs in what is
//! the RU's own: its FEROL streams and their naming, its peers' rules, the EVM's drain and the
//! run's end, and sending again to the BUs it could not reach.
//!
//! Connections: front ends connect to the FEROL port (each stream is named by the FED id in its
//! first block header); the EVM connects to each RU's control port; each RU connects to each
//! BU's data port; each BU connects to the EVM's port, and RU 0's data for that BU travels back
//! on that connection, in order with the EVM's messages.

use crate::conn::{Conn, LinkSide, PieceSource};
use crate::event_loop::{CONN_TOKENS, EventLoop, Links, MAX_SLEEP, UNIT_TOKENS, Unit, io_err, pin_to, poller};
use crate::ferol_input::{FragmentHandle, Framing, Received, StreamBuffer};
use crate::link::LinkKey;
use crate::state::Transition;
use crate::stats::{BLOCKED_AFTER, FED_SILENT_AFTER, FedError, SubState, Throttle, UnitStats};
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll, Token};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_config::CorruptStreamPolicy;
use tessera_config::TransportSection;
use tessera_evb::ingest::IngestRu;
use tessera_evb::intake::Intake;
use tessera_evb::msg::{BufferRef, FragmentRef, Message, SuperFragment, TriggerInfo, data_batches};
use tessera_evb::push::{Destinations, PushNode, PushNodeConfig, PushRu};
use tessera_evb::ru::{BackPressure, FedState, StreamChange};
use tessera_evb::types::{EventNumber, FedId, FileId, Nanos, Peer};
pub use tessera_evb::unit::TriggerBreak;
use tessera_evb::unit::{Input, Notice, RuOutput};
use tessera_evb::wire::{encode, encode_data_header_pieces};
use tessera_evb::{EvmConfig, EvmNode, Ru, RuConfig};
use tessera_formats::fed::CrcCheck;
use tessera_formats::ferol::{FerolBlockHeader, HEADER_BYTES};
use tessera_formats::orbit::DthBlockHeader;
use tessera_formats::tcds::{TCDS_FED_ID, TCDS_FRAGMENT_BYTES, TcdsRecord, lumi_section_of_orbit};

mod conns;
mod pass;
mod protocol;
mod streams;
pub use crate::error::NodeError;
pub use crate::event_loop::Control;
use conns::Stalls;
use protocol::{RuCore, trigger_off};

/// How an RU node runs: its core's configuration, where it listens and whom it calls.
#[derive(Debug)]
pub struct RuNodeConfig {
    /// The run number, which every peer's link must name.
    pub run: u32,
    /// The run's link key, with which every peer proves that it belongs to the run.
    pub link_key: LinkKey,
    /// The RU core.
    pub ru: RuConfig,
    /// The EVM core, for RU 0 (the EVM's node) under pull.
    pub evm: Option<EvmConfig>,
    /// Push protocol: how this RU pushes (and, on RU 0, leads the run); `None` under pull.
    pub push: Option<PushPlan>,
    /// Where front ends connect, one connection per FED.
    pub ferol_listener: std::net::TcpListener,
    /// RU: where the EVM connects. EVM's node: where BUs connect.
    pub control_listener: std::net::TcpListener,
    /// RU other than RU 0: each BU's data address, by BU index.
    pub bu_data: Vec<SocketAddr>,
    /// EVM's node: each RU's control address, for RUs 1, 2, ...
    pub ru_control: Vec<SocketAddr>,
    /// Receive memory per FED stream: chunk size in bytes.
    pub chunk_bytes: usize,
    /// Receive memory per FED stream: chunks.
    pub chunks_per_fed: usize,
    /// Largest fragment on the wire, FEROL block headers included.
    pub max_wire_bytes: usize,
    /// What a stream that cannot be read on does to the run.
    pub on_corrupt_stream: CorruptStreamPolicy,
    /// Which fragments' CRC is checked (`ru.fragment_crc_check`): a FED fragment's CRC-16, an
    /// orbit block's CRC-32C.
    pub fragment_crc_check: CrcCheck,
    /// What the front-end streams carry: FED fragments, or orbit blocks (orbit mode).
    pub framing: Framing,
    /// The run's event limit (`run.events`): every FED stream, the trigger's too, brings this
    /// many events and closes. A stream that closes there ends cleanly; one that closes before
    /// has disconnected (for the trigger stream, a fault that fails the run). `None`: the run
    /// ends by run control's stop ([`Control::stop_trigger`], [`Control::streams_end_after`]).
    pub event_limit: Option<u64>,
    /// How long the run waits for every FEROL (or DTH) stream of this RU to connect and name
    /// its FED (`ru.connect_timeout_s`), from the moment the RU is enabled: past it the RU fails,
    /// naming the FEDs never seen. Front ends may connect in any order meanwhile.
    pub streams_timeout: Duration,
    /// How long to keep trying to reach a peer at start-up.
    pub connect_timeout: Duration,
    /// Largest protocol frame accepted, in bytes.
    pub max_frame_bytes: u32,
    /// The addresses protocol peers may call from (the EVM's for an RU, the BUs' for the EVM);
    /// `None` accepts any.
    pub allowed_peers: Option<Vec<std::net::IpAddr>>,
    /// Ingest only, for benchmarks: no EVM and no BU. The RU assigns itself every event that all
    /// its streams have delivered, and releases each super-fragment as soon as its core sends
    /// it: the RU's whole receive path (streams, checks, receive memory, super-fragments) with
    /// nothing sent. The node ends when every stream has ended. Needs `evm: None`.
    pub ingest_only: bool,
    /// Pin the unit's loop thread to this CPU core; a core that cannot be had is reported, and
    /// the unit runs unpinned.
    pub pin_core: Option<usize>,
    /// What its protocol links travel on, per link class (`transport` of the system file).
    pub transport: TransportSection,
}

/// How an RU pushes its super-fragments (the push protocol, `tessera_evb::push`).
#[derive(Debug, Clone)]
pub struct PushPlan {
    /// The destination function, the same in every RU.
    pub destinations: Destinations,
    /// Events held at which the RU's throttle rises.
    pub high_water_events: usize,
    /// The window of event numbers the RUs keep within of each other
    /// (`tessera_evb::push::PushRu::with_window`).
    pub window_events: u64,
    /// RU 0 only: RUs and BUs in the run, and how far past the newest event seen a lost BU is
    /// excluded (`None` on other RUs).
    pub leader: Option<PushLeader>,
}

/// What RU 0 needs to lead a push run.
#[derive(Debug, Clone, Copy)]
pub struct PushLeader {
    /// RUs in the run, RU 0 included.
    pub n_ru: u16,
    /// BUs in the run.
    pub n_bu: u16,
    /// A lost BU is excluded from the first block at least this many events past the newest
    /// event RU 0 has seen.
    pub exclude_margin_events: u64,
}

/// How an RU node ended.
#[derive(Debug, Clone, Default)]
pub struct RuReport {
    /// The RU core's counters.
    pub ru: tessera_evb::ru::RuCounters,
    /// The EVM's counters, on the EVM's node.
    pub evm: Option<tessera_evb::evm::EvmCounters>,
    /// The last event triggered (RU 0).
    pub last_event: Option<EventNumber>,
    /// Events triggered (RU 0, either protocol).
    pub triggered: Option<u64>,
    /// Push, RU 0: the BUs excluded after their loss, each with the first event excluded and
    /// the events the destination function gave it before (those it did not publish are lost
    /// with it, `BU_LOST`).
    pub excluded: Vec<Excluded>,
    /// EVM: how the trigger stream broke before run control stopped the trigger. The node
    /// drained the events triggered before it and ended, but the run has failed.
    pub trigger_fault: Option<TriggerFault>,
    /// Fragments received of events after the run's last triggered event, per FED in the RU's
    /// order (FEDs with none left out; the trigger FED's own never counted): what the front ends
    /// sent that no trigger made an event of, discarded at the end of the run.
    pub orphan_fragments: Vec<(FedId, u64)>,
}

/// A BU excluded from a push run after its loss (also as RU 0's process reports it, in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Excluded {
    /// The BU.
    pub bu: u16,
    /// The first event it no longer gets.
    pub from_event: EventNumber,
    /// The events it was given before.
    pub events_given: u64,
}

/// How the trigger stream (FED 1024) broke before run control stopped the trigger: the EVM's
/// node drains the events triggered before it, then ends with it in its [`RuReport`], and the
/// run has failed. The trigger's only clean ends are run control's stop and, with an event
/// limit, the trigger stream's close at a fragment boundary after exactly that many events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the trigger stream (FED {fed}) {what} at stream byte {stream_offset}, after {fragments} fragments \
     (last good event {last_event:?}), before run control stopped the trigger: the run failed"
)]
pub struct TriggerFault {
    /// The trigger FED.
    pub fed: FedId,
    /// What happened.
    pub what: TriggerBreak,
    /// Byte offset in the stream where it happened (the end of the last good fragment, or where
    /// the stream could not be read on).
    pub stream_offset: u64,
    /// Good trigger fragments before it.
    pub fragments: u64,
    /// The last event triggered.
    pub last_event: Option<EventNumber>,
}

/// Where front ends connect: the RU's own listener (protocol callers come to the event loop's).
const FEROL_LISTENER: Token = Token(UNIT_TOKENS);
/// FEROL streams from here, one per configured FED.
const STREAM_BASE: usize = 1 << 16;
/// Bytes read from one FEROL stream before the loop turns to the others.
const STREAM_TURN_BYTES: usize = 1 << 20;
/// Room kept in a data frame for its header and descriptors.
const FRAME_SLACK_BYTES: usize = 1 << 20;
/// Front-end connections beyond this RU's streams not yet connected that may wait at once for
/// their first block header ([`Intake`]): room for a few strangers, while every configured stream
/// always has room (a caller that sends nothing holds a place for [`NAME_TIMEOUT`] only).
const SPARE_UNNAMED_STREAMS: usize = 16;
/// Protocol messages for the EVM kept while its connection is not there yet (an RU says that its
/// streams are connected as soon as they are, which may be before the EVM has called).
const MAX_EVM_PENDING: usize = 64;
/// How often an RU looks for its longest wait for a FED, for its figures.
const WAIT_LOOK: Duration = Duration::from_millis(50);
/// How often the EVM says what a long drain waits for.
const DRAIN_REPORT: Duration = Duration::from_secs(5);
/// How long an RU waits for the EVM's Drain after a BU's connection closed before it says the BU
/// was lost (at the run's end the BUs close as the Drain comes, on another connection).
const LOSS_PATIENCE: Duration = Duration::from_secs(1);
/// How often an RU tries again to reach a BU it lost, to send it its events again (until the
/// EVM reassigns them or the run ends).
const BU_RETRY: Duration = Duration::from_millis(250);
/// How long a front-end connection may take to send its first block header: as long as a unit
/// waits for a peer, since a front end on a busy machine may connect long before it is scheduled
/// to write.
const NAME_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the EVM's node keeps flushing its last messages once the run has drained.
const FINAL_FLUSH: Duration = Duration::from_secs(5);
/// How long a drained EVM waits for BUs lost during the run to come back (restarted by run
/// control) and take their end of run, before it ends without them.
const LOST_BU_GRACE: Duration = Duration::from_secs(10);

/// Where a received fragment is, as the protocol carries it: the FED stream's index, then the
/// stream's own handle, field for field.
fn buffer_ref(stream: usize, handle: FragmentHandle) -> BufferRef {
    let area = u32::try_from(stream).expect("an RU's FED streams are counted in u32");
    BufferRef { area, chunk: handle.chunk, offset: handle.offset, len: handle.wire_len, head: handle.head }
}

/// The stream's handle of a fragment, as [`buffer_ref`] gave it.
fn stream_handle(buffer: BufferRef) -> (usize, FragmentHandle) {
    (
        buffer.area as usize,
        FragmentHandle { chunk: buffer.chunk, offset: buffer.offset, wire_len: buffer.len, head: buffer.head },
    )
}

/// The receive memory of every FEROL stream of the RU, by FED index.
struct Buffers(Vec<StreamBuffer>);

impl PieceSource for Buffers {
    fn pieces<'a>(&'a self, buffer: BufferRef, out: &mut Vec<&'a [u8]>) {
        let (stream, h) = stream_handle(buffer);
        if let Some(b) = self.0.get(stream) {
            out.extend(b.segments(h));
        }
    }
}

/// Why a FED is left out for the rest of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeftOut {
    /// It sent an event out of sequence.
    SyncLost,
    /// Its stream closed before the run's end.
    Disconnected,
}

/// One FEROL stream's connection.
struct FerolConn {
    stream: TcpStream,
    readable: bool,
    ended: bool,
    /// The stream cannot be read on (garbage, or closed inside a fragment): where (its byte
    /// offset) and why. Its bytes are read and thrown away until it ends.
    broke: Option<(u64, String)>,
    /// Its end has been looked at (a clean end, a disconnect or a break): once.
    settled: bool,
    fragments: u64,
    /// Bytes of the stream up to the end of its last whole fragment.
    bytes: u64,
    /// Where its last whole fragment starts (the end of the one before).
    last_offset: u64,
    last_lv1: Option<u32>,
}

/// An RU node, ready to run.
pub struct RuNode {
    cfg: RuNodeConfig,
    core: Box<dyn RuCore>,
    stats: Arc<UnitStats>,
    control: Control,
    poll: Poll,
}

impl RuNode {
    /// Sets up the node: its core, its poller, and its receive memory, allocated and touched now.
    pub fn new(cfg: RuNodeConfig) -> Result<Self, NodeError> {
        // Every data message fits the frame a BU accepts: the core splits them so.
        let mut ru = cfg.ru.clone();
        ru.max_data_bytes =
            ru.max_data_bytes.min((cfg.max_frame_bytes as usize).saturating_sub(FRAME_SLACK_BYTES).max(1));
        let core: Box<dyn RuCore> = match (cfg.evm.clone(), cfg.push.clone()) {
            (Some(evm), _) => Box::new(EvmNode::new(evm, ru)),
            (None, Some(PushPlan { destinations, high_water_events, window_events, leader: Some(l) })) => {
                Box::new(PushNode::new(PushNodeConfig {
                    ru,
                    n_ru: l.n_ru,
                    n_bu: l.n_bu,
                    destinations,
                    high_water_events,
                    exclude_margin_events: l.exclude_margin_events,
                    window_events: Some(window_events),
                    bug: None,
                }))
            }
            (None, Some(p)) => Box::new(PushRu::new(ru, p.destinations, p.high_water_events).with_window(
                p.window_events,
                vec![Peer::Evm],
                false,
            )),
            (None, None) if cfg.ingest_only => Box::new(IngestRu::new(ru)),
            (None, None) => Box::new(Ru::new(ru)),
        };
        let (poll, control) = poller()?;
        let stats = Arc::new(UnitStats::for_ru(&cfg.ru.feds));
        Ok(RuNode { cfg, core, stats, control, poll })
    }

    /// The unit's live figures.
    pub fn stats(&self) -> Arc<UnitStats> {
        self.stats.clone()
    }

    /// The run-control handle.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Runs the unit until the run ends: for an RU, when the EVM closes its connection after the
    /// drain; for the EVM's node, when every event is committed, every lumi section closed and
    /// the end of run sent.
    pub fn run(self) -> Result<RuReport, NodeError> {
        let RuNode { cfg, core, stats, control, poll } = self;
        stats.transition(Transition::Configure);
        pin_to(cfg.pin_core, &stats, &format!("RU {}", cfg.ru.ru));
        // One super-fragment must fit in a frame: data messages are split between them only.
        let largest = cfg.ru.feds.len() * cfg.max_wire_bytes + FRAME_SLACK_BYTES;
        if largest > cfg.max_frame_bytes as usize {
            return Err(NodeError::Io {
                what: format!(
                    "RU {}: a super-fragment of {} FEDs of up to {} bytes may not fit in a frame of {} bytes",
                    cfg.ru.ru,
                    cfg.ru.feds.len(),
                    cfg.max_wire_bytes,
                    cfg.max_frame_bytes
                ),
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        stats.chunks_total.set((cfg.chunks_per_fed * cfg.ru.feds.len()) as u64);
        let me = if core.leader().is_some() { Peer::Evm } else { Peer::Ru(cfg.ru.ru) };
        let links = Links {
            side: LinkSide { me, run: cfg.run, key: cfg.link_key.clone(), transport: cfg.transport.clone() },
            max_frame_bytes: cfg.max_frame_bytes,
            connect_timeout: cfg.connect_timeout,
            allowed_peers: cfg.allowed_peers.clone(),
        };
        let mut lp = RuLoop {
            io: EventLoop::new(poll, control, stats.clone(), 1024, links)?,
            ferol: None,
            streams: (0..cfg.ru.feds.len()).map(|_| None).collect(),
            unnamed: Vec::new(),
            intake: Intake::new(cfg.ru.feds.clone(), SPARE_UNNAMED_STREAMS),
            buffers: Buffers(Vec::new()),
            scratch: vec![0u8; 256 << 10],
            bus_down: BTreeMap::new(),
            bus_lost: Vec::new(),
            stop_noted: false,
            last_trigger: None,
            left_out: vec![None; cfg.ru.feds.len()],
            trigger_fault: None,
            stalls: Stalls::default(),
            ending: Ending::default(),
            sending: HashMap::new(),
            unreachable_said: BTreeSet::new(),
            peers_called: false,
            excluded: Vec::new(),
            parts_unreachable: 0,
            enabled_at: None,
            evm_pending: Vec::new(),
            wait_looked: None,
            missing_said: BTreeSet::new(),
            stats,
            core,
            cfg,
        };
        let result = lp.run();
        let failed_after_drain = result.as_ref().is_ok_and(|r| r.trigger_fault.is_some());
        crate::event_loop::say_end(&lp.stats, &result, failed_after_drain);
        result
    }
}

/// An RU node's part of its event loop: its core, its FEROL streams and their receive memory,
/// and what it keeps of its peers and of the run's end.
struct RuLoop {
    cfg: RuNodeConfig,
    core: Box<dyn RuCore>,
    stats: Arc<UnitStats>,
    /// The event loop's shared half: poller, clock, protocol connections, run control.
    io: EventLoop,
    /// Where front ends connect, once listening.
    ferol: Option<TcpListener>,
    streams: Vec<Option<FerolConn>>,
    /// Front-end connections that have not yet named their FED, and since when.
    unnamed: Vec<(TcpStream, SocketAddr, Instant)>,
    /// Who of them may wait, and which FED streams are connected.
    intake: Intake,
    buffers: Buffers,
    scratch: Vec<u8>,
    /// BUs whose connection closed before the EVM's Drain, with when and the line that says it:
    /// said after [`LOSS_PATIENCE`] without the Drain.
    bus_lost: Vec<(Instant, String)>,
    /// BUs this RU could not reach, since when, with the super-fragments it could not send them
    /// and their incarnation: sent again every [`BU_RETRY`] while still theirs.
    bus_down: BTreeMap<u16, (Instant, Vec<(u32, SuperFragment)>)>,
    /// The trigger's stop (the EVM's node's to decide) has been taken as the unit's Stop.
    stop_noted: bool,
    /// The trigger information of the last trigger fragment that parsed.
    last_trigger: Option<TriggerInfo>,
    /// Why each FED (by index) is left out for the rest of the run, once it is: it lost sync or
    /// disconnected. The unit stays in [`SubState::SyncLoss`] or [`SubState::FedDisconnected`]
    /// meanwhile.
    left_out: Vec<Option<LeftOut>>,
    /// EVM: how the trigger stream broke before run control stopped the trigger.
    trigger_fault: Option<TriggerFault>,
    stalls: Stalls,
    ending: Ending,
    /// Push: fragments queued on a connection and not yet written, with how many frames hold
    /// each and whether the core has freed it; its memory is released once both are done.
    sending: HashMap<BufferRef, Sending>,
    /// Push: the BUs this RU could not reach, said once each.
    unreachable_said: BTreeSet<u16>,
    /// Push: the peers it must reach from its first event on are there (see
    /// `RuLoop::peers_ready`).
    peers_called: bool,
    /// Push, RU 0: the BUs excluded so far.
    excluded: Vec<Excluded>,
    /// Push: super-fragments dropped because their BU could not be reached.
    parts_unreachable: u64,
    /// When the RU was enabled: the wait for its streams counts from then.
    enabled_at: Option<Instant>,
    /// Messages for the EVM encoded before its connection was there, sent once it is (at most
    /// [`MAX_EVM_PENDING`]).
    evm_pending: Vec<Vec<u8>>,
    /// When the RU last looked for its longest wait for a FED (every [`WAIT_LOOK`]).
    wait_looked: Option<Instant>,
    /// The FEDs left out for the rest of the run whose first event without them was said.
    missing_said: BTreeSet<FedId>,
}

/// A fragment of a push RU on its way out (see `RuLoop::sending`).
#[derive(Debug, Clone, Copy, Default)]
struct Sending {
    /// Frames queued that carry it.
    queued: u32,
    /// The core has freed it.
    freed: bool,
}

/// What the EVM's node keeps of the run's end, once the trigger is off.
#[derive(Debug, Default)]
struct Ending {
    /// Since when the trigger is off and the EVM not drained.
    stopped_at: Option<Instant>,
    /// How many times the drain has said what it waits for.
    drain_reports: u32,
    /// When the EVM drained.
    drained_at: Option<Instant>,
    /// The BUs lost during the run have been said to be waited for.
    lost_said: bool,
}

impl RuLoop {
    fn now(&self) -> Nanos {
        self.io.now()
    }

    /// RU 0's node, which reads the trigger and leads the run (the EVM's node under pull).
    fn is_evm(&self) -> bool {
        self.core.leader().is_some()
    }

    /// An RU (not the EVM's node) has had the EVM's drain: the run is over.
    fn drain_seen(&self) -> bool {
        !self.is_evm() && self.core.ru().drain_seen()
    }

    fn me(&self) -> Peer {
        if self.is_evm() { Peer::Evm } else { Peer::Ru(self.cfg.ru.ru) }
    }

    /// Sets the node up on its event loop (listeners, calls out, receive memory), waits to be
    /// enabled, then runs the loop until the run ends.
    fn run(&mut self) -> Result<RuReport, NodeError> {
        let l = self.cfg.ferol_listener.try_clone().map_err(io_err("FEROL listener"))?;
        l.set_nonblocking(true).map_err(io_err("FEROL listener"))?;
        let mut ferol = TcpListener::from_std(l);
        self.io
            .registry()
            .register(&mut ferol, FEROL_LISTENER, Interest::READABLE)
            .map_err(io_err("FEROL listener"))?;
        self.ferol = Some(ferol);
        self.io.listen(&self.cfg.control_listener, "control listener")?;
        // Calls out: the EVM to every RU, every RU to every BU.
        for (i, &address) in self.cfg.ru_control.iter().enumerate() {
            let peer = Peer::Ru(i as u16 + 1);
            let s = self.io.connect(address, peer)?;
            self.io.open(TcpStream::from_std(s), peer)?;
        }
        for (b, &address) in self.cfg.bu_data.iter().enumerate() {
            let peer = Peer::Bu(b as u16);
            let s = self.io.connect(address, peer)?;
            self.io.open(TcpStream::from_std(s), peer)?;
        }
        // Receive memory is allocated and touched once the peers are reached (which takes
        // them no time to notice), not before: front ends wait in the listener's backlog. The
        // loop's heartbeat goes on meanwhile, stream by stream: touching gigabytes takes seconds.
        let cfg = &self.cfg;
        let mut buffers = Vec::with_capacity(cfg.ru.feds.len());
        for &fed in &cfg.ru.feds {
            let buffer = StreamBuffer::new(fed, cfg.chunk_bytes, cfg.chunks_per_fed, cfg.max_wire_bytes)
                .map_err(|e| NodeError::Io { what: "receive memory".into(), source: io::Error::other(e) })?;
            buffers.push(buffer.with_crc_check(cfg.fragment_crc_check).with_framing(cfg.framing));
            self.stats.heartbeats.add(1);
        }
        self.buffers = Buffers(buffers);
        self.stats.set_streams_missing(self.core.ru().unconnected_feds());
        self.io.enable(&format!("RU {}", self.cfg.ru.ru))?;
        self.enabled_at = Some(Instant::now());
        crate::event_loop::run(self)
    }

    /// The end-of-run report. Fragments received of events after the run's last belong to
    /// events the trigger never issued (the front ends sent past the trigger's last event, or
    /// the trigger stream broke): they are not events, but they are counted per FED and said,
    /// not dropped silently.
    fn report(&mut self) -> RuReport {
        self.io.sample_cpu(true);
        self.publish_stats();
        let orphan_fragments = self.orphan_fragments();
        if !orphan_fragments.is_empty() {
            let per_fed: Vec<String> = orphan_fragments.iter().map(|(fed, n)| format!("FED {fed}: {n}")).collect();
            let last = self.last_event_of_run().map_or("none (no event was triggered)".to_owned(), |e| e.to_string());
            self.stats.problem(format!(
                "{}: fragments received of events after the run's last event, {last}, discarded at the end of the run: {}",
                self.me(),
                per_fed.join(", ")
            ));
        }
        RuReport {
            ru: self.core.ru().counters(),
            evm: self.core.leader().and_then(|l| l.evm_counters()),
            last_event: self.core.leader().and_then(|l| l.last_triggered()),
            triggered: self.core.leader().map(|l| l.triggered()),
            excluded: self.excluded.clone(),
            trigger_fault: self.trigger_fault.clone(),
            orphan_fragments,
        }
    }

    /// The run's last event: the last triggered (EVM), or as the EVM's drain said (RU).
    fn last_event_of_run(&self) -> Option<EventNumber> {
        match self.core.leader() {
            Some(l) => l.last_triggered(),
            None => self.core.ru().run_last_event(),
        }
    }

    /// Events of the run up to its last event (0 before the first).
    fn events_of_run(&self) -> u64 {
        self.last_event_of_run().map_or(0, |last| (last + 1).saturating_sub(self.cfg.ru.first_event))
    }

    /// Per data FED, the fragments received, taken or still whole in its receive memory, of
    /// events after the run's last.
    fn orphan_fragments(&mut self) -> Vec<(FedId, u64)> {
        if self.cfg.ingest_only {
            return Vec::new();
        }
        let events = self.events_of_run();
        let mut orphans = Vec::new();
        for (i, s) in self.streams.iter().enumerate() {
            let fed = self.cfg.ru.feds[i];
            let Some(s) = s.as_ref().filter(|_| fed != TCDS_FED_ID) else { continue };
            let mut received = s.fragments;
            if s.broke.is_none() {
                while let Some(Ok(_)) = self.buffers.0[i].next_fragment() {
                    received += 1;
                }
            }
            let n = received.saturating_sub(events);
            if n > 0 {
                orphans.push((fed, n));
            }
        }
        orphans
    }

    /// Where a FED stream that closes cleanly is expected to close, when known: the run's
    /// event limit, the stop line, and once the run's last event is known (the trigger stopped,
    /// the drain seen), the events of the run.
    fn clean_end_at(&self) -> Option<u64> {
        let stopped = if self.is_evm() { trigger_off(&*self.core) } else { self.drain_seen() };
        let run = stopped.then(|| self.events_of_run());
        [self.cfg.event_limit, self.io.control.stop_line(), run].into_iter().flatten().min()
    }

    fn publish_stats(&self) {
        if self.left_out.contains(&Some(LeftOut::SyncLost)) {
            self.stats.saw(SubState::SyncLoss);
        }
        if self.left_out.contains(&Some(LeftOut::Disconnected)) {
            self.stats.saw(SubState::FedDisconnected);
        }
        let c = self.core.ru().counters();
        self.stats.events_buffered.set(self.core.ru().events_buffered() as u64);
        self.stats.fragments.set(c.fragments);
        self.stats.corrupt_fragments.set(c.corrupt_fragments);
        if let Some(p) = self.core.push_counters() {
            self.stats.parts_unsent.set(self.parts_unreachable + p.dropped_for_excluded);
        }
        let used: usize = self.buffers.0.iter().map(|b| b.occupancy().0).sum();
        self.stats.chunks_used.set(used as u64);
        if let Some(l) = self.core.leader() {
            // Read at each pass, so within a pass of the event: well inside a millisecond.
            let now_us = || std::time::SystemTime::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_micros() as u64);
            if l.started() && self.stats.run_started.get() == 0 {
                self.stats.trigger_began_unix_us.set(now_us());
            }
            if l.triggered() > self.stats.triggered.get() {
                self.stats.trigger_latest_unix_us.set(now_us());
            }
            self.stats.triggered.set(l.triggered());
            self.stats.run_started.set(u64::from(l.started()));
        }
        if let Some(e) = self.core.leader().and_then(|l| l.evm_counters()) {
            self.stats.committed.set(e.committed);
            self.stats.reassigned.set(e.reassigned);
            self.stats.lost_lumi_closed.set(e.lost_lumi_closed);
        }
    }

    /// Run control stops the trigger at the last event triggered.
    fn stop_trigger(&mut self) {
        if !self.is_evm() {
            return;
        }
        // The trigger's own end, if it has one, bounds a stop line drawn past it (push).
        let limit = [self.cfg.event_limit, self.io.control.stop_line()].into_iter().flatten().min();
        let leader = self.core.leader_mut().expect("the EVM's node");
        if let Some(n) = limit {
            leader.limit_trigger(n);
        }
        let last_event = leader.last_triggered();
        let now = self.now();
        self.core.handle(now, Input::StopTrigger { last_event });
        self.dispatch(now);
    }

    /// Takes note once that the run stopped: the EVM's node stopped the trigger (run control's
    /// stop, the trigger stream's clean end, or its break), or an RU had the EVM's drain.
    fn note_stop(&mut self) {
        if !self.stop_noted && (trigger_off(&*self.core) || self.drain_seen()) {
            self.stop_noted = true;
            self.stats.transition(Transition::Stop);
        }
    }

    /// Push: whether the peers this RU must reach from its first event on are there. RU 0
    /// sends its parts on the connections the BUs open to it, so it reads no FED stream before
    /// every BU has called (a BU that never calls fails the run at its start, as under pull);
    /// another RU tells RU 0 its progress on the connection RU 0 opens to it, and a progress
    /// said before it is there would be lost and hold the window for good. Once true, true for
    /// the run: a peer lost later is excluded, or fails the run.
    fn peers_ready(&mut self) -> bool {
        if self.peers_called || !self.core.frees_on_send() {
            return true;
        }
        let called = match self.core.leader().map(|l| l.n_bu()) {
            Some(n_bu) => (0..n_bu).all(|b| self.io.conn_to(Peer::Bu(b)).is_some()),
            None => self.io.conn_to(Peer::Evm).is_some(),
        };
        self.peers_called = called;
        called
    }

    /// Looks, every [`WAIT_LOOK`], for the event that has waited longest for a FED, and
    /// publishes it; an event that waits [`FED_SILENT_AFTER`] or more for one makes the RU say
    /// that the FED is silent.
    fn look_at_waits(&mut self) {
        if self.wait_looked.is_some_and(|t| t.elapsed() < WAIT_LOOK) {
            return;
        }
        self.wait_looked = Some(Instant::now());
        let now = self.now();
        match self.core.ru().waiting_for() {
            Some(w) => {
                let waited = Duration::from_nanos(now.saturating_sub(w.since));
                self.stats.waiting_fed.set(u64::from(w.fed) + 1);
                self.stats.waiting_ms.set(waited.as_millis() as u64);
                if waited >= FED_SILENT_AFTER {
                    self.stats.saw(SubState::FedSilent);
                }
            }
            None => {
                self.stats.waiting_fed.set(0);
                self.stats.waiting_ms.set(0);
            }
        }
    }

    /// Fails the RU when some of its streams have not connected within
    /// [`RuNodeConfig::streams_timeout`] of its enabling, unless the run ended meanwhile.
    fn check_streams_connected(&self) -> Result<(), NodeError> {
        let Some(enabled_at) = self.enabled_at else { return Ok(()) };
        if self.core.ru().all_connected() || trigger_off(&*self.core) || self.drain_seen() {
            return Ok(());
        }
        if enabled_at.elapsed() < self.cfg.streams_timeout {
            return Ok(());
        }
        Err(NodeError::StreamsMissing {
            ru: self.cfg.ru.ru,
            feds: self.core.ru().unconnected_feds(),
            waited_s: self.cfg.streams_timeout.as_secs(),
        })
    }

    /// Masks the FEDs an operator asked to mask, each said; one that is not this RU's is said
    /// too.
    fn take_masks(&mut self) {
        for fed in self.io.control.take_masks() {
            let me = self.me();
            let Some(i) = self.cfg.ru.feds.iter().position(|&f| f == fed) else {
                self.stats.problem(format!("{me}: cannot mask FED {fed}: it is not one of {:?}", self.cfg.ru.feds));
                continue;
            };
            if fed == TCDS_FED_ID && self.is_evm() {
                self.stats.problem(format!("{me:?}: cannot mask FED {fed}: it is the trigger; stop the run instead"));
                continue;
            }
            let now = self.now();
            if self.core.stream_changed(now, i, StreamChange::Masked) {
                self.stats.fed_errors.add(i, FedError::Masked, 1);
                self.stats.saw(SubState::FedMasked);
                self.stats.set_streams_missing(self.core.ru().unconnected_feds());
            } else {
                self.stats.problem(format!("{me:?}: FED {fed} is left out already; masking it changes nothing"));
            }
            self.dispatch(now);
        }
    }

    /// Ingest only: every stream has ended and every event is built and freed.
    fn ingested_all(&self) -> bool {
        let ended = self.streams.iter().all(|s| s.as_ref().is_some_and(|s| s.ended));
        ended && self.core.ru().events_buffered() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed handle this replaced kept 16 bits of the chunk: chunk 65,536 named chunk 0.
    /// Field for field, every chunk and stream at and past that boundary names itself.
    #[test]
    fn a_fragment_in_chunk_65536_or_on_stream_65536_is_named_as_itself() {
        for (stream, chunk) in [(0, 65_535), (0, 65_536), (1, 65_537), (65_536, 3), (70_000, u32::MAX)] {
            let handle = FragmentHandle { chunk, offset: 4096, wire_len: 2064, head: 16 };
            let back = stream_handle(buffer_ref(stream, handle));
            assert_eq!((back.0, back.1), (stream, handle));
        }
    }
}
