//! `tessera bench protocols`: pull and push compared, the same system and the same sender for
//! both, in one invocation so that the ratios hold on a noisy machine (issue #20 item 5).
//!
//! 1. **The cores alone** ([`crate::protocol`]: no I/O, CPU per fragment and messages per event
//!    of 1×1, 4×4 and 8×8 systems under each protocol).
//! 2. **Throughput** on loopback sockets ([`crate::watched`]): [`RUS`] RUs × [`BUS`] BUs of the
//!    laptop's shape (the default system's: RU 0 reads the trigger FED 1024 and 4 data FEDs, RU
//!    1 4 data FEDs), [`FRAGMENT_BYTES`]-byte data fragments, every unit tuned as the system
//!    file's defaults have it ([`Tuning::SystemFile`]), free-running generating front ends (as
//!    `tessera run`'s), BUs writing files of [`FILE_EVENTS`] events to the RAM disk that a
//!    watcher takes as a reader would; events/s built, under pull and push, without and with a
//!    **slow BU**: the last BU takes events at most at half of a BU's share of the lower of the
//!    two throughputs ([`slow_bu_events_per_s`]), the others as fast as they can.
//! 3. **Latency from trigger to published file**: the same system, with the same slow BU, its
//!    trigger paced (Poisson) at half the lowest of the four throughputs of 2., so that both
//!    protocols sustain it with and without the slow BU: p50, p99 and the largest, the dead
//!    time, and the events lost and incomplete.
//! 4. **LHCb's figure**: events/s built at one destination (1 BU, discarding) against the number
//!    of sources, [`SOURCES`] RUs of one FED each (RU 0's the trigger FED), fixed
//!    [`SOURCES_FRAGMENT_BYTES`]-byte fragments, under both protocols, beside (a) raw TCP ingest
//!    of the same number of streams into one thread ([`crate::net::raw_ingest`]); and the BU
//!    loop's CPU per fragment received, beside LHCb's [`LHCB_NS_PER_FRAGMENT`] of host protocol
//!    software per fragment and (a)'s receiver CPU per fragment.
//!
//! Ratios: push over pull in each case; a slow BU's case over the same protocol's without it;
//! the sources scan over (a) at the same number of sources. Plots (CSV and SVG): [`RATE_FILE`],
//! [`CPU_FILE`], [`LATENCY_FILE`].
//!
//! LHCb's figures are from J.-P. Dufey, B. Jost, N. Neufeld, M. Zuin, "Event building in an
//! intelligent network interface card for the LHCb DAQ system", IEEE Trans. Nucl. Sci. 48 (2001)
//! 1323–1328, doi:10.1109/23.958774 ([`LHCB_REFERENCE`]): its Fig. 5 (events/s at one
//! destination, 1 Gb/s Ethernet, [`crate::evb_suite::LHCB_POINTS`]) and its host measurement of
//! the protocol's software per fragment, the 3.2 µs issue #20 quotes.

use crate::BenchError;
use crate::evb::{BuOutput, EvbCase, EvbMeasured, Tuning, run_case};
use crate::evb_suite::{LHCB_POINTS, ScanPlot, write_plots};
use crate::net::{Measured, NetBudget, NetCase, StreamMode, raw_ingest};
use crate::protocol::Cost;
use crate::scan::Series;
use crate::timing::Budget;
use crate::watched::{WatchedCase, WatchedMeasured, run_watched};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessera_config::Protocol;
use tessera_formats::fed::CrcCheck;

