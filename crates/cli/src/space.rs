//! Where a `tessera run` writes and how much: the estimate said before anything starts, the
//! refusal when the file system lacks the room, and what is kept after the run (`--keep`).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use tessera_config::SystemConfig;
use tessera_formats::frd::FRD_HEADER_BYTES;
use tessera_formats::tcds::{TCDS_FRAGMENT_BYTES, is_tcds_fed};

/// What stays in the output directory after a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Keep {
    /// The merged storage and `summary.json`; the BUs', FUs' and mergers' directories are
    /// removed once the chain's check proves storage holds every built event. A run that does
    /// not prove it keeps everything, for diagnosis.
    #[default]
    Storage,
    /// Everything: the BUs' run directories (bookkeeping, for `tessera verify --built`), the FUs'
    /// and mergers' directories and logs, storage and the summary.
    All,
    /// `summary.json` alone (a run for its figures).
    Summary,
}

/// How much a run may write.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Events the run asks for (the event limit, or the rate times the time limit), if known.
    pub events: Option<u64>,
    /// Mean bytes of a built event: its FED fragments and its FRD header.
    pub event_bytes: f64,
}

impl Estimate {
    /// The run of `cfg`.
    pub fn of(cfg: &SystemConfig) -> Self {
        let fragments: f64 = cfg
            .rus
            .iter()
            .flat_map(|ru| ru.feds.iter().map(move |&fed| (fed, ru.fragment_size)))
            .map(|(fed, size)| if is_tcds_fed(fed) { TCDS_FRAGMENT_BYTES as f64 } else { size.mean_bytes() })
            .sum();
        let by_time = match (cfg.trigger.paced_rate_hz(), cfg.run.seconds) {
            (Some(rate), Some(seconds)) => Some((rate * seconds).ceil() as u64),
            _ => None,
        };
        let events = match (cfg.run.events, by_time) {
            (Some(n), Some(m)) => Some(n.min(m)),
            (n, m) => n.or(m),
        };
        Estimate { events, event_bytes: fragments + FRD_HEADER_BYTES as f64 }
    }

    /// The most the run writes at once, in bytes: every event once (the BUs' files go as the
    /// FUs take them; storage holds at most every event, once, if the HLT accepts all).
    pub fn bytes(&self) -> Option<u64> {
        self.events.map(|n| (n as f64 * self.event_bytes).ceil() as u64)
    }
}

/// Bytes free for this user on the file system that holds `path`, or would hold it (the
/// nearest directory above it that exists).
pub fn free_bytes(path: &Path) -> Result<(u64, PathBuf)> {
    let mut at = std::path::absolute(path).with_context(|| format!("{}", path.display()))?;
    while !at.exists() {
        if !at.pop() {
            bail!("{}: no directory above it exists", path.display());
        }
    }
    let stat = rustix::fs::statvfs(&at).with_context(|| format!("reading the free space of {}", at.display()))?;
    Ok((stat.f_bavail.saturating_mul(stat.f_frsize), at))
}

/// Says where the run writes and how much it expects to, and refuses (with the figures) when
/// the file system cannot hold it.
pub fn announce_and_check(cfg: &SystemConfig, output: &Path, keep: Keep) -> Result<()> {
    if cfg.bu.discard_events {
        tracing::info!(
            "output: {}; the BUs discard every event they build (bu.discard_events): no file",
            output.display()
        );
        return Ok(());
    }
    let estimate = Estimate::of(cfg);
    let (free, fs) = free_bytes(output)?;
    let kept = match keep {
        Keep::Storage => "storage/ and summary.json are kept",
        Keep::All => "every unit's files are kept",
        Keep::Summary => "summary.json alone is kept",
    };
    let Some(bytes) = estimate.bytes() else {
        tracing::info!(
            "output: {}; free running for a time, so its size is not known in advance (events of {} on average); \
             {} free on {}; {kept}",
            output.display(),
            size(estimate.event_bytes as u64),
            size(free),
            fs.display()
        );
        return Ok(());
    };
    let events = estimate.events.unwrap_or(0);
    if bytes > free {
        bail!(
            "{}: the run may write up to {} ({events} events of {} on average) but {} has {} free; \
             give --output on a larger file system, or fewer --seconds or --events",
            output.display(),
            size(bytes),
            size(estimate.event_bytes as u64),
            fs.display(),
            size(free)
        );
    }
    tracing::info!(
        "output: {}; up to {} ({events} events of {} on average, before the HLT's selection); {} free on {}; {kept}",
        output.display(),
        size(bytes),
        size(estimate.event_bytes as u64),
        size(free),
        fs.display()
    );
    Ok(())
}

