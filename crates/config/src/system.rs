//! The sections of the system file: one struct per unit, with units in the field names and
//! the defaults of the laptop system.

use crate::emulation::{ClockSpec, EmulationError, FaultSpec, MAX_FRAGMENT_BYTES, SizeModel};
use crate::fed_list::{format_fed_list, parse_fed_list};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::{Path, PathBuf};
use tessera_formats::fed::CrcCheck;
use tessera_formats::ferol::ferol_wire_len;
use tessera_formats::tcds::{TCDS_FED_ID, TCDS_FRAGMENT_BYTES};

/// A whole Tessera system: what runs where, and how each kind of unit is tuned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    /// The run: its number, its first event and when it stops.
    #[serde(default)]
    pub run: RunSection,
    /// The emulated trigger.
    #[serde(default)]
    pub trigger: TriggerSection,
    /// The event manager, which runs beside RU 0 (pull).
    #[serde(default)]
    pub evm: EvmParams,
    /// The push protocol's tuning (`run.protocol: push`).
    #[serde(default)]
    pub push: PushParams,
    /// The readout units, at least one; `rus[0]` reads the trigger FED and hosts the EVM.
    pub rus: Vec<RuSection>,
    /// The builder units, at least one.
    pub bus: Vec<BuSection>,
    /// Tuning shared by every RU (an RU may override some of it in its `params`).
    #[serde(default)]
    pub ru: RuParams,
    /// Tuning shared by every BU.
    #[serde(default)]
    pub bu: BuParams,
    /// The filter farm behind the BUs and the mergers into storage.
    #[serde(default)]
    pub fu: FuParams,
    /// How `tessera run` places the units: in its own process, or on hosts through agents.
    #[serde(default)]
    pub controller: ControllerSection,
    /// What the protocol links travel on, per link class: TCP (the default) or UCX.
    #[serde(default)]
    pub transport: TransportSection,
}

impl Default for SystemConfig {
    /// The laptop system: two RUs (`ru0` with the trigger FED 1024 and FEDs 0–3, `ru1` with FEDs
    /// 4–7), two BUs, everything on 127.0.0.1 on any free port, 20 kHz for 10 seconds.
    fn default() -> Self {
        SystemConfig {
            run: RunSection::default(),
            trigger: TriggerSection::default(),
            evm: EvmParams::default(),
            push: PushParams::default(),
            rus: vec![RuSection::new("ru0", vec![TCDS_FED_ID, 0, 1, 2, 3]), RuSection::new("ru1", vec![4, 5, 6, 7])],
            bus: vec![BuSection::new("bu0"), BuSection::new("bu1")],
            ru: RuParams::default(),
            bu: BuParams::default(),
            fu: FuParams::default(),
            controller: ControllerSection::default(),
            transport: TransportSection::default(),
        }
    }
}

impl SystemConfig {
    /// Every FED of the system: those of `rus[0]` in the order listed, then `rus[1]`'s, and so on.
    pub fn all_feds(&self) -> Vec<u16> {
        self.rus.iter().flat_map(|ru| ru.feds.iter().copied()).collect()
    }

    /// The tuning of RU `ru_index`: the shared `ru` section with that RU's `params` on top.
    ///
    /// # Panics
    /// If there is no RU `ru_index`.
    pub fn ru_params(&self, ru_index: usize) -> RuParams {
        self.rus[ru_index].params.apply(&self.ru)
    }

    /// The directory in which BU `bu_index` writes its run directory: its `directory` if set,
    /// else `output/<name>`, where `output` is the run's output directory (`run.output`, or what
    /// the command line put in its place). A relative `directory` is used as written, relative
    /// to the working directory of the process.
    ///
    /// # Panics
    /// If there is no BU `bu_index`.
    pub fn bu_directory(&self, bu_index: usize, output: &Path) -> PathBuf {
        let bu = &self.bus[bu_index];
        bu.directory.clone().unwrap_or_else(|| output.join(&bu.name))
    }

    /// Whether the system builds orbits (`run.mode: orbit`).
    pub fn is_orbit_mode(&self) -> bool {
        self.run.mode == RunMode::Orbit
    }

    /// Whether events are pushed (`run.protocol: push`).
    pub fn is_push(&self) -> bool {
        self.run.protocol == Protocol::Push
    }

    /// How many of its units every front-end stream brings before it closes, if the run has a
    /// limit: `run.events` (event mode) or `run.orbits` (orbit mode). The protocol counts
    /// these units, events or orbits, alike.
    pub fn stream_limit(&self) -> Option<u64> {
        match self.run.mode {
            RunMode::Event => self.run.events,
            RunMode::Orbit => self.run.orbits,
        }
    }

