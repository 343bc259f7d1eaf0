//! Deployments rendered from one Tessera system file, so that nothing is described twice:
//! [`kubernetes()`] manifests (a ConfigMap with the system file, a Secret with the run's keys, a
//! Pod per unit pinned to its node, the FUs as a Deployment per BU, the mergers) and [`systemd`]
//! units per host.
//!
//! Both start from [`Deployment::plan`]: the system file made ready to run on many hosts at once.
//! Every port the file leaves to the system (`0`) is given a fixed one, since units on other hosts
//! must know where to call, and every BU gets a file broker, through which its FUs read.

#![warn(missing_docs)]

pub mod kubernetes;
mod systemd;

pub use kubernetes::{BuStorage, KubernetesOptions, kubernetes};
pub use systemd::{SystemdOptions, UnitFile, systemd};

use std::collections::BTreeSet;
use tessera_config::SystemConfig;

/// Where the rendered system file lives inside every container and on every host.
pub const SYSTEM_PATH: &str = "/etc/tessera/system.yaml";
/// Where the rendered menu lives, when the system names one.
pub const MENU_PATH: &str = "/etc/tessera/menu.yaml";
/// How long a deployed front end waits for its RU to listen, in seconds (`tessera ferol
/// --connect-wait-s`). Its service or pod is never restarted, since its streams would start
/// again at the run's first event: it waits as long as its RU's host may take to start it (a
/// node pulling the image, a unit restarted after a failure).
pub const FRONT_END_WAIT_S: u64 = 300;

/// What a deployment cannot be rendered from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    /// The system file cannot run across hosts as written.
    #[error("{key}: {why}")]
    System {
        /// The key at fault.
        key: String,
        /// Why.
        why: String,
    },
    /// No free port was left above the base port.
    #[error("no free port is left at or above {0} for the ports the file leaves to the system")]
    Ports(u16),
}

/// One unit to start: its name, its role and the host it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The unit's name (`evm`, an RU's or a BU's name).
    pub name: String,
    /// What it is.
    pub role: Role,
    /// Its host (a node name, or an address).
    pub host: String,
    /// The port of its control server (health, metrics).
    pub control_port: u16,
}

/// What a placed process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The EVM and RU 0.
    Evm,
    /// Another RU (`index` in `rus`).
    Ru {
        /// Its index in `rus`.
        index: usize,
    },
    /// A BU (`index` in `bus`).
    Bu {
        /// Its index in `bus`.
        index: usize,
    },
}

/// A system ready to deploy: the file with every port fixed, and where each unit runs.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The system as deployed: the file's own keys, ports fixed, brokers on.
    pub system: SystemConfig,
    /// The units, the EVM first, then the other RUs, then the BUs.
    pub units: Vec<Placement>,
    /// The menu file the system named, if any: deployed at [`MENU_PATH`].
    pub menu: Option<std::path::PathBuf>,
}

impl Deployment {
    /// `cfg` made ready for many hosts: every port `0` gets the next free one from `base_port`
    /// (one not named elsewhere in the file), every BU without a broker gets one, and each unit
    /// gets a control port of its own. The run's output directory becomes `output`.
    pub fn plan(cfg: &SystemConfig, base_port: u16, output: &str) -> Result<Deployment, DeployError> {
        let mut system = cfg.clone();
        system.run.output = Some(output.into());
        let menu = cfg.fu.menu.clone();
        system.fu.menu = menu.as_ref().map(|_| MENU_PATH.into());
        // Units are started by the deployment, not by agents.
        system.controller.agent_port = None;
        let mut taken: BTreeSet<u16> = BTreeSet::new();
        if system.evm.port != 0 {
            taken.insert(system.evm.port);
        }
        for ru in &system.rus {
            taken.extend([ru.ferol_port, ru.control_port].into_iter().filter(|&p| p != 0));
        }
        for bu in &system.bus {
            taken.extend([bu.data_port].into_iter().chain(bu.broker_port).filter(|&p| p != 0));
        }
        let mut next = base_port;
        let mut fresh = || -> Result<u16, DeployError> {
            while taken.contains(&next) {
                next = next.checked_add(1).ok_or(DeployError::Ports(base_port))?;
            }
            let port = next;
            taken.insert(port);
            Ok(port)
        };
        if system.evm.port == 0 {
            system.evm.port = fresh()?;
        }
        for ru in &mut system.rus {
            if ru.ferol_port == 0 {
                ru.ferol_port = fresh()?;
            }
            if ru.control_port == 0 {
                ru.control_port = fresh()?;
            }
        }
        for bu in &mut system.bus {
            if bu.data_port == 0 {
                bu.data_port = fresh()?;
            }
            if bu.broker_port.is_none_or(|p| p == 0) {
                bu.broker_port = Some(fresh()?);
            }
        }
        let mut units = vec![Placement {
            name: "evm".into(),
            role: Role::Evm,
            host: system.rus[0].host.clone(),
            control_port: fresh()?,
        }];
        for (index, ru) in system.rus.iter().enumerate().skip(1) {
            units.push(Placement {
                name: ru.name.clone(),
                role: Role::Ru { index },
                host: ru.host.clone(),
                control_port: fresh()?,
            });
        }
        for (index, bu) in system.bus.iter().enumerate() {
            units.push(Placement {
                name: bu.name.clone(),
                role: Role::Bu { index },
                host: bu.host.clone(),
                control_port: fresh()?,
            });
        }
        Ok(Deployment { system, units, menu })
    }

