//! A scan's report: its points as CSV, as a terminal table, and as SVG plots of the average
//! client's throughput against the message size (Figures 6 and 7 of the CMS HL-LHC orbit-builder
//! study).
//!
//! Sizes are printed in binary units (`256 B`, `4 KiB`, `1 MiB`): a scan's message sizes are
//! powers of two, which decimal units would print as `4.096 kB`. Throughputs are decimal (Gb/s,
//! 10⁹ bits per second), as links are sold.
//!
//! The baselines are set beside pipestream as follows. Raw TCP is measured by the same processes
//! at the same thread counts, so a pipestream point and its raw-TCP point share topology, threads
//! and message size. iperf3 runs its streams on one thread whatever the point's thread count
//! (iperf 3.12), so a driver may measure it once per topology and size: an iperf3 point is
//! matched on its thread count when one has it, else the first iperf3 point of the topology and
//! size stands for every thread count. Should a key repeat, its first point counts.

use crate::results::{PointResult, Sender};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessera_bench::scan::{Series, plot_svg};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// A file or directory could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A plot could not be drawn (a point at message size 0 cannot sit on the log axis, say).
    #[error(transparent)]
    Plot(#[from] tessera_bench::BenchError),
    /// There is no point to plot.
    #[error("no results to plot")]
    NoResults,
}

/// The header of [`csv_text`].
pub const CSV_HEADER: &str = "topology,clients,servers,folded,threads,message_bytes,sender,seconds,messages,bytes,\
                              client_gbps,total_gbps,messages_per_s,cpu_ns_per_message,errors";

/// The CSV text of `results`: [`CSV_HEADER`], then one row per point in the order given; numbers
/// in Rust's shortest round-trip form, an empty `cpu_ns_per_message` where it was not measured.
pub fn csv_text(results: &[PointResult]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for r in results {
        let cpu = r.cpu_ns_per_message.map(|c| c.to_string()).unwrap_or_default();
        // Writing into a String cannot fail; no field can hold a comma or a quote.
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{cpu},{}",
            r.topology(),
            r.clients,
            r.servers,
            r.folded,
            r.threads,
            r.message_bytes,
            r.sender.name(),
            r.seconds,
            r.messages,
            r.bytes,
            r.client_gbps(),
            r.total_gbps(),
            r.messages_per_s(),
            r.errors,
        );
    }
    out
}

/// Writes [`csv_text`] to `path` (created or truncated).
pub fn write_csv(path: &Path, results: &[PointResult]) -> Result<(), ReportError> {
    std::fs::write(path, csv_text(results))
        .map_err(|source| ReportError::Io { what: format!("writing {}", path.display()), source })
}

/// A size in binary units: `256 B`, `4 KiB`, `1 MiB`, `1.5 KiB` (one decimal when not whole).
pub fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >= 1 << (10 * (unit + 1)) {
        unit += 1;
    }
    let scale = 1u64 << (10 * unit);
    if bytes.is_multiple_of(scale) {
        format!("{} {}", bytes / scale, UNITS[unit])
    } else {
        format!("{:.1} {}", bytes as f64 / scale as f64, UNITS[unit])
    }
}

/// A topology as sorted and shown: (clients, servers, folded).
type Topology = (u32, u32, bool);

fn topology_of(r: &PointResult) -> Topology {
    (r.clients, r.servers, r.folded)
}

/// The first point of `sender` at `topology`, `threads` and `message_bytes`.
fn find(
    results: &[PointResult],
    sender: Sender,
    topology: Topology,
    threads: u32,
    message_bytes: u32,
) -> Option<&PointResult> {
    results.iter().find(|r| {
        r.sender == sender && topology_of(r) == topology && r.threads == threads && r.message_bytes == message_bytes
    })
}

/// The iperf3 point to set beside `threads` threads: the one at that thread count, else the first
/// of the topology and size (see the module's documentation).
fn iperf3_for(results: &[PointResult], topology: Topology, threads: u32, message_bytes: u32) -> Option<&PointResult> {
    find(results, Sender::Iperf3, topology, threads, message_bytes).or_else(|| {
        results
            .iter()
            .find(|r| r.sender == Sender::Iperf3 && topology_of(r) == topology && r.message_bytes == message_bytes)
    })
}