    /// The largest unit on the wire that RU `ru_index` receives: its largest FED fragment with
    /// FEROL block headers, or in orbit mode a whole chunk (an orbit block, with its stream block
    /// headers, must fit in one; a larger one breaks its stream, said as such).
    ///
    /// # Panics
    /// If there is no RU `ru_index`.
    pub fn max_wire_bytes(&self, ru_index: usize) -> usize {
        match self.run.mode {
            RunMode::Event => self.rus[ru_index].max_wire_fragment_bytes(),
            RunMode::Orbit => self.ru_params(ru_index).chunk_bytes,
        }
    }

    /// The rate at which the protocol's units are asked for: the paced trigger rate, or in orbit
    /// mode the LHC orbit rate (11.245 kHz) at which the DTH emulators send orbits; `None` when
    /// free running.
    pub fn unit_rate_hz(&self) -> Option<f64> {
        match self.run.mode {
            RunMode::Event => self.trigger.paced_rate_hz(),
            RunMode::Orbit => (!self.trigger.free_running).then(|| 1.0 / tessera_formats::fed::ORBIT_SECONDS),
        }
    }

    /// What the protocol's units are, as the summary and progress name them: `orbits` in orbit
    /// mode, `events` otherwise.
    pub fn unit_noun(&self) -> &'static str {
        match self.run.mode {
            RunMode::Event => "events",
            RunMode::Orbit => "orbits",
        }
    }

    /// The emulated trigger clock of this system.
    pub fn clock_spec(&self) -> ClockSpec {
        ClockSpec {
            rate_hz: self.trigger.clock_rate_hz(),
            seed: self.trigger.seed,
            orbits_per_lumi_section: self.run.orbits_per_lumi_section,
        }
    }
}

/// The run: its number, its first event, when it stops and where its files go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "RunFile")]
pub struct RunSection {
    /// Run number, 1..=999999.
    pub number: u32,
    /// What the system builds: events from FEROL streams (`event`, the default), or whole
    /// orbits from DTH streams (`orbit`, HL-LHC).
    pub mode: RunMode,
    /// How events reach the BUs: `pull` (the default: BUs ask the EVM for events) or `push`
    /// (every RU sends each event to the BU a function of its number gives; tuned in `push`).
    pub protocol: Protocol,
    /// Number of the first event, at least 1 (16777211 crosses the 24-bit LV1 wrap after 5
    /// events).
    pub first_event: u64,
    /// Stop after this many events per FED stream (event mode).
    pub events: Option<u64>,
    /// Stop after this many orbits per source (orbit mode).
    pub orbits: Option<u64>,
    /// Stop after this many seconds. When the file gives neither `events` nor `seconds`, this
    /// is 10; when it gives `events` only, there is no time limit.
    pub seconds: Option<f64>,
    /// Orbits per lumi section, 1..=262144 (2^18 is real data, about 23.3 s; 16384 is about
    /// 1.46 s).
    pub orbits_per_lumi_section: u64,
    /// Directory under which every unit's files go (`tessera run --output` overrides it).
    pub output: Option<PathBuf>,
}

/// What a system builds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    /// Events: one fragment per FED and event, on FEROL streams (docs/formats.md §1-§2).
    #[default]
    Event,
    /// Orbits: one orbit block per source and LHC orbit, on DTH streams (docs/formats.md §6).
    /// The protocol's units are orbits: every count of events in `evm`, `ru` and `bu` counts
    /// orbits, and the source 1024 of `rus[0]` paces the run as the trigger FED does.
    Orbit,
}

/// How events reach the BUs (docs/design.md §8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// BUs ask the EVM for events; RUs send them what it assigned.
    #[default]
    Pull,
    /// Every RU sends each event to the BU a function of its number gives; no event manager.
    Push,
}

/// Seconds a run lasts when the file says nothing about when it stops.
pub const DEFAULT_RUN_SECONDS: f64 = 10.0;

impl Default for RunSection {
    fn default() -> Self {
        RunSection {
            number: 1,
            mode: RunMode::Event,
            protocol: Protocol::Pull,
            first_event: 1,
            events: None,
            orbits: None,
            seconds: Some(DEFAULT_RUN_SECONDS),
            orbits_per_lumi_section: 16_384,
            output: None,
        }
    }
}

/// The `run` section as written: `seconds` distinguishes absent from `null`, because an absent
/// `seconds` means 10 s only when `events` is absent too.
#[derive(Deserialize)]
#[serde(rename = "RunSection", deny_unknown_fields)]
struct RunFile {
    #[serde(default = "one_u32")]
    number: u32,
    #[serde(default)]
    mode: RunMode,
    #[serde(default)]
    protocol: Protocol,
    #[serde(default = "one_u64")]
    first_event: u64,
    #[serde(default)]
    events: Option<u64>,
    #[serde(default)]
    orbits: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    seconds: Option<Option<f64>>,
    #[serde(default = "default_orbits_per_lumi_section")]
    orbits_per_lumi_section: u64,
    #[serde(default)]
    output: Option<PathBuf>,
}

