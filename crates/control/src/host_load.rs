//! How busy this machine is, read from `/proc`, so that a run short of CPU says so: the cores'
//! busy share, the threads ready to run, and the CPU this process had. A front end or a unit
//! that is not scheduled for a second looks, from inside the run, exactly like a silent FED; only
//! the machine's figures tell the two apart.

use serde::Serialize;
use std::collections::VecDeque;

/// A machine is overloaded when its cores are at least this busy...
pub const BUSY_OVERLOADED: f64 = 0.95;
/// ...and more threads are ready to run than it has cores, by this many per core at least (on
/// average over the last [`RUNNABLE_SAMPLES`] readings): work waits for a core.
pub const RUNNABLE_PER_CORE_OVERLOADED: f64 = 1.5;
/// Readings of the threads ready to run averaged (the kernel gives an instant count).
pub const RUNNABLE_SAMPLES: usize = 8;
/// An overload that holds the trigger this share of the time, or more, is said.
pub const DEAD_FRACTION_SAID: f64 = 0.05;
/// Other work that had at most this share of the cores leaves the run alone to blame.
pub const OTHERS_SHARE_SAID: f64 = 0.1;

/// One reading of the machine and of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuSample {
    /// Clock ticks of every core, busy (user, nice, system, irq, softirq, steal) and in all.
    pub busy_ticks: u64,
    /// See `busy_ticks`.
    pub total_ticks: u64,
    /// Threads ready to run at the reading (`procs_running`), this one's reader included.
    pub runnable: u64,
    /// Clock ticks of CPU this run has had: this process's threads and its child processes'
    /// (a run's FUs and mergers), user and system.
    pub own_ticks: u64,
    /// Cores online.
    pub cores: u32,
}

impl CpuSample {
    /// Reads `/proc/stat` and `/proc/self/stat`; `None` where they cannot be read (not Linux).
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (busy_ticks, total_ticks, runnable, cores) = parse_stat(&stat)?;
        let me = std::process::id();
        // The children: every process whose parent is this one (a short walk of /proc).
        let children: u64 = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|text| parse_parent(text) == Some(me))
            .filter_map(|text| parse_own_ticks(&text))
            .sum();
        Some(CpuSample { busy_ticks, total_ticks, runnable, own_ticks: parse_own_ticks(&own)? + children, cores })
    }
}

/// From a `/proc/PID/stat`: the parent's process id (field 4).
pub fn parse_parent(text: &str) -> Option<u32> {
    let after = &text[text.rfind(')')? + 1..];
    after.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// From `/proc/stat`: busy and total ticks of the `cpu` line, `procs_running`, and the cores
/// (`cpuN` lines).
pub fn parse_stat(text: &str) -> Option<(u64, u64, u64, u32)> {
    let mut totals = None;
    let mut runnable = None;
    let mut cores = 0u32;
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        match words.next() {
            Some("cpu") => {
                let v: Vec<u64> = words.map_while(|w| w.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal (guest time is within user).
                let at = |i: usize| v.get(i).copied().unwrap_or(0);
                let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
                totals = Some((busy, busy + at(3) + at(4)));
            }
            Some(w) if w.starts_with("cpu") => cores += 1,
            Some("procs_running") => runnable = words.next().and_then(|w| w.parse().ok()),
            _ => {}
        }
    }
    let (busy, total) = totals?;
    Some((busy, total, runnable?, cores.max(1)))
}

/// From `/proc/self/stat`: user and system ticks (fields 14 and 15, counted after the command's
/// closing parenthesis, which may itself hold spaces).
pub fn parse_own_ticks(text: &str) -> Option<u64> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_ascii_whitespace().collect();
    // After ')', field 3 (state) is at 0: fields 14 and 15 are at 11 and 12.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// What the machine did between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Load {
    /// Cores online.
    pub cores: u32,
    /// Share of all cores' time that was busy, 0 to 1.
    pub busy: f64,
    /// Threads ready to run, on average over the recent readings.
    pub runnable: f64,
    /// Cores' worth of CPU this run had (this process and its children).
    pub own_cores: f64,
}

impl Load {
    /// Whether the machine is overloaded: its cores busy and more work ready than they run.
    pub fn overloaded(&self) -> bool {
        self.busy >= BUSY_OVERLOADED && self.runnable >= RUNNABLE_PER_CORE_OVERLOADED * f64::from(self.cores)
    }

    /// Cores' worth of CPU other work had.
    pub fn others_cores(&self) -> f64 {
        (self.busy * f64::from(self.cores) - self.own_cores).max(0.0)
    }

    /// Whether an overload is worth saying: other work took more of the machine than the run,
    /// or the trigger was held for it (`dead_fraction` of the time, at least
    /// [`DEAD_FRACTION_SAID`]). A run that alone keeps every core busy, at its rate, is a
    /// machine at work.
    pub fn overload_matters(&self, dead_fraction: f64) -> bool {
        self.overloaded() && (self.others_cores() > self.own_cores || dead_fraction >= DEAD_FRACTION_SAID)
    }

