//! `tessera bench net`: the raw network baselines of [`crate::net`] for one case, and a scan
//! over fragment size written as CSV and SVG.
//!
//! Cases: (a) raw ingest and (e) raw relay for [`MAIN_STREAMS`] streams of [`MAIN_FRAGMENT_BYTES`]
//! bytes, the relay writing to [`RELAY_OUTPUTS`] connections; then both for [`SCAN_STREAMS`]
//! streams over [`SCAN_SIZES`] (a CMS readout unit reads about 12 FEDs). The scan's plot carries,
//! as a reference, the throughput one RU of 12 FEDs needs at the CMS level-1 rate of 100 kHz, up to
//! [`REFERENCE_MAX_BYTES`] (beyond, it would squash the measured curves: 20 GB/s at 16 kB).
//! Last, the raw links between two threads ([`crate::links`]) for every transport the protocol
//! links may take: TCP, and in a build with UCX, UCX's TCP and its shared memory.

use crate::BenchError;
use crate::links::{LINK_MESSAGE_BYTES, LinkMeasured, raw_link, transports};
use crate::net::{Measured, NetBudget, NetCase, StreamMode, raw_ingest, raw_relay, wire_bytes_per_fragment};
use crate::scan::{Series, plot_svg, write_csv};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Streams of the main cases.
pub const MAIN_STREAMS: usize = 8;
/// Fragment size of the main cases.
pub const MAIN_FRAGMENT_BYTES: usize = 2048;
/// Outbound connections of the relay (two builder units).
pub const RELAY_OUTPUTS: usize = 2;
/// Streams of the scan.
pub const SCAN_STREAMS: usize = 12;
/// Fragment sizes of the scan.
pub const SCAN_SIZES: [usize; 7] = [256, 512, 1024, 2048, 4096, 8192, 16384];
/// Fragment sizes of the scan with `--quick`.
pub const QUICK_SCAN_SIZES: [usize; 3] = [256, 2048, 16384];
/// The CMS level-1 trigger rate, for the reference curve.
pub const L1_RATE_HZ: f64 = 100_000.0;
/// Largest fragment size of the 100 kHz reference curve.
pub const REFERENCE_MAX_BYTES: usize = 4096;
/// Base name of the scan's files.
pub const SCAN_FILE: &str = "raw-ingest-vs-size";
/// Base name of the CPU scan's files.
pub const CPU_FILE: &str = "raw-cpu-vs-size";

/// Everything the suite measured.
#[derive(Debug, Clone)]
pub struct NetSuite {
    /// (a) for the main case.
    pub ingest: Measured,
    /// (e) for the main case.
    pub relay: Measured,
    /// (a) at each scan size.
    pub scan_ingest: Vec<Measured>,
    /// (e) at each scan size.
    pub scan_relay: Vec<Measured>,
    /// The raw link of each transport, TCP first.
    pub links: Vec<LinkMeasured>,
    /// The files written.
    pub files: Vec<PathBuf>,
}

/// Runs the suite and writes the scan into `out` (created if missing): `raw-ingest-vs-size`
/// (GB/s) and `raw-cpu-vs-size` (CPU ns per fragment), each as `.csv` and `.svg`.
pub fn run(quick: bool, out: &Path) -> Result<NetSuite, BenchError> {
    std::fs::create_dir_all(out)
        .map_err(|source| BenchError::Io { what: format!("creating {}", out.display()), source })?;
    let (budget, scan_budget, sizes) = if quick {
        (NetBudget::QUICK, NetBudget::QUICK, &QUICK_SCAN_SIZES[..])
    } else {
        (NetBudget::FULL, NetBudget::SCAN, &SCAN_SIZES[..])
    };
    let main = NetCase {
        streams: MAIN_STREAMS,
        fragment_bytes: MAIN_FRAGMENT_BYTES,
        mode: StreamMode::Event,
        relay_outputs: RELAY_OUTPUTS,
        budget,
    };
    let ingest = raw_ingest(&main)?;
    let relay = raw_relay(&main)?;
    let (mut scan_ingest, mut scan_relay) = (Vec::new(), Vec::new());
    for &fragment_bytes in sizes {
        let case = NetCase {
            streams: SCAN_STREAMS,
            fragment_bytes,
            mode: StreamMode::Event,
            relay_outputs: RELAY_OUTPUTS,
            budget: scan_budget,
        };
        scan_ingest.push(raw_ingest(&case)?);
        scan_relay.push(raw_relay(&case)?);
    }
    let files = write_scan(out, &scan_ingest, &scan_relay)?;
    let links =
        transports().iter().map(|kind| raw_link(kind, LINK_MESSAGE_BYTES, budget.seconds)).collect::<Result<_, _>>()?;
    Ok(NetSuite { ingest, relay, scan_ingest, scan_relay, links, files })
}

