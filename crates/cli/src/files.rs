//! The commands that read and write run files: `tessera inspect`, `tessera verify`, `tessera
//! sample` and `tessera demo`.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tessera_inspect::event::EventChecks;
use tessera_inspect::{Target, inspect_path, render, verify};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

/// The options of `tessera sample`.
#[derive(Args)]
pub struct SampleArgs {
    /// BU directory to write the run directory into.
    #[arg(long)]
    output: PathBuf,
    /// Run number.
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// Lumi sections.
    #[arg(long, default_value_t = 3)]
    lumi_sections: u32,
    /// Events per lumi section.
    #[arg(long, default_value_t = 20)]
    events_per_ls: u32,
    /// Events per raw file at most.
    #[arg(long, default_value_t = 8)]
    events_per_file: u32,
    /// Data FEDs per event (ids 0..N; the trigger fragment, FED 1024, comes on top).
    #[arg(long, default_value_t = 8)]
    feds: u16,
    /// Mean payload bytes per data fragment.
    #[arg(long, default_value_t = 2048)]
    fed_bytes: usize,
    /// Number of the first event (2^24 − 5 = 16777211 shows the LV1 id wrap).
    #[arg(long, default_value_t = 1)]
    first_event: u64,
}

impl SampleArgs {
    /// The sample run these options describe.
    fn spec(&self) -> Result<SampleSpec> {
        if self.feds > 1024 {
            bail!("--feds {}: data FED ids must stay below 1024, the trigger fragment's", self.feds);
        }
        Ok(SampleSpec {
            run: self.run,
            lumi_sections: self.lumi_sections,
            events_per_lumi_section: self.events_per_ls,
            events_per_file: self.events_per_file,
            fed_ids: (0..self.feds).collect(),
            fed_payload_bytes_mean: self.fed_bytes,
            first_event: self.first_event,
            source: "sample-bu".into(),
        })
    }
}

/// The checks of events that `--no-seed-check` leaves or keeps.
fn checks(no_seed_check: bool) -> EventChecks {
    EventChecks { seeded_payloads: !no_seed_check }
}