/// RUs of the throughput and latency cases.
pub const RUS: usize = 2;
/// BUs of the throughput and latency cases; the last is the slow one when there is one.
pub const BUS: usize = 2;
/// FED streams of the throughput and latency cases: the trigger FED and 8 data FEDs, as the
/// default system (RU 0 reads the first 5).
pub const STREAMS: usize = 9;
/// Data fragment size of the throughput and latency cases, in bytes.
pub const FRAGMENT_BYTES: usize = 2048;
/// Events per raw file in the throughput and latency cases (`bu.max_events_per_file`).
pub const FILE_EVENTS: u32 = 16;
/// Writer threads per BU in the throughput and latency cases.
pub const WRITER_THREADS: usize = 2;
/// How long the trigger runs in each throughput and latency case, in seconds.
pub const SECONDS: f64 = 4.0;
/// The same with `--quick`.
pub const QUICK_SECONDS: f64 = 1.0;
/// Sources (RUs of one FED each) of LHCb's figure.
pub const SOURCES: [usize; 5] = [2, 4, 8, 16, 32];
/// The same with `--quick`.
pub const QUICK_SOURCES: [usize; 2] = [2, 4];
/// Fragment size of LHCb's figure, in bytes.
pub const SOURCES_FRAGMENT_BYTES: usize = 1500;
/// LHCb's host measurement: CPU of the event-building protocol's software per fragment at the
/// destination, in ns.
pub const LHCB_NS_PER_FRAGMENT: f64 = 3200.0;
/// Where LHCb's figures come from.
pub const LHCB_REFERENCE: &str = "Dufey, Jost, Neufeld, Zuin, \"Event building in an intelligent network interface \
                                  card for the LHCb DAQ system\", IEEE TNS 48 (2001) 1323, doi:10.1109/23.958774";
/// Events/s at one BU vs sources, both protocols.
pub const RATE_FILE: &str = "protocols-rate-vs-sources";
/// BU CPU per fragment vs sources, both protocols.
pub const CPU_FILE: &str = "protocols-cpu-vs-sources";
/// Latency percentiles, both protocols, with and without the slow BU.
pub const LATENCY_FILE: &str = "protocols-latency";
/// Percentiles drawn in [`LATENCY_FILE`].
const PLOTTED_PERCENTILES: [f64; 16] =
    [1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0];

/// A case's figures, or why it failed: a failed case is reported as such and the suite goes on
/// (push in the runtime has known failures under load; BENCHMARKS.md).
pub type Outcome<T> = Result<T, String>;

/// One point of LHCb's figure.
#[derive(Debug, Clone)]
pub struct SourcesPoint {
    /// Sources: RUs of one FED each.
    pub sources: usize,
    /// (a) raw TCP ingest of as many streams of the same fragments into one thread.
    pub raw: Measured,
    /// Pull, `sources` RUs into one discarding BU.
    pub pull: Outcome<EvbMeasured>,
    /// Push, the same.
    pub push: Outcome<EvbMeasured>,
}

/// Everything the suite measured.
#[derive(Debug, Clone)]
pub struct ProtocolsSuite {
    /// Short runs, few points.
    pub quick: bool,
    /// 1. The cores alone, each topology under pull then push.
    pub cores: Vec<Cost>,
    /// 2. Throughput, in [`CASES`]' order.
    pub throughput: [Outcome<WatchedMeasured>; 4],
    /// The slow BU's cap, in events/s (`None` when no throughput without it was measured).
    pub slow_bu_events_per_s: Option<f64>,
    /// 3. The latency cases' trigger rate, in Hz (`None` when no throughput was measured).
    pub paced_rate_hz: Option<f64>,
    /// 3. Latency, in [`CASES`]' order.
    pub latency: [Outcome<WatchedMeasured>; 4],
    /// 4. LHCb's figure.
    pub sources: Vec<SourcesPoint>,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// The throughput and latency cases' order: (protocol, slow BU).
pub const CASES: [(Protocol, bool); 4] =
    [(Protocol::Pull, false), (Protocol::Push, false), (Protocol::Pull, true), (Protocol::Push, true)];

/// A case's name: `pull`, `push, slow BU`.
pub fn case_name(protocol: Protocol, slow: bool) -> String {
    format!("{}{}", protocol_name(protocol), if slow { ", slow BU" } else { "" })
}

/// `pull` or `push`.
pub fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Pull => "pull",
        Protocol::Push => "push",
    }
}

/// The slow BU's cap: half of a BU's share of the lower of the throughputs without it
/// (`min(pull, push) / BUS / 2` events/s), so that it is half as fast as the others are asked
/// to be in the same system; `None` without any.
pub fn slow_bu_events_per_s(without: &[&EvbMeasured]) -> Option<f64> {
    let lowest = without.iter().map(|m| m.events_per_s()).reduce(f64::min)?;
    Some((lowest / BUS as f64 / 2.0).max(1.0))
}

