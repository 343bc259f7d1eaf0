//! `tessera bench`: the benchmark suites of `tessera_bench`, printed as text or as JSON.

use anyhow::{Result, bail};
use std::path::Path;
use std::process::ExitCode;
use tessera_bench::Target;

/// The suites of `tessera bench`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum BenchSuite {
    /// CRC-16, CRC-32C and fragment validation.
    Formats,
    /// Pull and push compared, the same system and sender for both: the cores alone (CPU per
    /// fragment, messages per event); on loopback sockets, 2 RUs x 2 BUs, throughput (discarding
    /// BUs) and latency from trigger to published file (p50, p99, max, at a paced rate both
    /// sustain), events lost and incomplete and dead time, without and with one slow BU (half
    /// speed); events/s at one BU and its CPU per fragment vs 2 to 32 sources of 1500-byte
    /// fragments, beside LHCb's; plots written as CSV and SVG to --out.
    Protocols,
    /// Encoding and decoding of the event-building wire frames.
    Wire,
    /// Raw TCP baselines on loopback: emulator into a discarding receiver, and through a relay;
    /// a scan over fragment size written as CSV and SVG to --out.
    Net,
    /// The event builder on loopback against raw TCP: RU ingest, the chain to discarding BUs and
    /// to RAM-disk files, ratios and targets; scans over fragment size, sources, RUs x BUs and
    /// writer threads written as CSV and SVG to --out.
    Evb,
    /// Orbit mode (HL-LHC DTH orbit blocks) on loopback against raw TCP of the same DTH streams,
    /// at 50, 125 and 250 kB orbit blocks per source: RU ingest with the CRC-32C never and
    /// always checked, the 2x2 chain to discarding BUs, ratios, orbits/s per RU against the LHC
    /// orbit rate; plots written as CSV and SVG to --out.
    Orbit,
    /// The filter farm on a RAM disk, one thread each: an FU process with the default menu over
    /// a sample run against a plain read of its files, and the micro, mini and macro mergers
    /// against a plain copy of the FU outputs that then removes them, as the mergers do.
    Fu,
    /// The BU's file broker on loopback: files granted per second to 1, 64 and 512 readers
    /// that keep to CMS's HLT's rules, against one thread claiming the same files locally.
    Broker,
    /// Every suite above in turn, each printed as it is alone, then one table of every target:
    /// its figure, the baseline it is measured against, and whether it is met.
    All,
}

/// The suites `all` runs, in its order: the cheap ones first.
const ALL: [(BenchSuite, &str); 8] = [
    (BenchSuite::Formats, "formats"),
    (BenchSuite::Wire, "wire"),
    (BenchSuite::Protocols, "protocols"),
    (BenchSuite::Net, "net"),
    (BenchSuite::Evb, "evb"),
    (BenchSuite::Orbit, "orbit"),
    (BenchSuite::Fu, "fu"),
    (BenchSuite::Broker, "broker"),
];

