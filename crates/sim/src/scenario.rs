//! What to simulate: a topology, a run length, and the faults to inject.

use tessera_evb::types::Nanos;

/// A system's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    /// Readout units; RU 0 also reads the trigger.
    pub n_ru: u16,
    /// Data FEDs per RU.
    pub feds_per_ru: u16,
    /// Builder units.
    pub n_bu: u16,
}

/// Faults to inject, each drawn from the seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// BU crashes over the run (each restarts after a while).
    pub bu_crashes: u32,
    /// BUs that write files 20 times slower than the others.
    pub slow_bus: u16,
    /// FEDs that pause for a while (up to ten times the give-up time a system might set), then
    /// resume: connected and silent, they hold their events, and through full buffers the
    /// trigger (dead time); none of their events goes out without them.
    pub stalled_feds: u16,
    /// FEDs whose stream ends (closes) for good partway through: the events from then on go
    /// out without them, flagged.
    pub dead_feds: u16,
    /// FEDs that go silent for good partway through, which an operator masks a few ms later:
    /// their events wait until the mask, and go out without them from then on.
    pub masked_feds: u16,
    /// FEDs that skip one event (a sync loss).
    pub sync_losses: u16,
    /// FEDs that send at half the trigger's rate: they fall further behind the trigger all run
    /// long, yet their streams are never silent, so none of their events may go out without them.
    pub slow_feds: u16,
    /// The trigger stream (FED 1024) closes a third to half-way through the run, before the
    /// run's event limit: the run must fail with the break said, build every event triggered
    /// before it, and count the data FEDs' fragments of later events as orphans.
    pub trigger_stream_lost: bool,
    /// Probability that a fragment is corrupt.
    pub corrupt_fragment_probability: f64,
    /// Largest extra network delay, in nanoseconds (reordering between connections).
    pub network_jitter_ns: u64,
    /// Orbit mode: sources whose blocks of a few orbits lack one of the orbit's events (the DTH
    /// emulator's `drop-event`): the BU must leave each such block out of its orbit, and only
    /// those.
    pub short_blocks: u16,
    /// Streams connect in a random order, each after a random delay up to this, and name their
    /// FED a random while later, with strangers among them (connections that name a FED of no
    /// RU, or nothing): no event may be made before every stream is there. 0: every stream is
    /// there at the start.
    pub connect_delay_max_ns: u64,
    /// Fragments often arrive in pieces: a part first (the stream is alive), the rest a while
    /// later, as reads of a TCP stream do.
    pub partial_reads: bool,
}

impl Faults {
    /// No faults and little jitter.
    pub const NONE: Faults = Faults {
        bu_crashes: 0,
        slow_bus: 0,
        stalled_feds: 0,
        dead_feds: 0,
        masked_feds: 0,
        sync_losses: 0,
        slow_feds: 0,
        trigger_stream_lost: false,
        corrupt_fragment_probability: 0.0,
        network_jitter_ns: 20_000,
        short_blocks: 0,
        connect_delay_max_ns: 0,
        partial_reads: false,
    };

    /// A little of everything, for the `8x8_*random` scenarios: BU crashes, slow BUs, a pause,
    /// a sync loss, a slow FED, corrupt fragments, network jitter, streams that connect late and
    /// fragments read in pieces.
    pub const RANDOM: Faults = Faults {
        bu_crashes: 3,
        slow_bus: 2,
        stalled_feds: 1,
        dead_feds: 0,
        masked_feds: 0,
        sync_losses: 1,
        slow_feds: 1,
        trigger_stream_lost: false,
        corrupt_fragment_probability: 0.001,
        network_jitter_ns: 200_000,
        short_blocks: 0,
        connect_delay_max_ns: 5_000_000,
        partial_reads: true,
    };
}

/// Orbit mode (HL-LHC): the protocol's unit is an orbit, every source sends one orbit block per
/// LHC orbit holding its fragment of each of the orbit's events, and the BUs write orbit files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrbitMode {
    /// Mean events per orbit (Poisson): the L1 rate over the LHC orbit rate, 66.7 at 750 kHz.
    pub mean_events: f64,
    /// Bytes of a source's fragment of one event, before SlinkRocket framing.
    pub fragment_bytes: u32,
    /// Orbits per lumi section.
    pub orbits_per_lumi_section: u64,
}