impl From<RunFile> for RunSection {
    fn from(f: RunFile) -> Self {
        let seconds = match (f.seconds, f.events.or(f.orbits)) {
            (Some(seconds), _) => seconds,
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_RUN_SECONDS),
        };
        RunSection {
            number: f.number,
            mode: f.mode,
            protocol: f.protocol,
            first_event: f.first_event,
            events: f.events,
            orbits: f.orbits,
            seconds,
            orbits_per_lumi_section: f.orbits_per_lumi_section,
            output: f.output,
        }
    }
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

fn one_u32() -> u32 {
    1
}

fn one_u64() -> u64 {
    1
}

fn default_orbits_per_lumi_section() -> u64 {
    RunSection::default().orbits_per_lumi_section
}

/// The emulated trigger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TriggerSection {
    /// Mean rate of Poisson triggers in Hz; `null` means free running.
    pub rate_hz: Option<f64>,
    /// Send as fast as the units take the data; orbits and BXs are still stamped from a clock at
    /// `rate_hz` (or 100 kHz) that nobody waits for.
    pub free_running: bool,
    /// Seed of trigger times and fault draws.
    pub seed: u64,
}

/// The trigger rate when none is given: what the default system sustains on a two-core machine,
/// its emulator, units, FUs and mergers sharing both cores (BENCHMARKS.md).
pub const DEFAULT_RATE_HZ: f64 = 20_000.0;
/// The rate of the clock that stamps a free-running stream's orbits and BXs when no rate is
/// given: the CMS level-1 trigger rate.
pub const LEVEL1_RATE_HZ: f64 = 100_000.0;

impl Default for TriggerSection {
    fn default() -> Self {
        TriggerSection { rate_hz: Some(DEFAULT_RATE_HZ), free_running: false, seed: 1 }
    }
}

impl TriggerSection {
    /// The rate at which triggers are paced, or `None` when free running.
    pub fn paced_rate_hz(&self) -> Option<f64> {
        self.rate_hz.filter(|_| !self.free_running)
    }

    /// The rate of the clock that stamps orbits and BXs, paced or not.
    pub fn clock_rate_hz(&self) -> f64 {
        self.rate_hz.unwrap_or(LEVEL1_RATE_HZ)
    }
}

/// The event manager's tuning. The EVM runs on the host of `rus[0]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvmParams {
    /// TCP port on which BUs connect to the EVM; 0 takes any free port, which only works when
    /// one `tessera run` starts every unit.
    pub port: u16,
    /// Events per assignment message, at least 1.
    pub assign_batch_events: u32,
    /// Most events assigned to one BU and not yet committed, at least 1.
    pub max_assigned_per_bu: u32,
    /// Longest an assignment waits for its batch to fill, in microseconds.
    pub assign_delay_us: u64,
    /// When triggers pause, the open lumi sections are closed after this many seconds without
    /// a trigger; at least one lumi section's length, so that any later trigger is of a later
    /// section (a trigger for a closed section is counted lost, `LUMI_SECTION_CLOSED`).
    pub lumi_section_timeout_s: f64,
}

impl Default for EvmParams {
    fn default() -> Self {
        EvmParams {
            port: 0,
            assign_batch_events: 64,
            max_assigned_per_bu: 4096,
            assign_delay_us: 100,
            lumi_section_timeout_s: 30.0,
        }
    }
}

/// The push protocol's tuning, used when `run.protocol` is `push`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushParams {
    /// Consecutive events that go to one BU, at least 1: each RU sends a block as one message.
    pub block_events: u64,
    /// The BUs that get events, by name, round robin in this order; absent: every BU. A BU left
    /// out runs and gets none (masking a BU is configuration).
    pub bus: Option<Vec<String>>,
    /// A BU ships an event incomplete once a part of an event this many events newer has come,
    /// at least 1.
    pub age_events: u64,
    /// ... or this long after its first part came, in ms, at least 1.
    pub age_ms: u64,
    /// A BU raises the throttle when it holds this share of `bu.max_events_in_flight`, in
    /// percent (1..=100).
    pub bu_high_water_percent: u8,
    /// An RU raises the throttle when it holds this share of `ru.max_events_buffered`, in
    /// percent (1..=100).
    pub ru_high_water_percent: u8,
    /// A lost BU gets no event from the first block this many events past the newest RU 0 has
    /// seen: every RU must not have sent it a part of them yet.
    pub exclude_margin_events: u64,
    /// The RUs keep within this many event numbers of each other: a FED stream further ahead of
    /// the slowest RU waits (and the trigger with it). At least 1, below `age_events`, so that
    /// the RUs' normal spread never ages an event.
    pub window_events: u64,
}

