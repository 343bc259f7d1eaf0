//! The filter unit and the mergers against plain file operations on a RAM disk (issue #5 item 8).
//!
//! Cases, on one thread each, over a sample BU run written by [`write_sample_run`] into a fresh
//! directory of `/dev/shm` (the system temporary directory where there is no `/dev/shm`):
//!
//! - (a) **plain read**, the baseline of (b): `fs::read` of every raw file of the run, touching
//!   one `u64` per 4 KiB page;
//! - (b) **FU read and select**: one FU process ([`run_fu`]) with the built-in HLT ([`MenuHlt`]
//!   over [`Menu::default`]) processing the whole run: claiming, reading, CRC-32C of every event,
//!   the menu's selection, outputs per lumi section and stream written to the same RAM disk;
//! - (c) **plain copy**, the baseline of (d): `fs::copy` of every FU output data file of (b)
//!   into another directory, then the removal of each source, as the mergers remove their inputs
//!   (docs/design.md §12): freeing the sources' pages of the RAM disk costs an eighth to a fifth
//!   of the copy, work that both cases must do. The copies alone are timed too and printed beside;
//! - (d) **merge**: the micro, mini and macro mergers of one BU and one FU node over the same FU
//!   outputs, until the macro merger has ended the run; its figure is the bytes of the final
//!   files in storage over the time.
//!
//! The FU and the mergers consume their inputs, so every repetition works on a fresh copy
//! (not timed); (a), (b) and (a2), then (c) and (d), alternate within each repetition and the
//! median time of each is kept. Every case reads a copy made just before it in the same way
//! (removed after it), so that all find their inputs' pages, and the page allocator, in the same
//! state (a copy of the FU's own outputs, read in every repetition, ran 10–20 % faster than one
//! of a copy just made); (a) and (a2) read the template itself before issue #37.
//!
//! The mergers' work per lumi section and stream (listings, JSON, ledger, links, renames) costs
//! about 2 ms per run here whatever the data; real FU outputs are MBs to GBs per lumi section,
//! so the full run merges 156 MB and even the quick one 20 MB, lest that fixed cost be all that
//! (d) measures.

use crate::BenchError;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tessera_formats::names::run_dir_name;
use tessera_fu::menu::Menu;
use tessera_fu::merge::{MacroMerger, MicroMerger, MiniMerger};
use tessera_fu::output::DATA_EXT;
use tessera_fu::process::{FuConfig, FuReport, run_fu};
use tessera_fu::{Hlt, MenuHlt};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

/// The target of (b) over (a).
pub const FU_TARGET: f64 = 0.70;
/// The target of (b) over (a2), its own file I/O (issue #37).
pub const FU_IO_TARGET: f64 = 0.80;
/// The target of (d) over (c) (issue #37; 0.80 in issue #5).
pub const MERGE_TARGET: f64 = 0.85;

/// The run number of the sample run.
const RUN: u32 = 1;
/// The BU's name, for the mini and macro mergers.
const BU: &str = "bu0";
/// The FU node's name, for the micro and mini mergers.
const NODE: &str = "node0";

/// The sample run and how often to measure it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuBenchConfig {
    /// Raw files in the run.
    pub files: u32,
    /// Lumi sections the files are spread over (evenly).
    pub lumi_sections: u32,
    /// Bytes per raw file, roughly: the events per file are chosen from the mean event size.
    pub file_bytes: u64,
    /// Data FEDs per event (the trigger FED 1024 comes on top).
    pub feds: u16,
    /// Mean payload bytes of a data fragment.
    pub fed_payload_bytes: usize,
    /// Repetitions of every case; the median time is reported.
    pub repetitions: usize,
}

impl FuBenchConfig {
    /// 8 files of about 32 MB in 2 lumi sections, 12 FEDs of 2 kB, 9 repetitions (the machine is shared: more samples steady the median).
    pub const FULL: FuBenchConfig = FuBenchConfig {
        files: 8,
        lumi_sections: 2,
        file_bytes: 32 << 20,
        feds: 12,
        fed_payload_bytes: 2048,
        repetitions: 9,
    };
    /// For smoke runs: 4 files of about 8 MB, 3 repetitions.
    pub const QUICK: FuBenchConfig = FuBenchConfig { file_bytes: 8 << 20, files: 4, repetitions: 3, ..Self::FULL };