/// The push protocol: the RUs send each event to the BU a shared function of its number gives,
/// the BUs age what stays incomplete, and a throttle holds the trigger.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PushMode {
    /// Consecutive events that go to one BU.
    pub block_events: u64,
    /// A BU ships an event incomplete once a part of an event this many newer came.
    pub age_events: u64,
    /// A BU ships an event incomplete this long after its first part came, in nanoseconds.
    pub age_ns: u64,
    /// A BU raises the throttle at this share of its bound on events held, in percent: at 100
    /// it never does, and only its RUs' throttle (their sends wait on it) holds the trigger.
    pub bu_high_water_percent: u32,
}

impl PushMode {
    /// The destination function over `n_bu` BUs, the runs' first event `first_event`.
    pub fn destinations(&self, first_event: u64, n_bu: u16) -> tessera_evb::push::Destinations {
        tessera_evb::push::Destinations::new(first_event, self.block_events, (0..n_bu).collect())
    }
}

/// The LHC orbit, in nanoseconds: the interval between the orbits of orbit mode.
pub const ORBIT_NS: u64 = 88_924;

/// A deliberate protocol bug, switched on to show that the simulator catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// The BU reports a file built before its data is written.
    CommitBeforeWritten,
    /// The EVM forgets to reassign a lost BU's events.
    ForgetReassign,
    /// The RU frees an event's buffers when it sends it, before the commit.
    ReleaseBeforeCommit,
    /// Push: RU 0's node excludes a lost BU without telling the other RUs.
    ExcludeUntold,
    /// The RUs give up on a FED silent for a while (the old fragment time-out), though the
    /// scenario sets no give-up time.
    GiveUpSilentFeds,
    /// The EVM starts the run without waiting for every RU's streams.
    StartBeforeStreams,
}

/// A named simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Name, after topology and fault: `2x2_bu_crash`.
    pub name: &'static str,
    /// The system.
    pub topology: Topology,
    /// Events triggered in the run.
    pub events: u64,
    /// Number of the first event.
    pub first_event: u64,
    /// Mean time between triggers, in nanoseconds.
    pub trigger_interval_ns: u64,
    /// Events per lumi section.
    pub events_per_lumi_section: u64,
    /// The RU's memory per data FED stream, in fragments, as the runtime's receive pool: a
    /// stream whose held fragments reach it is not read until some are released after their
    /// commit. The trigger FED's fragments are small, and its memory is bound by the RU's window
    /// alone, as with real fragment sizes (a 952-byte trigger fragment, kilobytes of data).
    pub fed_buffer_fragments: u64,
    /// Orbit mode, or `None` for event mode. In orbit mode `events` counts orbits, the trigger
    /// comes every [`ORBIT_NS`], `events_per_lumi_section` is unused, and
    /// `fed_buffer_fragments` counts orbit blocks.
    pub orbit: Option<OrbitMode>,
    /// The push protocol, or `None` for pull.
    pub push: Option<PushMode>,
    /// Faults.
    pub faults: Faults,
    /// A deliberate bug, for the mutation check.
    pub bug: Option<Bug>,
    /// The RUs give up on a FED whose stream brings nothing for this long
    /// (`ru.silent_fed_give_up_ms`), in nanoseconds; `None` (as by default): never.
    pub give_up_ns: Option<Nanos>,
    /// Events an RU holds at most (its window).
    pub ru_window_events: usize,
    /// Each BU's store, in bytes (`bu.frame_store_bytes`): under pull its requests are credits
    /// for room in it. `None`: no bound but its events.
    pub bu_store_bytes: Option<u64>,
}

impl Scenario {
    /// The largest pause of a stalled FED: ten times the give-up time a system might set
    /// ([`GIVE_UP_NS`]), whether this one sets it or not.
    pub fn pause_max_ns(&self) -> Nanos {
        10 * GIVE_UP_NS
    }
}

/// The give-up time of the scenarios that set one, and the measure of the others' pauses.
pub const GIVE_UP_NS: Nanos = 2_000_000;

/// How long an operator takes to mask a FED that went silent for good.
pub const MASK_AFTER_NS: Nanos = 5_000_000;

