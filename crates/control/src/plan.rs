//! The system file turned into units, written once: the configuration of each RU's node
//! ([`ru_node`]), each BU's node ([`bu_node`]) and each front-end emulator ([`emulator`]) from a
//! [`SystemConfig`], the ports they listen on ([`Listeners`], [`bind`]) and call ([`resolve`]),
//! and whom each unit lets call it ([`ru_peers`], [`bu_peers`]). `tessera run` (the whole system
//! in one process, [`plan`]) and the unit commands (`tessera evm|ru|bu`, one unit a process) use
//! the same functions, so that a unit is configured the same way wherever it runs; the
//! whole-system tests and `tessera bench evb` plan their systems here too.

use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_config::SystemConfig;
use tessera_config::emulation::{EmulationError, FedSpec, OrbitFaultSpec};
use tessera_emu::dth::DthSenderConfig;
use tessera_emu::generator::StreamConfig;
use tessera_emu::orbit::OrbitStreamConfig;
use tessera_emu::sender::{Limits, SenderConfig, Sink};
use tessera_evb::push::{Destinations, PushBu};
use tessera_evb::{BuConfig, EvmConfig, RuConfig};
use tessera_formats::orbit::DEFAULT_MAX_BLOCK_BYTES;
use tessera_rundir::resources::FarmLimits;
use tessera_runtime::bu_node::BuNodeConfig;
use tessera_runtime::ferol_input::Framing;
use tessera_runtime::link::LinkKey;
use tessera_runtime::ru_node::{PushLeader, PushPlan, RuNodeConfig};

use crate::system::SystemPlan;

/// How long a unit keeps calling a peer that does not answer yet.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest protocol frame accepted, at least.
const MIN_MAX_FRAME_BYTES: u32 = 64 << 20;

/// Why a system file could not be turned into units.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A port could not be bound.
    #[error("{what}: cannot listen on {host}:{port}")]
    Bind {
        /// Which port, in the system file's words.
        what: String,
        /// The host it names.
        host: String,
        /// The port.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// A peer's port is 0, which a unit in another process cannot find.
    #[error(
        "{what}: port 0 means \"any free port\", which only one `tessera run` can use; give a port in the system file"
    )]
    AnyPort {
        /// Which port, in the system file's words.
        what: String,
    },
    /// A peer's address could not be resolved.
    #[error("{what}: cannot resolve {host}:{port}")]
    Resolve {
        /// Which port, in the system file's words.
        what: String,
        /// The host it names.
        host: String,
        /// The port.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// A peer's address resolved to no address at all.
    #[error("{what}: {host}:{port} resolves to nothing")]
    Nowhere {
        /// Which port, in the system file's words.
        what: String,
        /// The host it names.
        host: String,
        /// The port.
        port: u16,
    },
    /// A host whose units may call could not be resolved.
    #[error("cannot resolve {host}")]
    Host {
        /// The host.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// An RU's faults could not be read.
    #[error("rus[{ru}].faults")]
    Faults {
        /// The RU's index.
        ru: usize,
        /// Why.
        source: EmulationError,
    },
    /// Ports that units in separate processes need are 0.
    #[error(
        "{system}: {} {} 0 (any free port), which only one `tessera run` can use: units in separate processes find each other by the ports in the file",
        ports.join(", "),
        if ports.len() == 1 { "is" } else { "are" }
    )]
    PortsZero {
        /// The system file.
        system: PathBuf,
        /// The settings that are 0, by their place in the file.
        ports: Vec<String>,
    },
}

/// The largest frame any unit of the system accepts: enough for the largest super-fragment an
/// RU can build (all its FEDs at their largest), and a megabyte of descriptors.
pub fn max_frame_bytes(cfg: &SystemConfig) -> u32 {
    let largest =
        cfg.rus.iter().enumerate().map(|(i, r)| r.feds.len() * cfg.max_wire_bytes(i)).max().unwrap_or(0) + (2 << 20);
    u32::try_from(largest).unwrap_or(u32::MAX).max(MIN_MAX_FRAME_BYTES)
}