/// The scan's series: measured GB/s of (a) and (e), and the 100 kHz reference up to
/// [`REFERENCE_MAX_BYTES`].
pub fn throughput_series(scan_ingest: &[Measured], scan_relay: &[Measured]) -> Vec<Series> {
    let points = |ms: &[Measured]| ms.iter().map(|m| (m.fragment_bytes as f64, m.gb_per_s())).collect();
    let needed = scan_ingest
        .iter()
        .filter(|m| m.fragment_bytes <= REFERENCE_MAX_BYTES)
        .map(|m| {
            let per_ru = SCAN_STREAMS as f64 * wire_bytes_per_fragment(m.fragment_bytes) as f64 * L1_RATE_HZ;
            (m.fragment_bytes as f64, per_ru / 1e9)
        })
        .collect();
    vec![
        Series::measured(format!("(a) raw TCP ingest, {SCAN_STREAMS} streams"), points(scan_ingest)),
        Series::measured(
            format!("(e) raw relay, {SCAN_STREAMS} streams -> {RELAY_OUTPUTS} outputs"),
            points(scan_relay),
        ),
        Series::reference(format!("needed by one RU of {SCAN_STREAMS} FEDs at 100 kHz"), needed),
    ]
}

/// The CPU scan's series: ns of CPU per fragment in the receiver (a) and in the relay (e).
pub fn cpu_series(scan_ingest: &[Measured], scan_relay: &[Measured]) -> Vec<Series> {
    let points = |ms: &[Measured]| ms.iter().map(|m| (m.fragment_bytes as f64, m.cpu_ns_per_fragment())).collect();
    vec![
        Series::measured("(a) receiver thread", points(scan_ingest)),
        Series::measured("(e) relay thread", points(scan_relay)),
    ]
}

fn write_scan(out: &Path, scan_ingest: &[Measured], scan_relay: &[Measured]) -> Result<Vec<PathBuf>, BenchError> {
    let mut files = Vec::new();
    let x = "fragment bytes";
    for (name, title, y, series) in [
        (
            SCAN_FILE,
            "Raw TCP over loopback vs fragment size (emulator -> one mio thread)",
            "GB/s",
            throughput_series(scan_ingest, scan_relay),
        ),
        (
            CPU_FILE,
            "CPU of the receiving / relaying thread per fragment",
            "CPU ns per fragment",
            cpu_series(scan_ingest, scan_relay),
        ),
    ] {
        let csv = out.join(format!("{name}.csv"));
        let svg = out.join(format!("{name}.svg"));
        write_csv(&csv, x, y, &series)?;
        plot_svg(&svg, title, x, y, &series, true)?;
        files.extend([csv, svg]);
    }
    Ok(files)
}

/// The suite's table: one row per case, with the ratio of (e) to (a) at the same size.
pub fn report(suite: &NetSuite) -> String {
    let mut s = String::new();
    let header = format!(
        "{:<18} {:>7} {:>8} {:>7} {:>12} {:>10} {:>12} {:>6} {:>12} {:>7}\n",
        "case",
        "streams",
        "fragment",
        "GB/s",
        "fragments/s",
        "events/s",
        "CPU ns/frag",
        "busy",
        "proc ns/frag",
        "÷ (a)"
    );
    let row = |s: &mut String, case: &str, m: &Measured, base: &Measured| {
        let _ = writeln!(
            s,
            "{:<18} {:>7} {:>8} {:>7.2} {:>12.0} {:>10.0} {:>12.1} {:>6.2} {:>12.1} {:>7.2}",
            case,
            m.streams,
            m.fragment_bytes,
            m.gb_per_s(),
            m.fragments_per_s(),
            m.events_per_s(),
            m.cpu_ns_per_fragment(),
            m.worker_busy(),
            m.process_cpu_ns_per_fragment(),
            m.gb_per_s() / base.gb_per_s().max(1e-12)
        );
    };
    s.push_str(&header);
    row(&mut s, "(a) raw ingest", &suite.ingest, &suite.ingest);
    row(&mut s, &format!("(e) raw relay ->{RELAY_OUTPUTS}"), &suite.relay, &suite.ingest);
    let _ = writeln!(s, "\nscan over fragment size, {SCAN_STREAMS} streams:");
    s.push_str(&header);
    for (a, e) in suite.scan_ingest.iter().zip(&suite.scan_relay) {
        row(&mut s, "(a) raw ingest", a, a);
        row(&mut s, &format!("(e) raw relay ->{RELAY_OUTPUTS}"), e, a);
    }
    let _ = writeln!(s, "\nraw links, {} kB messages, one sender and one receiver thread:", LINK_MESSAGE_BYTES >> 10);
    let tcp = suite.links.first().map_or(0.0, LinkMeasured::gb_per_s);
    for l in &suite.links {
        let _ = writeln!(
            s,
            "  {:<28} {:>6.2} GB/s {:>6.2} ÷ TCP",
            l.kind.label(),
            l.gb_per_s(),
            l.gb_per_s() / tcp.max(1e-12)
        );
    }
    if !cfg!(feature = "ucx") {
        let _ = writeln!(s, "  UCX not measured: this build has no UCX (build with `--features ucx`)");
    }
    let _ = writeln!(
        s,
        "\nCPU ns/frag and busy: the receiver thread in (a), the relay thread in (e); proc: the whole process,\n\
         emulator threads included. Wire bytes per fragment include 16-byte FEROL block headers."
    );
    for f in &suite.files {
        let _ = writeln!(s, "wrote {}", f.display());
    }
    s
}