const fn base(name: &'static str, n_ru: u16, feds_per_ru: u16, n_bu: u16, events: u64) -> Scenario {
    Scenario {
        name,
        topology: Topology { n_ru, feds_per_ru, n_bu },
        events,
        first_event: 1,
        trigger_interval_ns: 10_000,
        events_per_lumi_section: 400,
        fed_buffer_fragments: 1024,
        orbit: None,
        push: None,
        faults: Faults::NONE,
        bug: None,
        give_up_ns: None,
        ru_window_events: 1024,
        bu_store_bytes: None,
    }
}

/// A push scenario: blocks of 8 events, BUs ageing events 2048 newer or 5 ms old.
const fn push_base(name: &'static str, n_ru: u16, feds_per_ru: u16, n_bu: u16, events: u64) -> Scenario {
    Scenario {
        push: Some(PushMode { block_events: 8, age_events: 2048, age_ns: 5_000_000, bu_high_water_percent: 50 }),
        ..base(name, n_ru, feds_per_ru, n_bu, events)
    }
}

/// An orbit-mode scenario of `orbits` orbits at `mean_events` events per orbit, 2 kB fragments,
/// 64 orbit blocks of receive memory per source (8 MiB at 125 kB blocks, the runtime's default)
/// and lumi sections of 200 orbits.
const fn orbit_base(
    name: &'static str,
    n_ru: u16,
    sources_per_ru: u16,
    n_bu: u16,
    orbits: u64,
    mean_events: f64,
) -> Scenario {
    Scenario {
        trigger_interval_ns: ORBIT_NS,
        fed_buffer_fragments: 64,
        orbit: Some(OrbitMode { mean_events, fragment_bytes: 2048, orbits_per_lumi_section: 200 }),
        ..base(name, n_ru, sources_per_ru, n_bu, orbits)
    }
}

