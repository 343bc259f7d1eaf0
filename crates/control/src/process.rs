//! The process's own metrics, in the names every Prometheus client library gives them (CPU
//! time, resident memory, open file descriptors), and the build's (`tessera_build_info`), read
//! from the operating system when `/metrics` is asked. A figure the system does not give (no
//! `/proc`) is left out, its family's help and type kept.

use crate::exposition::{Family, Kind};

/// The version of this build, from the workspace's `Cargo.toml`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The short git commit this build was made from, or `unknown` when it was built outside a git
/// checkout (a source tarball) or without git.
pub const GIT_HASH: &str = env!("TESSERA_GIT_HASH");

/// The resident memory of this process in bytes, from `VmRSS` of `/proc/self/status`.
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?;
    kib.trim().parse::<u64>().ok().map(|k| k * 1024)
}

/// The file descriptors this process has open, from `/proc/self/fd` (the one that reads it
/// included, as other Prometheus clients count).
fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

/// The process's and the build's metric families.
pub(crate) fn process_metrics(families: &mut Vec<Family>) {
    let mut family = |name: &str, kind: Kind, help: &str, value: Option<f64>| {
        let mut family = Family::new(name, kind, help);
        if let Some(value) = value {
            family.sample(&[], value);
        }
        families.push(family);
    };
    let cpu = cpu_time::ProcessTime::try_now().ok().map(|t| t.as_duration().as_secs_f64());
    family("process_cpu_seconds_total", Kind::Counter, "CPU time of this process (user and system), in seconds.", cpu);
    family(
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory of this process, in bytes.",
        resident_memory_bytes().map(|b| b as f64),
    );
    family("process_open_fds", Kind::Gauge, "File descriptors this process has open.", open_fds().map(|n| n as f64));
    let mut build =
        Family::new("tessera_build_info", Kind::Gauge, "1, with the version and the git commit of this build.");
    build.sample(
        &[("version", &crate::exposition::label(VERSION)), ("git_hash", &crate::exposition::label(GIT_HASH))],
        1.0,
    );
    families.push(build);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `name` (no labels).
    fn sample(text: &str, name: &str) -> f64 {
        let line = text.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')));
        line.unwrap_or_else(|| panic!("no {name} in\n{text}")).parse().unwrap()
    }

    #[test]
    fn the_process_metrics_are_this_process_s() {
        let page = || {
            let mut families = Vec::new();
            process_metrics(&mut families);
            crate::exposition::encode(families)
        };
        let text = page();
        let fds = sample(&text, "process_open_fds");
        // Three more files open: the count goes up by three.
        let files: Vec<std::fs::File> = (0..3).map(|_| std::fs::File::open("/proc/self/status").unwrap()).collect();
        let more = page();
        drop(files);
        // At least three more: the harness's own threads may open one meanwhile.
        assert!(sample(&more, "process_open_fds") >= fds + 3.0, "{text}\n{more}");
        // A test binary holds more than a megabyte, less than what the machine has.
        let rss = sample(&text, "process_resident_memory_bytes");
        assert!(rss > 1e6 && rss < 1e12, "{rss}");
        assert!(sample(&text, "process_cpu_seconds_total") > 0.0, "{text}");
        assert!(text.contains(&format!("tessera_build_info{{version=\"{VERSION}\",git_hash=\"{GIT_HASH}\"}} 1\n")));
        assert!(!GIT_HASH.is_empty() && GIT_HASH.chars().all(|c| c.is_ascii_alphanumeric()), "{GIT_HASH}");
    }
}