/// `tessera bench SUITE`: runs the suite and prints its figures, each with its ratio to a
/// baseline measured in the same run.
pub fn run(suite: BenchSuite, quick: bool, out: &Path, json: bool) -> Result<ExitCode> {
    if matches!(suite, BenchSuite::All) {
        if json {
            bail!("--json is supported by the net, evb, orbit, protocols and fu suites only");
        }
        bench_all(quick, out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if json
        && !matches!(
            suite,
            BenchSuite::Net | BenchSuite::Evb | BenchSuite::Orbit | BenchSuite::Protocols | BenchSuite::Fu
        )
    {
        bail!("--json is supported by the net, evb, orbit, protocols and fu suites only");
    }
    run_one(suite, quick, out, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs one suite and prints it; its targets.
fn run_one(suite: BenchSuite, quick: bool, out: &Path, json: bool) -> Result<Vec<Target>> {
    let budget = if quick { tessera_bench::timing::Budget::QUICK } else { tessera_bench::timing::Budget::FULL };
    Ok(match suite {
        BenchSuite::Formats => {
            let rows = tessera_bench::formats::run(budget);
            say_part!("{}", tessera_bench::formats::report(&rows));
            tessera_bench::formats::targets(&rows)
        }
        BenchSuite::Protocols => bench_protocols(quick, out, json)?,
        BenchSuite::Wire => {
            say_part!("{}", tessera_bench::wire::report(&tessera_bench::wire::run(budget)));
            Vec::new()
        }
        BenchSuite::Net => {
            bench_net(quick, out, json)?;
            Vec::new()
        }
        BenchSuite::Evb => bench_evb(quick, out, json)?,
        BenchSuite::Orbit => bench_orbit(quick, out, json)?,
        BenchSuite::Fu => bench_fu(quick, json)?,
        BenchSuite::Broker => {
            say_err!("bench broker: files granted per second to many readers{}", if quick { " (quick)" } else { "" });
            let rates = tessera_bench::broker::run(if quick { 1024 } else { 8192 }, &mut |what| say_err!("  {what}"))?;
            say_part!("{}", tessera_bench::broker::report(&rates));
            Vec::new()
        }
        BenchSuite::All => bail!("bench all runs the other suites, not itself"),
    })
}

/// `tessera bench all`: every suite, then every target in one table.
fn bench_all(quick: bool, out: &Path) -> Result<()> {
    let mut every = Vec::new();
    for (suite, name) in ALL {
        say_err!("== bench {name}{}", if quick { " --quick" } else { "" });
        say!("== bench {name}");
        let targets = run_one(suite, quick, out, false)?;
        every.extend(targets.into_iter().map(|t| (name, t)));
        say!("");
    }
    say_part!("{}", targets_table(&every));
    Ok(())
}

/// Every target of `bench all`, one line each, and how many were met.
fn targets_table(every: &[(&str, Target)]) -> String {
    use std::fmt::Write;
    let mut s = String::from("every target of this run (figures over baselines measured in it):\n");
    let _ = writeln!(s, "{:<10} {:<7} target: figure [baseline]", "suite", "verdict");
    for (suite, t) in every {
        let _ = writeln!(s, "{suite:<10} {:<7} {}: {} [{}]", t.verdict(), t.name, t.figure, t.baseline);
    }
    let met = every.iter().filter(|(_, t)| t.met).count();
    let _ = writeln!(s, "{met} of {} met, {} missed", every.len(), every.len() - met);
    s
}

/// The pull-and-push suite.
fn bench_protocols(quick: bool, out: &Path, json: bool) -> Result<Vec<Target>> {
    use tessera_bench::protocols;
    say_err!(
        "bench protocols: pull and push, the same system and sender for both{}; writing the plots to {}",
        if quick { " (quick)" } else { "" },
        out.display()
    );
    let suite = protocols::run(quick, out, &mut |what| say_err!("  {what}"))?;
    if json {
        say!("{}", serde_json::to_string_pretty(&protocols::json(&suite))?);
    } else {
        say_part!("{}", protocols::report(&suite));
    }
    Ok(tessera_bench::protocol::targets(&suite.cores))
}

/// The filter farm suite.
fn bench_fu(quick: bool, json: bool) -> Result<Vec<Target>> {
    use tessera_bench::fu;
    say_err!("bench fu: the filter farm against plain file operations{}", if quick { " (quick)" } else { "" });
    let config = if quick { fu::FuBenchConfig::QUICK } else { fu::FuBenchConfig::FULL };
    let bench = fu::run(&config, &mut |what| say_err!("  {what}"))?;
    if json {
        say!("{}", fu::json(&bench));
    } else {
        say_part!("{}", fu::report(&bench));
    }
    Ok(fu::targets(&bench))
}

/// The raw TCP suite.
fn bench_net(quick: bool, out: &Path, json: bool) -> Result<()> {
    use tessera_bench::net::Measured;
    use tessera_bench::net_suite;
    say_err!(
        "bench net: raw TCP over loopback{}; writing the scan to {}",
        if quick { " (quick)" } else { "" },
        out.display()
    );
    let suite = net_suite::run(quick, out)?;
    if !json {
        say_part!("{}", net_suite::report(&suite));
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
    say!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// A raw TCP measurement as JSON.
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

/// An event-builder measurement as JSON.
fn evb_json(m: &tessera_bench::evb::EvbMeasured) -> serde_json::Value {
    use tessera_bench::evb::BuOutput;
    serde_json::json!({
        "rus": m.case.rus,
        "bus": m.case.bus,
        "streams": m.case.streams,
        "fragment_bytes": m.case.fragment_bytes,
        "mode": if m.case.mode.is_orbit() { "orbit" } else { "event" },
        "crc_check": format!("{:?}", m.case.crc_check).to_lowercase(),
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

/// The event-builder suite.
fn bench_evb(quick: bool, out: &Path, json: bool) -> Result<Vec<Target>> {
    use tessera_bench::evb_suite;
    say_err!(
        "bench evb: the event builder on loopback against raw TCP{}; writing the scans to {}",
        if quick { " (quick)" } else { "" },
        out.display()
    );
    let suite = evb_suite::run(quick, out, &mut |what| say_err!("  {what}"))?;
    let targets = evb_suite::targets(&suite);
    if !json {
        say_part!("{}", evb_suite::report(&suite));
        return Ok(targets);
    }
    let ratio = |a: f64, b: f64| a / b.max(1e-12);
    let report = serde_json::json!({
        "suite": "evb",
        "quick": quick,
        "raw_ingest": net_json(&suite.ingest),
        "minimal_ingest": net_json(&suite.minimal_ingest),
        "ru_ingest": evb_json(&suite.ru),
        "chain": evb_json(&suite.chain),
        "chain_ramdisk": evb_json(&suite.disk),
        "raw_relay": net_json(&suite.relay),
        "minimal_relay": net_json(&suite.minimal_relay),
        "ratios": {
            "ru_ingest_over_raw_ingest": ratio(suite.ru.gb_per_s(), suite.ingest.gb_per_s()),
            "ru_ingest_over_minimal_ingest": ratio(suite.ru.gb_per_s(), suite.minimal_ingest.gb_per_s()),
            "chain_over_raw_relay": ratio(suite.chain.gb_per_s(), suite.relay.gb_per_s()),
            "chain_over_minimal_relay": ratio(suite.chain.gb_per_s(), suite.minimal_relay.gb_per_s()),
            "chain_ramdisk_over_raw_relay": ratio(suite.disk.gb_per_s(), suite.relay.gb_per_s()),
        },
        "ru_cpu_ns_beyond_kernel_copy": suite.ru.ru_cpu_ns_per_fragment() - suite.ingest.cpu_ns_per_fragment(),
        "memory": {
            "ru_chunks_per_fed": tessera_bench::evb::CHUNKS_PER_FED,
            "ru_chunk_bytes": tessera_bench::evb::CHUNK_BYTES,
            "bu_frame_store_bytes": tessera_bench::evb::FRAME_STORE_BYTES,
        },
        "targets": targets.iter().map(target_json).collect::<Vec<_>>(),
        "scans": {
            "size": suite.sizes.iter().map(|p| serde_json::json!({
                "raw_ingest": net_json(&p.raw), "minimal_ingest": net_json(&p.minimal_ingest),
                "ru_ingest": evb_json(&p.ru), "chain": evb_json(&p.chain), "minimal_relay": net_json(&p.minimal_relay),
            })).collect::<Vec<_>>(),
            "sources": suite.sources.iter().map(|(a, b)| serde_json::json!({
                "raw_ingest": net_json(a), "built": evb_json(b),
            })).collect::<Vec<_>>(),
            "units": suite.units.iter().map(evb_json).collect::<Vec<_>>(),
            "writers": suite.writers.iter().map(evb_json).collect::<Vec<_>>(),
        },
        "files": suite.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
    });
    say!("{}", serde_json::to_string_pretty(&report)?);
    Ok(targets)
}

/// A target as JSON.
fn target_json(t: &Target) -> serde_json::Value {
    serde_json::json!({ "target": t.name, "figure": t.figure, "baseline": t.baseline, "met": t.met })
}

/// The orbit-mode suite.
fn bench_orbit(quick: bool, out: &Path, json: bool) -> Result<Vec<Target>> {
    use tessera_bench::orbit_suite::{self, OrbitPoint};
    say_err!(
        "bench orbit: orbit mode on loopback against raw TCP of the same DTH streams{}; writing the plots to {}",
        if quick { " (quick)" } else { "" },
        out.display()
    );
    let suite = orbit_suite::run(quick, out, &mut |what| say_err!("  {what}"))?;
    let targets = orbit_suite::targets(&suite);
    if !json {
        say_part!("{}", orbit_suite::report(&suite));
        return Ok(targets);
    }
    let point = |p: &OrbitPoint| {
        serde_json::json!({
            "block_bytes": p.block_bytes,
            "mean_block_wire_bytes": p.raw.wire_bytes_per_fragment,
            "raw_ingest": net_json(&p.raw),
            "raw_ingest_into_ru_memory": net_json(&p.raw_memory),
            "minimal_ingest": net_json(&p.minimal),
            "ru_ingest_crc_never": evb_json(&p.ingest),
            "ru_ingest_crc_always": evb_json(&p.ingest_crc),
            "chain": evb_json(&p.chain),
            "ratios": {
                "ru_ingest_crc_never_over_raw_ingest": p.ingest_ratio(),
                "ru_ingest_crc_always_over_raw_ingest": p.ingest_crc_ratio(),
                "chain_over_raw_ingest": p.chain_ratio(),
                "ru_ingest_crc_never_over_raw_into_memory": p.ingest_over_memory(),
                "ru_ingest_crc_always_over_raw_into_memory": p.ingest_crc_over_memory(),
                "ru_ingest_crc_always_over_minimal_ingest": p.ingest_crc_over_minimal(),
            },
            "crc32c_ns_per_block": p.crc_ns_per_block(),
        })
    };
    let report = serde_json::json!({
        "suite": "orbit",
        "quick": quick,
        "streams": orbit_suite::STREAMS,
        "l1_rate_hz": orbit_suite::L1_RATE_HZ,
        "lhc_orbit_hz": tessera_emu::orbit::LHC_ORBIT_HZ,
        "points": suite.points.iter().map(point).collect::<Vec<_>>(),
        "targets": targets.iter().map(target_json).collect::<Vec<_>>(),
        "files": suite.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
    });
    say!("{}", serde_json::to_string_pretty(&report)?);
    Ok(targets)
}
