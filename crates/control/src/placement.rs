//! Where every process of a run across hosts goes and with which command line: the filter farm
//! (FUs or readers, and the mergers), the BUs, the RUs, the EVM and the front-end emulators, in
//! the order they start ([`placement`]).

use std::path::Path;
use tessera_config::SystemConfig;

/// The command line (after `tessera`) of an FU of BU `i` of a system whose output is under a
/// directory, reading the BU's directory or, given, its file broker (`HOST:PORT`) from another
/// host.
pub type FuArgs = fn(&SystemConfig, usize, &Path, Option<String>) -> Vec<String>;

/// What a placed process is in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An FU process of BU i.
    Fu(usize),
    /// The mergers.
    Merger,
    /// BU i.
    Bu(usize),
    /// RU i (0 is the EVM's).
    Ru(usize),
    /// The front-end emulator of RU i.
    Trigger(usize),
}

impl Role {
    /// Whether it is an event-builder unit with a control server.
    pub fn is_unit(self) -> bool {
        matches!(self, Role::Bu(_) | Role::Ru(_))
    }

    /// Whether a crashed process of this role can be started again without loss: a BU (the
    /// protocol reassigns its events and its restart recovers its files), an FU (its claims
    /// go back to the pool) and the mergers (each step is idempotent). An RU or the EVM holds
    /// the only copy of its fragments: its crash ends the run.
    pub fn restartable(self) -> bool {
        matches!(self, Role::Bu(_) | Role::Fu(_) | Role::Merger)
    }
}

/// One process of the run, on one host.
#[derive(Debug, Clone)]
pub struct Placed {
    /// Its name: a unit's name in the system file, or one made for an FU, the mergers or a
    /// front-end emulator.
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// What it is.
    pub role: Role,
    /// Its command line, after `tessera`.
    pub args: Vec<String>,
}

/// Every process of the run, in the order they start.
pub fn placement(cfg: &SystemConfig, output: &Path, fu_args: FuArgs) -> Vec<Placed> {
    let mut placed = Vec::new();
    let unit_args = |command: &str, name: Option<&str>| {
        let mut args = vec![command.to_owned(), "--system".to_owned(), "{system}".to_owned()];
        if let Some(name) = name {
            args.extend(["--name".to_owned(), name.to_owned()]);
        }
        args.extend(
            ["--control", "127.0.0.1:0", "--control-file", "{control_file}", "--json", "--wait-for-enable"]
                .into_iter()
                .map(str::to_owned),
        );
        args
    };
    let readers = cfg.fu.read_by_readers();
    if cfg.fu.enabled {
        for (i, bu) in cfg.bus.iter().enumerate() {
            let fu_host = bu.fu_host().to_owned();
            let broker = (fu_host != bu.host).then(|| format!("{}:{}", bu.host, bu.broker_port.unwrap_or(0)));
            for k in 0..cfg.fu.processes_per_bu {
                let args = if readers {
                    // Through the BU's broker (a port, by `require_ports`), reading the files
                    // where the reader's host sees the BU's directory.
                    let broker = format!("{}:{}", bu.host, bu.broker_port.unwrap_or(0));
                    let bu_dir = cfg.bu_directory(i, output).display().to_string();
                    let run = cfg.run.number.to_string();
                    ["reader", "--broker", &broker, "--bu-dir", &bu_dir, "--run", &run].map(str::to_owned).to_vec()
                } else {
                    fu_args(cfg, i, output, broker.clone())
                };
                let kind = if readers { "reader" } else { "fu" };
                placed.push(Placed {
                    name: format!("{}-{kind}{k}", bu.name),
                    host: fu_host.clone(),
                    role: Role::Fu(i),
                    args,
                });
            }
        }
        if cfg.fu.merge && !readers {
            let host = cfg.controller.merger_host.clone().unwrap_or_else(|| cfg.bus[0].fu_host().to_owned());
            let args = ["merge", "--system", "{system}", "--output"].into_iter().map(str::to_owned);
            placed.push(Placed {
                name: "mergers".into(),
                host,
                role: Role::Merger,
                args: args.chain([output.display().to_string()]).collect(),
            });
        }
    }
    for (i, bu) in cfg.bus.iter().enumerate() {
        placed.push(Placed {
            name: bu.name.clone(),
            host: bu.host.clone(),
            role: Role::Bu(i),
            args: unit_args("bu", Some(&bu.name)),
        });
    }
    for (i, ru) in cfg.rus.iter().enumerate().skip(1) {
        placed.push(Placed {
            name: ru.name.clone(),
            host: ru.host.clone(),
            role: Role::Ru(i),
            args: unit_args("ru", Some(&ru.name)),
        });
    }
    placed.push(Placed {
        name: cfg.rus[0].name.clone(),
        host: cfg.rus[0].host.clone(),
        role: Role::Ru(0),
        args: unit_args("evm", None),
    });
    for (i, ru) in cfg.rus.iter().enumerate().filter(|(_, r)| r.emulated) {
        let args = ["ferol", "--system", "{system}", "--ru", &ru.name].into_iter().map(str::to_owned).collect();
        placed.push(Placed {
            name: format!("trigger-{}", ru.name),
            host: ru.host.clone(),
            role: Role::Trigger(i),
            args,
        });
    }
    placed
}