    /// The sample run's spec.
    pub fn spec(&self) -> SampleSpec {
        // Each data fragment carries 16 bytes of header and trailer; the trigger fragment and the
        // FRD header come to about 1 kB.
        let event_bytes = u64::from(self.feds) * (self.fed_payload_bytes as u64 + 16) + 1024;
        let events_per_file = (self.file_bytes / event_bytes).max(1) as u32;
        let files_per_ls = self.files.div_ceil(self.lumi_sections.max(1)).max(1);
        SampleSpec {
            run: RUN,
            lumi_sections: self.lumi_sections.max(1),
            events_per_lumi_section: events_per_file * files_per_ls,
            events_per_file,
            fed_ids: (0..self.feds).collect(),
            fed_payload_bytes_mean: self.fed_payload_bytes,
            first_event: 1,
            source: BU.into(),
        }
    }
}

/// One timed case: the bytes it handles and the time of each repetition.
#[derive(Debug, Clone, Default)]
pub struct Timed {
    /// Bytes handled per repetition.
    pub bytes: u64,
    /// Wall time of each repetition, in seconds, in the order measured.
    pub seconds: Vec<f64>,
}

impl Timed {
    /// The median time, in seconds (NaN without repetitions).
    pub fn median_seconds(&self) -> f64 {
        let mut sorted = self.seconds.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
    }

    /// Bytes per second at the median time, in MB/s (10^6).
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.median_seconds() / 1e6
    }

    fn push(&mut self, bytes: u64, elapsed: Duration) {
        self.bytes = bytes;
        self.seconds.push(elapsed.as_secs_f64());
    }
}

/// Everything one run of the suite measured.
#[derive(Debug, Clone)]
pub struct FuBench {
    /// The configuration it ran with.
    pub config: FuBenchConfig,
    /// The directory everything was written to (removed at the end).
    pub dir: PathBuf,
    /// The file system type of that directory, from `/proc/mounts` (`?` if unknown).
    pub fs_type: String,
    /// Raw files in the sample run.
    pub raw_files: usize,
    /// Events in the sample run.
    pub events: u64,
    /// (a) plain read of the raw files.
    pub read: Timed,
    /// (a2) plain read of the raw files and write of the share of their bytes the FU writes:
    /// the FU's own file I/O, without checks or selection (a reference, not a target).
    pub read_write: Timed,
    /// (b) one FU process over the run.
    pub fu: Timed,
    /// What the FU did (of the first repetition).
    pub fu_report: FuReport,
    /// FU output data files (of the first repetition), the input of (c) and (d).
    pub output_files: usize,
    /// (c) plain copy of the FU output data files, then removal of the sources.
    pub copy: Timed,
    /// The copies of (c) alone, without the removal.
    pub copy_only: Timed,
    /// (d) micro, mini and macro mergers; bytes are those of the final files.
    pub merge: Timed,
    /// Final data files in storage.
    pub merged_files: usize,
}

impl FuBench {
    /// (b) over (a).
    pub fn fu_ratio(&self) -> f64 {
        self.fu.mb_per_s() / self.read.mb_per_s()
    }

    /// (b) over (a2): what checks, selection and bookkeeping cost on top of the FU's file I/O.
    pub fn fu_over_io_ratio(&self) -> f64 {
        self.fu.mb_per_s() / self.read_write.mb_per_s()
    }

    /// (d) over (c).
    pub fn merge_ratio(&self) -> f64 {
        self.merge.mb_per_s() / self.copy.mb_per_s()
    }