/// The system of the throughput and latency cases, running `seconds`.
fn laptop(protocol: Protocol, slow: Option<f64>, seconds: f64) -> EvbCase {
    EvbCase {
        rus: RUS,
        bus: BUS,
        streams: STREAMS,
        fragment_bytes: FRAGMENT_BYTES,
        mode: StreamMode::Event,
        crc_check: CrcCheck::Always,
        output: BuOutput::RamDisk { writer_threads: WRITER_THREADS },
        budget: NetBudget { seconds, bytes: u64::MAX },
        protocol,
        slow_bu_events_per_s: slow,
        tuning: Tuning::SystemFile,
        ucx: None,
    }
}

/// A case's outcome, a failure told to `progress` as it happens.
fn settle<T>(progress: &mut dyn FnMut(&str), what: &str, result: Result<T, BenchError>) -> Outcome<T> {
    result.map_err(|e| {
        let e = e.to_string();
        progress(&format!("   {what}: FAILED: {e}"));
        e
    })
}

/// The figures of the cases that succeeded.
fn succeeded<T>(cases: &[Outcome<T>]) -> impl Iterator<Item = &T> {
    cases.iter().filter_map(|c| c.as_ref().ok())
}

/// Runs the suite, telling `progress` about each case before it runs (and about each that
/// fails), and writes the plots into `out` (created if missing).
pub fn run(quick: bool, out: &Path, progress: &mut dyn FnMut(&str)) -> Result<ProtocolsSuite, BenchError> {
    std::fs::create_dir_all(out)
        .map_err(|source| BenchError::Io { what: format!("creating {}", out.display()), source })?;
    let (scan, cores_budget, seconds) =
        if quick { (NetBudget::QUICK, Budget::QUICK, QUICK_SECONDS) } else { (NetBudget::SCAN, Budget::FULL, SECONDS) };
    progress("1. the cores alone: 1x1, 4x4, 8x8 under pull and push");
    let cores = crate::protocol::run(cores_budget);
    let mut throughput: Vec<Outcome<WatchedMeasured>> = Vec::new();
    let mut slow = None;
    for (protocol, slowed) in CASES {
        if slowed && throughput.len() == 2 {
            slow = slow_bu_events_per_s(&succeeded(&throughput).map(|m| &m.evb).collect::<Vec<_>>());
        }
        let name = case_name(protocol, slowed);
        let result = match (slowed, slow) {
            (true, None) => Err(BenchError::BadCase("no throughput without the slow BU to set its cap from".into())),
            _ => {
                let system = laptop(protocol, slow.filter(|_| slowed), seconds);
                progress(&format!("2. throughput, free running: {}", system.label()));
                run_watched(&WatchedCase { system, rate_hz: None, file_events: FILE_EVENTS })
            }
        };
        throughput.push(settle(progress, &format!("2. {name}"), result));
    }
    let lowest = succeeded(&throughput).map(|m| m.evb.events_per_s()).reduce(f64::min);
    let paced_rate_hz = lowest.map(|r| (r / 2.0).max(1.0));
    let mut latency = Vec::new();
    for (protocol, slowed) in CASES {
        let name = case_name(protocol, slowed);
        let result = match (paced_rate_hz, slowed, slow) {
            (None, ..) => Err(BenchError::BadCase("no throughput to set the rate from".into())),
            (_, true, None) => Err(BenchError::BadCase("no slow BU's cap".into())),
            (Some(rate), ..) => {
                let system = laptop(protocol, slow.filter(|_| slowed), seconds);
                progress(&format!("3. latency at {rate:.0} Hz: {}", system.label()));
                run_watched(&WatchedCase { system, rate_hz: Some(rate), file_events: FILE_EVENTS })
            }
        };
        latency.push(settle(progress, &format!("3. {name}"), result));
    }
    let mut sources = Vec::new();
    for &n in if quick { &QUICK_SOURCES[..] } else { &SOURCES[..] } {
        progress(&format!("4. one destination, {n} sources of {SOURCES_FRAGMENT_BYTES} B: raw TCP, pull, push"));
        let raw = raw_ingest(&NetCase {
            streams: n,
            fragment_bytes: SOURCES_FRAGMENT_BYTES,
            mode: StreamMode::Event,
            relay_outputs: 1,
            budget: scan,
        })?;
        let case = |protocol| EvbCase {
            rus: n,
            bus: 1,
            streams: n,
            fragment_bytes: SOURCES_FRAGMENT_BYTES,
            mode: StreamMode::Event,
            crc_check: CrcCheck::Always,
            output: BuOutput::Discard,
            budget: scan,
            protocol,
            slow_bu_events_per_s: None,
            tuning: Tuning::SystemFile,
            ucx: None,
        };
        let pull = settle(progress, &format!("4. {n} sources, pull"), run_case(&case(Protocol::Pull)));
        let push = settle(progress, &format!("4. {n} sources, push"), run_case(&case(Protocol::Push)));
        sources.push(SourcesPoint { sources: n, raw, pull, push });
    }
    let mut suite = ProtocolsSuite {
        quick,
        cores,
        throughput: four(throughput),
        slow_bu_events_per_s: slow,
        paced_rate_hz,
        latency: four(latency),
        sources,
        files: Vec::new(),
    };
    suite.files = write_plots(out, &plots(&suite))?;
    Ok(suite)
}