/// The run's output directory: the one given, or a new one under the current directory named
/// by the run and the UTC time, `tessera-run000001-20261128-201034` (with `-2`, `-3`... should
/// one of that second exist).
pub fn output_dir(cfg: &SystemConfig) -> PathBuf {
    cfg.run.output.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let base = format!("tessera-run{:06}-{}", cfg.run.number, utc_stamp(secs));
        // Bounded: past 100 runs of one second the last name is taken, and the run's own
        // check of its output refuses it.
        (1..=100)
            .map(|n| PathBuf::from(if n == 1 { base.clone() } else { format!("{base}-{n}") }))
            .find(|p| !p.exists())
            .unwrap_or_else(|| PathBuf::from(base))
    })
}

/// `secs` since the Unix epoch as the UTC date and time `YYYYMMDD-HHMMSS`, for names that sort
/// by time and read as one.
pub fn utc_stamp(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // The civil date of a day count, by 400-year eras counted from 0000-03-01 (the leap day
    // last in its year).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}-{:02}{:02}{:02}", rest / 3_600, rest % 3_600 / 60, rest % 60)
}

/// Listens on `host:port`, `what` naming the port in the system file's words.
pub fn bind(host: &str, port: u16, what: &str) -> Result<TcpListener, PlanError> {
    TcpListener::bind((host, port)).map_err(|source| PlanError::Bind {
        what: what.to_owned(),
        host: host.to_owned(),
        port,
        source,
    })
}

/// Binds an RU's FEROL port, with room in its queue of connections not yet accepted for each of
/// its `streams` and some more: front ends may all connect at once, while the RU is still
/// setting itself up, and a queue of the usual 128 would drop the rest.
pub fn bind_ferol(host: &str, port: u16, what: &str, streams: usize) -> Result<TcpListener, PlanError> {
    let listener = bind(host, port, what)?;
    let backlog = i32::try_from(streams + 64).unwrap_or(i32::MAX).max(128);
    rustix::net::listen(&listener, backlog).map_err(|e| PlanError::Bind {
        what: what.to_owned(),
        host: host.to_owned(),
        port,
        source: e.into(),
    })?;
    Ok(listener)
}

/// The address of a peer's port `host:port`, which must be given (not 0).
pub fn resolve(host: &str, port: u16, what: &str) -> Result<SocketAddr, PlanError> {
    if port == 0 {
        return Err(PlanError::AnyPort { what: what.to_owned() });
    }
    let place = || (what.to_owned(), host.to_owned());
    (host, port)
        .to_socket_addrs()
        .map_err(|source| {
            let (what, host) = place();
            PlanError::Resolve { what, host, port, source }
        })?
        .next()
        .ok_or_else(|| {
            let (what, host) = place();
            PlanError::Nowhere { what, host, port }
        })
}

/// Refuses a system whose units in separate processes could not find each other: every port
/// a peer calls must be given (not 0). `system` names the file in the message.
pub fn require_ports(cfg: &SystemConfig, system: &Path) -> Result<(), PlanError> {
    let mut zero = Vec::new();
    if cfg.evm.port == 0 {
        zero.push("evm.port".to_string());
    }
    for (i, ru) in cfg.rus.iter().enumerate() {
        if ru.ferol_port == 0 {
            zero.push(format!("rus[{i}].ferol_port"));
        }
        if i > 0 && ru.control_port == 0 {
            zero.push(format!("rus[{i}].control_port"));
        }
    }
    let readers = cfg.fu.read_by_readers();
    for (i, bu) in cfg.bus.iter().enumerate() {
        if bu.data_port == 0 {
            zero.push(format!("bus[{i}].data_port"));
        }
        // Readers read through the BU's file broker.
        if readers && bu.broker_port.is_none_or(|p| p == 0) {
            zero.push(format!("bus[{i}].broker_port (fu.process: reader)"));
        }
    }
    if zero.is_empty() { Ok(()) } else { Err(PlanError::PortsZero { system: system.to_owned(), ports: zero }) }
}