/// The (topology, threads) groups of the table: those of pipestream and raw-TCP points, and those
/// of iperf3 points at topologies with neither (so that no point goes unshown).
fn groups(results: &[PointResult]) -> BTreeSet<(Topology, u32)> {
    let own: BTreeSet<(Topology, u32)> =
        results.iter().filter(|r| r.sender != Sender::Iperf3).map(|r| (topology_of(r), r.threads)).collect();
    let own_topologies: BTreeSet<Topology> = own.iter().map(|g| g.0).collect();
    let lone_iperf3 = results
        .iter()
        .filter(|r| r.sender == Sender::Iperf3 && !own_topologies.contains(&topology_of(r)))
        .map(|r| (topology_of(r), r.threads));
    own.into_iter().chain(lone_iperf3).collect()
}

fn topology_text((clients, servers, folded): Topology) -> String {
    format!("{clients}x{servers}{}", if folded { " folded" } else { "" })
}

/// "1.23 M", "812 k", "950": three significant figures with an SI prefix.
fn si_text(value: f64) -> String {
    let (scaled, prefix) = match value.abs() {
        v if v >= 1e9 => (value / 1e9, " G"),
        v if v >= 1e6 => (value / 1e6, " M"),
        v if v >= 1e3 => (value / 1e3, " k"),
        _ => (value, ""),
    };
    let decimals = match scaled.abs() {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        _ => 2,
    };
    format!("{scaled:.decimals$}{prefix}")
}

/// `-` for a figure that was not measured.
fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "-".into())
}

/// The columns of [`table`].
const COLUMNS: [&str; 9] = [
    "message",
    "pipestream client Gb/s",
    "raw-tcp client Gb/s",
    "ps/raw",
    "iperf3 total Gb/s",
    "ps/iperf3 total",
    "messages/s",
    "CPU ns/message",
    "errors",
];

/// The scan as an aligned terminal table: one block per topology and thread count, one row per
/// message size, with pipestream's and raw TCP's average client throughput and their ratio,
/// iperf3's total throughput and pipestream's total over it, and pipestream's messages/s, CPU
/// time per message and errors. A figure not measured shows `-`.
pub fn table(results: &[PointResult]) -> String {
    let mut blocks: Vec<(String, Vec<[String; 9]>)> = Vec::new();
    let groups = groups(results);
    for &(topology, threads) in &groups {
        let sizes: BTreeSet<u32> = results
            .iter()
            .filter(|r| topology_of(r) == topology && (r.threads == threads || r.sender == Sender::Iperf3))
            .map(|r| r.message_bytes)
            .collect();
        let mut rows = Vec::new();
        for size in sizes {
            let ps = find(results, Sender::Pipestream, topology, threads, size);
            let raw = find(results, Sender::RawTcp, topology, threads, size);
            let iperf3 = iperf3_for(results, topology, threads, size);
            if ps.is_none()
                && raw.is_none()
                && iperf3.is_some_and(|i| i.threads != threads && groups.contains(&(topology, i.threads)))
            {
                // Nothing of this block's own at this size, and the iperf3 figure shows in the
                // block of its own thread count.
                continue;
            }
            let gbps = |p: Option<&PointResult>| p.map(|p| format!("{:.2}", p.client_gbps()));
            rows.push([
                size_text(u64::from(size)),
                or_dash(gbps(ps)),
                or_dash(gbps(raw)),
                or_dash(ps.zip(raw).map(|(p, r)| format!("{:.2}", p.client_gbps() / r.client_gbps()))),
                or_dash(iperf3.map(|i| format!("{:.2}", i.total_gbps()))),
                or_dash(ps.zip(iperf3).map(|(p, i)| format!("{:.2}", p.total_gbps() / i.total_gbps()))),
                or_dash(ps.map(|p| si_text(p.messages_per_s()))),
                or_dash(ps.and_then(|p| p.cpu_ns_per_message).map(|c| format!("{c:.0}"))),
                or_dash(ps.map(|p| p.errors.to_string())),
            ]);
        }
        let title = format!("{}, {threads} thread{}", topology_text(topology), if threads == 1 { "" } else { "s" });
        blocks.push((title, rows));
    }
    // One set of widths for every block, so that the blocks line up under each other.
    let mut widths = COLUMNS.map(|c| c.chars().count());
    for row in blocks.iter().flat_map(|b| &b.1) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 9]| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            let sep = if i == 0 { "" } else { "  " };
            // The size reads left to right, the figures are right-aligned to compare digits.
            if i == 0 {
                let _ = write!(text, "{sep}{cell:<width$}");
            } else {
                let _ = write!(text, "{sep}{cell:>width$}");
            }
        }
        text.trim_end().to_string()
    };
    let mut out = String::from(
        "client Gb/s: the average client's payload; total: all clients'. \
         ps/raw compares client figures, ps/iperf3 totals.\n\
         raw-tcp: the same connections, plain bytes, no acknowledgement; the better of the file's socket buffers \
         and of buffers of what pipestream keeps in flight (burst x message).\n",
    );
    let header = line(&COLUMNS.map(String::from));
    for (title, rows) in blocks {
        let _ = writeln!(out, "\n{title}\n{header}\n{}", "-".repeat(header.chars().count()));
        for row in &rows {
            let _ = writeln!(out, "{}", line(row));
        }
    }
    out
}