    /// (d) over the copies of (c) alone: what the mergers cost beyond the one copy.
    pub fn merge_over_copy_only_ratio(&self) -> f64 {
        self.merge.mb_per_s() / self.copy_only.mb_per_s()
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// A fresh directory on the RAM disk `/dev/shm` if there is one, else in the temporary
/// directory; its name starts with `prefix`.
pub(crate) fn scratch_dir(prefix: &str) -> Result<tempfile::TempDir, BenchError> {
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix(prefix);
        b
    };
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { builder.tempdir_in(shm) } else { builder.tempdir() }.map_err(io("creating a scratch directory"))
}

/// The type of the file system holding `path`: the longest mount point of `/proc/mounts` that
/// is a prefix of it.
fn fs_type(path: &Path) -> String {
    let Ok(mounts) = fs::read_to_string("/proc/mounts") else { return "?".into() };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            path.starts_with(point).then(|| (point.len(), kind.to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "?".into(), |(_, kind)| kind)
}

/// Copies the directory tree `from` to `to` (which must not exist).
fn copy_tree(from: &Path, to: &Path) -> Result<(), BenchError> {
    fs::create_dir_all(to).map_err(io(format!("creating {}", to.display())))?;
    for entry in fs::read_dir(from).map_err(io(format!("listing {}", from.display())))? {
        let entry = entry.map_err(io(format!("listing {}", from.display())))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().map_err(io(format!("inspecting {}", source.display())))?.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            fs::copy(&source, &target).map_err(io(format!("copying {}", source.display())))?;
        }
    }
    Ok(())
}

fn remove_tree(dir: &Path) -> Result<(), BenchError> {
    fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))
}

/// The files of `dir` whose extension is `ext`, sorted, with their sizes.
fn files_with_ext(dir: &Path, ext: &str) -> Result<Vec<(PathBuf, u64)>, BenchError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(io(format!("listing {}", dir.display())))? {
        let entry = entry.map_err(io(format!("listing {}", dir.display())))?;
        let meta = entry.metadata().map_err(io(format!("inspecting {}", entry.path().display())))?;
        if meta.is_file() && entry.path().extension().is_some_and(|e| e == ext) {
            found.push((entry.path(), meta.len()));
        }
    }
    found.sort();
    Ok(found)
}

/// (a): reads every file and sums one `u64` per 4 KiB page, so that no byte is left unread by a
/// lazy mapping; returns the bytes read.
fn plain_read(files: &[PathBuf]) -> Result<u64, BenchError> {
    let mut bytes = 0u64;
    let mut sum = 0u64;
    for file in files {
        let data = fs::read(file).map_err(io(format!("reading {}", file.display())))?;
        for page in data.chunks(4096) {
            let word: [u8; 8] = page.get(..8).and_then(|w| w.try_into().ok()).unwrap_or_default();
            sum = sum.wrapping_add(u64::from_le_bytes(word));
        }
        bytes += data.len() as u64;
    }
    std::hint::black_box(sum);
    Ok(bytes)
}

/// (a2): reads every file and writes the first `share` of it into a new file under `dir`;
/// returns the bytes read.
fn plain_read_write(files: &[PathBuf], share: f64, dir: &Path) -> Result<u64, BenchError> {
    fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let mut bytes = 0u64;
    for file in files {
        let data = fs::read(file).map_err(io(format!("reading {}", file.display())))?;
        let keep = ((data.len() as f64 * share) as usize).min(data.len());
        let out = dir.join(file.file_name().expect("listed files have names"));
        fs::write(&out, &data[..keep]).map_err(io(format!("writing {}", out.display())))?;
        bytes += data.len() as u64;
    }
    Ok(bytes)
}

/// The FU's configuration for the BU directory `bu` and node output directory `fu`.
fn fu_config(bu: &Path, fu: &Path) -> FuConfig {
    FuConfig {
        bu: tessera_fu::remote::BuAccess::Directory(bu.to_owned()),
        output_dir: fu.to_owned(),
        run: RUN,
        host: "bench".into(),
        pid: std::process::id(),
        poll_interval: Duration::from_millis(1),
        // Nobody else claims here: look for dead claims once, at the start.
        recovery_interval: Duration::from_secs(3600),
        run_start_timeout: Duration::from_secs(5),
        summary_interval: Duration::from_secs(1),
    }
}

