//! The BU's file broker under many readers (issue #17 item 3): files granted per second to 1,
//! 64 and 512 readers at once.
//!
//! Each case writes a sample run of small files (one event each, so that the figure is the
//! broker's and not the readers') to a fresh directory of the RAM disk, starts a broker on
//! loopback, and runs that many readers ([`run_reader`], the rules of CMS's HLT: one keep-alive
//! connection each, every file's events checked, then deleted) on threads of this process until
//! every one has its `EOR`. The figure is files granted over the time from the first request to
//! the last reader's end. The baseline, measured in the same run, is (a) **local claims**: one
//! thread claiming every file of the same run directly in the directory ([`Claimer`]), as a
//! Tessera FU on the BU's host does, without HTTP.

use crate::BenchError;
use crate::fu::scratch_dir;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tessera_fu::broker::{Broker, BrokerConfig};
use tessera_fu::claim::Claimer;
use tessera_fu::reader::{ReaderConfig, run_reader};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

const RUN: u32 = 1;

/// One case's figure.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantRate {
    /// Readers at once (0: the local-claims baseline).
    pub readers: usize,
    /// Files granted (or claimed).
    pub files: u64,
    /// Wall time.
    pub seconds: f64,
}

impl GrantRate {
    /// Files per second.
    pub fn per_second(&self) -> f64 {
        self.files as f64 / self.seconds.max(1e-9)
    }
}

/// The sample run of every case: `files` files of one event.
fn sample(files: u32) -> Result<tempfile::TempDir, BenchError> {
    let dir = scratch_dir("tessera-bench-broker-")?;
    let lumi_sections = 8;
    let spec = SampleSpec {
        run: RUN,
        lumi_sections,
        events_per_lumi_section: files.div_ceil(lumi_sections),
        events_per_file: 1,
        fed_ids: vec![0],
        fed_payload_bytes_mean: 64,
        ..SampleSpec::default()
    };
    write_sample_run(dir.path(), &spec).map_err(|e| BenchError::BadCase(format!("writing the sample run: {e}")))?;
    Ok(dir)
}

/// (a): one thread claiming every file in the directory.
fn local_claims(files: u32) -> Result<GrantRate, BenchError> {
    let dir = sample(files)?;
    let claimer = Claimer::new(dir.path(), RUN, "bench", std::process::id())?;
    let started = Instant::now();
    let mut claimed = 0u64;
    loop {
        let state = claimer.listing()?;
        let Some(&first) = state.unclaimed.first() else { break };
        if claimer.claim_first(&[first])?.is_some() {
            claimed += 1;
        }
    }
    Ok(GrantRate { readers: 0, files: claimed, seconds: started.elapsed().as_secs_f64() })
}

/// `readers` readers through a broker.
fn through_broker(files: u32, readers: usize) -> Result<GrantRate, BenchError> {
    let dir = sample(files)?;
    let broker = Broker::start(BrokerConfig { max_connections: readers + 16, ..BrokerConfig::new(dir.path(), RUN) })
        .map_err(|source| BenchError::Io { what: "starting the broker".into(), source })?;
    let cfg = ReaderConfig {
        broker: broker.local_addr(),
        broker_host: "127.0.0.1".into(),
        bu_dir: dir.path().to_owned(),
        run: RUN,
        pid: 0,
        stop_ls: None,
        file_delay: Duration::ZERO,
        timeout: Duration::from_secs(600),
    };
    let started = Instant::now();
    let threads: Vec<_> = (0..readers)
        .map(|k| {
            let cfg = ReaderConfig { pid: 100_000 + k as u32, ..cfg.clone() };
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || run_reader(&cfg, &AtomicBool::new(false)))
                .map_err(|source| BenchError::Io { what: "starting a reader".into(), source })
        })
        .collect::<Result<_, _>>()?;
    let mut read = 0;
    for thread in threads {
        let report = thread
            .join()
            .map_err(|_| BenchError::System("a reader panicked".into()))?
            .map_err(|e| BenchError::System(e.to_string()))?;
        if let Some(deviation) = report.deviations.first() {
            return Err(BenchError::System(format!("a reader met a deviation: {deviation}")));
        }
        read += report.files;
    }
    let seconds = started.elapsed().as_secs_f64();
    if read != u64::from(files) {
        return Err(BenchError::System(format!("the readers read {read} of {files} files")));
    }
    Ok(GrantRate { readers, files: read, seconds })
}

/// Every case: the baseline, then 1, 64 and 512 readers (`files` files each).
pub fn run(files: u32, progress: &mut dyn FnMut(&str)) -> Result<Vec<GrantRate>, BenchError> {
    progress("(a) local claims, one thread");
    let mut rates = vec![local_claims(files)?];
    for readers in [1, 64, 512] {
        progress(&format!("{readers} readers through the broker"));
        rates.push(through_broker(files, readers)?);
    }
    Ok(rates)
}

/// The table: files per second, and each case's ratio to the baseline (a) and to one reader.
pub fn report(rates: &[GrantRate]) -> String {
    let base = rates.iter().find(|r| r.readers == 0).map_or(1.0, GrantRate::per_second);
    let one = rates.iter().find(|r| r.readers == 1).map_or(1.0, GrantRate::per_second);
    let mut out = String::from("case                              files/s   files   vs (a)   vs 1 reader\n");
    for r in rates {
        let name = if r.readers == 0 {
            "(a) local claims, one thread".to_owned()
        } else {
            format!("{} readers through the broker", r.readers)
        };
        out.push_str(&format!(
            "{name:<32} {:>9.0} {:>7} {:>8.2} {:>13}\n",
            r.per_second(),
            r.files,
            r.per_second() / base,
            if r.readers == 0 { "-".to_owned() } else { format!("{:.2}", r.per_second() / one) }
        ));
    }
    out
}
