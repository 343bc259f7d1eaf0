//! The resource-summary contract between a BU and its filter farm: every FU process publishes a
//! small resource summary in the BU's directory, and the BU reads them to decide whether to ask
//! the EVM for more events ([`assess`], which names the farm's pressure, [`FarmPressure`]). Both
//! sides use this module; neither imports the other.
//!
//! Summaries are `<bu_dir>/appliance/resources/<host>-pid<pid>.json`, written atomically about
//! once a second and removed when the FU leaves. They sit beside the run directories, not in
//! them, so that the file contract of a run directory is unchanged. An FU on another host than
//! its BU's publishes and removes its summary through the BU's file broker
//! (`tessera_fu::broker`, `POST` and `DELETE /summary`), which writes it here under the host
//! name it gives the FU's claims.

use crate::{RunDirError, write_atomically};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where summaries go, relative to the BU directory.
pub const RESOURCES_DIR: &str = "appliance/resources";

/// What one FU process says of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceSummary {
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The run it works on.
    pub run: u32,
    /// When it wrote this, in ms since the Unix epoch.
    pub updated_unix_ms: u64,
    /// Free processing slots: 1 when the process waits for a file, 0 while it works on one.
    pub free_slots: u32,
    /// Lumi sections the BU has ended whose files are not all processed yet.
    pub queued_lumi_sections: u32,
    /// Bytes it wrote into its outputs over the last interval, per second.
    pub output_bytes_per_s: f64,
    /// How full the file system of its output directory is, in percent.
    pub output_used_percent: u8,
    /// CPU time the process has used since it started (user and system, all its threads), in
    /// seconds. An HLT program it runs as a child process (`--exec`) is a process of its own and
    /// not counted. Summaries of FUs that do not say it read 0.
    #[serde(default)]
    pub cpu_seconds: f64,
}

/// The stable keys of [`FarmPressure`], for units that report them.
pub mod keys {
    /// [`FarmPressure::NotEnoughFus`](super::FarmPressure::NotEnoughFus).
    pub const NOT_ENOUGH_FUS: &str = "NOT_ENOUGH_FUS";
    /// [`FarmPressure::TooManyLsQueued`](super::FarmPressure::TooManyLsQueued).
    pub const TOO_MANY_LS_QUEUED: &str = "TOO_MANY_LS_QUEUED";
    /// [`FarmPressure::FuOutputHigh`](super::FarmPressure::FuOutputHigh).
    pub const FU_OUTPUT_HIGH: &str = "FU_OUTPUT_HIGH";
    /// [`FarmPressure::ResourceSummaryStale`](super::FarmPressure::ResourceSummaryStale).
    pub const RESOURCE_SUMMARY_STALE: &str = "RESOURCE_SUMMARY_STALE";
}

/// Why a BU holds back because of its farm (the farm's pressure, not an RU's refusal of a
/// fragment when its buffers are full, `tessera_evb::ru::BackPressure`): a stable key and the
/// numbers behind it.
#[derive(Debug, Clone, PartialEq)]
pub enum FarmPressure {
    /// Fewer live FU processes than required.
    NotEnoughFus {
        /// Live FU processes.
        live: usize,
        /// Required.
        required: u32,
    },
    /// The farm lags by more lumi sections than allowed.
    TooManyLsQueued {
        /// Lumi sections queued at the most lagging FU.
        queued: u32,
        /// Allowed.
        max: u32,
    },
    /// An FU's output file system is above its high-water mark.
    FuOutputHigh {
        /// The fullest, in percent.
        used_percent: u8,
        /// The mark, in percent.
        high_water_percent: u8,
    },
    /// FUs have published summaries, but none recently: the farm may be stuck.
    ResourceSummaryStale {
        /// Age of the newest summary.
        age: Duration,
    },
}

impl FarmPressure {
    /// The stable key, as in metrics and the run's progress line.
    pub fn key(&self) -> &'static str {
        match self {
            FarmPressure::NotEnoughFus { .. } => keys::NOT_ENOUGH_FUS,
            FarmPressure::TooManyLsQueued { .. } => keys::TOO_MANY_LS_QUEUED,
            FarmPressure::FuOutputHigh { .. } => keys::FU_OUTPUT_HIGH,
            FarmPressure::ResourceSummaryStale { .. } => keys::RESOURCE_SUMMARY_STALE,
        }
    }
}

