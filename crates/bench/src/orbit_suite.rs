//! `tessera bench orbit`: orbit mode (HL-LHC DTH orbit blocks, `run.mode: orbit`) against raw
//! TCP, all in one invocation so that the ratios hold on a noisy machine.
//!
//! For each mean orbit block size of [`BLOCK_BYTES`] per source (events per orbit × fragment: a
//! Poisson number of events of mean [`L1_RATE_HZ`] / 11.245 kHz, every fragment of
//! [`fragment_bytes_for_block`] bytes of payload), [`STREAMS`] DTH streams, the cases run in turn:
//!
//! - (a) **raw TCP ingest** ([`crate::net::raw_ingest`] in [`StreamMode::Orbit`]): the same DTH
//!   stream bytes, the same number of streams, received and discarded by one thread;
//! - (a2) **raw TCP ingest into receive memory**, a reference ([`crate::net::raw_ingest_into`]):
//!   the same, each read going to the next place of memory as large as (b)'s RU's receive memory,
//!   at the RU's read size: the RU's I/O without the RU, so that what is left between (a2) and (b)
//!   is the RU's own work;
//! - (b) **RU ingest**: one RU in ingest-only mode ([`crate::evb`]'s case (b)) reading the same
//!   streams as orbit blocks, with the orbit blocks' CRC-32C unchecked (`ru.fragment_crc_check:
//!   never`) and checked (`always`, the default), so that the difference is the CRC's cost;
//! - (c) **the chain**: [`CHAIN_RUS`] RUs (the first with the EVM) of [`STREAMS`] / [`CHAIN_RUS`]
//!   sources each into [`CHAIN_BUS`] discarding BUs, CRC-32C checked.
//!
//! Ratios are GB/s over (a)'s at the same block size. The target: (b) ≥ [`INGEST_TARGET`] of (a).
//! The HL-LHC requirement is an RU that takes the orbit blocks of all its sources at the LHC orbit
//! rate, [`LHC_ORBIT_HZ`]; every case prints its orbits per second per RU against it, and
//! [`RATE_FILE`] plots them over block size with the requirement as a line.

use crate::evb::{BuOutput, EvbCase, EvbMeasured, run_case};
use crate::evb_suite::{ScanPlot, write_plots};
use crate::minimal::minimal_ingest;
use crate::net::{Measured, NetBudget, NetCase, ReadInto, StreamMode, raw_ingest, raw_ingest_into};
use crate::scan::Series;
use crate::{BenchError, Target};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessera_emu::orbit::{DEFAULT_L1_RATE_HZ, LHC_ORBIT_HZ};
use tessera_formats::fed::CrcCheck;
use tessera_formats::orbit::{ORBIT_HEADER_BYTES, UNIT_BYTES, orbit_fragment_len};
use tessera_runtime::ferol_input::DTH_READ_BYTES;

/// DTH streams (sources) of every case, the trigger source 1024 among them in (b) and (c).
pub const STREAMS: usize = 8;
/// RUs of the chain (c); the streams are split evenly over them.
pub const CHAIN_RUS: usize = 2;
/// Discarding BUs of the chain (c).
pub const CHAIN_BUS: usize = 2;
/// The HL-LHC L1 rate: 66.7 events per orbit on average.
pub const L1_RATE_HZ: f64 = DEFAULT_L1_RATE_HZ;
/// Mean orbit block sizes per source, in bytes (10^3 per kB), orbit header included.
pub const BLOCK_BYTES: [usize; 3] = [50_000, 125_000, 250_000];
/// Target: RU ingest in orbit mode at least this fraction of raw ingest of the same streams.
pub const INGEST_TARGET: f64 = 0.95;
/// File name (without extension) of orbits per second per RU vs block size.
pub const RATE_FILE: &str = "orbit-rate-vs-block";
/// File name of GB/s vs block size.
pub const THROUGHPUT_FILE: &str = "orbit-throughput-vs-block";

/// The payload bytes of each event's fragment that make a mean orbit block of `block_bytes` at
/// `l1_rate_hz`: the orbit header and the mean number of events of [`orbit_fragment_len`] each,
/// the payload a whole number of 16-byte units (the block is then within 8 bytes × events of
/// the size asked for).
pub fn fragment_bytes_for_block(block_bytes: usize, l1_rate_hz: f64) -> usize {
    let events = l1_rate_hz / LHC_ORBIT_HZ;
    let per_fragment = block_bytes.saturating_sub(ORBIT_HEADER_BYTES) as f64 / events.max(1e-9);
    let overhead = orbit_fragment_len(0) as f64;
    let units = ((per_fragment - overhead) / UNIT_BYTES as f64).round().max(1.0);
    units as usize * UNIT_BYTES
}