impl Default for PushParams {
    fn default() -> Self {
        PushParams {
            block_events: 64,
            bus: None,
            age_events: 4096,
            age_ms: 200,
            bu_high_water_percent: 80,
            ru_high_water_percent: 80,
            exclude_margin_events: 4096,
            window_events: 2048,
        }
    }
}

/// How `tessera run` places the units of a system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControllerSection {
    /// The port on which every host named in the file runs `tessera agent`; `tessera run` then
    /// starts each unit as a process on its host through that host's agent. Absent: the whole
    /// system runs inside the `tessera run` process (threads, and FU processes beside it).
    pub agent_port: Option<u16>,
    /// A unit whose loop has not moved its heartbeat, or whose host's agent has not answered,
    /// for this long is reported stalled and the run is stopped, in s.
    pub heartbeat_timeout_s: f64,
    /// Longest a unit may take from its start until it takes data, in s.
    pub start_timeout_s: u64,
    /// After an operator's stop (SIGINT, SIGTERM, the control API's stop), the run drains and
    /// its filter farm finishes within this long, or is cut short (whole files, a summary); a
    /// second stop cuts it short at once. Keep it below a service manager's own stop time-out,
    /// in s.
    pub stop_timeout_s: u64,
    /// A BU, FU or merger process that dies is started again (a BU with `--restart`) up to
    /// this many times each; 0: its death ends the run. An RU's or the EVM's always does. On
    /// one host (`tessera run`) it bounds the restarts of each FU process.
    pub max_restarts: u32,
    /// The host that runs the mergers (`tessera merge`), which read the FUs' outputs and the
    /// BUs' directories through a file system all hosts share; absent: the FU host of `bus[0]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merger_host: Option<String>,
}

impl Default for ControllerSection {
    fn default() -> Self {
        ControllerSection {
            agent_port: None,
            heartbeat_timeout_s: 3.0,
            start_timeout_s: 30,
            stop_timeout_s: 60,
            max_restarts: 2,
            merger_host: None,
        }
    }
}

/// What a protocol link travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// A TCP connection (the default): what every host has.
    #[default]
    Tcp,
    /// UCX active messages (a build with the feature `ucx`): InfiniBand or RoCE verbs, shared
    /// memory between the processes of one host, or UCX's own TCP, as UCX chooses; the link's
    /// TCP connection stays open beside it, for its opening and to see its peer go.
    Ucx,
}

/// The class of a protocol link, by the units at its ends: each class has its transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkClass {
    /// A link to a BU: from an RU or from the EVM's node (whose RU 0 sends its super-fragments
    /// on it beside the EVM's messages): super-fragments, requests, commits; the event
    /// builder's bulk.
    RuBu,
    /// A link between the EVM's node and another RU: event assignments, releases and the drain.
    EvmRu,
}

/// What the protocol links travel on, per [`LinkClass`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportSection {
    /// The links to the BUs: super-fragments, requests and commits.
    pub ru_bu: Transport,
    /// The links between the EVM's node and the other RUs.
    pub evm_ru: Transport,
    /// UCX's transports, as `UCX_TLS` names them (`tcp`, `sm,self`, `rc,ud`, ...); absent:
    /// `UCX_TLS` from the environment, else UCX's own choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ucx_transports: Option<String>,
}

impl Default for TransportSection {
    fn default() -> Self {
        TransportSection { ru_bu: Transport::Tcp, evm_ru: Transport::Tcp, ucx_transports: None }
    }
}

impl TransportSection {
    /// The transport of the links of `class`.
    pub fn of(&self, class: LinkClass) -> Transport {
        match class {
            LinkClass::RuBu => self.ru_bu,
            LinkClass::EvmRu => self.evm_ru,
        }
    }

    /// Whether any link class travels on UCX.
    pub fn uses_ucx(&self) -> bool {
        self.ru_bu == Transport::Ucx || self.evm_ru == Transport::Ucx
    }

    /// What the links travel on, in words for a run's first lines: "links on TCP", "links on
    /// UCX (transports tcp)", or per class when they differ. `unset` says which transports the
    /// UCX links take when the file names none (`UCX_TLS` of the process that starts them).
    pub fn words(&self, unset: &str) -> String {
        let ucx = match &self.ucx_transports {
            Some(t) => format!("UCX (transports {t})"),
            None => format!("UCX (transports {unset})"),
        };
        let on = |t: Transport| if t == Transport::Ucx { ucx.clone() } else { "TCP".to_owned() };
        if self.ru_bu == self.evm_ru {
            format!("links on {}", on(self.ru_bu))
        } else {
            format!("links to the BUs on {}, between the EVM and the RUs on {}", on(self.ru_bu), on(self.evm_ru))
        }
    }
}

