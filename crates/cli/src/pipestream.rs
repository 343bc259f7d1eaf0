//! `tessera pipestream`: the all-to-all network benchmark's instance and its scan driver.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tessera_pipestream::config::PipestreamConfig;
use tessera_pipestream::instance::Instance;
use tessera_pipestream::report::count;
use tessera_pipestream::scan::{Scan, ScanError};

/// What `tessera pipestream` does.
#[derive(clap::Subcommand, Debug)]
pub enum PipestreamAction {
    /// Measure every point of a pipestream file (message sizes × thread counts × topologies),
    /// pipestream and its baselines in the same run; print the table and leave CSV, JSON and
    /// SVG plots in the output directory. Exit status 1 if a message was lost, repeated or
    /// damaged; Ctrl-C ends it at its next step (status 130), leaving the points measured.
    Scan {
        /// The pipestream file.
        config: PathBuf,
        /// Where the results go (overrides the file's `output`).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Check a pipestream file without running anything (as `tessera config check` does);
    /// exit status 1 on any mistake.
    Check {
        /// The pipestream file.
        config: PathBuf,
    },
    /// Serve one instance: a client, a server or both, driven over REST by a scan (or an
    /// operator) through its states. Runs until Ctrl-C or SIGTERM, or until the process that
    /// started it is gone.
    Instance {
        /// The instance's name, in its figures.
        #[arg(long)]
        name: String,
        /// Where to serve its REST API (loopback only).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// A file to write the API's address into, once serving.
        #[arg(long)]
        control_file: Option<PathBuf>,
    },
}

/// Carries out `action`.
pub fn pipestream(action: PipestreamAction) -> Result<ExitCode> {
    match action {
        PipestreamAction::Check { config } => Ok(crate::config::pipestream_check(&config)),
        PipestreamAction::Scan { config, output } => {
            let mut cfg = match PipestreamConfig::load(&config) {
                Ok(cfg) => cfg,
                Err(errors) => {
                    say_err!("{errors}");
                    return Ok(ExitCode::from(2));
                }
            };
            if let Some(output) = output {
                cfg.output = output;
            }
            let program = std::env::current_exe().context("finding this program, to start the instances")?;
            let output = cfg.output.clone();
            // Ctrl-C or SIGTERM ends the scan at its next step, its instances ended.
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
            let outcome = match Scan::new(&cfg, &output, &program, &stop).run(|step| say_err!("pipestream: {step}")) {
                Ok(outcome) => outcome,
                Err(ScanError::Stopped) => {
                    say_err!("tessera: {}", ScanError::Stopped);
                    return Ok(ExitCode::from(130));
                }
                Err(e) => return Err(e.into()),
            };
            say_part!("{}", outcome.table);
            say!("results: {}", outcome.csv.display());
            for plot in &outcome.plots {
                say!("plot: {}", plot.display());
            }
            let errors: u64 = outcome.results.iter().map(|r| r.errors).sum();
            if errors > 0 {
                say!("{} lost, repeated, damaged or unaccounted for: see the errors column", count(errors, "message"));
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        PipestreamAction::Instance { name, listen, control_file } => {
            let instance = Instance::new(&name);
            let served = instance.serve(listen).map_err(anyhow::Error::msg)?;
            if let Some(path) = &control_file {
                let partial = path.with_extension("partial");
                std::fs::write(&partial, format!("{}\n", served.local_addr()))
                    .and_then(|()| std::fs::rename(&partial, path))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            say_err!("pipestream instance {name}: serving on http://{}", served.local_addr());
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
            // A driver or agent that dies without ending its instances leaves them to init:
            // an instance whose parent changed has nobody to drive it, and leaves.
            let parent = std::os::unix::process::parent_id();
            while !stop.load(Ordering::SeqCst) && std::os::unix::process::parent_id() == parent {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            instance.disconnect();
            Ok(ExitCode::SUCCESS)
        }
    }
}