/// Everything measured at one block size.
#[derive(Debug, Clone)]
pub struct OrbitPoint {
    /// The mean orbit block per source asked for.
    pub block_bytes: usize,
    /// (a) raw TCP ingest of the DTH streams.
    pub raw: Measured,
    /// (a2) the same into memory as large as (b)'s RU's receive memory, at its read size.
    pub raw_memory: Measured,
    /// (a+) the least an RU must do with the same streams: read into receive memory of the
    /// RU's shape, each orbit block's headers and CRC-32C checked and indexed
    /// ([`crate::minimal`]).
    pub minimal: Measured,
    /// (b) RU ingest, CRC-32C never checked.
    pub ingest: EvbMeasured,
    /// (b) RU ingest, CRC-32C of every orbit block checked.
    pub ingest_crc: EvbMeasured,
    /// (c) the chain, [`CHAIN_RUS`] × [`CHAIN_BUS`], discarding, CRC-32C checked.
    pub chain: EvbMeasured,
}

/// Everything the suite measured.
#[derive(Debug, Clone)]
pub struct OrbitSuite {
    /// Short measurements.
    pub quick: bool,
    /// One point per block size, smallest first.
    pub points: Vec<OrbitPoint>,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// The cases of one block size: (a), (b) without and with the CRC-32C, (c).
pub fn cases(block_bytes: usize, budget: NetBudget) -> (NetCase, [EvbCase; 3]) {
    let mode = StreamMode::Orbit { l1_rate_hz: L1_RATE_HZ };
    let fragment_bytes = fragment_bytes_for_block(block_bytes, L1_RATE_HZ);
    let raw = NetCase { streams: STREAMS, fragment_bytes, mode, relay_outputs: 1, budget };
    let ingest = EvbCase {
        rus: 1,
        bus: 0,
        streams: STREAMS,
        fragment_bytes,
        mode,
        crc_check: CrcCheck::Never,
        output: BuOutput::IngestOnly,
        budget,
        protocol: tessera_config::Protocol::Pull,
        slow_bu_events_per_s: None,
        tuning: crate::evb::Tuning::Bench,
        ucx: None,
    };
    let ingest_crc = EvbCase { crc_check: CrcCheck::Always, ..ingest };
    let chain = EvbCase { rus: CHAIN_RUS, bus: CHAIN_BUS, output: BuOutput::Discard, ..ingest_crc };
    (raw, [ingest, ingest_crc, chain])
}

/// Runs the cases of one block size in turn.
pub fn run_point(
    block_bytes: usize,
    budget: NetBudget,
    progress: &mut dyn FnMut(&str),
) -> Result<OrbitPoint, BenchError> {
    let (raw_case, [ingest, ingest_crc, chain]) = cases(block_bytes, budget);
    let kb = block_bytes as f64 / 1e3;
    progress(&format!("(a) raw ingest: {STREAMS} DTH streams, {kb:.0} kB orbit blocks"));
    let raw = raw_ingest(&raw_case)?;
    let memory = ReadInto::ru_memory(ingest.ru_memory_bytes(), DTH_READ_BYTES);
    progress(&format!("(a2) raw ingest into {} MiB of receive memory", memory.memory_bytes >> 20));
    let raw_memory = raw_ingest_into(&raw_case, memory)?;
    progress("(a+) minimal ingest: headers and CRC-32C of each orbit block checked, indexed");
    let minimal = minimal_ingest(&raw_case)?;
    let mut sys = |what: &str, case: EvbCase| {
        progress(&format!("{what}: {}, {} streams, {kb:.0} kB orbit blocks", case.label(), case.streams));
        run_case(&case)
    };
    Ok(OrbitPoint {
        block_bytes,
        raw,
        raw_memory,
        minimal,
        ingest: sys("(b) RU ingest", ingest)?,
        ingest_crc: sys("(b) RU ingest", ingest_crc)?,
        chain: sys("(c) chain", chain)?,
    })
}

/// Runs the suite, telling `progress` about each case before it runs, and writes the plots into
/// `out` (created if missing). `--quick` runs every block size for [`NetBudget::QUICK`].
pub fn run(quick: bool, out: &Path, progress: &mut dyn FnMut(&str)) -> Result<OrbitSuite, BenchError> {
    std::fs::create_dir_all(out)
        .map_err(|source| BenchError::Io { what: format!("creating {}", out.display()), source })?;
    let budget = if quick { NetBudget::QUICK } else { NetBudget::FULL };
    let points = BLOCK_BYTES.iter().map(|&b| run_point(b, budget, progress)).collect::<Result<Vec<_>, _>>()?;
    let mut suite = OrbitSuite { quick, points, files: Vec::new() };
    suite.files = write_plots(out, &plots(&suite))?;
    Ok(suite)
}

fn ratio(a: f64, b: f64) -> f64 {
    a / b.max(1e-12)
}

impl OrbitPoint {
    /// (b) without the CRC-32C over (a), in GB/s.
    pub fn ingest_ratio(&self) -> f64 {
        ratio(self.ingest.gb_per_s(), self.raw.gb_per_s())
    }