impl BuSection {
    /// The host of this BU's FU processes.
    pub fn fu_host(&self) -> &str {
        self.fu_host.as_deref().unwrap_or(&self.host)
    }
}

/// The host everything binds to unless told otherwise (guarantee 5: loopback by default).
pub const DEFAULT_HOST: &str = "127.0.0.1";

fn default_host() -> String {
    DEFAULT_HOST.to_owned()
}

fn yes() -> bool {
    true
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// One readout unit: where it runs, which FEDs it reads, and their emulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuSection {
    /// Name, unique across all units, of letters, digits, `_` and `-`.
    pub name: String,
    /// Address it binds to and is reached at.
    #[serde(default = "default_host")]
    pub host: String,
    /// Port the FEROL streams connect to; 0 takes any free port.
    #[serde(default)]
    pub ferol_port: u16,
    /// Port the EVM connects to for assignments; 0 takes any free port.
    #[serde(default)]
    pub control_port: u16,
    /// Its FEDs, written as a FED list (`1024,0-3`); unique across the system, the trigger FED
    /// 1024 only on `rus[0]`.
    #[serde(deserialize_with = "fed_list_from_yaml", serialize_with = "fed_list_to_yaml")]
    pub feds: Vec<u16>,
    /// Size of its FEDs' fragments (not of the trigger FED's, which is always 952 bytes).
    #[serde(default)]
    pub fragment_size: FragmentSize,
    /// Emulator fault specifications as on the command line (`bad-crc@100/3`).
    #[serde(default)]
    pub faults: Vec<String>,
    /// Whether `tessera run` starts an emulator for these FEDs.
    #[serde(default = "yes")]
    pub emulated: bool,
    /// The pace of its emulated front ends, in percent of the trigger's (1 to 100): below 100
    /// they send each event later than its trigger and fall further behind it all run long, as
    /// slow front ends do (back-pressure then holds the trigger: dead time).
    #[serde(default = "full_pace", skip_serializing_if = "is_full_pace")]
    pub send_rate_percent: u32,
    /// This RU's own values for some of the shared `ru` tuning.
    #[serde(default, skip_serializing_if = "is_default")]
    pub params: RuParamsOverride,
    /// Pin the RU's loop thread to this CPU core of its host (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
}

fn full_pace() -> u32 {
    100
}

fn is_full_pace(percent: &u32) -> bool {
    *percent == 100
}

impl RuSection {
    /// An RU called `name` reading `feds` on 127.0.0.1, with every other field at its default.
    pub fn new(name: &str, feds: Vec<u16>) -> Self {
        RuSection {
            name: name.to_owned(),
            host: default_host(),
            ferol_port: 0,
            control_port: 0,
            feds,
            fragment_size: FragmentSize::default(),
            faults: Vec::new(),
            emulated: true,
            send_rate_percent: 100,
            params: RuParamsOverride::default(),
            cpu: None,
        }
    }

    /// Its fault specifications, read.
    pub fn fault_specs(&self) -> Result<Vec<FaultSpec>, EmulationError> {
        self.faults.iter().map(|spec| spec.parse()).collect()
    }

    /// Bytes of the largest fragment one of its FEDs can send, FEROL block headers included.
    pub fn max_wire_fragment_bytes(&self) -> usize {
        self.feds
            .iter()
            .map(|&fed| match fed {
                TCDS_FED_ID => TCDS_FRAGMENT_BYTES,
                _ => self.fragment_size.max_fragment_bytes(),
            })
            .map(ferol_wire_len)
            .max()
            .unwrap_or(0)
    }
}

fn fed_list_from_yaml<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
    struct FedList;
    impl serde::de::Visitor<'_> for FedList {
        type Value = Vec<u16>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a FED list such as \"1024,0-3\"")
        }
        fn visit_str<E: serde::de::Error>(self, list: &str) -> Result<Vec<u16>, E> {
            parse_fed_list(list).map_err(E::custom)
        }
        // `feds: 5` is a YAML number where `feds: 0-3` is a string: take both.
        fn visit_u64<E: serde::de::Error>(self, fed: u64) -> Result<Vec<u16>, E> {
            self.visit_str(&fed.to_string())
        }
    }
    d.deserialize_any(FedList)
}

fn fed_list_to_yaml<S: Serializer>(feds: &[u16], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_fed_list(feds))
}

