//! The checks that a well-typed system file must still pass before anything starts.

use crate::emulation::{FaultSpec, FaultWhen, FedSpec, MAX_STREAMS, OrbitFaultSpec, SizeModel};
use crate::error::ValidationError;
use crate::system::{FragmentSize, RuParams, RunMode, SystemConfig};
use std::collections::HashMap;
use tessera_formats::fed::ORBIT_SECONDS;
use tessera_formats::ferol::ferol_wire_len;
use tessera_formats::tcds::{ORBITS_PER_LUMI_SECTION, TCDS_FED_ID, orbit_index};

/// Most FU processes per BU.
pub const MAX_FU_PROCESSES_PER_BU: u32 = 64;

/// Longest name of a unit, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Largest run number (six decimal digits, as in CMS run numbers and Tessera's file names).
pub const MAX_RUN_NUMBER: u32 = 999_999;
/// Most writer threads of one BU.
pub const MAX_WRITER_THREADS: u32 = 16;

/// How much a run makes, as its file says.
struct RunSize {
    /// Events: the event limit, or the paced rate times the time limit.
    events: u64,
    /// Mean bytes of an event: its fragments and its FRD header.
    event_bytes: f64,
    /// Whether `events` is the event limit (else the rate times the time limit).
    by_limit: bool,
    /// Whether the figures are exact: an event limit and fixed fragment sizes.
    exact: bool,
}

/// A setting that runs but costs something, with its arithmetic and remedy: said by
/// `config check` and at the start of a run, never refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// Key path of the value to change, such as `ru.chunks_per_fed`.
    pub key: String,
    /// What it costs and what would not.
    pub message: String,
}

impl std::fmt::Display for Advice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// The problems found so far, at most one a key (the first found): a key with several problems
/// is reported once, and the others show when it is put right. What a file's own checks collect
/// for [`read_yaml`](crate::yaml::read_yaml).
#[derive(Default)]
pub struct Problems(Vec<ValidationError>);

impl Problems {
    /// Notes that the value of `key` is wrong, unless a problem with it is noted already.
    pub fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        if !self.0.iter().any(|p| p.key == key) {
            self.0.push(ValidationError { key, message: message.into() });
        }
    }

    fn at_least_one(&mut self, key: &str, value: u64) {
        if value == 0 {
            self.add(key, "must be at least 1");
        }
    }

    /// Whether a problem with `key` is noted.
    fn has(&self, key: &str) -> bool {
        self.0.iter().any(|p| p.key == key)
    }

    /// Every problem noted, in the order found.
    pub fn into_vec(self) -> Vec<ValidationError> {
        self.0
    }
}

/// Whether `host` is a name under `.example`, the top-level domain kept for examples that never
/// resolves: the example files name their hosts so, and must be given real ones to run.
fn is_placeholder(host: &str) -> bool {
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    host == "example" || host.ends_with(".example")
}

impl SystemConfig {
    /// Checks everything that the types alone do not: counts, ranges, unique names, host names,
    /// FEDs and ports, and that the tuning fits the fragments. The first problem, if any; see
    /// [`SystemConfig::problems`] for all of them.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }

    /// Every problem [`SystemConfig::validate`] looks for, at most one a key, in the order of
    /// the sections. A check that needs a value already found wrong is left out, so that one
    /// mistake is not reported again under other keys.
    pub fn problems(&self) -> Vec<ValidationError> {
        let mut p = Problems::default();
        self.validate_run(&mut p);
        self.validate_units(&mut p);
        self.validate_feds(&mut p);
        self.validate_ports(&mut p);
        self.validate_params(&mut p);
        self.validate_controller(&mut p);
        self.validate_transport(&mut p);
        // Only for an otherwise good file: its figures are the other keys'.
        if p.0.is_empty() {
            self.validate_ramdisks(&mut p);
        }
        p.into_vec()
    }

