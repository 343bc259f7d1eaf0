//! `tessera ferol`: the front-end emulator of `tessera_emu` on the command line, its streams
//! described by the options or by one RU of a system file.

use crate::{options, unit};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// The options of `tessera ferol`.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("sink").required(true).args(["connect", "output", "system"])))]
#[command(group(clap::ArgGroup::new("limit").required(true).multiple(true).args(["events", "seconds", "system"])))]
pub struct FerolArgs {
    /// Emulate the FEDs of one RU of this system file (with --ru), sending to its FEROL port;
    /// the run's number, first event, sizes, trigger and event limit come from the file. The
    /// file's `run.seconds` is the EVM's to keep, from the run's start (once every stream is
    /// connected): without `--events`, `--seconds` or `run.events` the streams run until the RU
    /// closes them at the run's end.
    #[arg(long, requires = "ru", conflicts_with_all = ["connect", "output", "feds", "run", "first_event", "size", "size_mean", "size_sigma", "rate_hz", "fault", "orbits_per_ls", "seed"])]
    system: Option<PathBuf>,
    /// The RU whose FEDs to emulate (with --system); in orbit mode, its DTH sources.
    #[arg(long, requires = "system")]
    ru: Option<String>,
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
    #[arg(long, allow_negative_numbers = true, value_parser = crate::options::count_arg)]
    events: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, allow_negative_numbers = true, value_parser = crate::options::seconds_arg)]
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
    /// wrong-fed-id, skip, truncate, garbage, disconnect, stall (the stream sends nothing more, left open). Repeatable.
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
    #[command(flatten)]
    connect_wait: options::ConnectWaitArgs,
    /// Write one capture file per FED, `DIR/fed<ID>.ferol` (created if missing).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Replay the capture files `CAPTURE/fed<ID>.ferol` (written by `--output`) from memory in a
    /// loop, renumbering each pass's events, instead of generating events: free running, no
    /// per-event generation.
    #[arg(long, value_name = "CAPTURE", conflicts_with_all = ["system", "feds", "run", "first_event", "size", "size_mean", "size_sigma", "rate_hz", "fault", "orbits_per_ls", "seed"])]
    replay: Option<PathBuf>,
}

/// `tessera ferol`: FED streams generated or replayed into an RU or capture files; prints
/// per FED and in total the events, bytes, GB/s and dead time.
pub fn ferol(args: FerolArgs) -> Result<ExitCode> {
    use tessera_config::emulation::{ClockSpec, FedSpec, MAX_STREAMS};
    use tessera_emu::generator::StreamConfig;
    use tessera_emu::sender::{self, Limits, SenderConfig, Sink};
    if let (Some(system), Some(ru)) = (&args.system, &args.ru) {
        let limits = options::SystemArgs { events: args.events, seconds: args.seconds, output: None };
        match unit::ferol_for(system, ru, &limits)? {
            unit::FrontEnds::Ferol(mut cfg) => {
                if let Sink::Connect { wait, .. } = &mut cfg.sink {
                    *wait = args.connect_wait.wait();
                }
                say_err!("sending {} FED streams of {ru} to {}", cfg.streams.len(), cfg.sink);
                say_part!("{}", sender::run(cfg)?);
            }
            unit::FrontEnds::Dth(mut cfg) => {
                if let Sink::Connect { wait, .. } = &mut cfg.sink {
                    *wait = args.connect_wait.wait();
                }
                say_err!("sending {} DTH orbit streams of {ru} to {}", cfg.streams.len(), cfg.sink);
                say_part!("{}", tessera_emu::dth::run(cfg)?);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Made once every argument is checked: a refused argument creates no directory.
    let sink = || match (&args.connect, &args.output) {
        (Some(address), _) => Ok(args.connect_wait.sink(address)),
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir).with_context(|| format!("--output {}: cannot create it", dir.display()))?;
            Ok(Sink::Directory(dir.clone()))
        }
        (None, None) => bail!("give --connect HOST:PORT or --output DIR"),
    };
    let limits = Limits { events: args.events, seconds: args.seconds };
    if let Some(dir) = &args.replay {
        let capture = tessera_emu::replay::Capture::load(dir).context("--replay")?;
        say_err!(
            "replaying {} FED streams of {} events ({} bytes a pass) from {}",
            capture.feds().len(),
            capture.events(),
            capture.bytes(),
            dir.display()
        );
        let (replay, sink) = (Some(std::sync::Arc::new(capture)), sink()?);
        let config =
            SenderConfig { streams: Vec::new(), replay, sink, paced: false, pace_percent: 100, limits, stop: None };
        say_part!("{}", sender::run(config)?);
        return Ok(ExitCode::SUCCESS);
    }
    let feds = tessera_config::parse_fed_list(&args.feds).with_context(|| format!("--feds {}", args.feds))?;
    if feds.len() > MAX_STREAMS {
        bail!("--feds {}: more than {MAX_STREAMS} FEDs for one process", args.feds);
    }
    let size = size_model(args.size, args.size_mean, args.size_sigma)?;
    let clock = ClockSpec {
        rate_hz: args.rate_hz.unwrap_or(tessera_config::LEVEL1_RATE_HZ),
        seed: args.seed,
        orbits_per_lumi_section: args.orbits_per_ls,
    };
    clock.validate().context("--rate-hz or --orbits-per-ls")?;
    let faults = parse_faults(&args.fault)?;
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
    if let Some(dir) = &args.output {
        // A fragment with its FEROL block headers (one per 4 kB of it, at least one).
        let fragment_bytes = size.mean_bytes() + 16.0 * (size.mean_bytes() / 4096.0).ceil().max(1.0);
        let by_time = args.seconds.zip(args.rate_hz).map(|(s, hz)| (s * hz).ceil() as u64);
        let events = [args.events, by_time].into_iter().flatten().min();
        crate::space::check_capture_room(dir, streams.len(), events, "events", fragment_bytes)?;
    }
    let sink = sink()?;
    say_err!(
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
    say_part!("{summary}");
    Ok(ExitCode::SUCCESS)
}

/// The size model of `--size` (2048 bytes when absent) or `--size-mean` and `--size-sigma`,
/// checked.
pub(crate) fn size_model(
    size: Option<usize>,
    size_mean: Option<f64>,
    size_sigma: Option<f64>,
) -> Result<tessera_config::emulation::SizeModel> {
    use tessera_config::emulation::SizeModel;
    let size = match (size, size_mean, size_sigma) {
        (_, Some(mean_bytes), Some(sigma_bytes)) => SizeModel::LogNormal { mean_bytes, sigma_bytes },
        (size, _, _) => SizeModel::Fixed(size.unwrap_or(2048)),
    };
    size.validate().with_context(|| match size {
        SizeModel::Fixed(b) => format!("--size {b}"),
        SizeModel::LogNormal { mean_bytes, sigma_bytes } => {
            format!("--size-mean {mean_bytes} --size-sigma {sigma_bytes}")
        }
    })?;
    Ok(size)
}

/// The `--fault` specifications, FEROL's or the DTH's, each refused with the option it came in.
pub(crate) fn parse_faults<T>(specs: &[String]) -> Result<Vec<T>>
where
    T: std::str::FromStr<Err = tessera_config::emulation::EmulationError>,
{
    use tessera_config::emulation::EmulationError;
    specs
        .iter()
        .map(|spec| match spec.parse() {
            Ok(f) => Ok(f),
            Err(EmulationError::BadFault { reason, .. }) => bail!("--fault {spec}: {reason}"),
            Err(e) => Err(e.into()),
        })
        .collect()
}
