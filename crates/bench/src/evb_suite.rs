//! `tessera bench evb`: the event builder against raw TCP, all in one invocation so that the
//! ratios hold on a noisy machine.
//!
//! Main cases, [`MAIN_STREAMS`] streams of [`MAIN_FRAGMENT_BYTES`]-byte fragments:
//! (a) raw TCP ingest ([`crate::net::raw_ingest`]); (b) RU ingest, one RU in ingest-only mode
//! (streams read and checked, super-fragments built and released, nothing sent); (c) the chain
//! into [`MAIN_BUS`] discarding BUs; (d) the same BUs writing raw files to the RAM disk with
//! [`MAIN_WRITER_THREADS`] writer threads each; (e) the raw relay into [`MAIN_BUS`] outputs
//! ([`crate::net::raw_relay`]). Beside them the speed-of-light baselines of [`crate::minimal`]:
//! (a+) the least any RU must do with the same streams (every fragment read into receive memory,
//! checked and indexed), and (e+) that, then every event sent on to [`MAIN_BUS`] outputs in
//! batches. Ratios: (b)/(a), (b)/(a+), (c)/(e), (c)/(e+), (d)/(e).
//!
//! Scans, each written as CSV and SVG:
//! 1. [`SIZE_FILE`], [`SIZE_RATE_FILE`], [`SIZE_CPU_FILE`]: (a), (a+), (b), (c) and (e+) vs fragment size,
//!    12 streams, beside the CMS Run-2 RU figure ([`cms_reference`]);
//! 2. [`SOURCES_FILE`]: events/s built at one BU vs the number of FED streams (sources) of one RU,
//!    1,500-byte fragments, (a) beside it, and the two LHCb points ([`LHCB_POINTS`]);
//! 3. [`UNITS_FILE`]: GB/s vs RUs and BUs (n×n, 1×n, n×1) with the 12 streams split over the RUs;
//!    [`WRITERS_FILE`]: GB/s vs writer threads of one BU writing to the RAM disk.
//!
//! Transports (a table): the 2×2 chain, discarding, with its protocol links on TCP, on UCX's TCP
//! and on UCX's shared memory ([`transports`]; UCX in a build with the feature `ucx` only),
//! each beside the raw link of the same transport ([`crate::links`]); ratios over the chain on
//! TCP and over the raw link.

use crate::evb::{BuOutput, CHUNK_BYTES, CHUNKS_PER_FED, EvbCase, EvbMeasured, FRAME_STORE_BYTES, run_case};
use crate::links::{LINK_MESSAGE_BYTES, LinkMeasured, raw_link, transports};
use crate::minimal::{minimal_ingest, minimal_relay};
use crate::net::{Measured, NetBudget, NetCase, StreamMode, raw_ingest, raw_relay};
use crate::scan::{Series, plot_svg, write_csv};
use crate::{BenchError, Target};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessera_formats::fed::CrcCheck;

/// Streams of the main cases and of the size scan (a CMS RU reads about 12 FEDs).
pub const MAIN_STREAMS: usize = 12;
/// Fragment size of the main cases.
pub const MAIN_FRAGMENT_BYTES: usize = 2048;
/// BUs of (c) and (d), outputs of (e).
pub const MAIN_BUS: usize = 2;
/// Writer threads per BU in (d).
pub const MAIN_WRITER_THREADS: usize = 2;
/// Fragment sizes of scan 1.
pub const SIZES: [usize; 7] = [256, 512, 1024, 2048, 4096, 8192, 16384];
/// Fragment sizes of scan 1 with `--quick`.
pub const QUICK_SIZES: [usize; 2] = [256, 4096];
/// Sources (FED streams of one RU) of scan 2.
pub const SOURCES: [usize; 5] = [2, 4, 8, 16, 32];
/// Sources of scan 2 with `--quick`.
pub const QUICK_SOURCES: [usize; 2] = [2, 8];
/// Fragment size of scan 2.
pub const SOURCES_FRAGMENT_BYTES: usize = 1500;
/// RU and BU counts of scan 3.
pub const UNITS: [usize; 3] = [1, 2, 4];
/// RU and BU counts of scan 3 with `--quick`.
pub const QUICK_UNITS: [usize; 2] = [1, 2];
/// Writer threads of scan 3.
pub const WRITER_THREADS: [usize; 3] = [1, 2, 4];
/// Writer threads of scan 3 with `--quick`.
pub const QUICK_WRITER_THREADS: [usize; 2] = [1, 2];
/// Fragment size of the transports' chain: 12 streams of it make super-fragments of about
/// 50 kB, near the raw links' messages.
pub const TRANSPORT_FRAGMENT_BYTES: usize = 4096;