impl std::fmt::Display for FarmPressure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FarmPressure::NotEnoughFus { live, required } => {
                write!(f, "NOT_ENOUGH_FUS: {live} FU processes publish resources, {required} required")
            }
            FarmPressure::TooManyLsQueued { queued, max } => {
                write!(f, "TOO_MANY_LS_QUEUED: the farm lags {queued} lumi sections behind, at most {max} allowed")
            }
            FarmPressure::FuOutputHigh { used_percent, high_water_percent } => {
                write!(f, "FU_OUTPUT_HIGH: an FU's output disk is {used_percent}% full, above {high_water_percent}%")
            }
            FarmPressure::ResourceSummaryStale { age } => {
                write!(f, "RESOURCE_SUMMARY_STALE: the newest FU resource summary is {:.1} s old", age.as_secs_f64())
            }
        }
    }
}

/// When a BU holds back because of its farm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FarmLimits {
    /// Live FU processes required, at least 1.
    pub min_fus: u32,
    /// Most lumi sections the farm may lag behind.
    pub max_queued_lumi_sections: u32,
    /// Hold back when an FU's output file system is this full, in percent.
    pub output_high_water_percent: u8,
    /// A summary older than this is not taken as a sign of life.
    pub stale_after: Duration,
}

impl Default for FarmLimits {
    fn default() -> Self {
        FarmLimits {
            min_fus: 1,
            max_queued_lumi_sections: 4,
            output_high_water_percent: 90,
            stale_after: Duration::from_secs(10),
        }
    }
}

/// Now, in ms since the Unix epoch, as summaries are stamped (0 if the clock is before 1970).
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The summary file of process `pid` on `host`.
pub fn summary_path(bu_dir: &Path, host: &str, pid: u32) -> PathBuf {
    bu_dir.join(RESOURCES_DIR).join(format!("{host}-pid{pid}.json"))
}

/// Publishes `summary` in `bu_dir`.
pub fn write_summary(bu_dir: &Path, summary: &ResourceSummary) -> Result<(), RunDirError> {
    let dir = bu_dir.join(RESOURCES_DIR);
    fs::create_dir_all(&dir).map_err(|source| RunDirError::Io { action: "creating", path: dir.clone(), source })?;
    let text = serde_json::to_string(summary).expect("a summary always serializes");
    write_atomically(&summary_path(bu_dir, &summary.host, summary.pid), text.as_bytes())
}

/// The summaries in `bu_dir` for run `run`; unreadable ones (being replaced) are skipped.
pub fn read_summaries(bu_dir: &Path, run: u32) -> Vec<ResourceSummary> {
    let dir = bu_dir.join(RESOURCES_DIR);
    let Ok(entries) = fs::read_dir(&dir) else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_str().is_some_and(|name| name.ends_with(".json")))
        .filter_map(|entry| fs::read_to_string(entry.path()).ok())
        .filter_map(|text| serde_json::from_str::<ResourceSummary>(&text).ok())
        .filter(|s| s.run == run)
        .collect()
}

/// Whether a BU should hold back, from its farm's summaries at `now_unix_ms`. `since_start` is
/// how long the BU has run: before `stale_after` has passed, a farm that has not spoken yet is
/// given the benefit of the doubt.
pub fn assess(
    summaries: &[ResourceSummary],
    now_unix_ms: u64,
    since_start: Duration,
    limits: &FarmLimits,
) -> Option<FarmPressure> {
    let age = |s: &ResourceSummary| Duration::from_millis(now_unix_ms.saturating_sub(s.updated_unix_ms));
    let live: Vec<&ResourceSummary> = summaries.iter().filter(|s| age(s) <= limits.stale_after).collect();
    if live.is_empty() {
        if let Some(newest) = summaries.iter().map(age).min() {
            return Some(FarmPressure::ResourceSummaryStale { age: newest });
        }
        if since_start < limits.stale_after {
            return None;
        }
    }
    if live.len() < limits.min_fus as usize {
        return Some(FarmPressure::NotEnoughFus { live: live.len(), required: limits.min_fus });
    }
    if let Some(used) = live.iter().map(|s| s.output_used_percent).max()
        && used >= limits.output_high_water_percent
    {
        return Some(FarmPressure::FuOutputHigh {
            used_percent: used,
            high_water_percent: limits.output_high_water_percent,
        });
    }
    if let Some(queued) = live.iter().map(|s| s.queued_lumi_sections).max()
        && queued > limits.max_queued_lumi_sections
    {
        return Some(FarmPressure::TooManyLsQueued { queued, max: limits.max_queued_lumi_sections });
    }
    None
}