/// The built-in scenarios, run by CI and by `tessera sim`.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario { first_event: (1 << 24) - 700, ..base("1x1_lv1_wrap", 1, 4, 1, 1500) },
        Scenario { faults: Faults { bu_crashes: 2, ..Faults::NONE }, ..base("2x2_bu_crash", 2, 4, 2, 1500) },
        Scenario { faults: Faults { slow_bus: 1, ..Faults::NONE }, ..base("4x4_slow_bu", 4, 16, 4, 1200) },
        // With a give-up time set (off by default): a silent FED is given up after it and its
        // events go out without it until it catches up; a stream that ends is given up at once.
        Scenario {
            faults: Faults { stalled_feds: 1, dead_feds: 1, ..Faults::NONE },
            give_up_ns: Some(GIVE_UP_NS),
            ..base("2x2_missing_fed", 2, 4, 2, 1200)
        },
        // Without one: FEDs that pause for up to ten times that hold the trigger (dead time,
        // counted), and no event goes out without them. A window of 256 events fills well
        // within a pause.
        Scenario {
            faults: Faults { stalled_feds: 3, partial_reads: true, ..Faults::NONE },
            ru_window_events: 256,
            fed_buffer_fragments: 256,
            ..base("4x4_fed_paused", 4, 4, 4, 2000)
        },
        // A FED goes silent for good; an operator masks it a few ms later: its events wait
        // until then, and go out without it from the mask on. Another's stream ends.
        Scenario {
            faults: Faults { masked_feds: 1, dead_feds: 1, ..Faults::NONE },
            ..base("2x2_fed_masked", 2, 4, 2, 1500)
        },
        // Streams connect in any order, up to 50 ms late (several times every time-out), with
        // strangers among them and fragments read in pieces: no event is made before the last
        // stream is there, and none is incomplete.
        Scenario {
            faults: Faults { connect_delay_max_ns: 50_000_000, partial_reads: true, ..Faults::NONE },
            ..base("4x4_late_connect", 4, 4, 4, 1500)
        },
        // 32 RUs and 32 BUs whose stores hold a dozen events: every BU asks only for what fits
        // (its requests are credits for room), and the run completes.
        Scenario { bu_store_bytes: Some(12 * 32 * 3 * 1024), ..base("32x32_small_store", 32, 3, 32, 800) },
        // Receive memory for 12 fragments a FED, less than one BU file holds (16 events): files
        // close on their time-out only, the RUs are full and their streams unread most of the
        // run, and no event may go out incomplete for it.
        Scenario { fed_buffer_fragments: 12, ..base("2x2_ru_full", 2, 4, 2, 1200) },
        Scenario { faults: Faults { slow_feds: 1, ..Faults::NONE }, ..base("4x4_slow_fed", 4, 4, 4, 1200) },
        Scenario {
            faults: Faults { trigger_stream_lost: true, ..Faults::NONE },
            ..base("2x2_trigger_stream_lost", 2, 4, 2, 1200)
        },
        Scenario { faults: Faults::RANDOM, ..base("8x8_random", 8, 4, 8, 2000) },
        // Orbit mode at a low L1 rate: one orbit in seven is empty (counted, never written).
        Scenario {
            faults: Faults { bu_crashes: 2, ..Faults::NONE },
            ..orbit_base("2x2_orbit_bu_crash", 2, 4, 2, 1000, 2.0)
        },
        // HL-LHC's 750 kHz: 67 events and ~140 kB blocks per source and orbit.
        Scenario {
            faults: Faults { stalled_feds: 1, dead_feds: 1, ..Faults::NONE },
            ..orbit_base("4x4_orbit_missing_source", 4, 4, 4, 600, 66.7)
        },
        Scenario {
            faults: Faults { short_blocks: 2, ..Faults::NONE },
            ..orbit_base("2x2_orbit_event_count_mismatch", 2, 4, 2, 800, 5.0)
        },
        // Receive memory for 6 orbit blocks a source: the RUs are full and their streams unread
        // most of the run, and no orbit may go out without a source for it.
        Scenario { fed_buffer_fragments: 6, ..orbit_base("2x2_orbit_ru_full", 2, 4, 2, 300, 66.7) },
        Scenario {
            faults: Faults { short_blocks: 1, ..Faults::RANDOM },
            ..orbit_base("8x8_orbit_random", 8, 4, 8, 500, 0.7)
        },
        // Push (after LHCb): no event manager; a throttle holds the trigger.
        push_base("2x2_push", 2, 4, 2, 1500),
        Scenario { faults: Faults { slow_bus: 1, ..Faults::NONE }, ..push_base("4x4_push_slow_bu", 4, 4, 4, 1200) },
        Scenario { faults: Faults { bu_crashes: 1, ..Faults::NONE }, ..push_base("2x2_push_bu_crash", 2, 4, 2, 1500) },
        // A FED stalls longer than the BUs wait, and its RU gives it up (a give-up time set):
        // the BUs ship its events without its RU's part, and the part, sent after the RU gave
        // up, comes late and is dropped.
        Scenario {
            faults: Faults { stalled_feds: 1, ..Faults::NONE },
            push: Some(PushMode { block_events: 8, age_events: 2048, age_ns: 1_000_000, bu_high_water_percent: 50 }),
            give_up_ns: Some(GIVE_UP_NS),
            ..base("4x4_push_late_fragment", 4, 4, 4, 1200)
        },
        Scenario { faults: Faults { bu_crashes: 2, ..Faults::RANDOM }, ..push_base("8x8_push_random", 8, 4, 8, 2000) },
        // Push with streams that connect late: nothing is sent before every stream is there, so
        // no BU ages an event for an RU still waiting for a stream.
        Scenario {
            faults: Faults { connect_delay_max_ns: 50_000_000, ..Faults::NONE },
            ..push_base("4x4_push_late_connect", 4, 4, 4, 1500)
        },
        // A slow BU that never throttles: it stops reading when full, its RUs' sends wait on
        // it (TCP), their memory fills, and their throttle holds the trigger.
        Scenario {
            faults: Faults { slow_bus: 1, ..Faults::NONE },
            push: Some(PushMode { block_events: 8, age_events: 2048, age_ns: 5_000_000, bu_high_water_percent: 100 }),
            ..base("2x2_push_bu_full", 2, 4, 2, 1200)
        },
    ]
}

/// The scenario called `name`.
pub fn scenario(name: &str) -> Option<Scenario> {
    scenarios().into_iter().find(|s| s.name == name)
}