/// The 2×2 chain on one transport, with the raw link of that transport.
#[derive(Debug, Clone)]
pub struct TransportPoint {
    /// The raw link.
    pub raw: LinkMeasured,
    /// The 2×2 chain, discarding.
    pub chain: EvbMeasured,
}

/// Target: (b)/(a) at least this for fragments of [`INGEST_TARGET_MIN_BYTES`] and more.
pub const INGEST_TARGET: f64 = 0.9;
/// Smallest fragment the ingest target applies to.
pub const INGEST_TARGET_MIN_BYTES: usize = 2048;
/// Target: (c)/(e) at least this.
pub const CHAIN_TARGET: f64 = 0.75;
/// Target: (b)/(a+) at least this, for fragments of [`CEILING_MIN_BYTES`] to [`CEILING_MAX_BYTES`].
pub const INGEST_CEILING_TARGET: f64 = 0.9;
/// Target: (c)/(e+) at least this, for the same fragments.
pub const CHAIN_CEILING_TARGET: f64 = 0.85;
/// Smallest fragment the targets against the speed-of-light baselines apply to.
pub const CEILING_MIN_BYTES: usize = 1024;
/// Largest fragment they apply to.
pub const CEILING_MAX_BYTES: usize = 16384;
/// Target: RU CPU per fragment beyond the kernel's copy, in ns.
pub const RU_NS_TARGET: f64 = 50.0;
/// CMS Run-2 event builder (Fig. 2 of "The CMS event builder for LHC Run 2"): an RU of 12
/// sources reached the level-1 rate of 100 kHz up to 3.5 kB fragments...
pub const CMS_RATE_HZ: f64 = 100_000.0;
/// ... up to this fragment size ...
pub const CMS_MAX_BYTES: f64 = 3500.0;
/// ... and about 90 % of 40 GbE beyond (0.9 × 40 Gb/s = 4.5 GB/s).
pub const CMS_PLATEAU_GB_S: f64 = 0.9 * 40.0 / 8.0;
/// LHCb event-builder NIC paper, Fig. 5: events/s built at one BU with 2 and 32 sources on
/// 1 Gb/s Ethernet.
pub const LHCB_POINTS: [(f64, f64); 2] = [(2.0, 42_000.0), (32.0, 2_600.0)];
/// File names (without extension) of the scans.
pub const SIZE_FILE: &str = "evb-throughput-vs-size";
/// Events/s vs fragment size.
pub const SIZE_RATE_FILE: &str = "evb-rate-vs-size";
/// RU CPU vs fragment size.
pub const SIZE_CPU_FILE: &str = "evb-cpu-vs-size";
/// Events/s at one BU vs sources.
pub const SOURCES_FILE: &str = "evb-rate-vs-sources";
/// GB/s vs RUs and BUs.
pub const UNITS_FILE: &str = "evb-throughput-vs-units";
/// GB/s vs writer threads.
pub const WRITERS_FILE: &str = "evb-throughput-vs-writers";

/// One point of the size scan.
#[derive(Debug, Clone)]
pub struct SizePoint {
    /// (a) raw ingest.
    pub raw: Measured,
    /// (a+) minimal ingest.
    pub minimal_ingest: Measured,
    /// (b) one RU, ingest only.
    pub ru: EvbMeasured,
    /// (c) one RU into [`MAIN_BUS`] discarding BUs.
    pub chain: EvbMeasured,
    /// (e+) minimal relay to [`MAIN_BUS`] outputs.
    pub minimal_relay: Measured,
}