/// The addresses units on `hosts` call from, or `None` (anyone) if a host is a wildcard such
/// as 0.0.0.0, which says nothing about where its calls come from.
fn peers_on(hosts: &[&str]) -> Result<Option<Vec<IpAddr>>, PlanError> {
    let mut ips = Vec::new();
    for host in hosts {
        let addresses =
            (*host, 0).to_socket_addrs().map_err(|source| PlanError::Host { host: (*host).to_owned(), source })?;
        for a in addresses {
            if a.ip().is_unspecified() {
                return Ok(None);
            }
            ips.push(a.ip());
        }
    }
    Ok(Some(ips))
}

/// Who may call RU `i`'s node: the BUs' hosts for the EVM (RU 0), the EVM's host for an RU.
pub fn ru_peers(cfg: &SystemConfig, i: usize) -> Result<Option<Vec<IpAddr>>, PlanError> {
    if i == 0 {
        peers_on(&cfg.bus.iter().map(|b| b.host.as_str()).collect::<Vec<_>>())
    } else {
        peers_on(&[&cfg.rus[0].host])
    }
}

/// Who may send data to a BU: the hosts of the RUs other than the EVM's.
pub fn bu_peers(cfg: &SystemConfig) -> Result<Option<Vec<IpAddr>>, PlanError> {
    peers_on(&cfg.rus[1..].iter().map(|r| r.host.as_str()).collect::<Vec<_>>())
}

/// Every listener of a system, bound: the single-process case, where port 0 works.
#[derive(Debug)]
pub struct Listeners {
    /// Each RU's FEROL port.
    pub ferol: Vec<TcpListener>,
    /// Each RU's control port; RU 0's is the EVM's port, which BUs call.
    pub control: Vec<TcpListener>,
    /// Each BU's data port.
    pub data: Vec<TcpListener>,
}

impl Listeners {
    /// Binds every port of `cfg`.
    pub fn bind_all(cfg: &SystemConfig) -> Result<Self, PlanError> {
        let mut control = Vec::new();
        let mut ferol = Vec::new();
        for (i, ru) in cfg.rus.iter().enumerate() {
            ferol.push(bind_ferol(&ru.host, ru.ferol_port, &format!("{} FEROL port", ru.name), ru.feds.len())?);
            // RU 0's control port is the EVM's: BUs connect to it.
            control.push(if i == 0 {
                bind(&ru.host, cfg.evm.port, "the EVM's port (evm.port)")?
            } else {
                bind(&ru.host, ru.control_port, &format!("{} control port", ru.name))?
            });
        }
        let data = cfg
            .bus
            .iter()
            .map(|bu| bind(&bu.host, bu.data_port, &format!("{} data port", bu.name)))
            .collect::<Result<_, _>>()?;
        Ok(Listeners { ferol, control, data })
    }
}

/// The address a bound listener listens on.
pub fn address(l: &TcpListener) -> SocketAddr {
    l.local_addr().expect("a bound listener has an address")
}

/// Whom a unit lets call it: peers that prove they hold the run's link key, from the addresses
/// allowed (`None`: any).
#[derive(Debug)]
pub struct Admission<'a> {
    /// The run's link key.
    pub link_key: &'a LinkKey,
    /// The addresses peers may call from; `None`: any.
    pub allowed_peers: Option<Vec<IpAddr>>,
}

/// The number of the run's first unit in the protocol: `run.first_event`, or in orbit mode the
/// index of the DTH emulator's first orbit, 1 ([`FIRST_ORBIT`]).
fn first_unit(cfg: &SystemConfig) -> u64 {
    if cfg.is_orbit_mode() { u64::from(FIRST_ORBIT) } else { cfg.run.first_event }
}