/// The x range of `results`' message sizes, for a limit line across the plot.
fn size_range<'a>(results: impl Iterator<Item = &'a PointResult>) -> Option<(f64, f64)> {
    results.map(|r| f64::from(r.message_bytes)).fold(None, |range, x| match range {
        None => Some((x, x)),
        Some((lo, hi)) => Some((f64::min(lo, x), f64::max(hi, x))),
    })
}

/// The (message size, average client Gb/s) points of `sender` at `topology` and `threads`, by size.
fn line_points(results: &[PointResult], sender: Sender, topology: Topology, threads: u32) -> Vec<(f64, f64)> {
    let sizes: BTreeSet<u32> = results
        .iter()
        .filter(|r| r.sender == sender && topology_of(r) == topology && r.threads == threads)
        .map(|r| r.message_bytes)
        .collect();
    sizes
        .into_iter()
        .filter_map(|size| find(results, sender, topology, threads, size))
        .map(|r| (f64::from(r.message_bytes), r.client_gbps()))
        .collect()
}

/// `n` and `noun`, in the plural unless `n` is 1: "1 thread", "2 threads", "2 FU processes".
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    let plural = if noun.ends_with('s') { "es" } else { "s" };
    format!("{n} {noun}{}", if n == 1 { "" } else { plural })
}

/// The link speed as a dashed line across `range`.
fn link_line(link_gbps: Option<f64>, range: Option<(f64, f64)>) -> Option<Series> {
    let (gbps, (lo, hi)) = (link_gbps?, range?);
    Some(Series::limit(format!("link {gbps} Gb/s"), vec![(lo, gbps), (hi, gbps)]))
}

const X_LABEL: &str = "message size (bytes)";
const Y_LABEL: &str = "average client throughput (Gb/s)";

/// One plot to draw: its file name, title and series.
struct PlotSpec {
    file: String,
    title: String,
    series: Vec<Series>,
}