    /// The run's size, if known in advance: its event limit (or its paced rate times its time
    /// limit, an estimate) and the mean size of an event (its fragments and FRD header).
    fn run_size(&self) -> Option<RunSize> {
        let event_bytes: f64 = tessera_formats::frd::FRD_HEADER_BYTES as f64
            + self
                .rus
                .iter()
                .flat_map(|ru| ru.feds.iter().map(move |&fed| (fed, ru.fragment_size)))
                .map(|(fed, size)| {
                    if fed == TCDS_FED_ID {
                        tessera_formats::tcds::TCDS_FRAGMENT_BYTES as f64
                    } else {
                        size.mean_bytes()
                    }
                })
                .sum::<f64>();
        let by_time = match (self.trigger.paced_rate_hz(), self.run.seconds) {
            (Some(rate), Some(seconds)) => Some((rate * seconds).ceil() as u64),
            _ => None,
        };
        let (events, by_limit) = match (self.run.events, by_time) {
            (Some(n), Some(m)) if m < n => (m, false),
            (Some(n), _) => (n, true),
            (None, Some(m)) => (m, false),
            (None, None) => return None,
        };
        let fixed = self.rus.iter().all(|ru| matches!(ru.fragment_size, FragmentSize::Fixed { .. }));
        Some(RunSize { events, event_bytes, by_limit, exact: by_limit && fixed })
    }

    /// The file systems of the BUs' directories, when every BU names its `directory` and the
    /// units run on this host (no `controller.agent_port`): each file system once, with its size
    /// in bytes and the first BU on it. `None` when a directory is not known before the run
    /// (it goes under the run's output, which the command line may change) or is on another
    /// host.
    pub fn bu_file_systems(&self) -> Option<Vec<(u64, usize)>> {
        if self.controller.agent_port.is_some() {
            return None;
        }
        let mut seen: Vec<(u64, u64, usize)> = Vec::new();
        for (i, bu) in self.bus.iter().enumerate() {
            let mut at = std::path::absolute(bu.directory.as_ref()?).ok()?;
            while !at.exists() {
                if !at.pop() {
                    return None;
                }
            }
            let stat = rustix::fs::statvfs(&at).ok()?;
            if !seen.iter().any(|&(fsid, _, _)| fsid == stat.f_fsid) {
                seen.push((stat.f_fsid, stat.f_blocks.saturating_mul(stat.f_frsize), i));
            }
        }
        Some(seen.into_iter().map(|(_, bytes, i)| (bytes, i)).collect())
    }

    /// A run without a filter farm (`fu.enabled: false`) whose data cannot fit on its BUs' RAM
    /// disks below their high-water mark, though they were empty: nothing removes the BUs'
    /// files, so the run would hold back for ever once the disks fill. Refused when certain (an
    /// event limit, fixed fragment sizes, every BU's `directory` named on this host); the cases
    /// that are only likely are advice ([`SystemConfig::advice`]).
    fn validate_ramdisks(&self, p: &mut Problems) {
        if let Some((key, message, true)) = self.ramdisks_too_small() {
            p.add(key, message);
        }
    }