/// Everything the suite measured.
#[derive(Debug, Clone)]
pub struct EvbSuite {
    /// Short measurements.
    pub quick: bool,
    /// (a) raw TCP ingest.
    pub ingest: Measured,
    /// (a+) minimal ingest.
    pub minimal_ingest: Measured,
    /// (b) RU ingest (ingest only).
    pub ru: EvbMeasured,
    /// (c) full chain, discarding BUs.
    pub chain: EvbMeasured,
    /// (d) full chain, RAM-disk writes.
    pub disk: EvbMeasured,
    /// (e) raw two-hop relay.
    pub relay: Measured,
    /// (e+) minimal relay.
    pub minimal_relay: Measured,
    /// Scan 1.
    pub sizes: Vec<SizePoint>,
    /// Scan 2: (a) and one RU with that many streams into one discarding BU.
    pub sources: Vec<(Measured, EvbMeasured)>,
    /// Scan 3: RUs × BUs, discarding.
    pub units: Vec<EvbMeasured>,
    /// Scan 3: writer threads of one BU on the RAM disk.
    pub writers: Vec<EvbMeasured>,
    /// The transports, TCP first.
    pub transports: Vec<TransportPoint>,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// A case of the suite on FEROL streams: pull, every CRC-16 checked, the bench's tuning.
pub fn event_case(
    rus: usize,
    bus: usize,
    streams: usize,
    fragment_bytes: usize,
    output: BuOutput,
    budget: NetBudget,
) -> EvbCase {
    EvbCase {
        rus,
        bus,
        streams,
        fragment_bytes,
        mode: StreamMode::Event,
        crc_check: CrcCheck::Always,
        output,
        budget,
        protocol: tessera_config::Protocol::Pull,
        slow_bu_events_per_s: None,
        ucx: None,
        tuning: crate::evb::Tuning::Bench,
    }
}

/// Runs the suite, telling `progress` about each case before it runs, and writes the scans
/// into `out` (created if missing).
pub fn run(quick: bool, out: &Path, progress: &mut dyn FnMut(&str)) -> Result<EvbSuite, BenchError> {
    std::fs::create_dir_all(out)
        .map_err(|source| BenchError::Io { what: format!("creating {}", out.display()), source })?;
    let (budget, scan) = if quick { (NetBudget::QUICK, NetBudget::QUICK) } else { (NetBudget::FULL, NetBudget::SCAN) };
    let (sizes, sources, units, writers) = if quick {
        (&QUICK_SIZES[..], &QUICK_SOURCES[..], &QUICK_UNITS[..], &QUICK_WRITER_THREADS[..])
    } else {
        (&SIZES[..], &SOURCES[..], &UNITS[..], &WRITER_THREADS[..])
    };
    let net = |streams, fragment_bytes, budget| NetCase {
        streams,
        fragment_bytes,
        mode: StreamMode::Event,
        relay_outputs: MAIN_BUS,
        budget,
    };
    let evb = event_case;
    let mut raw = |what: &str, case: NetCase, baseline: fn(&NetCase) -> Result<Measured, BenchError>| {
        progress(&format!("{what}: {} streams, {} B", case.streams, case.fragment_bytes));
        baseline(&case)
    };
    let main = net(MAIN_STREAMS, MAIN_FRAGMENT_BYTES, budget);
    let ingest = raw("(a) raw ingest", main, raw_ingest)?;
    let minimal = raw("(a+) minimal ingest", main, minimal_ingest)?;
    let relay = raw("(e) raw relay", main, raw_relay)?;
    let minimal_relayed = raw("(e+) minimal relay", main, minimal_relay)?;
    let mut sys = |what: &str, case: EvbCase| {
        progress(&format!("{what}: {}, {} streams, {} B", case.label(), case.streams, case.fragment_bytes));
        run_case(&case)
    };
    let (d, f) = (BuOutput::Discard, MAIN_FRAGMENT_BYTES);
    let ru = sys("(b) RU ingest", evb(1, 0, MAIN_STREAMS, f, BuOutput::IngestOnly, budget))?;
    let chain = sys("(c) chain", evb(1, MAIN_BUS, MAIN_STREAMS, f, d, budget))?;
    let ram = BuOutput::RamDisk { writer_threads: MAIN_WRITER_THREADS };
    let disk = sys("(d) chain to RAM disk", evb(1, MAIN_BUS, MAIN_STREAMS, f, ram, budget))?;
    let mut size_points = Vec::new();
    for &s in sizes {
        let raw = raw_ingest(&net(MAIN_STREAMS, s, scan))?;
        let minimal_ingest = minimal_ingest(&net(MAIN_STREAMS, s, scan))?;
        let ru = sys("scan 1", evb(1, 0, MAIN_STREAMS, s, BuOutput::IngestOnly, scan))?;
        let chain = sys("scan 1", evb(1, MAIN_BUS, MAIN_STREAMS, s, d, scan))?;
        let minimal_relay = minimal_relay(&net(MAIN_STREAMS, s, scan))?;
        size_points.push(SizePoint { raw, minimal_ingest, ru, chain, minimal_relay });
    }
    let mut source_points = Vec::new();
    for &n in sources {
        let raw = raw_ingest(&net(n, SOURCES_FRAGMENT_BYTES, scan))?;
        let built = sys("scan 2", evb(1, 1, n, SOURCES_FRAGMENT_BYTES, d, scan))?;
        source_points.push((raw, built));
    }
    let mut shapes: Vec<(usize, usize)> = units.iter().flat_map(|&n| [(n, n), (1, n), (n, 1)]).collect();
    shapes.sort_unstable();
    shapes.dedup();
    let mut unit_points = Vec::new();
    for (r, b) in shapes {
        unit_points.push(sys("scan 3", evb(r, b, MAIN_STREAMS, f, d, scan))?);
    }
    let mut writer_points = Vec::new();
    for &w in writers {
        let out = BuOutput::RamDisk { writer_threads: w };
        writer_points.push(sys("scan 3", evb(1, 1, MAIN_STREAMS, f, out, scan))?);
    }
    let mut transport_points = Vec::new();
    for kind in transports() {
        let raw = raw_link(&kind, LINK_MESSAGE_BYTES, scan.seconds)?;
        let mut case = evb(2, 2, MAIN_STREAMS, TRANSPORT_FRAGMENT_BYTES, d, scan);
        case.ucx = kind.ucx_transports();
        let chain = sys("transports", case)?;
        transport_points.push(TransportPoint { raw, chain });
    }
    let mut suite = EvbSuite {
        quick,
        ingest,
        minimal_ingest: minimal,
        ru,
        chain,
        disk,
        relay,
        minimal_relay: minimal_relayed,
        sizes: size_points,
        sources: source_points,
        units: unit_points,
        writers: writer_points,
        transports: transport_points,
        files: Vec::new(),
    };
    suite.files = write_plots(out, &scan_series(&suite))?;
    Ok(suite)
}

/// The CMS Run-2 RU as a reference series of GB/s at `sizes`: 12 × size × 100 kHz up to 3.5 kB,
/// about 90 % of 40 GbE beyond.
pub fn cms_reference(sizes: &[usize]) -> Vec<(f64, f64)> {
    sizes
        .iter()
        .map(|&s| {
            let s = s as f64;
            let gb = if s <= CMS_MAX_BYTES { 12.0 * s * CMS_RATE_HZ / 1e9 } else { CMS_PLATEAU_GB_S };
            (s, gb.min(CMS_PLATEAU_GB_S))
        })
        .collect()
}

/// One plot of a scan, with its CSV.
#[derive(Debug, Clone)]
pub struct ScanPlot {
    /// File name without extension.
    pub file: &'static str,
    /// Title of the plot.
    pub title: &'static str,
    /// X axis label (and CSV column).
    pub x: &'static str,
    /// Y axis label (and CSV column).
    pub y: &'static str,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// The curves.
    pub series: Vec<Series>,
}

/// Every scan plot of the suite.
pub fn scan_series(suite: &EvbSuite) -> Vec<ScanPlot> {
    let size_x = |p: &SizePoint| p.raw.fragment_bytes as f64;
    let sizes: Vec<usize> = suite.sizes.iter().map(|p| p.raw.fragment_bytes).collect();
    let pts = |f: &dyn Fn(&SizePoint) -> f64| suite.sizes.iter().map(|p| (size_x(p), f(p))).collect::<Vec<_>>();
    let throughput = vec![
        Series::measured("(a) raw TCP ingest, 12 streams", pts(&|p| p.raw.gb_per_s())),
        Series::measured("(a+) minimal ingest: read, checked, indexed", pts(&|p| p.minimal_ingest.gb_per_s())),
        Series::measured("(b) RU ingest (nothing sent)", pts(&|p| p.ru.gb_per_s())),
        Series::measured(format!("(c) chain, 1 RU -> {MAIN_BUS} discarding BUs"), pts(&|p| p.chain.gb_per_s())),
        Series::measured(format!("(e+) minimal relay -> {MAIN_BUS}"), pts(&|p| p.minimal_relay.gb_per_s())),
        Series::reference(
            "CMS Run-2 RU, 12 sources (Fig. 2): 100 kHz to 3.5 kB, ~90% of 40 GbE",
            cms_reference(&sizes),
        ),
    ];
    let rate = vec![
        Series::measured("(a) raw TCP ingest (fragments/s per stream)", pts(&|p| p.raw.events_per_s())),
        Series::measured("(b) RU ingest, events built", pts(&|p| p.ru.events_per_s())),
        Series::measured(format!("(c) chain to {MAIN_BUS} BUs, events built"), pts(&|p| p.chain.events_per_s())),
        Series::reference(
            "CMS Run-2 RU, 12 sources (Fig. 2): 100 kHz to 3.5 kB",
            sizes.iter().filter(|&&s| s as f64 <= CMS_MAX_BYTES).map(|&s| (s as f64, CMS_RATE_HZ)).collect(),
        ),
    ];
    let cpu = vec![
        Series::measured("(a) receiver thread", pts(&|p| p.raw.cpu_ns_per_fragment())),
        Series::measured("(a+) minimal ingest thread", pts(&|p| p.minimal_ingest.cpu_ns_per_fragment())),
        Series::measured("(e+) minimal relay thread", pts(&|p| p.minimal_relay.cpu_ns_per_fragment())),
        Series::measured("(b) RU thread (1 BU)", pts(&|p| p.ru.ru_cpu_ns_per_fragment())),
        Series::measured(format!("(c) RU thread ({MAIN_BUS} BUs)"), pts(&|p| p.chain.ru_cpu_ns_per_fragment())),
    ];
    let sources = vec![
        Series::measured(
            "(a) raw TCP ingest, fragments/s per stream",
            suite.sources.iter().map(|(a, _)| (a.streams as f64, a.events_per_s())).collect(),
        ),
        Series::measured(
            "Tessera: events built at 1 BU (1 RU, discarding BU)",
            suite.sources.iter().map(|(_, b)| (b.case.streams as f64, b.events_per_s())).collect(),
        ),
        Series::reference("LHCb event-builder NIC paper, Fig. 5 (1 Gb/s)", LHCB_POINTS.to_vec()),
    ];
    let shape = |f: &dyn Fn(&EvbCase) -> Option<usize>| {
        let mut p: Vec<(f64, f64)> =
            suite.units.iter().filter_map(|m| f(&m.case).map(|n| (n as f64, m.gb_per_s()))).collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        p
    };
    let units = vec![
        Series::measured("n RUs x n BUs", shape(&|c| (c.rus == c.bus).then_some(c.rus))),
        Series::measured("1 RU x n BUs", shape(&|c| (c.rus == 1).then_some(c.bus))),
        Series::measured("n RUs x 1 BU", shape(&|c| (c.bus == 1).then_some(c.rus))),
    ];
    let writers = vec![Series::measured(
        "1 RU x 1 BU, RAM disk",
        suite
            .writers
            .iter()
            .map(|m| match m.case.output {
                BuOutput::RamDisk { writer_threads } => (writer_threads as f64, m.gb_per_s()),
                BuOutput::Discard | BuOutput::IngestOnly => (0.0, m.gb_per_s()),
            })
            .collect(),
    )];
    vec![
        ScanPlot {
            file: SIZE_FILE,
            title: "Event builder vs fragment size (12 FED streams per RU, loopback)",
            x: "fragment bytes",
            y: "GB/s",
            log_x: true,
            series: throughput,
        },
        ScanPlot {
            file: SIZE_RATE_FILE,
            title: "Events per second vs fragment size (12 FED streams per RU)",
            x: "fragment bytes",
            y: "events/s",
            log_x: true,
            series: rate,
        },
        ScanPlot {
            file: SIZE_CPU_FILE,
            title: "CPU of the receiving thread / RU thread per fragment",
            x: "fragment bytes",
            y: "CPU ns per fragment",
            log_x: true,
            series: cpu,
        },
        ScanPlot {
            file: SOURCES_FILE,
            title: "Events/s built at one BU vs sources (1500-byte fragments)",
            x: "sources",
            y: "events/s",
            log_x: true,
            series: sources,
        },
        ScanPlot {
            file: UNITS_FILE,
            title: "Event builder vs RUs and BUs (12 FED streams in all, 2 kB, discarding BUs)",
            x: "n",
            y: "GB/s",
            log_x: false,
            series: units,
        },
        ScanPlot {
            file: WRITERS_FILE,
            title: "Event builder to RAM disk vs writer threads (1 RU, 1 BU, 2 kB)",
            x: "writer threads",
            y: "GB/s",
            log_x: false,
            series: writers,
        },
    ]
}

/// Writes each of `plots` into `out` as an SVG plot and a CSV of its curves; returns the files.
pub fn write_plots(out: &Path, plots: &[ScanPlot]) -> Result<Vec<PathBuf>, BenchError> {
    let mut files = Vec::new();
    for p in plots {
        let csv = out.join(format!("{}.csv", p.file));
        let svg = out.join(format!("{}.svg", p.file));
        write_csv(&csv, p.x, p.y, &p.series)?;
        plot_svg(&svg, p.title, p.x, p.y, &p.series, p.log_x)?;
        files.extend([csv, svg]);
    }
    Ok(files)
}

fn ratio(a: f64, b: f64) -> f64 {
    a / b.max(1e-12)
}

/// The (fragment size, ratio) of `points` with the lowest ratio; `points` holds at least the
/// main case.
fn worst_of(points: &[(usize, f64)]) -> (usize, f64) {
    points.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1)).expect("the main case")
}