    /// The command line of `unit`, after the program name.
    pub fn unit_args(&self, unit: &Placement) -> Vec<String> {
        let mut args: Vec<String> = match unit.role {
            Role::Evm => vec!["evm".into()],
            Role::Ru { .. } => vec!["ru".into(), "--name".into(), unit.name.clone()],
            // A BU started again after a crash recovers its run directory (`--restart`); on a
            // first start there is none, and it starts afresh.
            Role::Bu { .. } => vec!["bu".into(), "--name".into(), unit.name.clone(), "--restart".into()],
        };
        args.extend([
            "--system".into(),
            SYSTEM_PATH.into(),
            "--control".into(),
            format!("0.0.0.0:{}", unit.control_port),
            "--log-format".into(),
            "json".into(),
        ]);
        args
    }

    /// The system file as deployed, as YAML: every key written out.
    pub fn system_yaml(&self) -> String {
        self.system.to_yaml()
    }

    /// Whether a host is this machine's loopback (a laptop system).
    pub fn is_loopback(host: &str) -> bool {
        host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()) || host == "localhost"
    }

    /// Bytes of a BU's RAM disk: the files of the lumi sections its farm may lag behind
    /// (`fu.max_queued_lumi_sections`, and the one being written) at the trigger rate (the
    /// level-1 rate when free running), of events of the fragments' mean sizes, its share of the
    /// BUs', below its high-water mark; at least 1 GiB, rounded up to whole GiB.
    pub fn ramdisk_bytes(&self) -> u64 {
        let s = &self.system;
        let event_bytes: f64 = s.rus.iter().map(|ru| ru.fragment_size.mean_bytes() * ru.feds.len() as f64).sum();
        let rate_hz = s.trigger.paced_rate_hz().unwrap_or(tessera_config::LEVEL1_RATE_HZ);
        let ls_seconds = s.run.orbits_per_lumi_section as f64 * tessera_formats::fed::ORBIT_SECONDS;
        let lumi_sections = f64::from(s.fu.max_queued_lumi_sections) + 1.0;
        let share = event_bytes * rate_hz * ls_seconds * lumi_sections / s.bus.len() as f64;
        let high = f64::from(s.bu.ramdisk_high_water_percent.max(1)) / 100.0;
        let bytes = ((share / high) as u64).max(1 << 30);
        bytes.div_ceil(1 << 30) << 30
    }

    /// Bytes a unit's process needs besides a RAM disk: its receive memory or frame store and
    /// writer buffers, with 256 MiB for the rest of the process.
    pub fn memory_bytes(&self, unit: &Placement) -> u64 {
        let s = &self.system;
        let base = 256u64 << 20;
        match unit.role {
            Role::Evm => ru_memory(s, 0) + base,
            Role::Ru { index } => ru_memory(s, index) + base,
            Role::Bu { .. } => s.bu.frame_store_bytes + u64::from(s.bu.writer_threads) * (64 << 20) + base,
        }
    }

    /// CPU cores a unit's process uses: its loop, and a BU's writer threads.
    pub fn cpus(&self, unit: &Placement) -> u32 {
        match unit.role {
            Role::Evm | Role::Ru { .. } => 2,
            Role::Bu { .. } => 1 + self.system.bu.writer_threads,
        }
    }
}

/// Receive memory of RU `index`: its chunks, per FED.
fn ru_memory(s: &SystemConfig, index: usize) -> u64 {
    let p = s.ru_params(index);
    p.chunk_bytes as u64 * u64::from(p.chunks_per_fed) * s.rus[index].feds.len() as u64
}

/// `bytes` as a Kubernetes quantity in MiB.
pub(crate) fn mebibytes(bytes: u64) -> String {
    format!("{}Mi", bytes.div_ceil(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_left_to_the_system_get_fixed_free_ones_and_every_bu_a_broker() {
        let mut cfg = SystemConfig::default();
        cfg.bus[1].data_port = 9101;
        let d = Deployment::plan(&cfg, 9100, "/data").unwrap();
        let s = &d.system;
        let mut ports = vec![s.evm.port];
        for ru in &s.rus {
            ports.extend([ru.ferol_port, ru.control_port]);
        }
        for bu in &s.bus {
            ports.extend([bu.data_port, bu.broker_port.unwrap()]);
        }
        ports.extend(d.units.iter().map(|u| u.control_port));
        assert!(ports.iter().all(|&p| p >= 9100), "{ports:?}");
        let unique: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len(), "no port twice: {ports:?}");
        assert_eq!(s.bus[1].data_port, 9101, "a port the file gives is kept");
        assert_eq!(d.units.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["evm", "ru1", "bu0", "bu1"]);
        assert_eq!(s.run.output.as_deref(), Some(std::path::Path::new("/data")));
        // The deployed file is a valid system file, as the units will read it.
        let text = d.system_yaml();
        let back = SystemConfig::from_yaml(&text, std::path::Path::new("system.yaml")).unwrap();
        assert_eq!(back.evm.port, s.evm.port);
    }

    #[test]
    fn a_bu_restarts_its_run_directory_and_every_unit_serves_control_on_its_port() {
        let d = Deployment::plan(&SystemConfig::default(), 9100, "/data").unwrap();
        let bu = d.units.iter().find(|u| u.name == "bu0").unwrap();
        let args = d.unit_args(bu);
        assert_eq!(&args[..4], ["bu", "--name", "bu0", "--restart"]);
        assert!(args.windows(2).any(|w| w[0] == "--control" && w[1] == format!("0.0.0.0:{}", bu.control_port)));
        assert!(d.ramdisk_bytes() >= 1 << 30 && d.ramdisk_bytes().is_multiple_of(1 << 30));
        assert!(d.memory_bytes(bu) > d.system.bu.frame_store_bytes);
    }
}