    /// (b) with the CRC-32C over (a).
    pub fn ingest_crc_ratio(&self) -> f64 {
        ratio(self.ingest_crc.gb_per_s(), self.raw.gb_per_s())
    }

    /// (c) over (a).
    pub fn chain_ratio(&self) -> f64 {
        ratio(self.chain.gb_per_s(), self.raw.gb_per_s())
    }

    /// (b) without the CRC-32C over (a2).
    pub fn ingest_over_memory(&self) -> f64 {
        ratio(self.ingest.gb_per_s(), self.raw_memory.gb_per_s())
    }

    /// (b) with the CRC-32C over (a2).
    pub fn ingest_crc_over_memory(&self) -> f64 {
        ratio(self.ingest_crc.gb_per_s(), self.raw_memory.gb_per_s())
    }

    /// (b) with the CRC-32C over (a+), which checks it too.
    pub fn ingest_crc_over_minimal(&self) -> f64 {
        ratio(self.ingest_crc.gb_per_s(), self.minimal.gb_per_s())
    }

    /// What checking the CRC-32C costs the RU thread per orbit block, in ns: (b) with it minus
    /// (b) without.
    pub fn crc_ns_per_block(&self) -> f64 {
        self.ingest_crc.ru_cpu_ns_per_fragment() - self.ingest.ru_cpu_ns_per_fragment()
    }
}

/// The plots of the suite: orbits per second per RU, and GB/s, over the block size.
pub fn plots(suite: &OrbitSuite) -> Vec<ScanPlot> {
    let x = |p: &OrbitPoint| p.block_bytes as f64 / 1e3;
    let pts = |f: &dyn Fn(&OrbitPoint) -> f64| suite.points.iter().map(|p| (x(p), f(p))).collect::<Vec<_>>();
    let ends: Vec<f64> = suite.points.iter().map(x).collect();
    let (lo, hi) = (ends.iter().copied().fold(f64::INFINITY, f64::min), ends.iter().copied().fold(0.0, f64::max));
    let per_ru = STREAMS / CHAIN_RUS;
    let rate = vec![
        Series::measured(
            format!("(a) raw TCP ingest, {STREAMS} DTH streams (blocks/s per stream)"),
            pts(&|p| p.raw.events_per_s()),
        ),
        Series::measured("(a2) raw TCP ingest into RU-sized receive memory", pts(&|p| p.raw_memory.events_per_s())),
        Series::measured("(a+) minimal ingest: headers and CRC-32C checked", pts(&|p| p.minimal.events_per_s())),
        Series::measured(format!("(b) RU ingest, {STREAMS} sources, CRC-32C never"), pts(&|p| p.ingest.events_per_s())),
        Series::measured(
            format!("(b) RU ingest, {STREAMS} sources, CRC-32C always"),
            pts(&|p| p.ingest_crc.events_per_s()),
        ),
        Series::measured(
            format!("(c) chain {CHAIN_RUS} RUs x {CHAIN_BUS} BUs, {per_ru} sources per RU"),
            pts(&|p| p.chain.events_per_s()),
        ),
        Series::requirement(
            format!("HL-LHC: {:.4} kHz orbits per RU (all its sources)", LHC_ORBIT_HZ / 1e3),
            vec![(lo, LHC_ORBIT_HZ), (hi, LHC_ORBIT_HZ)],
        ),
    ];
    let throughput = vec![
        Series::measured(format!("(a) raw TCP ingest, {STREAMS} DTH streams"), pts(&|p| p.raw.gb_per_s())),
        Series::measured("(a2) raw TCP ingest into RU-sized receive memory", pts(&|p| p.raw_memory.gb_per_s())),
        Series::measured("(a+) minimal ingest: headers and CRC-32C checked", pts(&|p| p.minimal.gb_per_s())),
        Series::measured("(b) RU ingest, CRC-32C never", pts(&|p| p.ingest.gb_per_s())),
        Series::measured("(b) RU ingest, CRC-32C always", pts(&|p| p.ingest_crc.gb_per_s())),
        Series::measured(format!("(c) chain {CHAIN_RUS} RUs x {CHAIN_BUS} BUs, all RUs"), pts(&|p| p.chain.gb_per_s())),
        Series::requirement(
            format!("HL-LHC: one RU of {STREAMS} sources at {:.4} kHz", LHC_ORBIT_HZ / 1e3),
            pts(&|p| STREAMS as f64 * p.raw.wire_bytes_per_fragment * LHC_ORBIT_HZ / 1e9),
        ),
    ];
    vec![
        ScanPlot {
            file: RATE_FILE,
            title: "Orbit mode: orbits per second per RU vs orbit block size per source (loopback)",
            x: "orbit block kB per source",
            y: "orbits/s per RU",
            log_x: true,
            series: rate,
        },
        ScanPlot {
            file: THROUGHPUT_FILE,
            title: "Orbit mode: GB/s vs orbit block size per source (loopback)",
            x: "orbit block kB per source",
            y: "GB/s",
            log_x: true,
            series: throughput,
        },
    ]
}

/// The targets: (b) ≥ [`INGEST_TARGET`] of (a) at every block size, with the CRC-32C checked
/// (the default) and without; and the HL-LHC orbit rate per RU, for reference.
pub fn targets(suite: &OrbitSuite) -> Vec<Target> {
    let worst = |f: &dyn Fn(&OrbitPoint) -> f64| {
        suite.points.iter().map(|p| (p.block_bytes, f(p))).min_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, f64::NAN))
    };
    let all = |f: &dyn Fn(&OrbitPoint) -> f64| {
        suite
            .points
            .iter()
            .map(|p| format!("{:.2} at {} kB", f(p), p.block_bytes / 1000))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ingest_target = |crc: &str, f: &dyn Fn(&OrbitPoint) -> f64| {
        let (size, w) = worst(f);
        Target {
            name: format!("RU ingest in orbit mode >= {INGEST_TARGET} of raw ingest, same streams, CRC-32C {crc}"),
            figure: format!("{} (worst {w:.2} at {} kB)", all(f), size / 1000),
            baseline: "(a) raw TCP ingest of the same DTH streams".into(),
            met: w >= INGEST_TARGET,
        }
    };
    let rate = |f: &dyn Fn(&OrbitPoint) -> f64| {
        suite
            .points
            .iter()
            .map(|p| format!("{:.1} kHz at {} kB", f(p) / 1e3, p.block_bytes / 1000))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (_, worst_rate) = worst(&|p| p.ingest_crc.events_per_s().min(p.chain.events_per_s()));
    vec![
        ingest_target("never", &OrbitPoint::ingest_ratio),
        ingest_target("always", &OrbitPoint::ingest_crc_ratio),
        Target {
            name: format!("HL-LHC orbit rate per RU >= {:.4} kHz (reference)", LHC_ORBIT_HZ / 1e3),
            figure: format!(
                "(b) CRC-32C always, {STREAMS} sources: {}; (c) {} sources per RU: {}",
                rate(&|p| p.ingest_crc.events_per_s()),
                STREAMS / CHAIN_RUS,
                rate(&|p| p.chain.events_per_s())
            ),
            baseline: "the LHC orbit rate".into(),
            met: worst_rate >= LHC_ORBIT_HZ,
        },
    ]
}

const HEADER: [&str; 11] = [
    "case",
    "RUxBU",
    "streams",
    "block kB",
    "GB/s",
    "orbits/s/RU",
    "orbits/s/BU",
    "CPU ns/block",
    "busy",
    "÷ HL-LHC",
    "ratio",
];

fn header(s: &mut String) {
    let h = HEADER;
    let _ = writeln!(
        s,
        "{:<32} {:>5} {:>7} {:>8} {:>6} {:>11} {:>11} {:>12} {:>5} {:>8} {:>9}",
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10]
    );
}