/// The number of an orbit mode run's first orbit: the first orbit of lumi section 1 after orbit
/// 0, whose index in the run is 1 whatever the lumi sections' length.
pub const FIRST_ORBIT: u32 = 1;

/// The configuration of RU `i`'s node: its FEROL and control listeners, the BUs' data ports it
/// sends to (an RU) or the RUs' control ports it assigns to (the EVM).
pub fn ru_node(
    cfg: &SystemConfig,
    i: usize,
    ferol_listener: TcpListener,
    control_listener: TcpListener,
    bu_data: Vec<SocketAddr>,
    ru_control: Vec<SocketAddr>,
    admission: Admission<'_>,
) -> RuNodeConfig {
    let section = &cfg.rus[i];
    let p = cfg.ru_params(i);
    let n_ru = cfg.rus.len() as u16;
    let n_bu = cfg.bus.len() as u16;
    let push = cfg.is_push().then(|| PushPlan {
        destinations: destinations(cfg),
        high_water_events: (p.max_events_buffered as usize * usize::from(cfg.push.ru_high_water_percent) / 100).max(1),
        window_events: cfg.push.window_events,
        leader: (i == 0).then_some(PushLeader { n_ru, n_bu, exclude_margin_events: cfg.push.exclude_margin_events }),
    });
    let evm = (i == 0 && !cfg.is_push()).then(|| EvmConfig {
        assign_batch_events: cfg.evm.assign_batch_events,
        assign_delay_ns: cfg.evm.assign_delay_us * 1000,
        max_assigned_per_bu: cfg.evm.max_assigned_per_bu as usize,
        lumi_section_timeout_ns: Some((cfg.evm.lumi_section_timeout_s * 1e9) as u64),
        ..EvmConfig::new(n_ru, n_bu)
    });
    RuNodeConfig {
        run: cfg.run.number,
        link_key: admission.link_key.clone(),
        ru: RuConfig {
            first_event: first_unit(cfg),
            max_events_buffered: p.max_events_buffered as usize,
            silent_fed_give_up_ns: p.silent_fed_give_up_ms.map(|ms| ms * 1_000_000),
            max_parts_per_message: p.max_parts_per_message as usize,
            ..RuConfig::new(i as u16, section.feds.clone())
        },
        evm,
        push,
        ferol_listener,
        control_listener,
        bu_data,
        ru_control,
        chunk_bytes: p.chunk_bytes,
        chunks_per_fed: p.chunks_per_fed as usize,
        max_wire_bytes: cfg.max_wire_bytes(i),
        on_corrupt_stream: p.on_corrupt_stream,
        fragment_crc_check: p.fragment_crc_check,
        framing: if cfg.is_orbit_mode() {
            Framing::Dth { orbits_per_lumi_section: cfg.run.orbits_per_lumi_section }
        } else {
            Framing::Ferol
        },
        event_limit: cfg.stream_limit(),
        streams_timeout: Duration::from_secs(p.connect_timeout_s),
        connect_timeout: CONNECT_TIMEOUT,
        max_frame_bytes: max_frame_bytes(cfg),
        allowed_peers: admission.allowed_peers,
        ingest_only: false,
        pin_core: section.cpu,
        transport: cfg.transport.clone(),
    }
}

/// The push protocol's destination function: blocks of `push.block_events` events round robin
/// over the BUs `push.bus` names (all, if it names none), from the run's first event.
pub fn destinations(cfg: &SystemConfig) -> Destinations {
    let bus: Vec<u16> = match &cfg.push.bus {
        Some(names) => {
            names.iter().filter_map(|n| cfg.bus.iter().position(|b| &b.name == n)).map(|b| b as u16).collect()
        }
        None => (0..cfg.bus.len() as u16).collect(),
    };
    Destinations::new(first_unit(cfg), cfg.push.block_events, bus)
}