/// (d): the mergers of one BU and one node under `root` (holding `bu/` and `fu/`) until the run
/// has ended in `root/storage`.
fn merge_all(root: &Path, streams: &[String]) -> Result<(), BenchError> {
    let micro = MicroMerger {
        bu: tessera_fu::remote::BuAccess::Directory(root.join("bu")),
        fu_output_dir: root.join("fu"),
        mini_dir: root.join("mini"),
        node: NODE.into(),
        run: RUN,
        streams: streams.to_vec(),
        host: "bench".into(),
    };
    let mini = MiniMerger {
        bu_dir: root.join("bu"),
        mini_dir: root.join("mini"),
        storage_dir: root.join("storage"),
        bu: BU.into(),
        nodes: vec![NODE.into()],
        run: RUN,
        streams: streams.to_vec(),
        bookkeeping_copy: None,
    };
    let macro_merger =
        MacroMerger { storage_dir: root.join("storage"), bus: vec![BU.into()], run: RUN, streams: streams.to_vec() };
    for _ in 0..10 {
        micro.pass()?;
        mini.pass()?;
        if macro_merger.pass()?.finished {
            return Ok(());
        }
    }
    Err(BenchError::System("the mergers did not end the run in 10 passes".into()))
}

/// Runs the suite: writes the sample run, measures (a)–(d) and removes everything it wrote.
/// `progress` is told what is being done.
pub fn run(config: &FuBenchConfig, progress: &mut dyn FnMut(&str)) -> Result<FuBench, BenchError> {
    let scratch = scratch_dir("tessera-bench-fu-")?;
    let root = scratch.path();
    let menu = Menu::default();
    let streams = MenuHlt::new(&menu)?.streams().to_vec();

    progress("writing the sample run");
    let template = root.join("template");
    let sample = write_sample_run(&template.join("bu"), &config.spec())
        .map_err(|e| BenchError::System(format!("writing the sample run: {e}")))?;
    let raw_files: Vec<PathBuf> = sample.files.iter().map(|f| f.path.clone()).collect();
    let raw_bytes: u64 = sample.bytes;

    let mut read = Timed::default();
    let mut read_write = Timed::default();
    let mut fu = Timed::default();
    let mut fu_report = None;
    let merge_input = root.join("merge-input");
    for rep in 0..config.repetitions.max(1) {
        progress(&format!("(a) plain read and (b) FU, repetition {}", rep + 1));
        // Each case reads a copy of the template made just before it (see the module docs).
        let fresh = |name: &str| -> Result<(PathBuf, Vec<PathBuf>), BenchError> {
            let dir = root.join(format!("{name}-rep{rep}"));
            copy_tree(&template, &dir)?;
            let files = raw_files
                .iter()
                .map(|f| dir.join(f.strip_prefix(&template).expect("the sample run is in the template")))
                .collect();
            Ok((dir, files))
        };
        let (plain, files) = fresh("read")?;
        let start = Instant::now();
        let bytes = plain_read(&files)?;
        read.push(bytes, start.elapsed());
        remove_tree(&plain)?;

        let farm = root.join(format!("fu-rep{rep}"));
        copy_tree(&template, &farm)?;
        let mut hlt = MenuHlt::new(&menu)?;
        let cfg = fu_config(&farm.join("bu"), &farm.join("fu"));
        let start = Instant::now();
        let report = run_fu(&cfg, &mut hlt, &AtomicBool::new(false))?;
        fu.push(raw_bytes, start.elapsed());
        if report.files != raw_files.len() as u64 || report.events != sample.events {
            return Err(BenchError::System(format!(
                "the FU processed {} files and {} events of {} and {}",
                report.files,
                report.events,
                raw_files.len(),
                sample.events
            )));
        }
        let share = report.output_bytes as f64 / raw_bytes as f64;
        let (plain, files) = fresh("read-write")?;
        let rw = root.join(format!("read-write-out-rep{rep}"));
        let start = Instant::now();
        let bytes = plain_read_write(&files, share, &rw)?;
        read_write.push(bytes, start.elapsed());
        remove_tree(&rw)?;
        remove_tree(&plain)?;
        if rep == 0 {
            fu_report = Some(report);
            fs::rename(&farm, &merge_input).map_err(io("keeping the FU outputs"))?;
        } else {
            remove_tree(&farm)?;
        }
    }
    remove_tree(&template)?;

    let outputs_dir = |farm: &Path| farm.join("fu").join(run_dir_name(RUN));
    let outputs = files_with_ext(&outputs_dir(&merge_input), DATA_EXT)?;
    let output_bytes: u64 = outputs.iter().map(|(_, len)| len).sum();
    let mut copy = Timed::default();
    let mut copy_only = Timed::default();
    let mut merge = Timed::default();
    let mut merged_files = 0;
    for rep in 0..config.repetitions.max(1) {
        progress(&format!("(c) plain copy and (d) merge, repetition {}", rep + 1));
        let farm = root.join(format!("copy-rep{rep}"));
        copy_tree(&merge_input, &farm)?;
        let sources = files_with_ext(&outputs_dir(&farm), DATA_EXT)?;
        let copied = farm.join("copied");
        fs::create_dir(&copied).map_err(io("creating the copy directory"))?;
        let start = Instant::now();
        for (path, _) in &sources {
            fs::copy(path, copied.join(path.file_name().expect("listed files have names")))
                .map_err(io(format!("copying {}", path.display())))?;
        }
        let copies = start.elapsed();
        for (path, _) in &sources {
            fs::remove_file(path).map_err(io(format!("removing {}", path.display())))?;
        }
        copy.push(output_bytes, start.elapsed());
        copy_only.push(output_bytes, copies);
        remove_tree(&farm)?;

        let farm = root.join(format!("merge-rep{rep}"));
        copy_tree(&merge_input, &farm)?;
        let start = Instant::now();
        merge_all(&farm, &streams)?;
        let elapsed = start.elapsed();
        let finals = files_with_ext(&farm.join("storage").join(run_dir_name(RUN)), DATA_EXT)?;
        merged_files = finals.len();
        merge.push(finals.iter().map(|(_, len)| len).sum(), elapsed);
        remove_tree(&farm)?;
    }

    Ok(FuBench {
        config: config.clone(),
        dir: root.to_owned(),
        fs_type: fs_type(root),
        raw_files: raw_files.len(),
        events: sample.events,
        read,
        read_write,
        fu,
        fu_report: fu_report.unwrap_or_default(),
        output_files: outputs.len(),
        copy,
        copy_only,
        merge,
        merged_files,
    })
}