/// The targets, from the main cases (and, for the ingest target, every size ≥ 2 kB of
/// scan 1).
pub fn targets(suite: &EvbSuite) -> Vec<Target> {
    let mut ingest: Vec<(usize, f64)> =
        vec![(MAIN_FRAGMENT_BYTES, ratio(suite.ru.gb_per_s(), suite.ingest.gb_per_s()))];
    ingest.extend(
        suite
            .sizes
            .iter()
            .filter(|p| p.raw.fragment_bytes >= INGEST_TARGET_MIN_BYTES)
            .map(|p| (p.raw.fragment_bytes, ratio(p.ru.gb_per_s(), p.raw.gb_per_s()))),
    );
    let (worst_size, worst) = worst_of(&ingest);
    let chain = ratio(suite.chain.gb_per_s(), suite.relay.gb_per_s());
    // Against the speed-of-light baselines: the main case and every size of scan 1 in range.
    let in_range =
        || suite.sizes.iter().filter(|p| (CEILING_MIN_BYTES..=CEILING_MAX_BYTES).contains(&p.raw.fragment_bytes));
    let mut ingest_ceiling = vec![(MAIN_FRAGMENT_BYTES, ratio(suite.ru.gb_per_s(), suite.minimal_ingest.gb_per_s()))];
    ingest_ceiling
        .extend(in_range().map(|p| (p.raw.fragment_bytes, ratio(p.ru.gb_per_s(), p.minimal_ingest.gb_per_s()))));
    let mut chain_ceiling = vec![(MAIN_FRAGMENT_BYTES, ratio(suite.chain.gb_per_s(), suite.minimal_relay.gb_per_s()))];
    chain_ceiling
        .extend(in_range().map(|p| (p.raw.fragment_bytes, ratio(p.chain.gb_per_s(), p.minimal_relay.gb_per_s()))));
    let (ingest_ceiling_size, ingest_ceiling_worst) = worst_of(&ingest_ceiling);
    let (chain_ceiling_size, chain_ceiling_worst) = worst_of(&chain_ceiling);
    let sizes = format!("{} to {} kB", CEILING_MIN_BYTES >> 10, CEILING_MAX_BYTES >> 10);
    let beyond = suite.ru.ru_cpu_ns_per_fragment() - suite.ingest.cpu_ns_per_fragment();
    vec![
        Target {
            name: format!("(b)/(a) >= {INGEST_TARGET} for fragments >= {INGEST_TARGET_MIN_BYTES} B"),
            figure: format!("worst {worst:.2} at {worst_size} B (main case {:.2})", ingest[0].1),
            baseline: "(a) raw TCP ingest, same streams".into(),
            met: worst >= INGEST_TARGET,
        },
        Target {
            name: format!("(b)/(a+) >= {INGEST_CEILING_TARGET} from {sizes}"),
            figure: format!(
                "worst {ingest_ceiling_worst:.2} at {ingest_ceiling_size} B (main case {:.2})",
                ingest_ceiling[0].1
            ),
            baseline: "(a+) minimal ingest, same streams".into(),
            met: ingest_ceiling_worst >= INGEST_CEILING_TARGET,
        },
        Target {
            name: format!("(c)/(e+) >= {CHAIN_CEILING_TARGET} from {sizes}"),
            figure: format!(
                "worst {chain_ceiling_worst:.2} at {chain_ceiling_size} B (main case {:.2})",
                chain_ceiling[0].1
            ),
            baseline: format!("(e+) minimal relay to {MAIN_BUS} outputs"),
            met: chain_ceiling_worst >= CHAIN_CEILING_TARGET,
        },
        Target {
            name: format!("(c)/(e) >= {CHAIN_TARGET}"),
            figure: format!("{chain:.2}"),
            baseline: format!("(e) raw relay to {MAIN_BUS} outputs"),
            met: chain >= CHAIN_TARGET,
        },
        Target {
            name: format!("RU CPU beyond the kernel's copy <= {RU_NS_TARGET} ns per fragment"),
            figure: format!(
                "(b) RU {:.0} ns - (a) receiver {:.0} ns = {beyond:.0} ns",
                suite.ru.ru_cpu_ns_per_fragment(),
                suite.ingest.cpu_ns_per_fragment()
            ),
            baseline: "(a) raw ingest's receiver CPU per fragment".into(),
            met: beyond <= RU_NS_TARGET,
        },
        Target {
            name: "memory bounded by configuration".into(),
            figure: format!(
                "RU: {CHUNKS_PER_FED} x {} MiB per FED = {} MiB for {MAIN_STREAMS} FEDs; BU: frame store {} MiB",
                CHUNK_BYTES >> 20,
                suite.ru.case.ru_memory_bytes() >> 20,
                FRAME_STORE_BYTES >> 20
            ),
            baseline: "configuration".into(),
            met: true,
        },
    ]
}