/// The plots of [`plot`], without drawing them.
fn plot_specs(results: &[PointResult], link_gbps: Option<f64>) -> Vec<PlotSpec> {
    let topologies: BTreeSet<Topology> = results.iter().map(topology_of).collect();
    let mut specs = Vec::new();
    for &topology in &topologies {
        let at = |sender: Sender| -> BTreeSet<u32> {
            results.iter().filter(|r| r.sender == sender && topology_of(r) == topology).map(|r| r.threads).collect()
        };
        let mut series = Vec::new();
        for threads in at(Sender::Pipestream) {
            let points = line_points(results, Sender::Pipestream, topology, threads);
            series.push(Series::measured(format!("pipestream, {}", count(threads, "thread")), points));
        }
        for threads in at(Sender::RawTcp) {
            let points = line_points(results, Sender::RawTcp, topology, threads);
            series.push(Series::measured(format!("raw TCP, {}", count(threads, "thread")), points));
        }
        let iperf3_threads = at(Sender::Iperf3);
        for &threads in &iperf3_threads {
            // client_gbps, which line_points plots, is already the total over the clients.
            let points = line_points(results, Sender::Iperf3, topology, threads);
            let mut name = format!("iperf3 total / {} clients", topology.0);
            if iperf3_threads.len() > 1 {
                let _ = write!(name, ", {}", count(threads, "thread"));
            }
            series.push(Series::measured(name, points));
        }
        series.extend(link_line(link_gbps, size_range(results.iter().filter(|r| topology_of(r) == topology))));
        let (clients, servers, folded) = topology;
        specs.push(PlotSpec {
            file: format!("throughput-{clients}x{servers}{}.svg", if folded { "-folded" } else { "" }),
            title: format!("pipestream {}: average client throughput", topology_text(topology)),
            series,
        });
    }
    if topologies.len() > 1 {
        let mut series = Vec::new();
        for &topology in &topologies {
            let most = results
                .iter()
                .filter(|r| r.sender == Sender::Pipestream && topology_of(r) == topology)
                .map(|r| r.threads)
                .max();
            if let Some(threads) = most {
                let points = line_points(results, Sender::Pipestream, topology, threads);
                series.push(Series::measured(
                    format!("{}, {}", topology_text(topology), count(threads, "thread")),
                    points,
                ));
            }
        }
        // Without a pipestream point there is nothing to compare across topologies (and no
        // range for the link's line).
        if !series.is_empty() {
            series.extend(link_line(link_gbps, size_range(results.iter().filter(|r| r.sender == Sender::Pipestream))));
            specs.push(PlotSpec {
                file: "throughput-topologies.svg".into(),
                title: "pipestream: average client throughput by topology".into(),
                series,
            });
        }
    }
    specs
}

