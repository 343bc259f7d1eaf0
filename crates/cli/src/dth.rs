//! `tessera dth`: the DTH emulator of `tessera_emu` on the command line, one orbit stream per
//! source.

use crate::ferol::{parse_faults, size_model};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// The options of `tessera dth`.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("sink").required(true).args(["connect", "output"])))]
#[command(group(clap::ArgGroup::new("limit").required(true).multiple(true).args(["orbits", "seconds"])))]
pub struct DthArgs {
    /// Source ids and ranges, e.g. 0-7,100 (at most 4095).
    #[arg(long, default_value = "0-7")]
    sources: String,
    /// Run number.
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// Number of the first orbit.
    #[arg(long, default_value_t = 1)]
    first_orbit: u32,
    /// Orbits per lumi section, 1..=262144: shorter sections number their orbits from
    /// (LS − 1) · 2^18, so that each orbit is in the lumi section orbit / 2^18 + 1.
    #[arg(long, default_value_t = 1 << 18, value_parser = clap::value_parser!(u64).range(1..=1 << 18))]
    orbits_per_ls: u64,
    /// Number of the first event; events are numbered on over orbits.
    #[arg(long, default_value_t = 1)]
    first_event: u64,
    /// Stop after this many orbits per source.
    #[arg(long, allow_negative_numbers = true, value_parser = crate::options::count_arg)]
    orbits: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, allow_negative_numbers = true, value_parser = crate::options::seconds_arg)]
    seconds: Option<f64>,
    /// Mean L1 rate in Hz: the events of an orbit are Poisson of mean this rate over the LHC
    /// orbit rate (11245.5 Hz), drawn alike by every source.
    #[arg(long, default_value_t = tessera_emu::orbit::DEFAULT_L1_RATE_HZ)]
    l1_rate_hz: f64,
    /// Send one orbit every 88.924 µs (the LHC orbit rate); free running when absent.
    #[arg(long)]
    paced: bool,
    /// Fixed payload size of every fragment in bytes (16..=1048576, rounded up to whole 8-byte
    /// words, then zero-padded to 16 in the fragment).
    #[arg(long, conflicts_with_all = ["size_mean", "size_sigma"])]
    size: Option<usize>,
    /// Mean of log-normal payload sizes in bytes (with --size-sigma).
    #[arg(long, requires = "size_sigma")]
    size_mean: Option<f64>,
    /// Standard deviation of log-normal payload sizes in bytes (with --size-mean).
    #[arg(long, requires = "size_mean")]
    size_sigma: Option<f64>,
    /// Inject a fault: NAME@ORBIT or NAME:PROBABILITY, optionally /SOURCE; names bad-crc,
    /// wrong-source-id, drop-event, extra-event, truncate, garbage, disconnect, skip-orbit.
    /// Repeatable.
    #[arg(long)]
    fault: Vec<String>,
    /// Seed of the orbits' event counts and BXs, and of fault draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest stream block in bytes, its 16-byte header included.
    #[arg(long, default_value_t = tessera_formats::orbit::DEFAULT_MAX_BLOCK_BYTES)]
    max_block_bytes: usize,
    /// Send to HOST:PORT, one TCP connection per source.
    #[arg(long, visible_alias = "to")]
    connect: Option<String>,
    #[command(flatten)]
    connect_wait: crate::options::ConnectWaitArgs,
    /// Write one capture file per source, `DIR/dth<SOURCE>.dth` (created if missing).
    #[arg(long)]
    output: Option<PathBuf>,
}

/// `tessera dth`: DTH orbit streams generated into a receiver or capture files; prints per
/// source and in total the orbits, events, faults, bytes and GB/s.
pub fn dth(args: DthArgs) -> Result<ExitCode> {
    use tessera_config::emulation::MAX_STREAMS;
    use tessera_emu::dth::{self, DthSenderConfig};
    use tessera_emu::orbit::OrbitStreamConfig;
    use tessera_emu::sender::Sink;
    use tessera_formats::orbit::MIN_MAX_BLOCK_BYTES;
    let sources =
        tessera_config::parse_fed_list(&args.sources).with_context(|| format!("--sources {}", args.sources))?;
    if sources.len() > MAX_STREAMS {
        bail!("--sources {}: more than {MAX_STREAMS} sources for one process", args.sources);
    }
    if args.max_block_bytes < MIN_MAX_BLOCK_BYTES {
        bail!("--max-block-bytes {}: at least {MIN_MAX_BLOCK_BYTES}", args.max_block_bytes);
    }
    let size = size_model(args.size, args.size_mean, args.size_sigma)?;
    let faults = parse_faults(&args.fault)?;
    let streams: Vec<OrbitStreamConfig> = sources
        .iter()
        .map(|&source| OrbitStreamConfig {
            run: args.run,
            source,
            size,
            first_orbit: args.first_orbit,
            orbits_per_lumi_section: args.orbits_per_ls,
            first_event: args.first_event,
            l1_rate_hz: args.l1_rate_hz,
            seed: args.seed,
            faults: faults.clone(),
            max_block_bytes: args.max_block_bytes,
        })
        .collect();
    if let Some(first) = streams.first() {
        first.validate().context("--l1-rate-hz")?;
    }
    // Made once every argument is checked: a refused argument creates no directory.
    let sink = match (&args.connect, &args.output) {
        (Some(address), _) => args.connect_wait.sink(address),
        (None, Some(dir)) => {
            // An orbit: its header, and per event a fragment with its header and trailer; a
            // block header per block, at most a few per orbit.
            let orbit_bytes = streams.first().map_or(0.0, |s| s.mean_events() * (size.mean_bytes() + 32.0) + 64.0);
            let by_time =
                args.seconds.filter(|_| args.paced).map(|s| (s * tessera_emu::orbit::LHC_ORBIT_HZ).ceil() as u64);
            let orbits = [args.orbits, by_time].into_iter().flatten().min();
            crate::space::check_capture_room(dir, streams.len(), orbits, "orbits", orbit_bytes)?;
            std::fs::create_dir_all(dir).with_context(|| format!("--output {}: cannot create it", dir.display()))?;
            Sink::Directory(dir.clone())
        }
        (None, None) => bail!("give --connect HOST:PORT or --output DIR"),
    };
    say_err!(
        "sending {} DTH orbit streams at a mean of {:.2} events per orbit ({})",
        streams.len(),
        streams.first().map_or(0.0, OrbitStreamConfig::mean_events),
        if args.paced { "paced at the LHC orbit rate" } else { "free running" }
    );
    let summary = dth::run(DthSenderConfig {
        streams,
        sink,
        paced: args.paced,
        orbits: args.orbits,
        seconds: args.seconds,
        stop: None,
    })?;
    say_part!("{summary}");
    Ok(ExitCode::SUCCESS)
}