fn raw_row(s: &mut String, case: &str, m: &Measured, ratio: f64) {
    let _ = writeln!(
        s,
        "{:<32} {:>5} {:>7} {:>8.1} {:>6.2} {:>11.0} {:>11} {:>12.0} {:>5.2} {:>8.2} {:>9}",
        case,
        "-",
        m.streams,
        m.wire_bytes_per_fragment / 1e3,
        m.gb_per_s(),
        m.events_per_s(),
        "-",
        m.cpu_ns_per_fragment(),
        m.worker_busy(),
        m.events_per_s() / LHC_ORBIT_HZ,
        format!("{ratio:.2} ÷(a)")
    );
}

fn evb_row(s: &mut String, case: &str, m: &EvbMeasured, block: f64, ratio: f64) {
    let per_bu = if m.case.bus > 0 { format!("{:.0}", m.events_per_s() / m.case.bus as f64) } else { "-".into() };
    let _ = writeln!(
        s,
        "{:<32} {:>5} {:>7} {:>8.1} {:>6.2} {:>11.0} {:>11} {:>12.0} {:>5.2} {:>8.2} {:>9}",
        case,
        format!("{}x{}", m.case.rus, m.case.bus),
        m.case.streams,
        block / 1e3,
        m.gb_per_s(),
        m.events_per_s(),
        per_bu,
        m.ru_cpu_ns_per_fragment(),
        m.ru_busy(),
        m.events_per_s() / LHC_ORBIT_HZ,
        format!("{ratio:.2} ÷(a)")
    );
}

