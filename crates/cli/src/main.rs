//! `tessera`: every role and tool of the Tessera event builder behind one binary. This file
//! holds the command line's definition and sends each subcommand to the module of its family.

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[macro_use]
mod out;

mod bench;
mod config;
mod controller;
mod deploy;
mod dth;
mod farm;
mod ferol;
mod files;
mod options;
mod pipestream;
mod run;
mod sim;
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

/// Sends the log to standard error: messages as they always read for people, every event as a
/// JSON object for machines.
fn init_log(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A log nobody reads any more (a closed pipe) is dropped, never said on standard error,
    // which is that pipe: that would end the process.
    let log =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(|| out::LogWriter).log_internal_errors(false);
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
    /// Show what a raw file, an orbit file, a FEROL or DTH stream capture, or a BU run directory
    /// holds, and flag what is wrong with it (exit status 1 if anything is).
    Inspect {
        /// A raw file, an orbit file, a stream capture, or a run directory.
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
    /// Check a run directory Tessera wrote (a BU's event or orbit files, or the merged files in
    /// storage) against every rule of the file contract; print each violation with file and
    /// offset; exit status 1 if there is any.
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
    Sample(files::SampleArgs),
    /// Write a sample run into a new directory, inspect it and verify it.
    Demo {
        /// Where to write (default: a new directory under the system's temporary directory).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Simulate whole systems under faults, deterministically, and check the protocol's
    /// invariants after every step; exit status 1 on any violation.
    Sim {
        /// Scenario to run, repeatable (default: all); the names are listed below.
        #[arg(long, value_parser = scenario_names())]
        scenario: Vec<String>,
        /// Seeds per scenario.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 0)]
        first_seed: u64,
    },
    /// Run a whole event builder, on this machine or on many hosts through their agents:
    /// emulated front ends, the RUs (the first one with the EVM), the BUs, the filter farm and
    /// its mergers; show progress; stop after the configured events or seconds or on Ctrl-C,
    /// drain, and print a summary ending with the conservation checks (exit status 1 if any unit
    /// failed, one does not hold, or more events are incomplete than allowed).
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
    /// Check the file of `tessera fu --alive-file`, as a container's probe: status 0 while the
    /// FU is alive (written recently, no HLT call too long; with --ready, its HLT started),
    /// status 1 and why not otherwise.
    FuAlive(farm::FuAliveArgs),
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
        /// EVM say which complete files to publish. With no run directory of this BU yet, start
        /// afresh (so that a supervisor may always pass it).
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
    Ferol(ferol::FerolArgs),
    /// Emulate HL-LHC DTH readout boards: send orbit streams, one per source, each orbit a block
    /// of SlinkRocket fragments (a Poisson number of events per orbit for an L1 rate, the same in
    /// every source) in Tessera's DTH stream blocks, over TCP or into capture files, paced at the
    /// LHC orbit rate or free running; print per source and in total the orbits, events, bytes
    /// and GB/s.
    Dth(dth::DthArgs),
    /// pipestream, the all-to-all network benchmark: clients send scheduled messages to
    /// servers as an event builder's RUs send to its BUs; scans over message size, threads and
    /// topology, with raw-TCP and iperf3 baselines from the same run.
    Pipestream {
        /// What to do.
        #[command(subcommand)]
        action: pipestream::PipestreamAction,
    },
    /// Render a deployment of a system file: Kubernetes manifests, or systemd units per host.
    Deploy {
        /// What to render.
        #[command(subcommand)]
        action: deploy::DeployAction,
    },
    /// Run a benchmark suite; every figure is printed with its ratio to a baseline measured in
    /// the same run.
    Bench {
        /// The suite.
        #[arg(value_enum)]
        suite: bench::BenchSuite,
        /// Short measurements, for smoke tests (figures are noisier).
        #[arg(long)]
        quick: bool,
        /// Where suites that write files (scans as CSV and SVG) put them.
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
        /// Print the results as one JSON object (suites `net`, `evb`, `orbit` and `fu` only).
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

#[derive(Subcommand)]
enum ConfigAction {
    /// Read and check a system file as `tessera run` would (every key, every value, the menu
    /// file it names), or a selection menu as an FU would; print a one-line summary, or every
    /// mistake with file, line, key, what was expected and what was found, then how many
    /// (exit status 1). A file whose top-level keys are a menu's (`streams`, `paths`) is
    /// checked as a menu, one whose keys are a pipestream file's as a pipestream file.
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_log(cli.log_format);
    // Units and front ends hold a socket per stream and link: the soft limit of many machines
    // (1024) is far below what the kernel allows this process.
    tessera_control::capacity::raise_open_files_limit();
    match run(cli) {
        Ok(code) => code,
        // Its reader has gone: nothing to say, and nobody to say it to.
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            say_err!("tessera: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Carries out the subcommand `cli` names.
fn run(cli: Cli) -> Result<ExitCode> {
    // Commands whose output is all they do end quietly when their reader goes; the others run
    // on (see `out`).
    if matches!(
        cli.command,
        Command::Inspect { .. }
            | Command::Verify { .. }
            | Command::Sim { .. }
            | Command::Config { .. }
            | Command::Completions { .. }
            | Command::Man { .. }
            | Command::Deploy { .. }
    ) {
        out::one_shot();
    }
    match cli.command {
        Command::Inspect { path, json, feds, no_seed_check } => files::inspect(&path, json, feds, no_seed_check),
        Command::Verify { run_dir, built, json, no_seed_check, expect_feds, system } => {
            files::verify(&run_dir, &built, json, no_seed_check, expect_feds, system)
        }
        Command::Sample(args) => files::sample(&args),
        Command::Demo { output } => files::demo(output),
        Command::Sim { scenario, seeds, first_seed } => sim::sim(&scenario, seeds, first_seed),
        Command::Ferol(args) => ferol::ferol(args),
        Command::Dth(args) => dth::dth(args),
        Command::Run { system, args, control, print_config, keep, max_incomplete } => {
            run::run(system.as_deref(), &args, &control, print_config, keep, max_incomplete)
        }
        Command::Config { action: ConfigAction::Default } => Ok(config::print_default()),
        Command::Config { action: ConfigAction::Check { file, menu, system } } => {
            Ok(config::check(&file, menu, system))
        }
        Command::Fu(args) => {
            let report = farm::fu(&args)?;
            say!("{}", farm::report_json(&report));
            Ok(ExitCode::SUCCESS)
        }
        Command::FuAlive(args) => farm::fu_alive(&args),
        Command::Reader(args) => {
            let report = farm::reader(&args)?;
            say!("{}", farm::reader_json(&report));
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
        Command::Bench { suite, quick, out, json } => bench::run(suite, quick, &out, json),
        Command::Pipestream { action } => pipestream::pipestream(action),
        Command::Deploy { action } => deploy::deploy(action).map(|()| ExitCode::SUCCESS),
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
            say!("{}: tessera.1 and a page per subcommand", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The simulator's scenario names, for `tessera sim --scenario`: its help lists them all, and a
/// name not among them is refused with the list.
fn scenario_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(tessera_sim::scenarios().into_iter().map(|s| s.name))
}