const HEADER: [&str; 10] =
    ["case", "RUxBU", "streams", "fragment", "GB/s", "events/s", "CPU ns/frag", "busy", "proc ns/frag", "ratio"];

fn header(s: &mut String) {
    let h = HEADER;
    let _ = writeln!(
        s,
        "{:<30} {:>6} {:>7} {:>8} {:>6} {:>9} {:>11} {:>5} {:>12} {:>22}",
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]
    );
}

fn raw_row(s: &mut String, case: &str, m: &Measured, ratio_text: &str) {
    let _ = writeln!(
        s,
        "{:<30} {:>6} {:>7} {:>8} {:>6.2} {:>9.0} {:>11.1} {:>5.2} {:>12.1} {:>22}",
        case,
        "-",
        m.streams,
        m.fragment_bytes,
        m.gb_per_s(),
        m.events_per_s(),
        m.cpu_ns_per_fragment(),
        m.worker_busy(),
        m.process_cpu_ns_per_fragment(),
        ratio_text
    );
}

fn evb_row(s: &mut String, case: &str, m: &EvbMeasured, ratio_text: &str) {
    let _ = writeln!(
        s,
        "{:<30} {:>6} {:>7} {:>8} {:>6.2} {:>9.0} {:>11.1} {:>5.2} {:>12.1} {:>22}",
        case,
        format!("{}x{}", m.case.rus, m.case.bus),
        m.case.streams,
        m.case.fragment_bytes,
        m.gb_per_s(),
        m.events_per_s(),
        m.ru_cpu_ns_per_fragment(),
        m.ru_busy(),
        m.process_cpu_ns_per_fragment(),
        ratio_text
    );
}