/// The suite's table, notes and targets.
pub fn report(suite: &OrbitSuite) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "orbit mode: {STREAMS} DTH streams, L1 {:.0} kHz ({:.1} events per orbit, Poisson), orbit blocks of {} kB per source",
        L1_RATE_HZ / 1e3,
        L1_RATE_HZ / LHC_ORBIT_HZ,
        BLOCK_BYTES.map(|b| (b / 1000).to_string()).join(", ")
    );
    header(&mut s);
    for p in &suite.points {
        let block = p.raw.wire_bytes_per_fragment;
        raw_row(&mut s, "(a) raw TCP ingest", &p.raw, 1.0);
        let memory = ratio(p.raw_memory.gb_per_s(), p.raw.gb_per_s());
        raw_row(&mut s, "(a2) raw, into RU-sized memory", &p.raw_memory, memory);
        let minimal = ratio(p.minimal.gb_per_s(), p.raw.gb_per_s());
        raw_row(&mut s, "(a+) minimal ingest", &p.minimal, minimal);
        evb_row(&mut s, "(b) RU ingest, CRC-32C never", &p.ingest, block, p.ingest_ratio());
        evb_row(&mut s, "(b) RU ingest, CRC-32C always", &p.ingest_crc, block, p.ingest_crc_ratio());
        evb_row(&mut s, &format!("(c) chain {CHAIN_RUS}x{CHAIN_BUS}, discarding"), &p.chain, block, p.chain_ratio());
    }
    let _ = writeln!(
        s,
        "\n(b) against (a2), the raw receiver reading into memory as large as the RU's, and against (a+), the least an RU\n\
         must do (references):"
    );
    for p in &suite.points {
        let _ = writeln!(
            s,
            "  {:>3} kB: CRC-32C never {:.2} ÷(a2), always {:.2} ÷(a2) and {:.2} ÷(a+); receiver {:.0} ns per block into memory, \
             {:.0} into one buffer, {:.0} checking it",
            p.block_bytes / 1000,
            p.ingest_over_memory(),
            p.ingest_crc_over_memory(),
            p.ingest_crc_over_minimal(),
            p.raw_memory.cpu_ns_per_fragment(),
            p.raw.cpu_ns_per_fragment(),
            p.minimal.cpu_ns_per_fragment(),
        );
    }
    let _ = writeln!(s, "\nCRC-32C of every orbit block, on the RU thread (b): always minus never");
    for p in &suite.points {
        let ns = p.crc_ns_per_block();
        let _ = writeln!(
            s,
            "  {:>3} kB: {:.0} -> {:.0} ns per block, {ns:+.0} ns ({}); raw receiver {:.0} ns per block",
            p.block_bytes / 1000,
            p.ingest.ru_cpu_ns_per_fragment(),
            p.ingest_crc.ru_cpu_ns_per_fragment(),
            if ns > 0.0 {
                format!("{:.1} GB/s of CRC-32C", p.raw.wire_bytes_per_fragment / ns)
            } else {
                "below the noise".into()
            },
            p.raw.cpu_ns_per_fragment(),
        );
    }
    let _ = writeln!(
        s,
        "\nblock kB: mean wire bytes of one source's orbit block (DTH stream block headers included) in the replayed\n\
         capture; GB/s: wire bytes over the window (all RUs in (c)); orbits/s/RU: orbit blocks per second per stream\n\
         in (a), orbits whose blocks every RU took in (b) and (c) (each RU has {} sources in (c); an RU's orbit\n\
         blocks/s are its orbits/s times its sources); orbits/s/BU: orbits built per BU; CPU ns/block: the receiver\n\
         thread (a) or the RU loop threads together, per orbit block of one source; busy: that thread's (the busiest\n\
         RU's) CPU over wall time; ÷ HL-LHC: orbits/s/RU over the LHC orbit rate, {:.4} kHz. Every case's DTH\n\
         streams are replayed from a capture in memory (orbit numbers renumbered only); in (b) and (c) one of them\n\
         is the trigger source 1024. All units share this 2-core process{}.",
        STREAMS / CHAIN_RUS,
        LHC_ORBIT_HZ / 1e3,
        if suite.quick { " (--quick: short runs)" } else { "" }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_make_the_named_mean_block() {
        for block in BLOCK_BYTES {
            let f = fragment_bytes_for_block(block, L1_RATE_HZ);
            assert_eq!(f % UNIT_BYTES, 0);
            let mean = ORBIT_HEADER_BYTES as f64 + L1_RATE_HZ / LHC_ORBIT_HZ * orbit_fragment_len(f) as f64;
            assert!((mean - block as f64).abs() <= 8.0 * 67.0, "{block}: {f} B fragments make {mean}");
        }
        // 125 kB at 750 kHz: 66.7 fragments of about 1.9 kB.
        assert_eq!(fragment_bytes_for_block(125_000, L1_RATE_HZ), 1824);
    }

    /// The smallest block size of the quick suite, every case: orbits built, every triggered
    /// orbit built, ratios finite. Nothing timed is asserted.
    #[test]
    fn the_quick_suites_smallest_point_builds_every_orbit() {
        let p = run_point(BLOCK_BYTES[0], NetBudget::QUICK, &mut |_| {}).unwrap();
        assert!(p.raw.fragments > 0 && p.raw.bytes > 0, "{:?}", p.raw);
        assert!(p.raw_memory.fragments > 0, "{:?}", p.raw_memory);
        for m in [&p.ingest, &p.ingest_crc] {
            assert!(m.fragments > 0 && m.seconds > 0.0 && m.ru_cpu_seconds[0] > 0.0, "{m:?}");
        }
        assert!(p.chain.events_built > 0 && p.chain.built > 0, "{:?}", p.chain);
        assert_eq!(p.chain.triggered, p.chain.built, "every triggered orbit built");
        assert_eq!(p.chain.problems, 0);
        let ratios = [p.ingest_ratio(), p.ingest_crc_ratio(), p.chain_ratio(), p.ingest_over_memory()];
        for r in ratios.into_iter().chain([p.ingest_crc_over_memory(), p.crc_ns_per_block()]) {
            assert!(r.is_finite(), "{r}");
        }
        for r in ratios {
            assert!(r > 0.0, "{r}");
        }
        let suite = OrbitSuite { quick: true, points: vec![p], files: Vec::new() };
        let text = report(&suite);
        assert!(text.contains("RU ingest in orbit mode >= 0.95"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let files = write_plots(dir.path(), &plots(&suite)).unwrap();
        let csv = std::fs::read_to_string(dir.path().join(format!("{RATE_FILE}.csv"))).unwrap();
        assert!(csv.contains(",50,11245") && csv.contains("requirement"), "{csv}");
        assert_eq!(files.len(), 4);
    }
}