/// `tessera inspect`: what a raw file, a stream capture or a run directory holds; exit status 1
/// if anything is wrong with it.
pub fn inspect(path: &Path, json: bool, feds: bool, no_seed_check: bool) -> Result<ExitCode> {
    // The filter farm's outputs (storage, an FU's or a merger's run directory) are checked as
    // `verify` checks them: their files follow the farm's rules, not a BU's.
    if path.is_dir() && tessera_control::chain::is_output_dir(path) {
        return verify_farm_outputs(path, &[], json, false);
    }
    let report = inspect_path(path, checks(no_seed_check))?;
    if json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        say_part!("{}", render::target(&report, feds));
    }
    Ok(if report.problem_count() == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `tessera verify`: a BU run directory checked against the file contract, or the filter farm's
/// outputs (with `--built`, storage against the BUs' bookkeeping); exit status 1 on any violation.
pub fn verify(
    run_dir: &Path,
    built: &[PathBuf],
    json: bool,
    no_seed_check: bool,
    expect_feds: Option<String>,
    system: Option<PathBuf>,
) -> Result<ExitCode> {
    if tessera_control::chain::is_output_dir(run_dir) {
        verify_farm_outputs(run_dir, built, json, expect_feds.is_some() || system.is_some())
    } else {
        verify_bu_run_dir(run_dir, json, no_seed_check, expect_feds, system)
    }
}

/// `tessera verify` of the filter farm's outputs: an FU's or a merger's, or storage's against
/// the BUs' run directories `built`.
fn verify_farm_outputs(run_dir: &Path, built: &[PathBuf], json: bool, fed_list_given: bool) -> Result<ExitCode> {
    if fed_list_given {
        bail!(
            "--expect-feds and --system check the events of a BU run directory; {} holds filter-farm outputs",
            run_dir.display()
        );
    }
    let storage = tessera_control::chain::is_storage_run_dir(run_dir);
    if !storage && !built.is_empty() {
        bail!("--built: {} holds FU or merger outputs, not storage", run_dir.display());
    }
    let check = if storage {
        tessera_control::chain::verify_storage(run_dir, built)?
    } else {
        tessera_control::chain::verify_outputs(run_dir)?
    };
    if json {
        let per_ls: Vec<_> =
            check.per_ls.iter().map(|(ls, (b, p))| serde_json::json!({"ls": ls, "built": b, "processed": p})).collect();
        let report = serde_json::json!({
            "holds": check.holds(),
            "per_lumi_section": per_ls,
            "accepted": check.accepted,
            "files": check.files,
            "bytes": check.bytes,
            "problems": check.problems,
        });
        say!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(if check.holds() { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    let (b, p) = check.totals();
    for problem in &check.problems {
        say!("{}: {problem}", run_dir.display());
    }
    for (ls, (built, processed)) in check.per_ls.iter().filter(|(_, (b, p))| b != p) {
        say!("{}: lumi section {ls}: built {built}, processed {processed}", run_dir.display());
    }
    say!(
        "{}: {} lumi sections, {} events processed{}, {} files, {:.1} MB; {}",
        run_dir.display(),
        check.per_ls.len(),
        p,
        if built.is_empty() { String::new() } else { format!(" of {b} built") },
        check.files,
        check.bytes as f64 / 1e6,
        if check.holds() { "no violations" } else { "VIOLATIONS" }
    );
    Ok(if check.holds() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `tessera verify` of a BU run directory, against a FED list when one is given.
fn verify_bu_run_dir(
    run_dir: &Path,
    json: bool,
    no_seed_check: bool,
    expect_feds: Option<String>,
    system: Option<PathBuf>,
) -> Result<ExitCode> {
    let expected = match (expect_feds, system) {
        (Some(list), _) => {
            Some(tessera_config::parse_fed_list(&list).with_context(|| format!("--expect-feds {list}"))?)
        }
        (None, Some(path)) => Some(tessera_config::SystemConfig::load(&path)?.all_feds()),
        (None, None) => None,
    };
    let Some(expected) = expected else {
        let violations = verify::verify_run_dir(run_dir, checks(no_seed_check))?;
        if json {
            say!("{}", serde_json::to_string_pretty(&violations)?);
        } else {
            say_part!("{}", render::violations(run_dir, &violations));
        }
        return Ok(if violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) });
    };
    let (violations, coverage) = verify::verify_run_dir_expecting(run_dir, checks(no_seed_check), &expected)?;
    if json {
        let report = serde_json::json!({ "violations": violations, "fed_coverage": coverage });
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        say_part!("{}", render::fed_coverage(run_dir, &coverage));
        say_part!("{}", render::violations(run_dir, &violations));
    }
    Ok(if violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `tessera sample`: a sample run written into `--output`; prints its run directory.
pub fn sample(args: &SampleArgs) -> Result<ExitCode> {
    let summary = write_sample(&args.output, &args.spec()?)?;
    say!("{}", summary.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes a sample run and returns its run directory.
fn write_sample(bu_dir: &Path, spec: &SampleSpec) -> Result<PathBuf> {
    let run_dir = bu_dir.join(tessera_formats::names::run_dir_name(spec.run));
    if run_dir.exists() {
        bail!("{} exists already: remove it or choose another --output or --run", run_dir.display());
    }
    let summary =
        write_sample_run(bu_dir, spec).with_context(|| format!("writing a sample run into {}", bu_dir.display()))?;
    say_err!(
        "wrote run {}: {} events in {} files, {} bytes",
        spec.run,
        summary.events,
        summary.files.len(),
        render::thousands(summary.bytes)
    );
    Ok(summary.run_dir)
}

/// `tessera demo`: a sample run written, inspected and verified.
pub fn demo(output: Option<PathBuf>) -> Result<ExitCode> {
    // Without --output the sample lives in a temporary directory, removed when the demo ends
    // (its guard is dropped then), however it ends.
    let (bu_dir, temporary) = match output {
        Some(dir) => (dir, None),
        None => {
            let t =
                tempfile::Builder::new().prefix("tessera-demo-").tempdir().context("creating a temporary directory")?;
            (t.path().to_owned(), Some(t))
        }
    };
    let spec = SampleSpec::default();
    let run_dir = write_sample(&bu_dir, &spec)?;
    say!("== tessera inspect {}\n", run_dir.display());
    let report = inspect_path(&run_dir, EventChecks::default())?;
    say_part!("{}", render::target(&report, false));
    let first_raw = std::fs::read_dir(&run_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "raw"))
        .min();
    if let Some(raw) = first_raw {
        say!("\n== tessera inspect --feds {}\n", raw.display());
        let report = inspect_path(&raw, EventChecks::default())?;
        say_part!("{}", render::target(&report, true));
        debug_assert!(matches!(report, Target::RawFile(_)));
    }
    say!("\n== tessera verify {}\n", run_dir.display());
    let violations = verify::verify_run_dir(&run_dir, EventChecks::default())?;
    say_part!("{}", render::violations(&run_dir, &violations));
    if temporary.is_some() {
        say!("\n(the sample is removed now; `tessera demo --output DIR` keeps it)");
    }
    Ok(if violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