/// The suite's tables, notes and targets.
pub fn report(suite: &EvbSuite) -> String {
    let mut s = String::new();
    let (a, e) = (&suite.ingest, &suite.relay);
    let _ = writeln!(s, "main cases: {MAIN_STREAMS} streams of {MAIN_FRAGMENT_BYTES}-byte fragments");
    header(&mut s);
    let (a_min, e_min) = (&suite.minimal_ingest, &suite.minimal_relay);
    raw_row(&mut s, "(a) raw ingest", a, "1.00 ÷(a)");
    raw_row(&mut s, "(a+) minimal ingest", a_min, &format!("{:.2} ÷(a)", ratio(a_min.gb_per_s(), a.gb_per_s())));
    evb_row(
        &mut s,
        "(b) RU ingest, nothing sent",
        &suite.ru,
        &format!(
            "{:.2} ÷(a), {:.2} ÷(a+)",
            ratio(suite.ru.gb_per_s(), a.gb_per_s()),
            ratio(suite.ru.gb_per_s(), a_min.gb_per_s())
        ),
    );
    evb_row(
        &mut s,
        "(c) chain, no disk",
        &suite.chain,
        &format!(
            "{:.2} ÷(e), {:.2} ÷(e+)",
            ratio(suite.chain.gb_per_s(), e.gb_per_s()),
            ratio(suite.chain.gb_per_s(), e_min.gb_per_s())
        ),
    );
    evb_row(
        &mut s,
        &format!("(d) chain, RAM disk {MAIN_WRITER_THREADS}w"),
        &suite.disk,
        &format!("{:.2} ÷(e)", ratio(suite.disk.gb_per_s(), e.gb_per_s())),
    );
    raw_row(&mut s, &format!("(e) raw relay ->{MAIN_BUS}"), e, "1.00 ÷(e)");
    raw_row(
        &mut s,
        &format!("(e+) minimal relay ->{MAIN_BUS}"),
        e_min,
        &format!("{:.2} ÷(e)", ratio(e_min.gb_per_s(), e.gb_per_s())),
    );
    let ru_ns = suite.ru.ru_cpu_ns_per_fragment();
    let _ = writeln!(
        s,
        "\nRU thread CPU per fragment in (b): {ru_ns:.0} ns; kernel copy estimated as (a)'s receiver, {:.0} ns: \
         beyond it {:.0} ns.",
        a.cpu_ns_per_fragment(),
        ru_ns - a.cpu_ns_per_fragment(),
    );
    let _ = writeln!(
        s,
        "\nscan 1: throughput per RU vs fragment size, {MAIN_STREAMS} streams (ratios over the baselines at the same size)"
    );
    header(&mut s);
    for p in &suite.sizes {
        let (a, a_min, e_min) = (p.raw.gb_per_s(), p.minimal_ingest.gb_per_s(), p.minimal_relay.gb_per_s());
        raw_row(&mut s, "(a) raw ingest", &p.raw, "1.00 ÷(a)");
        raw_row(&mut s, "(a+) minimal ingest", &p.minimal_ingest, &format!("{:.2} ÷(a)", ratio(a_min, a)));
        let (b, c) = (p.ru.gb_per_s(), p.chain.gb_per_s());
        evb_row(&mut s, "(b) RU ingest", &p.ru, &format!("{:.2} ÷(a), {:.2} ÷(a+)", ratio(b, a), ratio(b, a_min)));
        evb_row(
            &mut s,
            "(c) chain, no disk",
            &p.chain,
            &format!("{:.2} ÷(a), {:.2} ÷(e+)", ratio(c, a), ratio(c, e_min)),
        );
        raw_row(&mut s, &format!("(e+) minimal relay ->{MAIN_BUS}"), &p.minimal_relay, "1.00 ÷(e+)");
    }
    let _ = writeln!(
        s,
        "\nscan 2: events/s at one BU vs sources, {SOURCES_FRAGMENT_BYTES}-byte fragments (1 RU, 1 discarding BU)"
    );
    header(&mut s);
    for (raw, m) in &suite.sources {
        raw_row(&mut s, "(a) raw ingest", raw, "1.00 ÷(a)");
        evb_row(&mut s, "1 RU -> 1 BU", m, &format!("{:.2} ÷(a)", ratio(m.events_per_s(), raw.events_per_s())));
    }
    let _ = writeln!(
        s,
        "  reference, LHCb NIC paper Fig. 5 (1 Gb/s): {:.0} events/s at 2 sources, {:.0} at 32",
        LHCB_POINTS[0].1, LHCB_POINTS[1].1
    );
    let _ = writeln!(
        s,
        "\nscan 3: RUs x BUs ({MAIN_STREAMS} streams in all, {MAIN_FRAGMENT_BYTES} B, discarding), and writer threads (RAM disk); ratio over (e)"
    );
    header(&mut s);
    for m in suite.units.iter().chain(&suite.writers) {
        evb_row(&mut s, &m.case.label(), m, &format!("{:.2} ÷(e)", ratio(m.gb_per_s(), e.gb_per_s())));
    }
    let _ = writeln!(
        s,
        "\ntransports: the 2x2 chain ({MAIN_STREAMS} streams of {TRANSPORT_FRAGMENT_BYTES} B, discarding) with its links on each, \
         beside that transport's raw link\n({} kB messages, 2 threads, nothing checked); ratios: the chain over the chain on TCP, and over its raw link",
        LINK_MESSAGE_BYTES >> 10
    );
    let _ = writeln!(
        s,
        "{:<30} {:>8} {:>11} {:>9} {:>8} {:>12} {:>12}",
        "transport", "raw GB/s", "chain GB/s", "events/s", "RU ns/f", "÷ chain TCP", "÷ raw link"
    );
    let tcp_chain = suite.transports.first().map_or(0.0, |t| t.chain.gb_per_s());
    for t in &suite.transports {
        let _ = writeln!(
            s,
            "{:<30} {:>8.2} {:>11.2} {:>9.0} {:>8.0} {:>12.2} {:>12.2}",
            t.raw.kind.label().replace("raw ", "").replace(", 1 connection", ""),
            t.raw.gb_per_s(),
            t.chain.gb_per_s(),
            t.chain.events_per_s(),
            t.chain.ru_cpu_ns_per_fragment(),
            ratio(t.chain.gb_per_s(), tcp_chain),
            ratio(t.chain.gb_per_s(), t.raw.gb_per_s()),
        );
    }
    if !cfg!(feature = "ucx") {
        let _ = writeln!(s, "  UCX not measured: this build has no UCX (build with `--features ucx`)");
    }
    let _ = writeln!(
        s,
        "\nGB/s: wire bytes (FEROL block headers included) over the window; events/s: built at the BUs (raw cases:\n\
         fragments/s per stream); CPU ns/frag: the receiver (a) or relay (e) thread, or the RU loop threads together;\n\
         busy: that thread's (busiest RU's) CPU over wall time; proc: the whole process, emulators included.\n\
         Every case's front ends replay a capture from memory (renumbering only), the baselines' as the builder's.\n\
         In (b)-(d) and the scans one of the streams of RU 0 is the trigger FED 1024 (a 952-byte TCDS record).\n\
         (a+) reads each stream into receive memory as the RU does and checks and indexes every fragment, nothing else;\n\
         (e+) does that and sends every event on, one writev per batch of 64 events to each output in turn.\n\
         (b) is one RU in ingest-only mode: it reads and checks every fragment and builds every super-fragment,\n\
         and releases each as soon as it is built. Scans 2 and 3 put all units in this one 2-core process{}.",
        if suite.quick { " (--quick: short runs, few points)" } else { "" }
    );
    let _ = writeln!(s, "\ntargets:");
    for t in targets(suite) {
        let _ = writeln!(s, "  {}: {}, {}", t.name, t.figure, t.verdict());
    }
    for f in &suite.files {
        let _ = writeln!(s, "wrote {}", f.display());
    }
    s
}