/// How big a FED's fragments are, header and trailer included: `{bytes: N}` or
/// `{mean_bytes: M, sigma_bytes: S}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FragmentSizeFile", into = "FragmentSizeFile")]
pub enum FragmentSize {
    /// Every fragment has this many bytes (rounded up to whole 8-byte words).
    Fixed {
        /// Bytes, 16..=1048576.
        bytes: usize,
    },
    /// Sizes drawn from a log-normal distribution, clamped to 16..=1048576 bytes.
    LogNormal {
        /// Mean in bytes.
        mean_bytes: f64,
        /// Standard deviation in bytes.
        sigma_bytes: f64,
    },
}

impl Default for FragmentSize {
    /// Log-normal, 2048 ± 512 bytes.
    fn default() -> Self {
        FragmentSize::LogNormal { mean_bytes: 2048.0, sigma_bytes: 512.0 }
    }
}

impl FragmentSize {
    /// The emulator's size model.
    pub fn model(&self) -> SizeModel {
        match *self {
            FragmentSize::Fixed { bytes } => SizeModel::Fixed(bytes),
            FragmentSize::LogNormal { mean_bytes, sigma_bytes } => SizeModel::LogNormal { mean_bytes, sigma_bytes },
        }
    }

    /// The mean fragment the model gives, in bytes, header and trailer included.
    pub fn mean_bytes(&self) -> f64 {
        match *self {
            FragmentSize::Fixed { bytes } => bytes.next_multiple_of(8) as f64,
            FragmentSize::LogNormal { mean_bytes, .. } => mean_bytes,
        }
    }

    /// The largest fragment the model gives, in bytes. Log-normal draws have no upper bound
    /// before the emulator clamps them, so this is the clamp, [`MAX_FRAGMENT_BYTES`], whatever
    /// the mean and sigma: a rare large draw must still fit in a receive chunk.
    pub fn max_fragment_bytes(&self) -> usize {
        match *self {
            // The emulator's own rounding to whole words; a fixed size is the same for every event.
            FragmentSize::Fixed { .. } => self.model().fragment_bytes(1, 0, 1),
            FragmentSize::LogNormal { .. } => MAX_FRAGMENT_BYTES,
        }
    }
}

/// `fragment_size` as written: either key set, checked when converted.
#[derive(Serialize, Deserialize)]
#[serde(rename = "FragmentSize", deny_unknown_fields)]
struct FragmentSizeFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mean_bytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sigma_bytes: Option<f64>,
}

impl TryFrom<FragmentSizeFile> for FragmentSize {
    type Error = &'static str;

    fn try_from(f: FragmentSizeFile) -> Result<Self, &'static str> {
        match (f.bytes, f.mean_bytes, f.sigma_bytes) {
            (Some(bytes), None, None) => Ok(FragmentSize::Fixed { bytes }),
            (None, Some(mean_bytes), Some(sigma_bytes)) => Ok(FragmentSize::LogNormal { mean_bytes, sigma_bytes }),
            _ => Err("expected either `bytes` or both `mean_bytes` and `sigma_bytes`"),
        }
    }
}

impl From<FragmentSize> for FragmentSizeFile {
    fn from(size: FragmentSize) -> Self {
        match size {
            FragmentSize::Fixed { bytes } => {
                FragmentSizeFile { bytes: Some(bytes), mean_bytes: None, sigma_bytes: None }
            }
            FragmentSize::LogNormal { mean_bytes, sigma_bytes } => {
                FragmentSizeFile { bytes: None, mean_bytes: Some(mean_bytes), sigma_bytes: Some(sigma_bytes) }
            }
        }
    }
}

/// One builder unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuSection {
    /// Name, unique across all units, of letters, digits, `_` and `-`.
    pub name: String,
    /// Address it binds to and is reached at.
    #[serde(default = "default_host")]
    pub host: String,
    /// Port the RUs connect to; 0 takes any free port.
    #[serde(default)]
    pub data_port: u16,
    /// Where its run directory goes (its RAM disk); `<run output>/<name>` when absent.
    #[serde(default)]
    pub directory: Option<PathBuf>,
    /// Pin the BU's loop thread to this CPU core of its host (optional; its writer threads are
    /// not pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    /// Serve the BU's files to FUs on other hosts over HTTP on this port of `host` (the file
    /// broker, docs/formats.md §7 (c) and §16); 0 takes any free port; absent: no broker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_port: Option<u16>,
    /// The host on which `tessera run` starts this BU's FU processes through its agent (they
    /// reach the BU through its file broker, so `broker_port` is required); absent: `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fu_host: Option<String>,
}

impl BuSection {
    /// A BU called `name` on 127.0.0.1, with every other field at its default.
    pub fn new(name: &str) -> Self {
        BuSection {
            name: name.to_owned(),
            host: default_host(),
            data_port: 0,
            directory: None,
            cpu: None,
            broker_port: None,
            fu_host: None,
        }
    }
}