/// The configuration of BU `i`'s node, writing under `output` (or its own directory), asking
/// the EVM at `evm`; `restart` for an incarnation started again after a crash.
pub fn bu_node(
    cfg: &SystemConfig,
    i: usize,
    output: &Path,
    data_listener: TcpListener,
    evm: SocketAddr,
    restart: bool,
    admission: Admission<'_>,
) -> BuNodeConfig {
    let p = &cfg.bu;
    BuNodeConfig {
        run: cfg.run.number,
        link_key: admission.link_key.clone(),
        bu: BuConfig {
            max_events_in_flight: p.max_events_in_flight,
            request_batch_events: p.request_batch_events,
            max_events_per_file: p.max_events_per_file,
            file_timeout_ns: p.file_timeout_ms * 1_000_000,
            // Under pull a BU's requests are credits for room in its store; under push the RUs
            // send unasked, and the BU stops reading instead.
            store_bytes: (!cfg.is_push()).then_some(p.frame_store_bytes),
            push: cfg.is_push().then(|| PushBu {
                age_events: cfg.push.age_events,
                age_ns: cfg.push.age_ms * 1_000_000,
                // The most events any RU puts in one message.
                message_events_max: (0..cfg.rus.len())
                    .map(|r| cfg.ru_params(r).max_parts_per_message)
                    .max()
                    .unwrap_or(cfg.ru.max_parts_per_message),
                high_water_events: (u64::from(p.max_events_in_flight) * u64::from(cfg.push.bu_high_water_percent) / 100)
                    .max(1) as u32,
            }),
            ..BuConfig::new(i as u16, cfg.rus.len() as u16)
        },
        data_listener,
        evm,
        directory: cfg.bu_directory(i, output),
        name: cfg.bus[i].name.clone(),
        restart,
        generated: cfg.rus.iter().any(|r| r.emulated),
        writer_threads: p.writer_threads as usize,
        frame_store_bytes: p.frame_store_bytes as usize,
        ramdisk_high_water_percent: p.ramdisk_high_water_percent,
        ramdisk_low_water_percent: p.ramdisk_low_water_percent,
        connect_timeout: CONNECT_TIMEOUT,
        max_frame_bytes: max_frame_bytes(cfg),
        allowed_peers: admission.allowed_peers,
        discard: p.discard_events,
        orbits: cfg.is_orbit_mode(),
        // A block no RU checked is checked before it reaches a file CMSSW reads.
        check_orbit_crc: cfg.is_orbit_mode()
            && (0..cfg.rus.len())
                .any(|r| cfg.ru_params(r).fragment_crc_check != tessera_formats::fed::CrcCheck::Always),
        pin_core: cfg.bus[i].cpu,
        transport: cfg.transport.clone(),
        // Readers publish no resource summaries: a BU holds back on Tessera's FUs only.
        farm_limits: (cfg.fu.enabled && !cfg.fu.read_by_readers()).then(|| FarmLimits {
            min_fus: cfg.fu.min_fus_per_bu,
            max_queued_lumi_sections: cfg.fu.max_queued_lumi_sections,
            output_high_water_percent: cfg.fu.output_high_water_percent,
            stale_after: Duration::from_secs(cfg.fu.resource_summary_stale_s),
        }),
        // Benchmarks only: no system file makes a BU slow.
        intake_events_per_s: None,
    }
}

/// The emulator of RU `i`'s FEDs, sending to `to`, until the run's event limit.
pub fn emulator(cfg: &SystemConfig, i: usize, to: SocketAddr) -> Result<SenderConfig, PlanError> {
    let section = &cfg.rus[i];
    let faults = section.fault_specs().map_err(|source| PlanError::Faults { ru: i, source })?;
    Ok(SenderConfig {
        replay: None,
        streams: section
            .feds
            .iter()
            .map(|&fed| StreamConfig {
                run: cfg.run.number,
                fed: FedSpec { fed, size: section.fragment_size.model() },
                first_event: cfg.run.first_event,
                clock: cfg.clock_spec(),
                faults: faults.clone(),
                seed: cfg.trigger.seed,
            })
            .collect(),
        sink: Sink::connect(to.to_string()),
        paced: cfg.trigger.paced_rate_hz().is_some(),
        pace_percent: section.send_rate_percent,
        limits: Limits { events: cfg.run.events, seconds: None },
        stop: None,
    })
}

