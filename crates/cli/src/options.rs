//! The options the commands share (the system file and its overrides, the control server) and
//! the operator's signals: what `tessera run`, the unit commands and `tessera agent` read from
//! the command line and the process before the control crate takes over.

use anyhow::{Context, Result, bail};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tessera_config::SystemConfig;
use tessera_control::{ControlConfig, ControlServer, Served};

/// A limit of seconds on the command line: a number above 0 (a negative one is read as a
/// number, to be refused by name, not taken for an option).
pub fn seconds_arg(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!("{text:?} is not a number of seconds above 0 (e.g. 10 or 0.5)")),
    }
}

/// A limit of events or orbits on the command line: a whole number above 0.
pub fn count_arg(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number above 0")),
    }
}

/// Why a `HOST:PORT` argument names no address.
#[derive(Debug, thiserror::Error)]
pub enum SocketAddressError {
    /// The text is not `HOST:PORT`, or its host does not resolve.
    #[error("expected HOST:PORT ({0})")]
    NotHostPort(std::io::Error),
    /// The host resolves, but to no address.
    #[error("{0} resolves to no address")]
    NoAddress(String),
}

/// A `HOST:PORT` argument, the host a name or an IP address: the first address it resolves to.
pub fn socket_address(text: &str) -> Result<SocketAddr, SocketAddressError> {
    use std::net::ToSocketAddrs;
    let mut addresses = text.to_socket_addrs().map_err(SocketAddressError::NotHostPort)?;
    addresses.next().ok_or_else(|| SocketAddressError::NoAddress(text.to_owned()))
}

/// The exit status of a run cut short by a second Ctrl-C (128 + SIGINT, as shells report it).
pub const CUT_SHORT_EXIT: u8 = 130;
/// Counts the operator's SIGINT and SIGTERM to this process. The first asks for a drain and
/// the second cuts the run short; each command bounds the waits that follow. A third leaves at
/// once (exit [`CUT_SHORT_EXIT`]), whatever still runs, so that no state ignores an operator.
pub fn count_interrupts() -> Result<Arc<AtomicU32>> {
    let interrupts = Arc::new(AtomicU32::new(0));
    let counter = interrupts.clone();
    ctrlc::set_handler(move || {
        if counter.fetch_add(1, Ordering::SeqCst) + 1 >= 3 {
            say_err!("tessera: a third interrupt: leaving at once");
            std::process::exit(i32::from(CUT_SHORT_EXIT));
        }
    })
    .context("installing the handler of SIGINT and SIGTERM")?;
    Ok(interrupts)
}

/// The options `tessera run` and the unit commands share.
#[derive(clap::Args, Debug, Clone)]
pub struct SystemArgs {
    /// Stop after this many events (per FED stream); overrides the system file.
    #[arg(long, allow_negative_numbers = true, value_parser = count_arg)]
    pub events: Option<u64>,
    /// Stop after this many seconds; overrides the system file.
    #[arg(long, allow_negative_numbers = true, value_parser = seconds_arg)]
    pub seconds: Option<f64>,
    /// Put every unit's files under this directory; overrides the system file.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

/// How long a front-end emulator (`tessera ferol`, `tessera dth`) waits for its receiver.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct ConnectWaitArgs {
    /// When sending over TCP: how long to wait for the receiver (the RU) to listen, in seconds
    /// (a refused connection is tried again meanwhile: a system's processes may start in any
    /// order); 0 tries once.
    #[arg(long, default_value_t = tessera_emu::sender::RECEIVER_WAIT.as_secs(), conflicts_with = "output")]
    pub connect_wait_s: u64,
}

impl ConnectWaitArgs {
    /// The wait.
    pub fn wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.connect_wait_s)
    }

    /// Streams over TCP to `address`, with this wait.
    pub fn sink(&self, address: &str) -> tessera_emu::sender::Sink {
        tessera_emu::sender::Sink::Connect { address: address.to_owned(), wait: self.wait() }
    }
}

/// Where a process serves its units' metrics and figures.
#[derive(clap::Args, Debug, Clone)]
pub struct ControlArgs {
    /// Serve the units' metrics (`/metrics`, Prometheus) and figures (`/api/v1/units`) here;
    /// port 0 takes any free port. An address other than loopback needs `--control-token`.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub control: SocketAddr,
    /// The token every control request must bring (`Authorization: Bearer TOKEN`); also read
    /// from the environment variable TESSERA_CONTROL_TOKEN.
    #[arg(long, env = "TESSERA_CONTROL_TOKEN", hide_env_values = true)]
    pub control_token: Option<String>,
    /// Write the control server's address into this file once it listens (for a supervisor
    /// such as `tessera agent` that starts units with port 0).
    #[arg(long)]
    pub control_file: Option<PathBuf>,
}

/// Starts the control server of this process (its units, their actions and its system) and says
/// where it is.
pub fn serve_control(args: &ControlArgs, served: Served) -> Result<ControlServer> {
    let config = ControlConfig { listen: args.control, token: args.control_token.clone() };
    let server = ControlServer::start(&config, served).context("--control")?;
    if let Some(path) = &args.control_file {
        server.write_address(path).with_context(|| format!("--control-file {}", path.display()))?;
    }
    tracing::info!(address = %server.local_addr(), "monitoring: http://{}/ (the dashboard), /metrics and /api/v1/units", server.local_addr());
    Ok(server)
}

/// Loads the system file (or the default system) and applies the command line.
pub fn load(system: Option<&Path>, args: &SystemArgs) -> Result<SystemConfig> {
    let mut cfg = match system {
        Some(path) => SystemConfig::load(path)?,
        None => SystemConfig::default(),
    };
    if args.events.is_some() || args.seconds.is_some() {
        cfg.run.events = args.events;
        cfg.run.seconds = args.seconds;
    }
    if let Some(s) = cfg.run.seconds
        && !(s.is_finite() && s > 0.0)
    {
        bail!("--seconds {s}: expected a number of seconds above 0");
    }
    if args.output.is_some() {
        cfg.run.output = args.output.clone();
    }
    // The command line may have made a file that was right wrong: say every problem, as a check does.
    let problems = cfg.problems();
    if !problems.is_empty() {
        let name = system.map_or("the default system".into(), |p| p.display().to_string());
        let lines: Vec<String> =
            problems.iter().map(|e| format!("{name} with the command line applied: {e}")).collect();
        bail!("{}", lines.join("\n"));
    }
    Ok(cfg)
}