/// The results as a table, the targets, notes, and last one line of JSON ([`json`]).
pub fn report(b: &FuBench) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let c = &b.config;
    let _ = writeln!(
        out,
        "sample run: {} raw files ({:.1} MB, {} events) in {} lumi sections, {} FEDs of ~{} B + trigger",
        b.raw_files,
        b.read.bytes as f64 / 1e6,
        b.events,
        c.lumi_sections,
        c.feds,
        c.fed_payload_bytes
    );
    let _ = writeln!(out, "{:<40} {:>9} {:>9} {:>9} {:>12}", "case (one thread each)", "MB", "ms", "MB/s", "ratio");
    let row = |out: &mut String, case: &str, t: &Timed, ratio: f64, of: &str| {
        let _ = writeln!(
            out,
            "{case:<40} {:>9.1} {:>9.1} {:>9.0} {:>7.2} ÷{of}",
            t.bytes as f64 / 1e6,
            t.median_seconds() * 1e3,
            t.mb_per_s(),
            ratio
        );
    };
    row(&mut out, "(a) plain read (baseline)", &b.read, 1.0, "(a)");
    row(
        &mut out,
        "(a2) plain read + write of (b)'s share",
        &b.read_write,
        b.read_write.mb_per_s() / b.read.mb_per_s(),
        "(a)",
    );
    row(&mut out, "(b) FU read, CRC, select, write", &b.fu, b.fu_ratio(), "(a)");
    let _ = writeln!(out, "{:<40} {:>47.2} ÷(a2)", "    (b) against its own file I/O", b.fu_over_io_ratio());
    row(&mut out, "(c) plain copy of FU outputs + remove", &b.copy, 1.0, "(c)");
    row(&mut out, "    (c) without the remove", &b.copy_only, b.copy_only.mb_per_s() / b.copy.mb_per_s(), "(c)");
    row(&mut out, "(d) micro + mini + macro merge", &b.merge, b.merge_ratio(), "(c)");
    let _ = writeln!(
        out,
        "{:<40} {:>47.2} ÷(c) without the remove",
        "    (d) against the copies alone",
        b.merge_over_copy_only_ratio()
    );
    for t in targets(b) {
        let _ = writeln!(out, "target {}: {}, {}", t.name, t.figure, t.verdict());
    }
    let accepted: Vec<String> = b.fu_report.accepted.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let _ = writeln!(
        out,
        "notes: written under {} ({}); median of {} repetitions, each on a fresh copy (not timed);\n  \
         FU events per stream: {}; {} FU output data files ({:.1} MB) merged into {} final files ({:.1} MB);\n  \
         one FU process per node, so the micro merger hard-links its file and the mini merger makes the one copy.",
        b.dir.display(),
        b.fs_type,
        c.repetitions,
        accepted.join(", "),
        b.output_files,
        b.copy.bytes as f64 / 1e6,
        b.merged_files,
        b.merge.bytes as f64 / 1e6
    );
    let _ = writeln!(out, "{}", json(b));
    out
}