/// The four cases' outcomes, in [`CASES`]' order.
fn four<T>(v: Vec<T>) -> [T; 4] {
    v.try_into().unwrap_or_else(|_| unreachable!("one per case"))
}

/// The suite's plots: events/s at one BU and its CPU per fragment vs sources (the cases that
/// succeeded), and the latencies' distribution of each latency case.
pub fn plots(suite: &ProtocolsSuite) -> Vec<ScanPlot> {
    let by_sources = |f: &dyn Fn(&SourcesPoint) -> Option<f64>| {
        suite.sources.iter().filter_map(|p| f(p).map(|y| (p.sources as f64, y))).collect::<Vec<_>>()
    };
    let pull = |f: fn(&EvbMeasured) -> f64| move |p: &SourcesPoint| p.pull.as_ref().ok().map(f);
    let push = |f: fn(&EvbMeasured) -> f64| move |p: &SourcesPoint| p.push.as_ref().ok().map(f);
    let rate = vec![
        Series::measured("pull: events built at 1 BU", by_sources(&pull(EvbMeasured::events_per_s))),
        Series::measured("push: events built at 1 BU", by_sources(&push(EvbMeasured::events_per_s))),
        Series::measured("(a) raw TCP ingest, fragments/s per stream", by_sources(&|p| Some(p.raw.events_per_s()))),
        Series::reference("LHCb NIC paper (Dufey et al. 2001), Fig. 5, 1 Gb/s", LHCB_POINTS.to_vec()),
    ];
    let xs: Vec<f64> = suite.sources.iter().map(|p| p.sources as f64).collect();
    let lhcb_line = match (xs.first(), xs.last()) {
        (Some(&a), Some(&b)) => vec![(a, LHCB_NS_PER_FRAGMENT), (b, LHCB_NS_PER_FRAGMENT)],
        _ => Vec::new(),
    };
    let cpu = vec![
        Series::measured("pull: BU loop CPU per fragment", by_sources(&pull(EvbMeasured::bu_cpu_ns_per_fragment))),
        Series::measured("push: BU loop CPU per fragment", by_sources(&push(EvbMeasured::bu_cpu_ns_per_fragment))),
        Series::measured("(a) raw TCP receiver CPU per fragment", by_sources(&|p| Some(p.raw.cpu_ns_per_fragment()))),
        Series::requirement("LHCb host measurement: 3.2 us of protocol software per fragment", lhcb_line),
    ];
    let latency: Vec<Series> = suite
        .latency
        .iter()
        .zip(CASES)
        .filter_map(|(m, (protocol, slow))| {
            let m = m.as_ref().ok()?;
            let points: Vec<(f64, f64)> = PLOTTED_PERCENTILES
                .iter()
                .map(|&p| (m.percentile_s(p) * 1e3, p))
                .filter(|&(ms, _)| ms > 0.0 && ms.is_finite())
                .collect();
            (!points.is_empty()).then(|| Series::measured(case_name(protocol, slow), points))
        })
        .collect();
    let mut plots = Vec::new();
    let has_points = |series: &[Series]| series.iter().any(|s| !s.points.is_empty());
    for (file, title, y, series) in [
        (RATE_FILE, "Events/s built at one BU vs sources (1500-byte fragments), pull and push", "events/s", rate),
        (
            CPU_FILE,
            "CPU per fragment at the destination (BU loop) vs sources, pull and push",
            "CPU ns per fragment",
            cpu,
        ),
    ] {
        if has_points(&series) {
            plots.push(ScanPlot { file, title, x: "sources (RUs of one FED)", y, log_x: true, series });
        }
    }
    if has_points(&latency) {
        plots.push(ScanPlot {
            file: LATENCY_FILE,
            title: "Latency from trigger to published file: share of events at or below (2 RUs x 2 BUs, paced)",
            x: "latency, ms",
            y: "percent of events",
            log_x: true,
            series: latency,
        });
    }
    plots
}

