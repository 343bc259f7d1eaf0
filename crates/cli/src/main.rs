//! `tessera`: every role and tool of the Tessera event builder behind one binary.

use anyhow::{Context, Result, bail};
use clap::{Args, CommandFactory, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tessera_inspect::event::EventChecks;
use tessera_inspect::{Target, inspect_path, render, verify};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

mod controller;
mod farm;
mod options;
mod run;
mod space;
mod unit;

/// Tessera: a software event builder for trigger/DAQ systems.
#[derive(Parser)]
#[command(name = "tessera", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How to write the log on standard error: `text` for people, `json` (one object a line,
    /// with the run, unit and lumi section as fields) for machines. `RUST_LOG` sets the levels
    /// (default `info`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// See [`Cli::log_format`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// A `HOST:PORT` argument, the host a name or an IP address: the first address it resolves to.
fn socket_address(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let mut addresses = text.to_socket_addrs().map_err(|e| format!("expected HOST:PORT ({e})"))?;
    addresses.next().ok_or_else(|| format!("{text} resolves to no address"))
}

/// Sends the log to standard error: messages as they always read for people, every event as a
/// JSON object for machines.
fn init_log(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        // The message alone, as people read it; the fields are for machines.
        LogFormat::Text => log
            .without_time()
            .with_level(false)
            .with_target(false)
            .with_ansi(false)
            .fmt_fields(tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
                if field.name() == "message" { write!(w, "{value:?}") } else { Ok(()) }
            }))
            .init(),
        LogFormat::Json => log.json().flatten_event(true).with_current_span(false).init(),
    }
}