/// Plots `results` into `dir` (created if missing) as SVG, message size on a log x axis against
/// the average client's throughput:
///
/// - for each topology, `throughput-<N>x<M>[-folded].svg`: pipestream and raw TCP, one line each
///   per thread count; iperf3's total divided by the clients, so that it compares with them; and
///   `link_gbps`, when given, as a dashed line across the sizes;
/// - when there are several topologies, `throughput-topologies.svg`: pipestream at each
///   topology's largest thread count, one line per topology.
///
/// Returns the paths written.
pub fn plot(dir: &Path, results: &[PointResult], link_gbps: Option<f64>) -> Result<Vec<PathBuf>, ReportError> {
    if results.is_empty() {
        return Err(ReportError::NoResults);
    }
    std::fs::create_dir_all(dir)
        .map_err(|source| ReportError::Io { what: format!("creating {}", dir.display()), source })?;
    let mut written = Vec::new();
    for spec in plot_specs(results, link_gbps) {
        let path = dir.join(spec.file);
        plot_svg(&path, &spec.title, X_LABEL, Y_LABEL, &spec.series, true)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(
        (clients, servers, folded): Topology,
        threads: u32,
        message_bytes: u32,
        sender: Sender,
        seconds: f64,
        bytes: u64,
    ) -> PointResult {
        PointResult {
            clients,
            servers,
            folded,
            threads,
            message_bytes,
            sender,
            seconds,
            messages: bytes.checked_div(u64::from(message_bytes)).unwrap_or(0),
            bytes,
            cpu_ns_per_message: None,
            errors: 0,
            socket_buffer_bytes: None,
        }
    }

    const SMALL: Topology = (2, 2, false);
    const FOLDED: Topology = (4, 4, true);

    /// Two topologies; at 2x2 two thread counts, raw TCP at 2 threads only, iperf3 once per size
    /// (at 1 thread) and not at 256 B.
    fn results() -> Vec<PointResult> {
        let mut ps = point(SMALL, 2, 4096, Sender::Pipestream, 1.0, 2_500_000_000); // 20 Gb/s total
        ps.cpu_ns_per_message = Some(1234.4);
        let mut folded = point(FOLDED, 2, 1 << 20, Sender::Pipestream, 2.0, 10_000_000_000); // 40 Gb/s
        folded.errors = 3;
        folded.cpu_ns_per_message = Some(80.0);
        vec![
            ps,
            point(SMALL, 2, 4096, Sender::RawTcp, 1.0, 3_125_000_000), // 25 Gb/s total
            point(SMALL, 1, 4096, Sender::Iperf3, 1.0, 5_000_000_000), // 40 Gb/s total
            point(SMALL, 2, 256, Sender::Pipestream, 2.0, 1_000_000_000), // 4 Gb/s total
            point(SMALL, 1, 4096, Sender::Pipestream, 1.0, 1_250_000_000), // 10 Gb/s total
            folded,
        ]
    }

    #[test]
    fn sizes_are_binary() {
        assert_eq!(size_text(0), "0 B");
        assert_eq!(size_text(256), "256 B");
        assert_eq!(size_text(1023), "1023 B");
        assert_eq!(size_text(4096), "4 KiB");
        assert_eq!(size_text(1536), "1.5 KiB");
        assert_eq!(size_text(64 << 10), "64 KiB");
        assert_eq!(size_text(1 << 20), "1 MiB");
        assert_eq!(size_text(3 << 30), "3 GiB");
    }

    #[test]
    fn csv_is_a_row_per_point_with_the_derived_figures() {
        let results = results();
        let text = csv_text(&results);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), results.len() + 1);
        assert_eq!(lines[0], CSV_HEADER);
        let header: Vec<&str> = CSV_HEADER.split(',').collect();
        assert_eq!(header.len(), 15);
        let rows: Vec<Vec<&str>> = lines[1..].iter().map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|r| r.len() == header.len()), "{rows:?}");
        let field = |row: usize, name: &str| rows[row][header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(lines[1], "2x2,2,2,false,2,4096,pipestream,1,610351,2500000000,10,20,610351,1234.4,0");
        assert_eq!(field(1, "sender"), "raw-tcp");
        assert_eq!(field(1, "client_gbps"), "12.5");
        assert_eq!(field(2, "sender"), "iperf3");
        assert_eq!(field(2, "cpu_ns_per_message"), "", "no CPU figure: an empty field");
        assert_eq!(field(3, "messages_per_s"), "1953125");
        assert_eq!(field(5, "topology"), "4x4 folded");
        assert_eq!(field(5, "folded"), "true");
        assert_eq!(field(5, "total_gbps"), "40");
        assert_eq!(field(5, "client_gbps"), "10");
        assert_eq!(field(5, "errors"), "3");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan.csv");
        write_csv(&path, &results).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        assert!(write_csv(&dir.path().join("missing/scan.csv"), &results).is_err());
    }

    /// The rows of `table`'s block `title`, each as its cells (cells hold at most single spaces,
    /// columns are two spaces apart at least).
    fn block(table: &str, title: &str) -> Vec<Vec<String>> {
        let mut lines = table.lines().skip_while(|l| *l != title);
        assert!(lines.next().is_some(), "no block {title:?} in\n{table}");
        let header = lines.next().unwrap();
        assert!(header.starts_with("message"), "{header}");
        assert!(lines.next().unwrap().chars().all(|c| c == '-'));
        lines
            .take_while(|l| !l.is_empty())
            .map(|l| l.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect())
            .collect()
    }

    #[test]
    fn table_sets_the_baselines_beside_pipestream() {
        let table = table(&results());
        println!("{table}");
        // 2x2 at 2 threads: 256 B without baselines, 4 KiB with raw TCP and the 1-thread iperf3.
        assert_eq!(
            block(&table, "2x2, 2 threads"),
            [
                ["256 B", "2.00", "-", "-", "-", "-", "1.95 M", "-", "0"],
                ["4 KiB", "10.00", "12.50", "0.80", "40.00", "0.50", "610 k", "1234", "0"],
            ]
        );
        // 2x2 at 1 thread: no raw TCP; iperf3 at its own thread count.
        assert_eq!(block(&table, "2x2, 1 thread"), [["4 KiB", "5.00", "-", "-", "40.00", "0.25", "305 k", "-", "0"]]);
        assert_eq!(
            block(&table, "4x4 folded, 2 threads"),
            [["1 MiB", "10.00", "-", "-", "-", "-", "4.77 k", "80", "3"]]
        );
        // Columns line up: every line of a block is as wide as its header, or narrower only by
        // trailing blanks.
        let widths: BTreeSet<usize> = table.lines().filter(|l| l.starts_with("message")).map(str::len).collect();
        assert_eq!(widths.len(), 1, "{table}");
        let width = *widths.first().unwrap();
        let rows = table.lines().filter(|l| l.ends_with(|c: char| c.is_ascii_digit()) && l.contains("  "));
        assert!(rows.clone().count() >= 4);
        assert!(rows.clone().all(|l| l.len() == width), "{table}");
    }

    #[test]
    fn table_shows_an_iperf3_only_topology() {
        let table = table(&[point((3, 1, false), 1, 512, Sender::Iperf3, 1.0, 1_000_000_000)]);
        assert_eq!(block(&table, "3x1, 1 thread"), [["512 B", "-", "-", "-", "8.00", "-", "-", "-", "-"]]);
    }

    #[test]
    fn plots_hold_pipestream_and_the_baselines_per_client() {
        let specs = plot_specs(&results(), Some(100.0));
        let files: Vec<&str> = specs.iter().map(|s| s.file.as_str()).collect();
        assert_eq!(files, ["throughput-2x2.svg", "throughput-4x4-folded.svg", "throughput-topologies.svg"]);
        let small: Vec<(&str, &[(f64, f64)])> =
            specs[0].series.iter().map(|s| (s.name.as_str(), s.points.as_slice())).collect();
        assert_eq!(
            small,
            [
                ("pipestream, 1 thread", &[(4096.0, 5.0)][..]),
                ("pipestream, 2 threads", &[(256.0, 2.0), (4096.0, 10.0)][..]),
                ("raw TCP, 2 threads", &[(4096.0, 12.5)][..]),
                // 40 Gb/s over both clients.
                ("iperf3 total / 2 clients", &[(4096.0, 20.0)][..]),
                ("link 100 Gb/s", &[(256.0, 100.0), (4096.0, 100.0)][..]),
            ]
        );
        assert_eq!(specs[0].series.last().unwrap().kind, tessera_bench::scan::SeriesKind::Limit);
        let across: Vec<(&str, &[(f64, f64)])> =
            specs[2].series.iter().map(|s| (s.name.as_str(), s.points.as_slice())).collect();
        assert_eq!(
            across,
            [
                ("2x2, 2 threads", &[(256.0, 2.0), (4096.0, 10.0)][..]),
                ("4x4 folded, 2 threads", &[(1048576.0, 10.0)][..]),
                ("link 100 Gb/s", &[(256.0, 100.0), (1048576.0, 100.0)][..]),
            ]
        );
        // One topology: no plot across topologies, and no link line unless given.
        let one: Vec<PointResult> = results().into_iter().filter(|r| topology_of(r) == SMALL).collect();
        let specs = plot_specs(&one, None);
        assert_eq!(specs.len(), 1);
        assert!(specs[0].series.iter().all(|s| !s.name.starts_with("link")));
    }

    #[test]
    fn plots_are_written_with_their_series() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("plots");
        let written = plot(&out, &results(), Some(100.0)).unwrap();
        assert_eq!(written.len(), 3);
        for (path, names) in written.iter().zip([
            &["pipestream, 2 threads", "raw TCP, 2 threads", "iperf3 total / 2 clients", "link 100 Gb/s"][..],
            &["pipestream, 2 threads", "link 100 Gb/s"][..],
            &["2x2, 2 threads", "4x4 folded, 2 threads"][..],
        ]) {
            let svg = std::fs::read_to_string(path).unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}", path.display());
            for name in names {
                assert!(svg.contains(name), "{} lacks {name:?}", path.display());
            }
        }
        assert!(matches!(plot(&out, &[], None), Err(ReportError::NoResults)));
        let zero = point(SMALL, 1, 0, Sender::Pipestream, 1.0, 0);
        let err = plot(&out, &[zero], None).unwrap_err();
        assert!(err.to_string().contains("logarithmic"), "{err}");
    }
}
