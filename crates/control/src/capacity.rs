//! Whether this machine can run a system whose units all run on it (`tessera run`): the threads,
//! processes, memory maps, open files and memory that its units, front ends and filter farm
//! need, against what the machine allows. A system past any of them would start a thread per
//! unit until the kernel refuses one, deep into the start: it is refused before, each limit with
//! its arithmetic.

use tessera_config::SystemConfig;

/// Threads of a BU besides its writers: its loop, its disk watcher and its bookkeeping thread.
const BU_THREADS: u64 = 3;
/// Threads of the process besides its units and front ends: the control server's runtime, the
/// supervisor, the brokers' and the signal handler's (a generous count).
const PROCESS_THREADS: u64 = 16;
/// Threads of an FU process, and of the mergers' process.
const FU_THREADS: u64 = 4;
/// Memory an FU process takes, in bytes (its menu, its output buffers, its reads).
const FU_BYTES: u64 = 64 << 20;
/// Memory maps a thread takes: its stack and guard page, its signal stack and guard page.
const MAPS_PER_THREAD: u64 = 4;
/// Memory maps of a process besides its threads': its binary, libraries, heap arenas.
const PROCESS_MAPS: u64 = 2_000;
/// Memory of an emulated front-end stream: its batching buffer and its generator's fragment.
const STREAM_BYTES: u64 = (256 << 10) + (1 << 20);
/// Open files of the process besides its sockets and files per unit.
const PROCESS_FILES: u64 = 256;
/// Open files of a BU: its writers' files, its directory watcher, its bookkeeping.
const BU_FILES: u64 = 32;

/// What a system run in one process needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// Threads of the process that runs the units and front ends.
    pub threads: u64,
    /// Processes of the filter farm (FUs or readers, and the mergers), besides that one.
    pub processes: u64,
    /// Memory maps of the process.
    pub maps: u64,
    /// Open files of the process (sockets at both ends of every stream and link, files).
    pub open_files: u64,
    /// Memory: the RUs' receive memory (taken at the start), the BUs' stores (their bound), the
    /// front ends' buffers and the filter farm, in bytes.
    pub memory_bytes: u64,
    /// Of it, the RUs' receive memory.
    pub receive_bytes: u64,
}

/// What a system file asks of the machine that runs every unit of it.
pub fn needs(cfg: &SystemConfig) -> Needs {
    let n_ru = cfg.rus.len() as u64;
    let n_bu = cfg.bus.len() as u64;
    let streams: u64 = cfg.rus.iter().filter(|r| r.emulated).map(|r| r.feds.len() as u64).sum();
    let feds: u64 = cfg.rus.iter().map(|r| r.feds.len() as u64).sum();
    let threads = n_ru + n_bu * (BU_THREADS + u64::from(cfg.bu.writer_threads)) + streams + PROCESS_THREADS;
    let processes = if cfg.fu.enabled { n_bu * u64::from(cfg.fu.processes_per_bu) + 1 } else { 0 };
    let receive_bytes: u64 = (0..cfg.rus.len())
        .map(|i| {
            let p = cfg.ru_params(i);
            (p.chunk_bytes as u64)
                .saturating_mul(u64::from(p.chunks_per_fed))
                .saturating_mul(cfg.rus[i].feds.len() as u64)
        })
        .fold(0, u64::saturating_add);
    let memory_bytes = receive_bytes
        .saturating_add(n_bu.saturating_mul(cfg.bu.frame_store_bytes))
        .saturating_add(streams * STREAM_BYTES)
        .saturating_add(processes * FU_BYTES);
    // Every stream and link has both its ends in this one process.
    let links = 2 * (n_ru * n_bu + n_bu + n_ru);
    let open_files = 2 * feds + links + n_bu * BU_FILES + PROCESS_FILES;
    Needs {
        threads,
        processes,
        maps: threads * MAPS_PER_THREAD + PROCESS_MAPS,
        open_files,
        memory_bytes,
        receive_bytes,
    }
}

/// What this machine allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    /// Memory in all (`MemTotal`), in bytes.
    pub memory_bytes: u64,
    /// Threads the kernel runs at most (`kernel.threads-max`).
    pub threads_max: u64,
    /// Processes and threads this user may have at once (`ulimit -u`, soft).
    pub user_tasks_max: u64,
    /// Memory maps a process may have (`vm.max_map_count`).
    pub maps_max: u64,
    /// Files this process may open (`ulimit -n`, soft; `tessera` raises it to the hard limit as
    /// it starts, [`raise_open_files_limit`]).
    pub open_files_max: u64,
}

impl Machine {
    /// This machine, read from `/proc` and the process's limits; `None` where they cannot be
    /// read (not Linux).
    pub fn this() -> Option<Machine> {
        use rustix::process::{Resource, getrlimit};
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let memory_bytes = read("/proc/meminfo")?
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_ascii_whitespace().next()?.parse::<u64>().ok())?
            * 1024;
        let number = |path: &str| read(path).and_then(|t| t.trim().parse::<u64>().ok());
        let limit = |r: Resource| getrlimit(r).current.unwrap_or(u64::MAX);
        Some(Machine {
            memory_bytes,
            threads_max: number("/proc/sys/kernel/threads-max")?,
            user_tasks_max: limit(Resource::Nproc),
            maps_max: number("/proc/sys/vm/max_map_count")?,
            open_files_max: limit(Resource::Nofile),
        })
    }
}