/// The DTH emulator of RU `i`'s sources (orbit mode), sending to `to`: one stream per source,
/// orbits from [`FIRST_ORBIT`] numbered for the run's lumi sections, events per orbit drawn for
/// `trigger.rate_hz` as the L1 rate, paced at the LHC orbit rate unless `trigger.free_running`,
/// until `run.orbits`.
pub fn dth_emulator(cfg: &SystemConfig, i: usize, to: SocketAddr) -> Result<DthSenderConfig, PlanError> {
    let section = &cfg.rus[i];
    let faults: Vec<OrbitFaultSpec> = section
        .faults
        .iter()
        .map(|spec| spec.parse())
        .collect::<Result<_, _>>()
        .map_err(|source| PlanError::Faults { ru: i, source })?;
    Ok(DthSenderConfig {
        streams: section
            .feds
            .iter()
            .map(|&source| OrbitStreamConfig {
                run: cfg.run.number,
                source,
                size: section.fragment_size.model(),
                first_orbit: FIRST_ORBIT,
                orbits_per_lumi_section: cfg.run.orbits_per_lumi_section,
                first_event: cfg.run.first_event,
                l1_rate_hz: cfg.trigger.clock_rate_hz(),
                seed: cfg.trigger.seed,
                faults: faults.clone(),
                max_block_bytes: DEFAULT_MAX_BLOCK_BYTES,
            })
            .collect(),
        sink: Sink::connect(to.to_string()),
        paced: !cfg.trigger.free_running,
        orbits: cfg.run.orbits,
        seconds: None,
        stop: None,
    })
}