/// The targets: the FU against a plain read (issue #5) and against its own file I/O (issue
/// #37), the mergers against a plain copy.
pub fn targets(b: &FuBench) -> Vec<crate::Target> {
    vec![
        crate::Target {
            name: format!("FU (b)/(a) >= {FU_TARGET:.2}"),
            figure: format!("{:.2}", b.fu_ratio()),
            baseline: "(a) a plain read of the same files".into(),
            met: b.fu_ratio() >= FU_TARGET,
        },
        crate::Target {
            name: format!("FU (b)/(a2) >= {FU_IO_TARGET:.2}"),
            figure: format!("{:.2}", b.fu_over_io_ratio()),
            baseline: "(a2) a plain read and write of (b)'s share".into(),
            met: b.fu_over_io_ratio() >= FU_IO_TARGET,
        },
        crate::Target {
            name: format!("mergers (d)/(c) >= {MERGE_TARGET:.2}"),
            figure: format!("{:.2}", b.merge_ratio()),
            baseline: "(c) a plain copy of the FU outputs, the sources then removed".into(),
            met: b.merge_ratio() >= MERGE_TARGET,
        },
    ]
}

/// The results as one JSON object.
pub fn json(b: &FuBench) -> serde_json::Value {
    let timed = |t: &Timed| {
        serde_json::json!({
            "bytes": t.bytes, "median_seconds": t.median_seconds(), "seconds": t.seconds, "mb_per_s": t.mb_per_s(),
        })
    };
    serde_json::json!({
        "suite": "fu",
        "dir": b.dir.display().to_string(),
        "fs_type": b.fs_type,
        "raw_files": b.raw_files,
        "events": b.events,
        "feds": b.config.feds,
        "fed_payload_bytes": b.config.fed_payload_bytes,
        "repetitions": b.config.repetitions,
        "plain_read": timed(&b.read),
        "plain_read_write": timed(&b.read_write),
        "fu": timed(&b.fu),
        "fu_accepted": b.fu_report.accepted,
        "plain_copy": timed(&b.copy),
        "plain_copy_only": timed(&b.copy_only),
        "merge": timed(&b.merge),
        "output_files": b.output_files,
        "merged_files": b.merged_files,
        "ratios": { "fu_over_read": b.fu_ratio(), "fu_over_read_write": b.fu_over_io_ratio(), "merge_over_copy": b.merge_ratio(), "merge_over_copy_only": b.merge_over_copy_only_ratio() },
        "targets": { "fu_over_read": FU_TARGET, "fu_over_read_write": FU_IO_TARGET, "merge_over_copy": MERGE_TARGET },
    })
}