/// Raises this process's open-file limit to its hard limit, as a server that holds a socket per
/// front end should: the soft limit of many machines (1024) is far below what the kernel allows.
pub fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(Resource::Nofile, rustix::process::Rlimit { current: limit.maximum, ..limit });
    }
}

/// What the system needs beyond what the machine allows, one sentence each with its
/// arithmetic; empty when it fits.
pub fn beyond(needs: &Needs, machine: &Machine) -> Vec<String> {
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let mut said = Vec::new();
    if needs.memory_bytes > machine.memory_bytes {
        said.push(format!(
            "memory: the RUs' receive memory ({:.1} GiB: ru.chunk_bytes × ru.chunks_per_fed × FEDs, summed over the \
             RUs), the BUs' stores (bus × bu.frame_store_bytes), the front ends' buffers and the filter farm need \
             {:.1} GiB, and this machine has {:.1} GiB",
            gib(needs.receive_bytes),
            gib(needs.memory_bytes),
            gib(machine.memory_bytes)
        ));
    }
    let tasks = needs.threads + needs.processes * FU_THREADS;
    let task_limit = machine.threads_max.min(machine.user_tasks_max);
    if tasks > task_limit {
        said.push(format!(
            "threads: a thread per RU, {BU_THREADS} plus bu.writer_threads per BU, one per emulated FED stream and \
             {PROCESS_THREADS} more make {} threads, and the filter farm's {} processes {} more: {tasks}, where this \
             machine allows {task_limit} (kernel.threads-max {}, ulimit -u {})",
            needs.threads,
            needs.processes,
            needs.processes * FU_THREADS,
            machine.threads_max,
            machine.user_tasks_max
        ));
    }
    if needs.maps > machine.maps_max {
        said.push(format!(
            "memory maps: {} threads × {MAPS_PER_THREAD} maps (stack, signal stack, their guard pages) + \
             {PROCESS_MAPS} = {}, where vm.max_map_count allows {}",
            needs.threads, needs.maps, machine.maps_max
        ));
    }
    if needs.open_files > machine.open_files_max {
        said.push(format!(
            "open files: both ends of every FED stream and protocol link in one process, and the BUs' files, make \
             {}, where ulimit -n allows {}",
            needs.open_files, machine.open_files_max
        ));
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_config::{BuSection, RuSection};

    fn system(n_bu: usize, feds_per_ru: u16) -> SystemConfig {
        SystemConfig {
            rus: vec![
                RuSection::new("ru0", std::iter::once(1024).chain(0..feds_per_ru).collect()),
                RuSection::new("ru1", (feds_per_ru..2 * feds_per_ru).collect()),
            ],
            bus: (0..n_bu).map(|b| BuSection::new(&format!("bu{b}"))).collect(),
            ..SystemConfig::default()
        }
    }

    const LAPTOP: Machine = Machine {
        memory_bytes: 16 << 30,
        threads_max: 100_000,
        user_tasks_max: 60_000,
        maps_max: 65_530,
        open_files_max: 20_000,
    };

    #[test]
    fn the_default_system_fits_a_laptop() {
        let needs = needs(&SystemConfig::default());
        assert!(beyond(&needs, &LAPTOP).is_empty(), "{needs:?}: {:?}", beyond(&needs, &LAPTOP));
    }

    #[test]
    fn two_thousand_bus_are_refused_with_the_arithmetic_of_each_limit_they_pass() {
        let said = beyond(&needs(&system(2000, 4)), &LAPTOP);
        let text = said.join("\n");
        assert!(text.contains("memory:") && text.contains("need 750.2 GiB"), "{text}");
        assert!(text.contains("open files:") && text.contains("ulimit -n allows 20000"), "{text}");
        // Forty thousand BUs pass the threads and the memory maps too.
        let text = beyond(&needs(&system(40_000, 4)), &LAPTOP).join("\n");
        assert!(text.contains("threads:") && text.contains("memory maps:"), "{text}");
    }

    #[test]
    fn a_terabyte_chunk_is_refused_for_memory() {
        let mut cfg = system(2, 4);
        cfg.ru.chunk_bytes = 1 << 40;
        let said = beyond(&needs(&cfg), &LAPTOP);
        assert_eq!(said.len(), 1, "{said:?}");
        // 9 FEDs × 8 chunks × 1 TiB.
        assert!(said[0].contains("receive memory (73728.0 GiB"), "{}", said[0]);
    }

    #[test]
    fn a_soft_limit_of_1024_files_does_not_hold_512_fed_streams() {
        let machine = Machine { open_files_max: 1024, ..LAPTOP };
        let said = beyond(&needs(&system(2, 256)), &machine);
        assert!(said.iter().any(|s| s.starts_with("open files:")), "{said:?}");
    }
}