    /// What [`SystemConfig::validate_ramdisks`] and the advice say about the BUs' RAM disks:
    /// the key, the message, and whether it certainly cannot run.
    fn ramdisks_too_small(&self) -> Option<(&'static str, String, bool)> {
        // BUs that discard their events put nothing on their disks.
        if self.bu.discard_events {
            return None;
        }
        let size = self.run_size()?;
        let (bytes, exact) = ((size.events as f64 * size.event_bytes).ceil() as u64, size.exact);
        let disks = self.bu_file_systems()?;
        let high = u64::from(self.bu.ramdisk_high_water_percent.min(100));
        let room: u64 = disks.iter().map(|&(total, _)| total / 100 * high).sum();
        let on = disks
            .iter()
            .map(|&(total, i)| {
                format!(
                    "bus[{i}].directory {} on {:.1} MB",
                    self.bus[i].directory.as_ref().expect("named").display(),
                    total as f64 / 1e6
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
        if !self.fu.enabled && bytes > room {
            let key = if size.by_limit { "run.events" } else { "run.seconds" };
            let what = if size.by_limit {
                format!("run.events {} make {}{}", size.events, if exact { "" } else { "about " }, mb(bytes))
            } else {
                format!("the run makes about {} ({} events at trigger.rate_hz)", mb(bytes), size.events)
            };
            return Some((
                key,
                format!(
                    "{what} of events, more than the BUs' RAM disks hold up to bu.ramdisk_high_water_percent {high} % \
                     ({} in all: {on}); with fu.enabled false nothing removes the BUs' files, so the run would hold back \
                     for ever once they are full; give a shorter run, larger disks, or enable the filter farm",
                    mb(room)
                ),
                exact,
            ));
        }
        if self.fu.enabled
            && let Some(rate) = self.trigger.paced_rate_hz()
        {
            let lumi_seconds = self.run.orbits_per_lumi_section as f64 * ORBIT_SECONDS;
            // A run shorter than a lumi section puts no more than the run on the disks.
            let events = (rate * lumi_seconds).min(size.events as f64);
            let per_bu = events * size.event_bytes / self.bus.len().max(1) as f64;
            let smallest = disks.iter().map(|&(total, _)| total / 100 * high).min().unwrap_or(u64::MAX);
            if per_bu > smallest as f64 {
                return Some((
                    "run.orbits_per_lumi_section",
                    format!(
                        "a lumi section of {} orbits at {rate} Hz (or the whole run, if shorter) puts about {} on each BU's RAM disk, more than the \
                         smallest holds up to bu.ramdisk_high_water_percent {high} % ({}; {on}): the FUs publish such a \
                         section in parts, each time the BU waits for room, which costs rate",
                        self.run.orbits_per_lumi_section,
                        mb(per_bu as u64),
                        mb(smallest)
                    ),
                    false,
                ));
            }
        }
        None
    }

    fn validate_transport(&self, p: &mut Problems) {
        if !cfg!(feature = "ucx") {
            for (key, transport) in
                [("transport.ru_bu", self.transport.ru_bu), ("transport.evm_ru", self.transport.evm_ru)]
            {
                if transport == crate::Transport::Ucx {
                    p.add(
                        key,
                        "this build of Tessera has no UCX: build it with `--features ucx` (UCX 1.13 or later, e.g. \
                         Debian's libucx-dev), or put the links on tcp",
                    );
                }
            }
        }
        let Some(list) = &self.transport.ucx_transports else { return };
        let names: Vec<&str> = list.split(',').map(str::trim).collect();
        let bad =
            names.iter().find(|n| n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || "_:-".contains(c)));
        if let Some(bad) = bad {
            p.add(
                "transport.ucx_transports",
                format!("{bad:?} is no UCX transport name: give a comma-separated list as UCX_TLS does, e.g. \"sm,self\" or \"tcp\""),
            );
        } else if !self.transport.uses_ucx() {
            p.add(
                "transport.ucx_transports",
                "no link class travels on UCX: set transport.ru_bu or transport.evm_ru to ucx",
            );
        }
    }

    fn validate_controller(&self, p: &mut Problems) {
        let c = &self.controller;
        if c.agent_port == Some(0) {
            p.add("controller.agent_port", "0 is no port an agent can be reached at");
        }
        if !(c.heartbeat_timeout_s.is_finite() && (0.1..=3600.0).contains(&c.heartbeat_timeout_s)) {
            p.add("controller.heartbeat_timeout_s", format!("{} is outside 0.1..=3600 s", c.heartbeat_timeout_s));
        }
        p.at_least_one("controller.start_timeout_s", c.start_timeout_s);
        p.at_least_one("controller.stop_timeout_s", c.stop_timeout_s);
        for (i, bu) in self.bus.iter().enumerate() {
            if let Some(fu_host) = &bu.fu_host {
                if c.agent_port.is_none() && *fu_host != bu.host {
                    p.add(
                        format!("bus[{i}].fu_host"),
                        "FUs on another host are started through agents: set controller.agent_port",
                    );
                }
                if self.fu.enabled && *fu_host != bu.host && bu.broker_port.is_none() {
                    p.add(
                        format!("bus[{i}].fu_host"),
                        format!(
                            "FUs on {fu_host} reach {} only through its file broker: set bus[{i}].broker_port",
                            bu.name
                        ),
                    );
                }
            }
        }
        if let Some(host) = &c.merger_host {
            if is_placeholder(host) {
                p.add("controller.merger_host", placeholder(host));
            }
            if c.agent_port.is_none() {
                p.add(
                    "controller.merger_host",
                    "mergers on a host are started through agents: set controller.agent_port",
                );
            }
        }
    }

    fn validate_run(&self, p: &mut Problems) {
        let run = &self.run;
        if !(1..=MAX_RUN_NUMBER).contains(&run.number) {
            p.add("run.number", format!("{} is outside 1..={MAX_RUN_NUMBER}", run.number));
        }
        p.at_least_one("run.first_event", run.first_event);
        if let Some(events) = run.events {
            p.at_least_one("run.events", events);
        }
        if let Some(orbits) = run.orbits {
            p.at_least_one("run.orbits", orbits);
        }
        match (run.mode, run.events, run.orbits) {
            (RunMode::Orbit, Some(_), _) => p.add(
                "run.events",
                "an orbit mode run (run.mode: orbit) stops after run.orbits orbits per source, not after events",
            ),
            (RunMode::Event, _, Some(_)) => {
                p.add("run.orbits", "only an orbit mode run (run.mode: orbit) stops after orbits; use run.events")
            }
            _ => {}
        }
        match run.seconds {
            Some(s) if !(s.is_finite() && s > 0.0) => {
                p.add("run.seconds", format!("{s} is not a number of seconds > 0"))
            }
            // Only an explicit `seconds: null` gets here: an absent one defaults to 10 s.
            None if self.stream_limit().is_none() => {
                let limit = if self.is_orbit_mode() { "run.orbits" } else { "run.events" };
                p.add("run.seconds", format!("null, and so is {limit}: the run needs at least one stop condition"));
            }
            _ => {}
        }
        if !(1..=ORBITS_PER_LUMI_SECTION).contains(&run.orbits_per_lumi_section) {
            p.add(
                "run.orbits_per_lumi_section",
                format!("{} is outside 1..={ORBITS_PER_LUMI_SECTION}", run.orbits_per_lumi_section),
            );
            // The time-out and the clock below are measured in lumi sections of this length.
            return;
        }
        let lumi_seconds = run.orbits_per_lumi_section as f64 * ORBIT_SECONDS;
        let timeout = self.evm.lumi_section_timeout_s;
        if !(timeout.is_finite() && timeout >= lumi_seconds) {
            p.add(
                "evm.lumi_section_timeout_s",
                format!(
                    "{timeout} s is shorter than a lumi section ({lumi_seconds:.3} s for {} orbits): a trigger after the time-out could still belong to the section it closed",
                    run.orbits_per_lumi_section
                ),
            );
        }
        // The emulator's own check of the rate, so the file refuses what the emulator would.
        if let Err(e) = self.clock_spec().validate() {
            p.add("trigger.rate_hz", e.reason());
        }
    }

    fn validate_units(&self, p: &mut Problems) {
        if self.rus.is_empty() {
            p.add("rus", "at least one RU is needed");
        }
        if self.bus.is_empty() {
            p.add("bus", "at least one BU is needed");
        }
        let names = self.rus.iter().enumerate().map(|(i, ru)| (format!("rus[{i}]"), &ru.name, &ru.host));
        let names = names.chain(self.bus.iter().enumerate().map(|(i, bu)| (format!("bus[{i}]"), &bu.name, &bu.host)));
        let mut seen: HashMap<&str, String> = HashMap::new();
        for (unit, name, host) in names {
            let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
            if name.is_empty() || !name.chars().all(ok) {
                p.add(format!("{unit}.name"), format!("{name:?} is not a name of letters, digits, `_` and `-`"));
            } else if name.len() > MAX_NAME_BYTES {
                // Names go into file and directory names (a BU's run directory, FU outputs,
                // the mergers' files), which a file system holds to 255 bytes.
                p.add(
                    format!("{unit}.name"),
                    format!(
                        "{} characters; a unit's name is at most {MAX_NAME_BYTES}, for the file names it goes into",
                        name.len()
                    ),
                );
            } else if let Some(first) = seen.insert(name, unit.clone()) {
                p.add(format!("{unit}.name"), format!("{name:?} is already the name of {first}"));
            }
            if host.trim().is_empty() {
                p.add(format!("{unit}.host"), "is empty");
            } else if is_placeholder(host) {
                p.add(format!("{unit}.host"), placeholder(host));
            }
        }
        for (i, bu) in self.bus.iter().enumerate() {
            if let Some(fu_host) = bu.fu_host.as_deref().filter(|host| is_placeholder(host)) {
                p.add(format!("bus[{i}].fu_host"), placeholder(fu_host));
            }
        }
    }

    fn validate_feds(&self, p: &mut Problems) {
        let mut owner: HashMap<u16, usize> = HashMap::new();
        for (i, ru) in self.rus.iter().enumerate() {
            let key = |field: &str| format!("rus[{i}].{field}");
            if let Err(e) = ru.fragment_size.model().validate() {
                p.add(key("fragment_size"), e.reason());
            }
            if ru.feds.is_empty() {
                p.add(key("feds"), "an RU needs at least one FED");
            }
            for &fed in &ru.feds {
                // The size model is checked above; this refuses the other trigger FED ids.
                if let Err(e) = (FedSpec { fed, size: SizeModel::Fixed(1024) }).validate_id() {
                    p.add(key("feds"), format!("FED {fed}: {}", e.reason()));
                }
                if let Some(first) = owner.insert(fed, i) {
                    p.add(key("feds"), format!("FED {fed} is already read by rus[{first}]"));
                }
            }
            // The trigger FED on another RU is either read twice or missing here: said once.
            if i == 0 && !ru.feds.contains(&TCDS_FED_ID) {
                p.add(key("feds"), format!("rus[0] hosts the EVM and must read the trigger FED {TCDS_FED_ID}"));
            }
            if ru.feds.len() > MAX_STREAMS {
                p.add(
                    key("feds"),
                    format!(
                        "{} FEDs; an RU reads at most {MAX_STREAMS} streams (and one emulator process sends at most as \
                         many): share them among more RUs",
                        ru.feds.len()
                    ),
                );
            }
            if !(1..=100).contains(&ru.send_rate_percent) {
                p.add(key("send_rate_percent"), format!("{}% is outside 1..=100", ru.send_rate_percent));
            }
            for (j, spec) in ru.faults.iter().enumerate() {
                // An orbit mode run's faults are the DTH emulator's, per orbit and source.
                let parsed = match self.run.mode {
                    RunMode::Event => spec.parse::<FaultSpec>().map(|f| (f.fed, f.when)),
                    RunMode::Orbit => spec.parse::<OrbitFaultSpec>().map(|f| (f.source, f.when)),
                };
                match parsed {
                    Err(e) => p.add(key(&format!("faults[{j}]")), format!("{spec:?}: {}", e.reason())),
                    Ok((fed, when)) => {
                        if let Some(fed) = fed.filter(|fed| !ru.feds.contains(fed)) {
                            p.add(
                                key(&format!("faults[{j}]")),
                                format!("{spec:?} hits FED {fed}, which this RU does not read"),
                            );
                        }
                        if let Some(why) = self.never_strikes(when) {
                            p.add(key(&format!("faults[{j}]")), format!("{spec:?} can never strike: {why}"));
                        }
                    }
                }
            }
        }
    }

    /// Why a fault at `when` can never strike in this run, if it cannot: an event before the
    /// run's first or after its last, an orbit number the run's numbering never gives or past
    /// its last orbit. A fault that silently does nothing would pass a test that meant to see it.
    fn never_strikes(&self, when: FaultWhen) -> Option<String> {
        let FaultWhen::At(n) = when else { return None };
        let run = &self.run;
        match run.mode {
            RunMode::Event => {
                let last = run.events.map(|k| run.first_event.saturating_add(k).saturating_sub(1));
                if n < run.first_event {
                    return Some(format!("the run's first event is {} (run.first_event)", run.first_event));
                }
                last.filter(|&last| n > last)
                    .map(|last| format!("the run's last event is {last} (run.events {})", run.events.unwrap_or(0)))
            }
            RunMode::Orbit => {
                let per_ls = run.orbits_per_lumi_section;
                match orbit_index(n, per_ls) {
                    None => Some(format!(
                        "no orbit has number {n}: with run.orbits_per_lumi_section {per_ls}, lumi section L's orbits \
                         are numbered (L − 1) · {ORBITS_PER_LUMI_SECTION} + 0..={}",
                        per_ls.saturating_sub(1)
                    )),
                    Some(0) => Some("the run's orbits are numbered from 1".to_owned()),
                    Some(i) => run
                        .orbits
                        .filter(|&k| i > k)
                        .map(|k| format!("orbit {n} is the run's orbit {i}, past its last (run.orbits {k})")),
                }
            }
        }
    }

    fn validate_ports(&self, p: &mut Problems) {
        // The EVM listens on the host of rus[0].
        let mut ports: Vec<(String, &str, u16)> =
            self.rus.first().map(|ru0| ("evm.port".to_owned(), ru0.host.as_str(), self.evm.port)).into_iter().collect();
        for (i, ru) in self.rus.iter().enumerate() {
            ports.push((format!("rus[{i}].ferol_port"), &ru.host, ru.ferol_port));
            ports.push((format!("rus[{i}].control_port"), &ru.host, ru.control_port));
        }
        for (i, bu) in self.bus.iter().enumerate() {
            ports.push((format!("bus[{i}].data_port"), &bu.host, bu.data_port));
            if let Some(port) = bu.broker_port {
                ports.push((format!("bus[{i}].broker_port"), &bu.host, port));
            }
        }
        let mut seen: HashMap<(&str, u16), &str> = HashMap::new();
        for (key, host, port) in &ports {
            if *port == 0 {
                continue;
            }
            if let Some(first) = seen.insert((host, *port), key) {
                p.add(key.clone(), format!("port {port} on {host} is already taken by {first}"));
            }
        }
    }

    /// An RU holds every event until its BU's file is published, and a BU publishes a file when
    /// it holds `bu.max_events_per_file` events (or on `bu.file_timeout_ms`). Receive memory that
    /// cannot hold a file's worth of events for every BU starves: files then close on their
    /// time-out only, and the RUs wait for them with their streams unread.
    /// Settings that run but cost rate, each with its arithmetic and remedy: receive memory
    /// that holds fewer events than the BUs' open files hold back. Such a system builds every
    /// event, because a BU closes a file early when its events wait for data (an RU short of
    /// room frees its memory only on commits), but its files are smaller and its rate lower.
    /// Empty for a file with problems ([`SystemConfig::problems`]).
    pub fn advice(&self) -> Vec<Advice> {
        if !self.problems().is_empty() {
            return Vec::new();
        }
        let mut advice = Vec::new();
        let per_file = u64::from(self.bu.max_events_per_file);
        let n_bu = self.bus.len() as u64;
        let held_back = n_bu * per_file;
        let files = format!(
            "the {held_back} events the BUs' open files can hold back ({n_bu} BUs × bu.max_events_per_file {per_file})"
        );
        let cost = "BUs will close their files early whenever the RU runs short of room: every event is built, \
                    in smaller files and at a lower rate";
        for (i, ru) in self.rus.iter().enumerate() {
            let params = self.ru_params(i);
            let own = |key: &str, set: bool| if set { format!("rus[{i}].params.{key}") } else { format!("ru.{key}") };
            if u64::from(params.max_events_buffered) < held_back {
                advice.push(Advice {
                    key: own("max_events_buffered", ru.params.max_events_buffered.is_some()),
                    message: format!(
                        "{} events for rus[{i}] are fewer than {files}: {cost}; give at least {held_back}, or \
                         bu.max_events_per_file at most {}",
                        params.max_events_buffered,
                        u64::from(params.max_events_buffered) / n_bu
                    ),
                });
            }
            let has_data_fed = ru.feds.iter().any(|&f| f != TCDS_FED_ID);
            let wire = ferol_wire_len(ru.fragment_size.mean_bytes().ceil() as usize) as u64;
            // One chunk is being filled; the others hold whole fragments.
            let per_chunk = (params.chunk_bytes as u64).checked_div(wire).unwrap_or(0);
            if !has_data_fed || per_chunk == 0 {
                continue;
            }
            let fragments = u64::from(params.chunks_per_fed - 1) * per_chunk;
            if fragments < held_back {
                advice.push(Advice {
                    key: own("chunks_per_fed", ru.params.chunks_per_fed.is_some()),
                    message: format!(
                        "{} chunks of {} bytes hold {fragments} of rus[{i}]'s fragments ({} chunks of {per_chunk} fragments \
                         of {wire} bytes on the wire, one chunk being filled), fewer than {files}: {cost}; give at least \
                         {} chunks, or bu.max_events_per_file at most {}",
                        params.chunks_per_fed,
                        params.chunk_bytes,
                        params.chunks_per_fed - 1,
                        held_back.div_ceil(per_chunk) + 1,
                        fragments / n_bu
                    ),
                });
            }
        }
        if let Some((key, message, false)) = self.ramdisks_too_small() {
            advice.push(Advice { key: key.to_owned(), message });
        }
        // A shared key (`ru.…`) is advised once, for the first RU it costs.
        let mut seen = std::collections::HashSet::new();
        advice.retain(|a| seen.insert(a.key.clone()));
        advice
    }

    /// The push section: checked whatever the protocol, so that a file switched to push later
    /// holds no surprise.
    fn validate_push(&self, p: &mut Problems) {
        let push = &self.push;
        p.at_least_one("push.block_events", push.block_events);
        p.at_least_one("push.age_events", push.age_events);
        p.at_least_one("push.age_ms", push.age_ms);
        p.at_least_one("push.window_events", push.window_events);
        if push.window_events >= push.age_events {
            p.add(
                "push.window_events",
                format!(
                    "{} is not below push.age_events ({}): RUs that far apart would age events that are only late",
                    push.window_events, push.age_events
                ),
            );
        }
        for (key, percent) in [
            ("push.bu_high_water_percent", push.bu_high_water_percent),
            ("push.ru_high_water_percent", push.ru_high_water_percent),
        ] {
            if !(1..=100).contains(&percent) {
                p.add(key, format!("{percent} is outside 1..=100"));
            }
        }
        if let Some(names) = &push.bus {
            if names.is_empty() {
                p.add("push.bus", "names no BU: at least one must get events");
            }
            for (i, name) in names.iter().enumerate() {
                if !self.bus.iter().any(|b| &b.name == name) {
                    let known: Vec<&str> = self.bus.iter().map(|b| b.name.as_str()).collect();
                    p.add(format!("push.bus[{i}]"), format!("no BU is named {name:?} (the BUs: {})", known.join(", ")));
                } else if names[..i].contains(name) {
                    p.add(format!("push.bus[{i}]"), format!("{name:?} is named twice"));
                }
            }
        }
    }

    fn validate_params(&self, p: &mut Problems) {
        self.validate_push(p);
        let evm = &self.evm;
        p.at_least_one("evm.assign_batch_events", evm.assign_batch_events.into());
        p.at_least_one("evm.max_assigned_per_bu", evm.max_assigned_per_bu.into());
        if evm.max_assigned_per_bu > 0 && evm.assign_batch_events > evm.max_assigned_per_bu {
            p.add(
                "evm.assign_batch_events",
                format!("{} is above evm.max_assigned_per_bu ({})", evm.assign_batch_events, evm.max_assigned_per_bu),
            );
        }
        validate_ru_params(p, &self.ru, "ru");
        for (i, ru) in self.rus.iter().enumerate() {
            let params = self.ru_params(i);
            let own = format!("rus[{i}].params");
            if ru.params != Default::default() {
                validate_ru_params(p, &params, &own);
            }
            // A chunk holds whole fragments: the largest one this RU can receive must fit, if
            // its size is one the emulator can send.
            if p.has(&format!("rus[{i}].fragment_size")) {
                continue;
            }
            let largest = ru.max_wire_fragment_bytes();
            if params.chunk_bytes < largest {
                let key = if ru.params.chunk_bytes.is_some() {
                    format!("{own}.chunk_bytes")
                } else {
                    "ru.chunk_bytes".into()
                };
                let why = match ru.fragment_size {
                    FragmentSize::LogNormal { .. } => ", as log-normal sizes can reach the emulator's 1 MiB clamp",
                    FragmentSize::Fixed { .. } => "",
                };
                p.add(
                    key,
                    format!(
                        "{} bytes cannot hold the largest fragment of rus[{i}] on the wire, {largest} bytes \
                         with FEROL block headers{why}",
                        params.chunk_bytes
                    ),
                );
            }
        }
        let bu = &self.bu;
        p.at_least_one("bu.max_events_in_flight", bu.max_events_in_flight.into());
        p.at_least_one("bu.request_batch_events", bu.request_batch_events.into());
        if bu.max_events_in_flight > 0 && bu.request_batch_events > bu.max_events_in_flight {
            p.add(
                "bu.request_batch_events",
                format!("{} is above bu.max_events_in_flight ({})", bu.request_batch_events, bu.max_events_in_flight),
            );
        }
        p.at_least_one("bu.max_events_per_file", bu.max_events_per_file.into());
        p.at_least_one("bu.file_timeout_ms", bu.file_timeout_ms);
        if !(1..=MAX_WRITER_THREADS).contains(&bu.writer_threads) {
            p.add("bu.writer_threads", format!("{} is outside 1..={MAX_WRITER_THREADS}", bu.writer_threads));
        }
        p.at_least_one("bu.frame_store_bytes", bu.frame_store_bytes);
        if bu.ramdisk_high_water_percent > 100 {
            p.add("bu.ramdisk_high_water_percent", format!("{}% is above 100%", bu.ramdisk_high_water_percent));
        } else if bu.ramdisk_low_water_percent >= bu.ramdisk_high_water_percent {
            p.add(
                "bu.ramdisk_low_water_percent",
                format!(
                    "{}% must be below bu.ramdisk_high_water_percent ({}%)",
                    bu.ramdisk_low_water_percent, bu.ramdisk_high_water_percent
                ),
            );
        }
        if bu.discard_events {
            // Nothing reads what is not written.
            if self.fu.enabled {
                p.add(
                    "bu.discard_events",
                    "true while fu.enabled is true: the filter farm reads the BUs' files, which BUs that discard \
                     their events never write; set fu.enabled: false, or bu.discard_events: false",
                );
            }
            for (i, b) in self.bus.iter().enumerate() {
                if b.broker_port.is_some() {
                    p.add(
                        format!("bus[{i}].broker_port"),
                        format!(
                            "a file broker serves the BU's files, and with bu.discard_events true it writes none: \
                             remove bus[{i}].broker_port, or set bu.discard_events: false"
                        ),
                    );
                }
            }
        }
        self.validate_fu(p);
    }

    fn validate_fu(&self, p: &mut Problems) {
        let fu = &self.fu;
        if !fu.enabled {
            return;
        }
        if !(1..=MAX_FU_PROCESSES_PER_BU).contains(&fu.processes_per_bu) {
            p.add("fu.processes_per_bu", format!("{} is outside 1..={MAX_FU_PROCESSES_PER_BU}", fu.processes_per_bu));
        } else if !(1..=fu.processes_per_bu).contains(&fu.min_fus_per_bu) {
            p.add(
                "fu.min_fus_per_bu",
                format!("{} is outside 1..=fu.processes_per_bu ({})", fu.min_fus_per_bu, fu.processes_per_bu),
            );
        }
        p.at_least_one("fu.poll_interval_ms", fu.poll_interval_ms);
        p.at_least_one("fu.max_queued_lumi_sections", fu.max_queued_lumi_sections.into());
        if !(1..=100).contains(&fu.output_high_water_percent) {
            p.add("fu.output_high_water_percent", format!("{}% is outside 1..=100%", fu.output_high_water_percent));
        }
        p.at_least_one("fu.resource_summary_stale_s", fu.resource_summary_stale_s);
        p.at_least_one("fu.drain_timeout_s", fu.drain_timeout_s);
        p.at_least_one("fu.claim_lease_s", fu.claim_lease_s);
        p.at_least_one("fu.broker_max_connections", u64::from(fu.broker_max_connections));
        if fu.exec.first().is_some_and(String::is_empty) {
            p.add("fu.exec", "the program's name is empty");
        }
        // A BU's name is the producer of its merged files, where `_` separates the name's parts.
        for (i, bu) in self.bus.iter().enumerate() {
            if bu.name.contains('_') {
                p.add(
                    format!("bus[{i}].name"),
                    format!("{:?}: with the filter farm on (fu.enabled), BU names may not contain `_`", bu.name),
                );
            }
        }
    }
}

/// The problem with a host named `host`, a placeholder of an example file.
fn placeholder(host: &str) -> String {
    format!("{host:?} is a placeholder: put your hosts' names here")
}

fn validate_ru_params(p: &mut Problems, params: &RuParams, prefix: &str) {
    p.at_least_one(&format!("{prefix}.max_events_buffered"), params.max_events_buffered.into());
    if let Some(ms) = params.silent_fed_give_up_ms {
        p.at_least_one(&format!("{prefix}.silent_fed_give_up_ms"), ms);
    }
    p.at_least_one(&format!("{prefix}.connect_timeout_s"), params.connect_timeout_s);
    p.at_least_one(&format!("{prefix}.max_parts_per_message"), params.max_parts_per_message.into());
    if params.chunks_per_fed < 2 {
        p.add(
            format!("{prefix}.chunks_per_fed"),
            format!(
                "{} is below 2: a stream needs a chunk to fill while another is still in use",
                params.chunks_per_fed
            ),
        );
    }
    if params.fragment_crc_check == tessera_formats::fed::CrcCheck::Sampled(0) {
        p.add(
            format!("{prefix}.fragment_crc_check"),
            "sampled: 0 checks no fragment: say `never`, or give N >= 1 (every Nth fragment)",
        );
    }
}