/// The CPU time of a BU's FU processes over a run: each process's last figure, kept after it
/// has left (and its summary with it), so that the total only grows.
#[derive(Debug, Default)]
pub struct FarmCpu {
    /// CPU seconds by (host, pid); as many entries as FU processes the run has seen.
    by_process: BTreeMap<(String, u32), f64>,
}

impl FarmCpu {
    /// Takes the figures of `summaries` (one run's); the total CPU time in seconds.
    pub fn update(&mut self, summaries: &[ResourceSummary]) -> f64 {
        for s in summaries {
            let seen = self.by_process.entry((s.host.clone(), s.pid)).or_default();
            *seen = seen.max(s.cpu_seconds);
        }
        self.by_process.values().sum()
    }
}

/// How full the file system holding `path` is, in percent (of the blocks an unprivileged
/// writer may use), if it can be asked.
pub fn used_percent(path: &Path) -> Option<u8> {
    let s = rustix::fs::statvfs(path).ok()?;
    let total = s.f_blocks;
    (total > 0).then(|| (100 - (s.f_bavail.min(total) * 100 / total)) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(pid: u32, updated_unix_ms: u64) -> ResourceSummary {
        ResourceSummary {
            host: "h".into(),
            pid,
            run: 1,
            updated_unix_ms,
            free_slots: 1,
            queued_lumi_sections: 0,
            output_bytes_per_s: 0.0,
            output_used_percent: 10,
            cpu_seconds: 0.0,
        }
    }

    #[test]
    fn farm_cpu_keeps_the_time_of_processes_that_left() {
        let mut cpu = FarmCpu::default();
        let a = ResourceSummary { cpu_seconds: 1.5, ..summary(1, 0) };
        let b = ResourceSummary { cpu_seconds: 2.0, ..summary(2, 0) };
        assert_eq!(cpu.update(&[a.clone(), b]), 3.5);
        // Process 2 has left; process 1 worked on.
        assert_eq!(cpu.update(&[ResourceSummary { cpu_seconds: 4.0, ..a }]), 6.0);
        assert_eq!(cpu.update(&[]), 6.0);
    }

    #[test]
    fn each_reason_is_given_when_its_limit_is_crossed() {
        let limits = FarmLimits { min_fus: 2, ..FarmLimits::default() };
        let now = 100_000;
        let long = Duration::from_secs(60);
        // Nobody has spoken: fine at first, then not enough FUs.
        assert_eq!(assess(&[], now, Duration::from_secs(1), &limits), None);
        assert_eq!(assess(&[], now, long, &limits).unwrap().key(), "NOT_ENOUGH_FUS");
        // Spoken long ago only: stale.
        assert_eq!(assess(&[summary(1, 0)], now, long, &limits).unwrap().key(), "RESOURCE_SUMMARY_STALE");
        // One live of two required.
        assert_eq!(assess(&[summary(1, now), summary(2, 0)], now, long, &limits).unwrap().key(), "NOT_ENOUGH_FUS");
        let two = [summary(1, now), summary(2, now - 500)];
        assert_eq!(assess(&two, now, long, &limits), None);
        let mut full = two.clone();
        full[1].output_used_percent = 95;
        assert_eq!(assess(&full, now, long, &limits).unwrap().key(), "FU_OUTPUT_HIGH");
        let mut lagging = two.clone();
        lagging[0].queued_lumi_sections = 5;
        let pressure = assess(&lagging, now, long, &limits).unwrap();
        assert_eq!(pressure.key(), "TOO_MANY_LS_QUEUED");
        assert!(pressure.to_string().contains("5 lumi sections"), "{pressure}");
    }

    #[test]
    fn summaries_round_trip_through_the_bu_directory() {
        let dir = tempfile::tempdir().unwrap();
        let s = summary(42, 7);
        write_summary(dir.path(), &s).unwrap();
        write_summary(dir.path(), &ResourceSummary { run: 2, pid: 43, ..s.clone() }).unwrap();
        assert_eq!(read_summaries(dir.path(), 1), [s]);
        assert!(used_percent(dir.path()).is_some_and(|p| p <= 100));
    }
}