/// What a FED stream that stops parsing does to the run (`ru.on_corrupt_stream`, and the RU
/// node's setting of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CorruptStreamPolicy {
    /// Count it, report it, take no more fragments from it (what it still sends is read and
    /// thrown away, so that its front end is not held back): its FED's events go on flagged
    /// incomplete.
    #[default]
    Continue,
    /// The RU fails its state machine with the error, which names the FED, the event and the
    /// byte offset; that ends the run.
    Fail,
}

/// Tuning shared by every RU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuParams {
    /// Events whose fragments an RU holds before it stops reading its streams.
    pub max_events_buffered: u32,
    /// Give up on a connected FED whose stream brings nothing for this long while an event
    /// waits for it: the event, and later ones until the FED catches up, go on flagged
    /// incomplete, in ms. Off (absent, or `null`) by default: a silent FED holds its events, and
    /// through the RU's full buffers the trigger, until it sends, its stream ends, or an operator
    /// masks it. A busy machine is not a dead front end.
    pub silent_fed_give_up_ms: Option<u64>,
    /// How long the run waits for every configured stream of the RU to connect (and name its
    /// FED) before it fails, naming the FEDs never seen, in s. The trigger starts only once
    /// every stream of every RU is there.
    pub connect_timeout_s: u64,
    /// Super-fragments per data message.
    pub max_parts_per_message: u32,
    /// Receive memory per FED stream comes in chunks of this many bytes; one chunk must hold the
    /// largest fragment on the wire.
    pub chunk_bytes: usize,
    /// Chunks per FED stream, at least 2 (one filling while the other is still referenced).
    pub chunks_per_fed: u32,
    /// What a stream that stops parsing does to the run.
    pub on_corrupt_stream: CorruptStreamPolicy,
    /// Which fragments' CRC-16 the RU checks: `always`, `never`, or `{sampled: N}` (fragments
    /// 0, N, 2N, … of each stream).
    pub fragment_crc_check: CrcCheck,
}

impl Default for RuParams {
    fn default() -> Self {
        RuParams {
            max_events_buffered: 8192,
            silent_fed_give_up_ms: None,
            connect_timeout_s: 60,
            max_parts_per_message: 64,
            chunk_bytes: 2 << 20,
            chunks_per_fed: 8,
            on_corrupt_stream: CorruptStreamPolicy::Continue,
            fragment_crc_check: CrcCheck::Always,
        }
    }
}

/// The `params` of one RU: the keys of [`RuParams`] that this RU sets for itself.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuParamsOverride {
    /// See [`RuParams::max_events_buffered`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_events_buffered: Option<u32>,
    /// See [`RuParams::silent_fed_give_up_ms`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub silent_fed_give_up_ms: Option<u64>,
    /// See [`RuParams::connect_timeout_s`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout_s: Option<u64>,
    /// See [`RuParams::max_parts_per_message`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parts_per_message: Option<u32>,
    /// See [`RuParams::chunk_bytes`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_bytes: Option<usize>,
    /// See [`RuParams::chunks_per_fed`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks_per_fed: Option<u32>,
    /// See [`RuParams::fragment_crc_check`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragment_crc_check: Option<CrcCheck>,
    /// See [`RuParams::on_corrupt_stream`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_corrupt_stream: Option<CorruptStreamPolicy>,
}

impl RuParamsOverride {
    /// `shared` with the values set here put in its place.
    pub fn apply(&self, shared: &RuParams) -> RuParams {
        RuParams {
            max_events_buffered: self.max_events_buffered.unwrap_or(shared.max_events_buffered),
            silent_fed_give_up_ms: self.silent_fed_give_up_ms.or(shared.silent_fed_give_up_ms),
            connect_timeout_s: self.connect_timeout_s.unwrap_or(shared.connect_timeout_s),
            max_parts_per_message: self.max_parts_per_message.unwrap_or(shared.max_parts_per_message),
            chunk_bytes: self.chunk_bytes.unwrap_or(shared.chunk_bytes),
            chunks_per_fed: self.chunks_per_fed.unwrap_or(shared.chunks_per_fed),
            on_corrupt_stream: self.on_corrupt_stream.unwrap_or(shared.on_corrupt_stream),
            fragment_crc_check: self.fragment_crc_check.unwrap_or(shared.fragment_crc_check),
        }
    }
}