/// Capture files of `streams` front-end streams into `dir` (`tessera ferol` or `tessera dth`
/// with `--output`): says what they will take, `units` of `unit` (events, orbits) per stream of
/// `unit_bytes` each on average when the run's length is known, and refuses, with the figures,
/// when the file system cannot hold them.
pub fn check_capture_room(dir: &Path, streams: usize, units: Option<u64>, unit: &str, unit_bytes: f64) -> Result<()> {
    let (free, fs) = free_bytes(dir)?;
    let Some(units) = units else {
        say_err!(
            "{}: free running for a time, so the captures' size is not known in advance ({} a {unit} and stream on \
             average); {} free on {}",
            dir.display(),
            size(unit_bytes as u64),
            size(free),
            fs.display()
        );
        return Ok(());
    };
    let bytes = (units as f64 * unit_bytes * streams as f64).ceil() as u64;
    if bytes > free {
        bail!(
            "{}: {streams} streams of {units} {unit} ({} each on average) take about {} but {} has {} free; give \
             --output on a larger file system, or fewer {unit} or streams",
            dir.display(),
            size(unit_bytes as u64),
            size(bytes),
            fs.display(),
            size(free)
        );
    }
    say_err!("{}: about {} of captures; {} free on {}", dir.display(), size(bytes), size(free), fs.display());
    Ok(())
}

/// A size for people: B, kB, MB or GB.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.1} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1} kB", b as f64 / 1e3),
        b => format!("{b} B"),
    }
}

/// After a run, removes from `output` what `keep` does not keep (the BUs' directories that lie
/// under `output`, the FUs' and the mergers'), unless `kept_for` says why the run keeps
/// everything (it failed, or was cut short). Returns a sentence saying what stays.
pub fn tidy(cfg: &SystemConfig, output: &Path, keep: Keep, kept_for: Option<&str>) -> Result<String> {
    if keep == Keep::All {
        return Ok(format!("kept: everything in {}", output.display()));
    }
    if let Some(why) = kept_for {
        return Ok(format!("kept: everything in {}, for its diagnosis: {why}", output.display()));
    }
    let mut remove: Vec<PathBuf> = (0..cfg.bus.len())
        .map(|i| cfg.bu_directory(i, output))
        .filter(|dir| dir.starts_with(output))
        .chain([output.join("fu"), output.join("merge")])
        .collect();
    if keep == Keep::Summary {
        remove.push(output.join("storage"));
    }
    for dir in remove.iter().filter(|d| d.exists()) {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(match keep {
        Keep::Summary => format!("kept: {} alone (--keep summary)", output.join("summary.json").display()),
        _ => format!(
            "kept: {} and {}; the units' own files are removed once merged (--keep all keeps them)",
            output.join("storage").display(),
            output.join("summary.json").display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_system_asks_for_rate_times_seconds_events_of_its_fragments() {
        let cfg = SystemConfig::default();
        let e = Estimate::of(&cfg);
        let rate = cfg.trigger.paced_rate_hz().unwrap();
        assert_eq!(e.events, Some((rate * cfg.run.seconds.unwrap()).ceil() as u64));
        // 8 data FEDs of 2048 bytes on average, the trigger fragment and the FRD header.
        assert_eq!(e.event_bytes, 8.0 * 2048.0 + 952.0 + 24.0);
        assert_eq!(e.bytes(), Some((e.events.unwrap() as f64 * e.event_bytes).ceil() as u64));
    }

    #[test]
    fn an_event_limit_below_the_time_limit_bounds_the_estimate_and_free_running_has_none() {
        let mut cfg = SystemConfig::default();
        cfg.run.events = Some(1000);
        assert_eq!(Estimate::of(&cfg).events, Some(1000));
        cfg.run.events = None;
        cfg.trigger.free_running = true;
        assert_eq!(Estimate::of(&cfg).events, None);
    }

    #[test]
    fn a_file_system_too_small_is_refused_with_the_figures() {
        let mut cfg = SystemConfig::default();
        cfg.run.seconds = None;
        cfg.run.events = Some(1_000_000_000_000);
        let dir = tempfile::tempdir().unwrap();
        let e = announce_and_check(&cfg, &dir.path().join("out"), Keep::Storage).unwrap_err().to_string();
        assert!(e.contains("the run may write up to") && e.contains("free"), "{e}");
        // BUs that discard their events write nothing, however long the run.
        (cfg.bu.discard_events, cfg.fu.enabled) = (true, false);
        announce_and_check(&cfg, &dir.path().join("out"), Keep::Storage).unwrap();
    }

    #[test]
    fn tidy_keeps_storage_and_the_summary_only_when_the_chain_is_proven() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let cfg = SystemConfig::default();
        let make = || {
            for d in ["bu0/run000001", "bu1/run000001", "fu/bu0", "merge/bu0", "storage/run000001"] {
                std::fs::create_dir_all(out.join(d)).unwrap();
            }
            std::fs::write(out.join("summary.json"), "{}").unwrap();
        };
        make();
        tidy(&cfg, out, Keep::Storage, Some("a unit did not end cleanly")).unwrap();
        assert!(out.join("bu0").exists(), "not proven: everything stays");
        tidy(&cfg, out, Keep::All, None).unwrap();
        assert!(out.join("bu0").exists() && out.join("fu").exists());
        tidy(&cfg, out, Keep::Storage, None).unwrap();
        assert!(!out.join("bu0").exists() && !out.join("bu1").exists() && !out.join("fu").exists());
        assert!(!out.join("merge").exists() && out.join("storage/run000001").exists());
        make();
        tidy(&cfg, out, Keep::Summary, None).unwrap();
        assert!(!out.join("storage").exists() && out.join("summary.json").exists());
    }
}