fn ratio(a: f64, b: f64) -> f64 {
    a / b.max(1e-12)
}

/// Dead time and its reasons, as `0.3 % (PUSH_HIGH_WATER 0.2 %, RU_INPUT 0.1 %)`.
fn dead_text(m: &WatchedMeasured) -> String {
    let reasons: Vec<String> = m
        .trigger
        .dead_by_reason
        .iter()
        .filter(|&(_, &share)| share > 0.0)
        .map(|(key, share)| format!("{key} {:.1} %", 100.0 * share))
        .collect();
    let total = format!("{:.1} %", 100.0 * m.trigger.dead_fraction);
    if reasons.is_empty() { total } else { format!("{total} ({})", reasons.join(", ")) }
}

/// A case's events/s, NaN when it failed.
fn rate(m: &Outcome<EvbMeasured>) -> f64 {
    m.as_ref().map_or(f64::NAN, EvbMeasured::events_per_s)
}

/// The suite's tables, ratios and notes; a failed case is a line that says why.
pub fn report(suite: &ProtocolsSuite) -> String {
    let mut s = String::new();
    let mut failures = Vec::new();
    let _ = writeln!(s, "1. the cores alone: no I/O, CPU per fragment and messages per event (the ideal driver)");
    s.push_str(&crate::protocol::report(&suite.cores));
    let t: Vec<Outcome<EvbMeasured>> =
        suite.throughput.iter().map(|m| m.as_ref().map(|m| m.evb.clone()).map_err(Clone::clone)).collect();
    let _ = writeln!(
        s,
        "\n2. throughput, free running: {RUS} RUs x {BUS} BUs ({STREAMS} FED streams: ru0 the trigger FED 1024 and 4 data FEDs, \
         ru1 4 data FEDs), {FRAGMENT_BYTES}-byte fragments,\n   the system file's default tuning, generating front ends, \
         BUs writing files of {FILE_EVENTS} events to /dev/shm ({WRITER_THREADS} writer threads each) that a watcher reads and deletes"
    );
    let _ = writeln!(
        s,
        "{:<16} {:>9} {:>6} {:>17} {:>11} {:>11} {:>10} {:>6} {:>6} {:>5}   ratio",
        "case", "events/s", "GB/s", "per BU events/s", "RU ns/frag", "BU ns/frag", "incomplete", "aged", "late", "lost",
    );
    for (i, (m, (protocol, slow))) in t.iter().zip(CASES).enumerate() {
        let name = case_name(protocol, slow);
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                let _ = writeln!(s, "{name:<16} FAILED");
                failures.push(format!("2. {name}: {e}"));
                continue;
            }
        };
        let per_bu: Vec<String> = m.bu_events_per_s().iter().map(|r| format!("{r:.0}")).collect();
        let ratio_text = match i {
            0 => "1.00 ÷pull".to_string(),
            1 => format!("{:.2} ÷pull", ratio(m.events_per_s(), rate(&t[0]))),
            _ => format!("{:.2} ÷{} without it", ratio(m.events_per_s(), rate(&t[i - 2])), protocol_name(protocol)),
        };
        let _ = writeln!(
            s,
            "{:<16} {:>9.0} {:>6.2} {:>17} {:>11.1} {:>11.1} {:>10} {:>6} {:>6} {:>5}   {}",
            name,
            m.events_per_s(),
            m.gb_per_s(),
            per_bu.join(" / "),
            m.ru_cpu_ns_per_fragment(),
            m.bu_cpu_ns_per_fragment(),
            m.built_incomplete,
            m.aged,
            m.late_parts,
            m.lost,
            ratio_text
        );
    }
    if let Some(cap) = suite.slow_bu_events_per_s {
        let _ = writeln!(
            s,
            "slow BU: bu{} reads no data while it is ahead of {cap:.0} events/s (half of a BU's share of the lower throughput above)",
            BUS - 1
        );
    }
    let _ = writeln!(
        s,
        "push/pull: {:.2} without the slow BU, {:.2} with it",
        ratio(rate(&t[1]), rate(&t[0])),
        ratio(rate(&t[3]), rate(&t[2])),
    );
    let l = &suite.latency;
    let _ = writeln!(
        s,
        "\n3. latency from trigger to published file: the same system and slow BU, the front ends paced at {} (Poisson;\n   \
         half the lowest throughput of 2.)",
        suite.paced_rate_hz.map_or("-".to_string(), |r| format!("{r:.0} Hz"))
    );
    let _ = writeln!(
        s,
        "{:<16} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>6} {:>6} {:>5}  dead time",
        "case", "rate got", "p50 ms", "p99 ms", "max ms", "events", "incomplete", "aged", "late", "lost"
    );
    for (m, (protocol, slow)) in l.iter().zip(CASES) {
        let name = case_name(protocol, slow);
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                let _ = writeln!(s, "{name:<16} FAILED");
                failures.push(format!("3. {name}: {e}"));
                continue;
            }
        };
        let _ = writeln!(
            s,
            "{:<16} {:>9.0} {:>8.2} {:>8.2} {:>8.2} {:>8} {:>10} {:>6} {:>6} {:>5}  {}",
            name,
            m.trigger.achieved_hz,
            m.percentile_s(50.0) * 1e3,
            m.percentile_s(99.0) * 1e3,
            m.max_s() * 1e3,
            m.latencies_s.len(),
            m.evb.built_incomplete,
            m.evb.aged,
            m.evb.late_parts,
            m.evb.lost,
            dead_text(m)
        );
    }
    let pct = |m: &Outcome<WatchedMeasured>, p: f64| m.as_ref().map_or(f64::NAN, |m| m.percentile_s(p));
    let max = |m: &Outcome<WatchedMeasured>| m.as_ref().map_or(f64::NAN, WatchedMeasured::max_s);
    for (pull, push) in [(0, 1), (2, 3)] {
        let (a, b) = (&l[pull], &l[push]);
        let _ = writeln!(
            s,
            "push/pull{}: p50 {:.2}, p99 {:.2}, max {:.2}",
            if pull == 0 { "" } else { ", slow BU" },
            ratio(pct(b, 50.0), pct(a, 50.0)),
            ratio(pct(b, 99.0), pct(a, 99.0)),
            ratio(max(b), max(a)),
        );
    }
    let spread = succeeded(l).map(|m| m.clock_start_spread_s).fold(0.0, f64::max);
    let _ = writeln!(
        s,
        "method: an event is triggered at its trigger's time on the emulators' clock (rate and seed) after the latest\n\
         emulator's clock start (the starts differed by at most {:.2} ms); it is published when a watcher listing the BUs'\n\
         run directories every {} ms first sees its file under its final name (then reads its events' headers and deletes\n\
         it, as an FU would): latencies are high by up to about a poll and a listing. Events triggered in the first {} ms\n\
         do not count.",
        spread * 1e3,
        crate::watched::POLL_INTERVAL.as_millis(),
        crate::watched::WARM_UP.as_millis()
    );
    let _ = writeln!(
        s,
        "\n4. LHCb's figure: events/s built at one destination vs sources (n RUs of one FED each, ru0's the trigger FED 1024,\n   \
         {SOURCES_FRAGMENT_BYTES}-byte fragments, 1 discarding BU, front ends replaying from memory), and the BU loop's CPU per\n   \
         fragment received"
    );
    let _ = writeln!(
        s,
        "{:>7} {:>11} {:>10} {:>6} {:>10} {:>6} {:>9} {:>11} {:>10} {:>10} {:>13}  incomplete/aged/late, pull; push",
        "sources",
        "(a) frag/s",
        "pull ev/s",
        "÷(a)",
        "push ev/s",
        "÷(a)",
        "push÷pull",
        "(a) ns/frag",
        "pull BU ns",
        "push BU ns",
        "÷3.2 µs",
    );
    for p in &suite.sources {
        let ns = |m: &Outcome<EvbMeasured>| m.as_ref().map_or(f64::NAN, EvbMeasured::bu_cpu_ns_per_fragment);
        let counts = |m: &Outcome<EvbMeasured>| {
            m.as_ref().map_or("FAILED".to_string(), |m| format!("{}/{}/{}", m.built_incomplete, m.aged, m.late_parts))
        };
        for (name, m) in [("pull", &p.pull), ("push", &p.push)] {
            if let Err(e) = m {
                failures.push(format!("4. {} sources, {name}: {e}", p.sources));
            }
        }
        let _ = writeln!(
            s,
            "{:>7} {:>11.0} {:>10.0} {:>6.3} {:>10.0} {:>6.3} {:>9.2} {:>11.1} {:>10.1} {:>10.1} {:>13}  {}; {}",
            p.sources,
            p.raw.events_per_s(),
            rate(&p.pull),
            ratio(rate(&p.pull), p.raw.events_per_s()),
            rate(&p.push),
            ratio(rate(&p.push), p.raw.events_per_s()),
            ratio(rate(&p.push), rate(&p.pull)),
            p.raw.cpu_ns_per_fragment(),
            ns(&p.pull),
            ns(&p.push),
            format!("{:.2} / {:.2}", ns(&p.pull) / LHCB_NS_PER_FRAGMENT, ns(&p.push) / LHCB_NS_PER_FRAGMENT),
            counts(&p.pull),
            counts(&p.push),
        );
    }
    let _ = writeln!(
        s,
        "  reference, LHCb ({LHCB_REFERENCE}):\n  Fig. 5 (1 Gb/s): {:.0} events/s at 2 sources, {:.0} at 32; \
         host protocol software {:.1} µs per fragment",
        LHCB_POINTS[0].1,
        LHCB_POINTS[1].1,
        LHCB_NS_PER_FRAGMENT / 1e3
    );
    let _ = writeln!(
        s,
        "\nevents/s: built at the BUs over the window ((a): fragments/s per stream); RU ns/frag: the RU loop threads' CPU over\n\
         the fragments they read; BU ns/frag: the BU loop threads' CPU over the fragments of the events they built (not their\n\
         writers'); incomplete, aged, late, lost: whole runs (aged and late are push's; a case that loses an event fails).\n\
         All units, emulators and the watcher share this process and its cores{}.",
        if suite.quick { " (--quick: short runs, few points)" } else { "" }
    );
    if !failures.is_empty() {
        let _ = writeln!(s, "\nfailed cases ({}):", failures.len());
        for f in &failures {
            let _ = writeln!(s, "  {f}");
        }
    }
    for f in &suite.files {
        let _ = writeln!(s, "wrote {}", f.display());
    }
    s
}