/// Tuning shared by every BU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuParams {
    /// Most events a BU has asked for and not yet written.
    pub max_events_in_flight: u32,
    /// Events per request to the EVM, at most `max_events_in_flight`.
    pub request_batch_events: u32,
    /// Events per raw file.
    pub max_events_per_file: u32,
    /// A file that is not full is closed this long after it was opened, in ms.
    pub file_timeout_ms: u64,
    /// Threads writing files, 1..=16.
    pub writer_threads: u32,
    /// Bound on received data held before it is written, in bytes.
    pub frame_store_bytes: u64,
    /// Stop asking for events when the file system of the BU's directory is fuller than this, in
    /// percent.
    pub ramdisk_high_water_percent: u8,
    /// Ask again once it is below this, in percent; below the high-water mark.
    pub ramdisk_low_water_percent: u8,
    /// Build, check and commit every event, then throw it away instead of writing it: no run
    /// directory, no file, no RAM disk. For measuring the network and the event building
    /// alone; nothing reads what is not written, so the filter farm must be off.
    pub discard_events: bool,
}

impl Default for BuParams {
    fn default() -> Self {
        BuParams {
            max_events_in_flight: 4096,
            request_batch_events: 64,
            max_events_per_file: 1000,
            file_timeout_ms: 2000,
            writer_threads: 2,
            frame_store_bytes: 256 << 20,
            ramdisk_high_water_percent: 90,
            ramdisk_low_water_percent: 80,
            discard_events: false,
        }
    }
}

/// What each process of the filter farm is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FuProcess {
    /// Tessera's FU: the menu or `fu.exec` selects, the mergers merge into storage.
    #[default]
    Tessera,
    /// `tessera reader`: reads the BU's files through its file broker exactly as CMS's HLT
    /// does and deletes each; nothing is selected or merged. A stand-in for CMSSW processes.
    Reader,
}

/// The filter farm: FU processes per BU, their selection, and the mergers into storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FuParams {
    /// A filter farm reads the BUs' files: `tessera run` starts its FUs and mergers, and every
    /// BU (also one started alone with `tessera bu`) holds back on the FUs' resource summaries.
    /// When false, the BUs' raw files stay where they are and nothing waits for FUs.
    pub enabled: bool,
    /// What each process is: `tessera` or `reader` (see [`FuProcess`]).
    pub process: FuProcess,
    /// FU processes per BU, on the BU's host, sharing one output directory, 1..=64.
    pub processes_per_bu: u32,
    /// The selection menu file (see `examples/menu.yaml`); none: the embedded default menu. A
    /// relative path is taken from the current directory.
    pub menu: Option<PathBuf>,
    /// An external HLT program and its arguments, run by every FU instead of the menu (see
    /// docs/hlt-contract.md); empty: the menu.
    pub exec: Vec<String>,
    /// Run the mergers inside `tessera run`; when false, `tessera merge` merges the run.
    pub merge: bool,
    /// How often FUs and mergers look at their directories when idle, in ms.
    pub poll_interval_ms: u64,
    /// How long the mergers may take to finish after the BUs have ended the run, in s.
    pub drain_timeout_s: u64,
    /// A BU asks for no events while fewer FU processes publish live resource summaries
    /// (`NOT_ENOUGH_FUS`), at most `processes_per_bu`.
    pub min_fus_per_bu: u32,
    /// A BU asks for no events while its farm lags more lumi sections behind
    /// (`TOO_MANY_LS_QUEUED`).
    pub max_queued_lumi_sections: u32,
    /// A BU asks for no events while an FU's output disk is this full (`FU_OUTPUT_HIGH`), in
    /// percent.
    pub output_high_water_percent: u8,
    /// A resource summary older than this is no sign of life (`RESOURCE_SUMMARY_STALE`), in s.
    pub resource_summary_stale_s: u64,
    /// A process that asks a BU's file broker nothing for this long is presumed dead: the files
    /// it was granted go back to the pool for others, in s.
    pub claim_lease_s: u64,
    /// Connections a BU's file broker serves at once (one per reading process, kept open); more
    /// are refused with 503.
    pub broker_max_connections: u32,
}

impl FuParams {
    /// Whether the farm is on and its processes are readers (`fu.process: reader`), which read
    /// through the BUs' brokers and publish no resource summaries.
    pub fn read_by_readers(&self) -> bool {
        self.enabled && self.process == FuProcess::Reader
    }
}

impl Default for FuParams {
    fn default() -> Self {
        FuParams {
            enabled: true,
            process: FuProcess::Tessera,
            processes_per_bu: 2,
            menu: None,
            exec: Vec::new(),
            merge: true,
            poll_interval_ms: 20,
            drain_timeout_s: 120,
            min_fus_per_bu: 1,
            max_queued_lumi_sections: 4,
            output_high_water_percent: 90,
            resource_summary_stale_s: 10,
            claim_lease_s: 300,
            broker_max_connections: 2048,
        }
    }
}