    /// The figures in a few words: "2 cores 99 % busy, 7.5 threads ready to run on average;
    /// this run had 0.8 of the 2 cores, other work 1.2", and when other work had next to nothing
    /// ([`OTHERS_SHARE_SAID`] of the cores at most), that the run alone needs more.
    pub fn figures(&self) -> String {
        let others = self.others_cores();
        let alone = if others <= OTHERS_SHARE_SAID * f64::from(self.cores) {
            ": the run alone needs more CPU than the machine has"
        } else {
            ""
        };
        let cores = if self.cores == 1 { "core" } else { "cores" };
        format!(
            "{} {cores} {:.0} % busy, {:.1} threads ready to run on average; this run had {:.1} of the {} {cores}, other work {others:.1}{alone}",
            self.cores,
            100.0 * self.busy,
            self.runnable,
            self.own_cores,
            self.cores,
        )
    }
}

/// Readings over a run: each interval's [`Load`], the threads ready to run averaged over the
/// last [`RUNNABLE_SAMPLES`] readings.
#[derive(Debug, Clone, Default)]
pub struct LoadWatch {
    last: Option<CpuSample>,
    runnable: VecDeque<u64>,
}

impl LoadWatch {
    /// Takes a reading; the load since the last one, if there was one.
    pub fn read(&mut self, sample: Option<CpuSample>) -> Option<Load> {
        let now = sample?;
        // The reader itself is running while it reads.
        self.runnable.push_back(now.runnable.saturating_sub(1));
        if self.runnable.len() > RUNNABLE_SAMPLES {
            self.runnable.pop_front();
        }
        let last = self.last.replace(now)?;
        let total = now.total_ticks.saturating_sub(last.total_ticks);
        if total == 0 {
            return None;
        }
        let busy = now.busy_ticks.saturating_sub(last.busy_ticks) as f64 / total as f64;
        // Total ticks are summed over the cores: this process's ticks over them, times the cores.
        let own = now.own_ticks.saturating_sub(last.own_ticks) as f64 / total as f64 * f64::from(now.cores);
        let runnable = self.runnable.iter().sum::<u64>() as f64 / self.runnable.len() as f64;
        Some(Load { cores: now.cores, busy: busy.min(1.0), runnable, own_cores: own })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n\
                        cpu1 50 3 25 400 10 2 1 5 0 0\nintr 1 2 3\nctxt 99\nprocs_running 7\nprocs_blocked 0\n";

    #[test]
    fn proc_stat_gives_busy_and_total_ticks_the_cores_and_the_threads_ready_to_run() {
        // busy = user 100 + nice 5 + system 50 + irq 3 + softirq 2 + steal 10; idle 800, iowait 20.
        assert_eq!(parse_stat(STAT), Some((170, 990, 7, 2)));
        assert_eq!(parse_stat("cpu0 1 2 3\n"), None, "no cpu line");
    }

    #[test]
    fn a_process_name_with_spaces_and_parentheses_does_not_shift_its_fields() {
        let own = "4242 (a (b) c) S 1 4242 4242 0 -1 4194304 100 0 0 0 37 13 0 0 20 0 9 0 1 2 3\n";
        assert_eq!(parse_own_ticks(own), Some(50));
        assert_eq!(parse_parent(own), Some(1));
        assert_eq!(parse_own_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn a_machine_is_overloaded_when_its_cores_are_busy_and_more_threads_wait_than_run() {
        let mut watch = LoadWatch::default();
        let sample = |busy, total, runnable, own| CpuSample {
            busy_ticks: busy,
            total_ticks: total,
            runnable,
            own_ticks: own,
            cores: 2,
        };
        assert_eq!(watch.read(Some(sample(0, 0, 8, 0))), None, "the first reading has nothing to compare");
        let load = watch.read(Some(sample(198, 200, 8, 40))).unwrap();
        assert!((load.busy - 0.99).abs() < 1e-9 && (load.own_cores - 0.4).abs() < 1e-9, "{load:?}");
        assert!((load.runnable - 7.0).abs() < 1e-9, "the reader is not counted: {load:?}");
        assert!(load.overloaded());
        assert!(load.figures().starts_with("2 cores 99 % busy, 7.0 threads ready to run"), "{}", load.figures());
        assert!(load.figures().ends_with("this run had 0.4 of the 2 cores, other work 1.6"), "{}", load.figures());
        // The run had nearly all of it: the run alone needs more.
        let mut watch = LoadWatch::default();
        watch.read(Some(sample(0, 0, 8, 0)));
        let alone = watch.read(Some(sample(200, 200, 8, 190))).unwrap().figures();
        assert!(
            alone.ends_with("1.9 of the 2 cores, other work 0.1: the run alone needs more CPU than the machine has"),
            "{alone}"
        );
        // Busy, but with as many threads ready as cores: a machine at work, not overloaded.
        let mut watch = LoadWatch::default();
        watch.read(Some(sample(0, 0, 3, 0)));
        assert!(!watch.read(Some(sample(200, 200, 3, 180))).unwrap().overloaded());
        // Threads waiting, but the cores idle half the time: not overloaded either.
        let mut watch = LoadWatch::default();
        watch.read(Some(sample(0, 0, 9, 0)));
        assert!(!watch.read(Some(sample(100, 200, 9, 10))).unwrap().overloaded());
    }
}