#[derive(Subcommand)]
enum Command {
    /// Show what a raw file, a FEROL or DTH stream capture, or a BU run directory holds, and flag
    /// what is wrong with it (exit status 1 if anything is).
    Inspect {
        /// A raw file, a stream capture, or a run directory.
        path: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// List every FED fragment of every event.
        #[arg(long)]
        feds: bool,
        /// Do not check generated payloads against Tessera's seeded content (for data from other
        /// emulators).
        #[arg(long)]
        no_seed_check: bool,
    },
    /// Check a BU run directory against every rule of the file contract; print each violation
    /// with file and offset; exit status 1 if there is any.
    Verify {
        /// The run directory (`.../runRRRRRR`): a BU's, or the storage run directory of the
        /// filter farm's mergers.
        run_dir: PathBuf,
        /// For a storage run directory: the BUs' run directories, whose EoLS records must equal
        /// what storage says was processed, per lumi section (the completeness proof).
        #[arg(long, num_args = 1..)]
        built: Vec<PathBuf>,
        /// Print the violations as JSON.
        #[arg(long)]
        json: bool,
        /// Do not check generated payloads against Tessera's seeded content.
        #[arg(long)]
        no_seed_check: bool,
        /// For a BU run directory: the run's FED list (`1024,0-7`, the trigger FED among them).
        /// Every event must hold every FED of the list: one that misses some is a violation
        /// (naming them, and whether its BU flagged it incomplete), and the events without each
        /// FED are counted.
        #[arg(long, value_name = "LIST", conflicts_with = "system")]
        expect_feds: Option<String>,
        /// For a BU run directory: the system file of the run, whose FEDs (every RU's) are the
        /// list every event must hold, as with `--expect-feds`.
        #[arg(long, value_name = "SYSTEM.yaml")]
        system: Option<PathBuf>,
    },
    /// Write a run of seeded, emulated events as a BU would: raw files, JSON bookkeeping, EoLS
    /// and EoR.
    Sample(SampleArgs),
    /// Write a sample run into a new directory, inspect it and verify it.
    Demo {
        /// Where to write (default: a new directory under the system's temporary directory).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Simulate whole systems under faults, deterministically, and check the protocol's
    /// invariants after every step; exit status 1 on any violation.
    Sim {
        /// Scenario to run (default: all). Names: 1x1_lv1_wrap, 2x2_bu_crash, 4x4_slow_bu,
        /// 2x2_missing_fed, 2x2_ru_full, 4x4_slow_fed, 8x8_random.
        #[arg(long)]
        scenario: Vec<String>,
        /// Seeds per scenario.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 0)]
        first_seed: u64,
    },
    /// Run a whole event builder on this machine: emulated front ends, the RUs (the first one
    /// with the EVM) and the BUs; show progress; stop after the configured events or seconds or
    /// on Ctrl-C, drain, and print a summary ending with the conservation check (exit status 1
    /// if any unit failed, it does not hold, or more events are incomplete than allowed).
    Run {
        /// The system file (default: 2 RUs, one of them the EVM, and 2 BUs on this machine).
        system: Option<PathBuf>,
        #[command(flatten)]
        args: options::SystemArgs,
        #[command(flatten)]
        control: options::ControlArgs,
        /// Print the system (the default one, or the file with its defaults filled in) as YAML,
        /// a starting point for a system file, and exit.
        #[arg(long)]
        print_config: bool,
        /// What stays in the output directory after the run: `storage` (the merged files and
        /// summary.json; the units' own files go once the chain's check proves storage holds
        /// every built event), `all` (the BUs' bookkeeping for `tessera verify --built`, the FUs'
        /// and mergers' files and logs too), or `summary` (summary.json alone). A run on agents
        /// keeps everything on its hosts.
        #[arg(long, value_enum, default_value_t = space::Keep::Storage)]
        keep: space::Keep,
        /// Most events that may be built incomplete (a FED missing) for the run to succeed
        /// (exit status 1 above it). Default: 0 when no fault is configured in the system file
        /// (`rus[i].faults`), any number when one is.
        #[arg(long, value_name = "N")]
        max_incomplete: Option<u64>,
    },
    /// Check a system file or a selection menu without running anything, or print the default
    /// system.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Run one filter unit: claim raw files from a BU's run directory, select their events with
    /// the menu (or an external HLT), write the accepted events per lumi section and stream, and
    /// leave when the run has ended and every file is processed. Prints its report as JSON.
    Fu(farm::FuArgs),
    /// Read a BU's files through its file broker exactly as CMS's HLT does (docs/formats.md
    /// §16): ask `/popfile`, move only forward in lumi sections, count each file's events from
    /// its header, check them, delete the file, never call back. A stand-in for an unchanged
    /// CMSSW process in tests of the broker: anything such a process would abort on is said as
    /// a deviation, and exits with status 1. Prints its report as JSON.
    Reader(farm::ReaderArgs),
    /// Run the mergers of a system's filter farm (micro, mini, macro) until the run is merged
    /// into storage, then check storage against the BUs' bookkeeping (exit status 1 if it does
    /// not hold). Resumes wherever killed mergers stopped.
    Merge(farm::MergeArgs),
    /// Run the EVM and the first RU of a system file in this process.
    Evm {
        /// The system file.
        #[arg(long)]
        system: PathBuf,
        #[command(flatten)]
        args: options::SystemArgs,
        #[command(flatten)]
        control: options::ControlArgs,
        #[command(flatten)]
        unit: unit::UnitArgs,
    },
    /// Run one RU (not the EVM's) of a system file in this process.
    Ru {
        /// The system file.
        #[arg(long)]
        system: PathBuf,
        /// The RU's name in the system file.
        #[arg(long)]
        name: String,
        #[command(flatten)]
        args: options::SystemArgs,
        #[command(flatten)]
        control: options::ControlArgs,
        #[command(flatten)]
        unit: unit::UnitArgs,
    },
    /// Run one BU of a system file in this process.
    Bu {
        /// The system file.
        #[arg(long)]
        system: PathBuf,
        /// The BU's name in the system file.
        #[arg(long)]
        name: String,
        /// Restart after a crash: reopen the run directory, discard partial files, and let the
        /// EVM say which complete files to publish.
        #[arg(long)]
        restart: bool,
        #[command(flatten)]
        args: options::SystemArgs,
        #[command(flatten)]
        control: options::ControlArgs,
        #[command(flatten)]
        unit: unit::UnitArgs,
    },
    /// Serve as this host's agent: start the units that `tessera run` places on this host (a
    /// system file with `controller.agent_port`) as processes, supervise them and report their
    /// states, figures and ends over HTTP. Runs until Ctrl-C or SIGTERM, which end its processes.
    Agent(controller::AgentArgs),
    /// Emulate FED readout boards: send FEROL streams of seeded fragments (and trigger fragments
    /// for FED 1024), one per FED, over TCP to an RU or into capture files, or replay captured
    /// streams from memory (`--replay`); print per FED and in total the events, bytes, GB/s and
    /// dead time.
    Ferol(FerolArgs),
    /// Run a benchmark suite; every figure is printed with its ratio to a baseline measured in
    /// the same run.
    Bench {
        /// The suite.
        #[arg(value_enum)]
        suite: BenchSuite,
        /// Short measurements, for smoke tests (figures are noisier).
        #[arg(long)]
        quick: bool,
        /// Where suites that write files (scans as CSV and SVG) put them.
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
        /// Print the results as one JSON object (suites `net`, `evb` and `fu` only).
        #[arg(long)]
        json: bool,
    },
    /// Print a completion script for a shell on standard output, made from this command line's
    /// own definition, e.g. `tessera completions bash >
    /// ~/.local/share/bash-completion/completions/tessera`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page `tessera.1` on standard output, or with `--output DIR` write it and
    /// one page per subcommand (`tessera-run.1`, `tessera-config-check.1`, ...) into DIR; all
    /// made from this command line's own definition.
    Man {
        /// Directory to write the pages into (created if it does not exist; pages of the same
        /// name are overwritten).
        #[arg(long)]
        output: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BenchSuite {
    /// CRC-16, CRC-32C and fragment validation.
    Formats,
    /// CPU cost and control messages of the event-building protocol, cores alone.
    Protocol,
    /// Encoding and decoding of the event-building wire frames.
    Wire,
    /// Raw TCP baselines on loopback: emulator into a discarding receiver, and through a relay;
    /// a scan over fragment size written as CSV and SVG to --out.
    Net,
    /// The event builder on loopback against raw TCP: RU ingest, the chain to discarding BUs and
    /// to RAM-disk files, ratios and targets; scans over fragment size, sources, RUs x BUs and
    /// writer threads written as CSV and SVG to --out.
    Evb,
    /// The filter farm on a RAM disk, one thread each: an FU process with the default menu over
    /// a sample run against a plain read of its files, and the micro, mini and macro mergers
    /// against a plain copy of the FU outputs.
    Fu,
    /// The BU's file broker on loopback: files granted per second to 1, 64 and 512 readers
    /// that keep to CMS's HLT's rules, against one thread claiming the same files locally.
    Broker,
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Read and check a system file as `tessera run` would (every key, every value, the menu
    /// file it names), or a selection menu as an FU would; print a one-line summary, or every
    /// mistake with file, line, key, what was expected and what was found, then how many
    /// (exit status 1). A file whose top-level keys are a menu's (`streams`, `paths`) is
    /// checked as a menu.
    Check {
        /// The system file or menu.
        file: PathBuf,
        /// Check the file as a selection menu, whatever its keys.
        #[arg(long, conflicts_with = "system")]
        menu: bool,
        /// Check the file as a system file, whatever its keys.
        #[arg(long)]
        system: bool,
    },
    /// Print the default system (the one `tessera run` runs without a file) as YAML.
    Default,
}

#[derive(Args)]
struct SampleArgs {
    /// BU directory to write the run directory into.
    #[arg(long)]
    output: PathBuf,
    /// Run number.
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// Lumi sections.
    #[arg(long, default_value_t = 3)]
    lumi_sections: u32,
    /// Events per lumi section.
    #[arg(long, default_value_t = 20)]
    events_per_ls: u32,
    /// Events per raw file at most.
    #[arg(long, default_value_t = 8)]
    events_per_file: u32,
    /// Data FEDs per event (ids 0..N; the trigger fragment, FED 1024, comes on top).
    #[arg(long, default_value_t = 8)]
    feds: u16,
    /// Mean payload bytes per data fragment.
    #[arg(long, default_value_t = 2048)]
    fed_bytes: usize,
    /// Number of the first event (2^24 − 5 = 16777211 shows the LV1 id wrap).
    #[arg(long, default_value_t = 1)]
    first_event: u64,
}

impl SampleArgs {
    fn spec(&self) -> Result<SampleSpec> {
        if self.feds > 1024 {
            bail!("--feds {}: data FED ids must stay below 1024, the trigger fragment's", self.feds);
        }
        Ok(SampleSpec {
            run: self.run,
            lumi_sections: self.lumi_sections,
            events_per_lumi_section: self.events_per_ls,
            events_per_file: self.events_per_file,
            fed_ids: (0..self.feds).collect(),
            fed_payload_bytes_mean: self.fed_bytes,
            first_event: self.first_event,
            source: "sample-bu".into(),
        })
    }
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("sink").required(true).args(["connect", "output", "system"])))]
#[command(group(clap::ArgGroup::new("limit").required(true).multiple(true).args(["events", "seconds", "system"])))]
struct FerolArgs {
    /// Emulate the FEDs of one RU of this system file (with --ru), sending to its FEROL port;
    /// the run's number, first event, sizes, trigger and limits come from the file.
    #[arg(long, requires = "ru", conflicts_with_all = ["connect", "output", "feds", "run", "first_event", "size", "size_mean", "size_sigma", "rate_hz", "fault", "orbits_per_ls", "seed"])]
    system: Option<PathBuf>,
    /// The RU whose FEDs to emulate (with --system).
    #[arg(long, requires = "system")]
    ru: Option<String>,
    /// With --system: leave out the file's `run.seconds` and send until the RU stops taking
    /// the streams or this process is ended (a controller stops such a run at the EVM, so that
    /// every FED ends after the same event). The file's `run.events` still applies.
    #[arg(long, requires = "system")]
    until_stopped: bool,
    /// FED ids and ranges, e.g. 0-7,1024 (1024 sends the 952-byte trigger fragment).
    #[arg(long, default_value = "0-7,1024")]
    feds: String,
    /// Run number.
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// Number of the first event (16777211 crosses the 24-bit LV1 wrap after 5 events).
    #[arg(long, default_value_t = 1)]
    first_event: u64,
    /// Stop after this many events per FED.
    #[arg(long)]
    events: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    seconds: Option<f64>,
    /// Poisson triggers at this mean rate (all FEDs of an event share the trigger time); free
    /// running when absent (orbits and BXs then come from a 100 kHz clock that nobody waits for).
    #[arg(long)]
    rate_hz: Option<f64>,
    /// Fixed fragment size in bytes, header and trailer included (16..=1048576, rounded up to
    /// whole 8-byte words).
    #[arg(long, conflicts_with_all = ["size_mean", "size_sigma"])]
    size: Option<usize>,
    /// Mean of log-normal fragment sizes in bytes (with --size-sigma).
    #[arg(long, requires = "size_sigma")]
    size_mean: Option<f64>,
    /// Standard deviation of log-normal fragment sizes in bytes (with --size-mean).
    #[arg(long, requires = "size_mean")]
    size_sigma: Option<f64>,
    /// Inject a fault: NAME@EVENT or NAME:PROBABILITY, optionally /FED; names bad-crc,
    /// wrong-fed-id, skip, truncate, garbage, disconnect. Repeatable.
    #[arg(long)]
    fault: Vec<String>,
    /// Orbits per lumi section (2^18 = 262144 for real data; fewer for short emulated sections).
    #[arg(long, default_value_t = 1 << 18)]
    orbits_per_ls: u64,
    /// Seed of trigger times and fault draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Send to an RU at HOST:PORT, one TCP connection per FED.
    #[arg(long)]
    connect: Option<String>,
    /// Write one capture file per FED, `DIR/fed<ID>.ferol` (created if missing).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Replay the capture files `CAPTURE/fed<ID>.ferol` (written by `--output`) from memory in a
    /// loop, renumbering each pass's events, instead of generating events: free running, no
    /// per-event generation.
    #[arg(long, value_name = "CAPTURE", conflicts_with_all = ["system", "feds", "run", "first_event", "size", "size_mean", "size_sigma", "rate_hz", "fault", "orbits_per_ls", "seed"])]
    replay: Option<PathBuf>,
}

fn ferol(args: FerolArgs) -> Result<ExitCode> {
    use tessera_config::emulation::{ClockSpec, EmulationError, FedSpec, MAX_STREAMS, SizeModel};
    use tessera_emu::generator::StreamConfig;
    use tessera_emu::sender::{self, Limits, SenderConfig, Sink};
    if let (Some(system), Some(ru)) = (&args.system, &args.ru) {
        let limits = options::SystemArgs { events: args.events, seconds: args.seconds, output: None };
        let mut cfg = unit::ferol_for(system, ru, &limits)?;
        if args.until_stopped {
            // A stop line nobody draws: the streams run until the RU or a signal ends them.
            cfg.limits.seconds = None;
            cfg.stop = Some(sender::StopLine::new());
        }
        eprintln!("sending {} FED streams of {ru} to {:?}", cfg.streams.len(), cfg.sink);
        print!("{}", sender::run(cfg)?);
        return Ok(ExitCode::SUCCESS);
    }
    // Made once every argument is checked: a refused argument creates no directory.
    let sink = || match (&args.connect, &args.output) {
        (Some(address), _) => Ok(Sink::Connect(address.clone())),
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir).with_context(|| format!("--output {}: cannot create it", dir.display()))?;
            Ok(Sink::Directory(dir.clone()))
        }
        (None, None) => bail!("give --connect HOST:PORT or --output DIR"),
    };
    let limits = Limits { events: args.events, seconds: args.seconds };
    if let Some(dir) = &args.replay {
        let capture = tessera_emu::replay::Capture::load(dir).context("--replay")?;
        eprintln!(
            "replaying {} FED streams of {} events ({} bytes a pass) from {}",
            capture.feds().len(),
            capture.events(),
            capture.bytes(),
            dir.display()
        );
        let (replay, sink) = (Some(std::sync::Arc::new(capture)), sink()?);
        let config =
            SenderConfig { streams: Vec::new(), replay, sink, paced: false, pace_percent: 100, limits, stop: None };
        print!("{}", sender::run(config)?);
        return Ok(ExitCode::SUCCESS);
    }
    let feds = tessera_config::parse_fed_list(&args.feds).with_context(|| format!("--feds {}", args.feds))?;
    if feds.len() > MAX_STREAMS {
        bail!("--feds {}: more than {MAX_STREAMS} FEDs for one process", args.feds);
    }
    let size = match (args.size, args.size_mean, args.size_sigma) {
        (_, Some(mean_bytes), Some(sigma_bytes)) => SizeModel::LogNormal { mean_bytes, sigma_bytes },
        (size, _, _) => SizeModel::Fixed(size.unwrap_or(2048)),
    };
    size.validate().with_context(|| match size {
        SizeModel::Fixed(b) => format!("--size {b}"),
        SizeModel::LogNormal { mean_bytes, sigma_bytes } => {
            format!("--size-mean {mean_bytes} --size-sigma {sigma_bytes}")
        }
    })?;
    let clock = ClockSpec {
        rate_hz: args.rate_hz.unwrap_or(tessera_config::LEVEL1_RATE_HZ),
        seed: args.seed,
        orbits_per_lumi_section: args.orbits_per_ls,
    };
    clock.validate().context("--rate-hz or --orbits-per-ls")?;
    let faults = args
        .fault
        .iter()
        .map(|spec| match spec.parse() {
            Ok(f) => Ok(f),
            Err(EmulationError::BadFault { reason, .. }) => bail!("--fault {spec}: {reason}"),
            Err(e) => Err(e.into()),
        })
        .collect::<Result<Vec<_>>>()?;
    let streams = feds
        .iter()
        .map(|&fed| {
            let fed = FedSpec { fed, size };
            fed.validate().with_context(|| format!("--feds {}", args.feds))?;
            Ok(StreamConfig {
                run: args.run,
                fed,
                first_event: args.first_event,
                clock,
                faults: faults.clone(),
                seed: args.seed,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let sink = sink()?;
    eprintln!(
        "sending {} FED streams ({})",
        streams.len(),
        if args.rate_hz.is_some() { "paced" } else { "free running" }
    );
    let summary = sender::run(SenderConfig {
        streams,
        replay: None,
        sink,
        paced: args.rate_hz.is_some(),
        pace_percent: 100,
        limits,
        stop: None,
    })?;
    print!("{summary}");
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_log(cli.log_format);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tessera: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `tessera config check`: the file read and checked as `tessera run` reads it, and the menu
/// file it names.
fn config_check(file: &Path) -> ExitCode {
    let cfg = match tessera_config::SystemConfig::load(file) {
        Ok(cfg) => cfg,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(1);
        }
    };
    if cfg.fu.enabled
        && let Some(menu) = &cfg.fu.menu
        && let Err(errors) = tessera_fu::menu::Menu::load(menu)
    {
        // The menu's mistakes are the system file's, through its `fu.menu`.
        for line in errors.to_string().lines() {
            eprintln!("{}: fu.menu: {line}", file.display());
        }
        return ExitCode::from(1);
    }
    let farm = if cfg.fu.enabled {
        format!("filter farm of {} FU processes per BU", cfg.fu.processes_per_bu)
    } else {
        "no filter farm".to_owned()
    };
    let placement = match cfg.controller.agent_port {
        Some(port) => {
            let mut hosts: Vec<&str> = cfg.rus.iter().map(|r| r.host.as_str()).collect();
            hosts.extend(cfg.bus.iter().flat_map(|b| [b.host.as_str(), b.fu_host()]));
            hosts.sort_unstable();
            hosts.dedup();
            format!("; placed on {} hosts through agents on port {port}", hosts.len())
        }
        None => String::new(),
    };
    println!(
        "{}: OK: run {}, {} RUs, {} BUs, {} FEDs, {}{placement}",
        file.display(),
        cfg.run.number,
        cfg.rus.len(),
        cfg.bus.len(),
        cfg.all_feds().len(),
        farm
    );
    for advice in cfg.advice() {
        println!("{}: advice: {advice}", file.display());
    }
    ExitCode::SUCCESS
}

/// `tessera config check` of a selection menu: read and checked as an FU reads it.
fn menu_check(file: &Path) -> ExitCode {
    match tessera_fu::menu::Menu::load(file) {
        Ok(menu) => {
            println!(
                "{}: OK: a selection menu of {} streams ({}) and {} paths ({})",
                file.display(),
                menu.streams.len(),
                menu.streams.join(", "),
                menu.paths.len(),
                menu.paths.iter().map(|path| path.name.as_str()).collect::<Vec<_>>().join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::from(1)
        }
    }
}

fn checks(no_seed_check: bool) -> EventChecks {
    EventChecks { seeded_payloads: !no_seed_check }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Inspect { path, json, feds, no_seed_check } => {
            let report = inspect_path(&path, checks(no_seed_check))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", render::target(&report, feds));
            }
            Ok(if report.problem_count() == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Verify { run_dir, built, json, no_seed_check: _, expect_feds, system }
            if tessera_control::chain::is_output_dir(&run_dir) =>
        {
            if expect_feds.is_some() || system.is_some() {
                bail!(
                    "--expect-feds and --system check the events of a BU run directory; {} holds filter-farm outputs",
                    run_dir.display()
                );
            }
            let storage = tessera_control::chain::is_storage_run_dir(&run_dir);
            if !storage && !built.is_empty() {
                bail!("--built: {} holds FU or merger outputs, not storage", run_dir.display());
            }
            let check = if storage {
                tessera_control::chain::verify_storage(&run_dir, &built)?
            } else {
                tessera_control::chain::verify_outputs(&run_dir)?
            };
            if json {
                let per_ls: Vec<_> = check
                    .per_ls
                    .iter()
                    .map(|(ls, (b, p))| serde_json::json!({"ls": ls, "built": b, "processed": p}))
                    .collect();
                let report = serde_json::json!({
                    "holds": check.holds(),
                    "per_lumi_section": per_ls,
                    "accepted": check.accepted,
                    "files": check.files,
                    "bytes": check.bytes,
                    "problems": check.problems,
                });
                println!("{}", serde_json::to_string_pretty(&report)?);
                return Ok(if check.holds() { ExitCode::SUCCESS } else { ExitCode::from(1) });
            }
            let (b, p) = check.totals();
            for problem in &check.problems {
                println!("{}: {problem}", run_dir.display());
            }
            for (ls, (built, processed)) in check.per_ls.iter().filter(|(_, (b, p))| b != p) {
                println!("{}: lumi section {ls}: built {built}, processed {processed}", run_dir.display());
            }
            println!(
                "{}: {} lumi sections, {} events processed{}, {} files, {:.1} MB; {}",
                run_dir.display(),
                check.per_ls.len(),
                p,
                if built.is_empty() { String::new() } else { format!(" of {b} built") },
                check.files,
                check.bytes as f64 / 1e6,
                if check.holds() { "no violations" } else { "VIOLATIONS" }
            );
            Ok(if check.holds() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Verify { run_dir, built: _, json, no_seed_check, expect_feds, system } => {
            let expected = match (expect_feds, system) {
                (Some(list), _) => {
                    Some(tessera_config::parse_fed_list(&list).with_context(|| format!("--expect-feds {list}"))?)
                }
                (None, Some(path)) => Some(tessera_config::SystemConfig::load(&path)?.all_feds()),
                (None, None) => None,
            };
            let Some(expected) = expected else {
                let violations = verify::verify_run_dir(&run_dir, checks(no_seed_check))?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&violations)?);
                } else {
                    print!("{}", render::violations(&run_dir, &violations));
                }
                return Ok(if violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) });
            };
            let (violations, coverage) = verify::verify_run_dir_expecting(&run_dir, checks(no_seed_check), &expected)?;
            if json {
                let report = serde_json::json!({ "violations": violations, "fed_coverage": coverage });
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", render::fed_coverage(&run_dir, &coverage));
                print!("{}", render::violations(&run_dir, &violations));
            }
            Ok(if violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Sample(args) => {
            let summary = write_sample(&args.output, &args.spec()?)?;
            println!("{}", summary.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { output } => demo(output),
        Command::Sim { scenario, seeds, first_seed } => sim(&scenario, seeds, first_seed),
        Command::Ferol(args) => ferol(args),
        Command::Run { system, args, control, print_config, keep, max_incomplete } => {
            run::run(system.as_deref(), &args, &control, print_config, keep, max_incomplete)
        }
        Command::Config { action: ConfigAction::Default } => {
            print!("{}", tessera_config::SystemConfig::default().to_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Config { action: ConfigAction::Check { file, menu, system } } => {
            let kind = match (menu, system) {
                (true, _) => tessera_fu::menu::FileKind::Menu,
                (_, true) => tessera_fu::menu::FileKind::System,
                _ => tessera_fu::menu::FileKind::of_file(&file),
            };
            Ok(match kind {
                tessera_fu::menu::FileKind::System => config_check(&file),
                tessera_fu::menu::FileKind::Menu => menu_check(&file),
            })
        }
        Command::Fu(args) => {
            let report = farm::fu(&args)?;
            println!("{}", farm::report_json(&report));
            Ok(ExitCode::SUCCESS)
        }
        Command::Reader(args) => {
            let report = farm::reader(&args)?;
            println!("{}", farm::reader_json(&report));
            Ok(if report.deviations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Merge(args) => Ok(if farm::merge(&args)? { ExitCode::SUCCESS } else { ExitCode::from(1) }),
        Command::Evm { system, args, control, unit } => {
            unit::unit(unit::Role::Evm, &system, None, &args, &control, false, &unit)
        }
        Command::Ru { system, name, args, control, unit } => {
            unit::unit(unit::Role::Ru, &system, Some(&name), &args, &control, false, &unit)
        }
        Command::Bu { system, name, restart, args, control, unit } => {
            unit::unit(unit::Role::Bu, &system, Some(&name), &args, &control, restart, &unit)
        }
        Command::Agent(args) => controller::agent(&args),
        Command::Bench { suite, quick, out, json } => {
            if json && !matches!(suite, BenchSuite::Net | BenchSuite::Evb | BenchSuite::Fu) {
                bail!("--json is supported by the net, evb and fu suites only");
            }
            let budget = if quick { tessera_bench::timing::Budget::QUICK } else { tessera_bench::timing::Budget::FULL };
            match suite {
                BenchSuite::Formats => {
                    print!("{}", tessera_bench::formats::report(&tessera_bench::formats::run(budget)))
                }
                BenchSuite::Protocol => {
                    print!("{}", tessera_bench::protocol::report(&tessera_bench::protocol::run(budget)))
                }
                BenchSuite::Wire => print!("{}", tessera_bench::wire::report(&tessera_bench::wire::run(budget))),
                BenchSuite::Net => bench_net(quick, &out, json)?,
                BenchSuite::Evb => bench_evb(quick, &out, json)?,
                BenchSuite::Fu => bench_fu(quick, json)?,
                BenchSuite::Broker => {
                    eprintln!(
                        "bench broker: files granted per second to many readers{}",
                        if quick { " (quick)" } else { "" }
                    );
                    let rates =
                        tessera_bench::broker::run(if quick { 1024 } else { 8192 }, &mut |what| eprintln!("  {what}"))?;
                    print!("{}", tessera_bench::broker::report(&rates));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            // Into memory first: the generator panics on a write error such as a closed pipe.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tessera", &mut script);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)
                .context("writing the completion script to standard output")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { output } => man(output.as_deref()),
    }
}

/// `tessera man`: the page of `tessera` on standard output, or every page written into `output`.
fn man(output: Option<&Path>) -> Result<ExitCode> {
    let command = Cli::command();
    match output {
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout().lock())
            .context("writing the manual page to standard output")?,
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing the manual pages into {}", dir.display()))?;
            println!("{}: tessera.1 and a page per subcommand", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_fu(quick: bool, json: bool) -> Result<()> {
    use tessera_bench::fu;
    eprintln!("bench fu: the filter farm against plain file operations{}", if quick { " (quick)" } else { "" });
    let config = if quick { fu::FuBenchConfig::QUICK } else { fu::FuBenchConfig::FULL };
    let bench = fu::run(&config, &mut |what| eprintln!("  {what}"))?;
    if json {
        println!("{}", fu::json(&bench));
    } else {
        print!("{}", fu::report(&bench));
    }
    Ok(())
}

fn bench_net(quick: bool, out: &Path, json: bool) -> Result<()> {
    use tessera_bench::net::Measured;
    use tessera_bench::net_suite;
    eprintln!(
        "bench net: raw TCP over loopback{}; writing the scan to {}",
        if quick { " (quick)" } else { "" },
        out.display()
    );
    let suite = net_suite::run(quick, out)?;
    if !json {
        print!("{}", net_suite::report(&suite));
        return Ok(());
    }
    let case = |m: &Measured| {
        serde_json::json!({
            "streams": m.streams,
            "fragment_bytes": m.fragment_bytes,
            "wire_bytes_per_fragment": m.wire_bytes_per_fragment,
            "bytes": m.bytes,
            "fragments": m.fragments,
            "seconds": m.seconds,
            "gb_per_s": m.gb_per_s(),
            "fragments_per_s": m.fragments_per_s(),
            "events_per_s": m.events_per_s(),
            "worker_cpu_seconds": m.worker_cpu_seconds,
            "receiver_cpu_seconds": m.receiver_cpu_seconds,
            "process_cpu_seconds": m.process_cpu_seconds,
            "cpu_ns_per_fragment": m.cpu_ns_per_fragment(),
            "process_cpu_ns_per_fragment": m.process_cpu_ns_per_fragment(),
        })
    };
    let cases = |ms: &[Measured]| ms.iter().map(case).collect::<Vec<_>>();
    let report = serde_json::json!({
        "suite": "net",
        "quick": quick,
        "relay_outputs": net_suite::RELAY_OUTPUTS,
        "raw_ingest": case(&suite.ingest),
        "raw_relay": case(&suite.relay),
        "relay_over_ingest": suite.relay.gb_per_s() / suite.ingest.gb_per_s().max(1e-12),
        "scan": { "raw_ingest": cases(&suite.scan_ingest), "raw_relay": cases(&suite.scan_relay) },
        "files": suite.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn net_json(m: &tessera_bench::net::Measured) -> serde_json::Value {
    serde_json::json!({
        "streams": m.streams,
        "fragment_bytes": m.fragment_bytes,
        "bytes": m.bytes,
        "fragments": m.fragments,
        "seconds": m.seconds,
        "gb_per_s": m.gb_per_s(),
        "events_per_s": m.events_per_s(),
        "cpu_ns_per_fragment": m.cpu_ns_per_fragment(),
        "process_cpu_ns_per_fragment": m.process_cpu_ns_per_fragment(),
    })
}

fn evb_json(m: &tessera_bench::evb::EvbMeasured) -> serde_json::Value {
    use tessera_bench::evb::BuOutput;
    serde_json::json!({
        "rus": m.case.rus,
        "bus": m.case.bus,
        "streams": m.case.streams,
        "fragment_bytes": m.case.fragment_bytes,
        "writer_threads": match m.case.output { BuOutput::Discard | BuOutput::IngestOnly => None, BuOutput::RamDisk { writer_threads } => Some(writer_threads) },
        "output": match m.case.output { BuOutput::IngestOnly => "ingest", BuOutput::Discard => "discard", BuOutput::RamDisk { .. } => "ramdisk" },
        "fragments": m.fragments,
        "wire_bytes": m.wire_bytes,
        "events_built": m.events_built,
        "seconds": m.seconds,
        "gb_per_s": m.gb_per_s(),
        "events_per_s": m.events_per_s(),
        "ru_cpu_ns_per_fragment": m.ru_cpu_ns_per_fragment(),
        "ru_busy": m.ru_busy(),
        "bu_cpu_seconds": m.bu_cpu_seconds,
        "process_cpu_ns_per_fragment": m.process_cpu_ns_per_fragment(),
        "triggered": m.triggered,
        "built": m.built,
        "problems": m.problems,
        "ru_memory_bytes": m.case.ru_memory_bytes(),
    })
}

fn bench_evb(quick: bool, out: &Path, json: bool) -> Result<()> {
    use tessera_bench::evb_suite;
    eprintln!(
        "bench evb: the event builder on loopback against raw TCP{}; writing the scans to {}",
        if quick { " (quick)" } else { "" },
        out.display()
    );
    let suite = evb_suite::run(quick, out, &mut |what| eprintln!("  {what}"))?;
    if !json {
        print!("{}", evb_suite::report(&suite));
        return Ok(());
    }
    let ratio = |a: f64, b: f64| a / b.max(1e-12);
    let report = serde_json::json!({
        "suite": "evb",
        "quick": quick,
        "raw_ingest": net_json(&suite.ingest),
        "ru_ingest": evb_json(&suite.ru),
        "chain": evb_json(&suite.chain),
        "chain_ramdisk": evb_json(&suite.disk),
        "raw_relay": net_json(&suite.relay),
        "ratios": {
            "ru_ingest_over_raw_ingest": ratio(suite.ru.gb_per_s(), suite.ingest.gb_per_s()),
            "chain_over_raw_relay": ratio(suite.chain.gb_per_s(), suite.relay.gb_per_s()),
            "chain_ramdisk_over_raw_relay": ratio(suite.disk.gb_per_s(), suite.relay.gb_per_s()),
        },
        "ru_cpu_ns_beyond_kernel_copy": suite.ru.ru_cpu_ns_per_fragment() - suite.ingest.cpu_ns_per_fragment(),
        "memory": {
            "ru_chunks_per_fed": tessera_bench::evb::CHUNKS_PER_FED,
            "ru_chunk_bytes": tessera_bench::evb::CHUNK_BYTES,
            "bu_frame_store_bytes": tessera_bench::evb::FRAME_STORE_BYTES,
        },
        "targets": evb_suite::targets(&suite).iter().map(|t| serde_json::json!({
            "target": t.name, "figure": t.figure, "met": t.met,
        })).collect::<Vec<_>>(),
        "scans": {
            "size": suite.sizes.iter().map(|p| serde_json::json!({
                "raw_ingest": net_json(&p.raw), "ru_ingest": evb_json(&p.ru), "chain": evb_json(&p.chain),
            })).collect::<Vec<_>>(),
            "sources": suite.sources.iter().map(|(a, b)| serde_json::json!({
                "raw_ingest": net_json(a), "built": evb_json(b),
            })).collect::<Vec<_>>(),
            "units": suite.units.iter().map(evb_json).collect::<Vec<_>>(),
            "writers": suite.writers.iter().map(evb_json).collect::<Vec<_>>(),
        },
        "files": suite.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// Writes a sample run and returns its run directory.
fn write_sample(bu_dir: &Path, spec: &SampleSpec) -> Result<PathBuf> {
    let run_dir = bu_dir.join(tessera_formats::names::run_dir_name(spec.run));
    if run_dir.exists() {
        bail!("{} exists already: remove it or choose another --output or --run", run_dir.display());
    }
    let summary =
        write_sample_run(bu_dir, spec).with_context(|| format!("writing a sample run into {}", bu_dir.display()))?;
    eprintln!(
        "wrote run {}: {} events in {} files, {} bytes",
        spec.run,
        summary.events,
        summary.files.len(),
        render::thousands(summary.bytes)
    );
    Ok(summary.run_dir)
}

fn demo(output: Option<PathBuf>) -> Result<ExitCode> {
    let bu_dir = match output {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("tessera-demo-{}", std::process::id())),
    };
    let spec = SampleSpec::default();
    let run_dir = write_sample(&bu_dir, &spec)?;
    println!("== tessera inspect {}\n", run_dir.display());
    let report = inspect_path(&run_dir, EventChecks::default())?;
    print!("{}", render::target(&report, false));
    let first_raw = std::fs::read_dir(&run_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "raw"))
        .min();
    if let Some(raw) = first_raw {
        println!("\n== tessera inspect --feds {}\n", raw.display());
        let report = inspect_path(&raw, EventChecks::default())?;
        print!("{}", render::target(&report, true));
        debug_assert!(matches!(report, Target::RawFile(_)));
    }
    println!("\n== tessera verify {}\n", run_dir.display());
    let violations = verify::verify_run_dir(&run_dir, EventChecks::default())?;
    print!("{}", render::violations(&run_dir, &violations));
    Ok(if violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn sim(names: &[String], seeds: u64, first_seed: u64) -> Result<ExitCode> {
    let all = tessera_sim::scenarios();
    let chosen: Vec<tessera_sim::Scenario> = if names.is_empty() {
        all
    } else {
        names
            .iter()
            .map(|n| {
                tessera_sim::scenario(n).with_context(|| {
                    let known: Vec<&str> = all.iter().map(|s| s.name).collect();
                    format!("no scenario {n:?}; known: {}", known.join(", "))
                })
            })
            .collect::<Result<_>>()?
    };
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut failed = false;
    println!(
        "{:<24} {:>6} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>8}  result",
        "scenario", "seeds", "events", "crashes", "slow", "FED", "corrupt", "orphans", "steps"
    );
    for sc in &chosen {
        // Seeds are independent: run them on every core, report in seed order.
        let reports: Vec<tessera_sim::SimReport> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..jobs)
                .map(|j| {
                    s.spawn(move || {
                        (first_seed..first_seed + seeds)
                            .filter(|seed| seed % jobs == j)
                            .map(|seed| tessera_sim::run(sc, seed))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut all: Vec<_> = handles.into_iter().flat_map(|h| h.join().expect("simulation thread")).collect();
            all.sort_by_key(|r| r.seed);
            all
        });
        let sum = |f: fn(&tessera_sim::SimReport) -> u64| reports.iter().map(f).sum::<u64>();
        let bad: Vec<&tessera_sim::SimReport> = reports.iter().filter(|r| !r.violations.is_empty()).collect();
        println!(
            "{:<24} {:>6} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>8}  {}",
            sc.name,
            reports.len(),
            sum(|r| r.events_checked),
            sum(|r| r.tally.bu_crashes),
            sum(|r| r.tally.slow_bus),
            sum(|r| r.tally.fed_faults),
            sum(|r| r.tally.corrupt_fragments),
            sum(|r| r.tally.orphan_fragments),
            sum(|r| r.tally.steps),
            if bad.is_empty() { "ok".to_string() } else { format!("{} FAILED", bad.len()) }
        );
        for r in bad.iter().take(3) {
            failed = true;
            println!("  seed {} broke an invariant:", r.seed);
            for v in r.violations.iter().take(5) {
                println!("    {v}");
            }
            println!("  replay: {}", tessera_sim::replay_command(sc.name, r.seed));
        }
        failed |= !bad.is_empty();
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