/// The whole system of `cfg` in one process, on the listeners `l`: every RU and BU node, and
/// the emulators of the emulated RUs, the units proving themselves to each other with
/// `link_key`; BUs write under `output`.
pub fn plan(cfg: &SystemConfig, l: Listeners, output: &Path, link_key: &LinkKey) -> Result<SystemPlan, PlanError> {
    let bu_data: Vec<SocketAddr> = l.data.iter().map(address).collect();
    let ru_control: Vec<SocketAddr> = l.control.iter().skip(1).map(address).collect();
    let evm = address(&l.control[0]);
    let emulated = (0..cfg.rus.len()).filter(|&i| cfg.rus[i].emulated);
    let (emulators, dth_emulators) = if cfg.is_orbit_mode() {
        (Vec::new(), emulated.map(|i| dth_emulator(cfg, i, address(&l.ferol[i]))).collect::<Result<Vec<_>, _>>()?)
    } else {
        (emulated.map(|i| emulator(cfg, i, address(&l.ferol[i]))).collect::<Result<Vec<_>, _>>()?, Vec::new())
    };
    let rus = l
        .ferol
        .into_iter()
        .zip(l.control)
        .enumerate()
        .map(|(i, (f, c))| {
            let (data, control) = if i == 0 { (Vec::new(), ru_control.clone()) } else { (bu_data.clone(), Vec::new()) };
            Ok(ru_node(cfg, i, f, c, data, control, Admission { link_key, allowed_peers: ru_peers(cfg, i)? }))
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    let bus = l
        .data
        .into_iter()
        .enumerate()
        .map(|(i, d)| Ok(bu_node(cfg, i, output, d, evm, false, Admission { link_key, allowed_peers: bu_peers(cfg)? })))
        .collect::<Result<Vec<_>, PlanError>>()?;
    Ok(SystemPlan { rus, bus, emulators, dth_emulators })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_directories_are_named_by_the_utc_time() {
        for (secs, stamp) in [
            (0, "19700101-000000"),
            (951_782_400, "20000229-000000"),
            (1_795_896_634, "20261128-201034"),
            (4_107_542_399, "21000228-235959"),
        ] {
            assert_eq!(utc_stamp(secs), stamp, "{secs}");
        }
    }

    #[test]
    fn the_default_system_on_loopback_is_planned_unit_by_unit_as_the_file_says() {
        let mut cfg = SystemConfig::default();
        for ru in &mut cfg.rus {
            (ru.host, ru.ferol_port, ru.control_port) = ("127.0.0.1".into(), 0, 0);
        }
        for bu in &mut cfg.bus {
            (bu.host, bu.data_port) = ("127.0.0.1".into(), 0);
        }
        cfg.evm.port = 0;
        let key = LinkKey::generate().expect("random bytes");
        let l = Listeners::bind_all(&cfg).expect("loopback ports");
        let evm = address(&l.control[0]);
        let data: Vec<SocketAddr> = l.data.iter().map(address).collect();
        let plan = plan(&cfg, l, Path::new("/nowhere"), &key).expect("a plan");
        assert_eq!((plan.rus.len(), plan.bus.len()), (cfg.rus.len(), cfg.bus.len()));
        assert_eq!(plan.emulators.len(), cfg.rus.iter().filter(|r| r.emulated).count());
        // The EVM assigns to the other RUs; the other RUs send to every BU.
        assert!(plan.rus[0].evm.is_some() && plan.rus[0].bu_data.is_empty());
        assert_eq!(plan.rus[0].ru_control.len(), cfg.rus.len() - 1);
        for ru in &plan.rus[1..] {
            assert!(ru.evm.is_none());
            assert_eq!(ru.bu_data, data);
        }
        for (i, bu) in plan.bus.iter().enumerate() {
            assert_eq!(bu.evm, evm);
            assert_eq!(bu.directory, cfg.bu_directory(i, Path::new("/nowhere")));
            assert_eq!(bu.name, cfg.bus[i].name);
        }
        // Units on loopback take calls from loopback only.
        assert_eq!(plan.bus[0].allowed_peers.as_deref().map(|p| p.iter().all(IpAddr::is_loopback)), Some(true));
        // BUs write their events unless the file says to discard them.
        assert!(plan.bus.iter().all(|b| !b.discard));
        (cfg.bu.discard_events, cfg.fu.enabled) = (true, false);
        let l = Listeners::bind_all(&cfg).expect("loopback ports");
        let plan = super::plan(&cfg, l, Path::new("/nowhere"), &key).expect("a plan");
        assert!(plan.bus.iter().all(|b| b.discard && b.farm_limits.is_none()));
    }

    #[test]
    fn a_peer_port_of_0_is_refused_with_its_place_in_the_file() {
        let e = resolve("127.0.0.1", 0, "evm.port").unwrap_err();
        assert!(e.to_string().starts_with("evm.port: port 0 means"), "{e}");
        let mut cfg = SystemConfig::default();
        for (i, ru) in cfg.rus.iter_mut().enumerate() {
            (ru.ferol_port, ru.control_port) = (9000 + i as u16, 9100 + i as u16);
        }
        for (i, bu) in cfg.bus.iter_mut().enumerate() {
            bu.data_port = 9200 + i as u16;
        }
        cfg.evm.port = 9300;
        assert!(require_ports(&cfg, Path::new("sys.yaml")).is_ok());
        cfg.evm.port = 0;
        cfg.bus[1].data_port = 0;
        let e = require_ports(&cfg, Path::new("sys.yaml")).unwrap_err();
        assert!(e.to_string().starts_with("sys.yaml: evm.port, bus[1].data_port are 0 (any free port)"), "{e}");
    }
}