/// The suite as one JSON object; a failed case is `{"failed": why}`.
pub fn json(suite: &ProtocolsSuite) -> serde_json::Value {
    let evb = |m: &EvbMeasured| {
        serde_json::json!({
            "case": m.case.label(),
            "events_per_s": m.events_per_s(),
            "gb_per_s": m.gb_per_s(),
            "bu_events_per_s": m.bu_events_per_s(),
            "ru_cpu_ns_per_fragment": m.ru_cpu_ns_per_fragment(),
            "bu_cpu_ns_per_fragment": m.bu_cpu_ns_per_fragment(),
            "triggered": m.triggered,
            "built": m.built,
            "built_incomplete": m.built_incomplete,
            "aged": m.aged,
            "late_parts": m.late_parts,
            "lost": m.lost,
            "problems": m.problems,
        })
    };
    let failed = |e: &String| serde_json::json!({ "failed": e });
    let throughput = |m: &Outcome<WatchedMeasured>| m.as_ref().map_or_else(failed, |m| evb(&m.evb));
    let latency = |m: &Outcome<WatchedMeasured>| {
        m.as_ref().map_or_else(failed, |m| {
            serde_json::json!({
                "case": m.case.system.label(),
                "rate_hz": m.case.rate_hz,
                "achieved_hz": m.trigger.achieved_hz,
                "dead_fraction": m.trigger.dead_fraction,
                "dead_by_reason": m.trigger.dead_by_reason,
                "events": m.latencies_s.len(),
                "p50_ms": m.percentile_s(50.0) * 1e3,
                "p99_ms": m.percentile_s(99.0) * 1e3,
                "max_ms": m.max_s() * 1e3,
                "triggered": m.evb.triggered,
                "built": m.evb.built,
                "seen": m.seen,
                "built_incomplete": m.evb.built_incomplete,
                "aged": m.evb.aged,
                "late_parts": m.evb.late_parts,
                "lost": m.evb.lost,
                "per_bu": m.per_bu,
                "files": m.files,
                "clock_start_spread_ms": m.clock_start_spread_s * 1e3,
                "problems": m.evb.problems,
            })
        })
    };
    let names = |i: usize| case_name(CASES[i].0, CASES[i].1);
    let t = |i: usize| suite.throughput[i].as_ref().map_or(f64::NAN, |m| m.evb.events_per_s());
    let p99 = |i: usize| suite.latency[i].as_ref().map_or(f64::NAN, |m| m.percentile_s(99.0));
    // JSON has no NaN: a ratio of a failed case is null.
    let finite = |x: f64| x.is_finite().then_some(x);
    serde_json::json!({
        "suite": "protocols",
        "quick": suite.quick,
        "cores": suite.cores.iter().map(|c| serde_json::json!({
            "topology": format!("{}x{}", c.topology.0, c.topology.1),
            "protocol": c.protocol,
            "ns_per_fragment": c.ns_per_fragment,
            "control_per_event": c.control_per_event,
            "data_per_event": c.data_per_event,
            "baseline_ns_per_fragment": c.baseline_ns_per_fragment,
        })).collect::<Vec<_>>(),
        "throughput": (0..4).map(|i| (names(i), throughput(&suite.throughput[i]))).collect::<serde_json::Map<_, _>>(),
        "slow_bu_events_per_s": suite.slow_bu_events_per_s,
        "paced_rate_hz": suite.paced_rate_hz,
        "latency": (0..4).map(|i| (names(i), latency(&suite.latency[i]))).collect::<serde_json::Map<_, _>>(),
        "ratios": {
            "throughput_push_over_pull": finite(ratio(t(1), t(0))),
            "throughput_push_over_pull_slow_bu": finite(ratio(t(3), t(2))),
            "throughput_pull_slow_over_pull": finite(ratio(t(2), t(0))),
            "throughput_push_slow_over_push": finite(ratio(t(3), t(1))),
            "latency_p99_push_over_pull": finite(ratio(p99(1), p99(0))),
            "latency_p99_push_over_pull_slow_bu": finite(ratio(p99(3), p99(2))),
        },
        "sources": suite.sources.iter().map(|p| serde_json::json!({
            "sources": p.sources,
            "raw_fragments_per_s_per_stream": p.raw.events_per_s(),
            "raw_cpu_ns_per_fragment": p.raw.cpu_ns_per_fragment(),
            "pull": p.pull.as_ref().map_or_else(failed, evb),
            "push": p.push.as_ref().map_or_else(failed, evb),
        })).collect::<Vec<_>>(),
        "lhcb": {
            "reference": LHCB_REFERENCE,
            "events_per_s_at_sources": LHCB_POINTS.iter().map(|&(n, r)| serde_json::json!({"sources": n, "events_per_s": r})).collect::<Vec<_>>(),
            "ns_per_fragment": LHCB_NS_PER_FRAGMENT,
        },
        "files": suite.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
    })
}
