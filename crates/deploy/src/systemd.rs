//! systemd units of a system, per host ([`systemd`]): the bare-metal twin of the Kubernetes
//! manifests, from the same plan. Each host gets a unit per process it runs (its units, the
//! front ends of its emulated RUs, its FUs as a template unit with an instance per process, the
//! mergers), the deployed system file, and an environment file with the run's keys.
//!
//! Every unit runs as the dedicated user `tessera`, never root, hardened: no new privileges, a
//! read-only view of the system but for the run's output and the RAM disk, private `/tmp`, no
//! capabilities (but `CAP_IPC_LOCK` for links on UCX), kernel tunables and modules protected,
//! only IP and Unix sockets, locked memory unbounded (RDMA pins what it moves).

use crate::{DeployError, Deployment, FRONT_END_WAIT_S, Role, SYSTEM_PATH};
use std::collections::BTreeMap;
use tessera_config::SystemConfig;

/// How to render.
#[derive(Debug, Clone)]
pub struct SystemdOptions {
    /// The first port given to ports the file leaves to the system.
    pub base_port: u16,
    /// The run's output directory on every host (a file system the FU hosts share, with the
    /// BUs' RAM disks under it, as in CMS's filter farm).
    pub output: String,
    /// The run's link key, as hex.
    pub link_key_hex: String,
    /// The control token of every unit's control server.
    pub control_token: String,
    /// Where the binary is installed.
    pub binary: String,
    /// The text of the menu file the system names, if it names one.
    pub menu: Option<String>,
}

/// A file to install on a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFile {
    /// The host.
    pub host: String,
    /// The file's name (`tessera-1-bu0.service`), or a path under `/etc/tessera` for the system
    /// file and the environment file.
    pub name: String,
    /// Its text.
    pub text: String,
}

/// The files of every host of `cfg`, by host then name.
pub fn systemd(cfg: &SystemConfig, opts: &SystemdOptions) -> Result<Vec<UnitFile>, DeployError> {
    let d = Deployment::plan(cfg, opts.base_port, &opts.output)?;
    let s = &d.system;
    let run = s.run.number;
    let env_path = format!("/etc/tessera/run-{run}.env");
    let mut files: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut add = |host: &str, name: String, text: String| {
        files.insert((host.to_owned(), name), text);
    };
    for unit in &d.units {
        let ucx = match unit.role {
            Role::Bu { .. } => s.transport.ru_bu == tessera_config::Transport::Ucx,
            _ => s.transport.uses_ucx(),
        };
        let what = match unit.role {
            Role::Evm => "the EVM and RU 0",
            Role::Ru { .. } => "an RU",
            Role::Bu { .. } => "a BU",
        };
        let exec = std::iter::once(opts.binary.clone()).chain(d.unit_args(unit)).collect::<Vec<_>>().join(" ");
        let text = service(
            &format!("Tessera run {run}: {} ({what})", unit.name),
            &exec,
            &env_path,
            &opts.output,
            ucx,
            "on-failure",
        );
        add(&unit.host, format!("tessera-{run}-{}.service", unit.name), text);
    }
    for ru in s.rus.iter().filter(|r| r.emulated && !s.is_orbit_mode()) {
        let exec = format!(
            "{} ferol --system {SYSTEM_PATH} --ru {} --connect-wait-s {FRONT_END_WAIT_S} --log-format json",
            opts.binary, ru.name
        );
        let text = service(
            &format!("Tessera run {run}: emulated front ends of {}", ru.name),
            &exec,
            &env_path,
            &opts.output,
            false,
            "no",
        );
        add(&ru.host, format!("tessera-{run}-{}-front-ends.service", ru.name), text);
    }
    if s.fu.enabled {
        for bu in &s.bus {
            let exec = format!(
                "{} fu --broker {}:{} --output {}/fu/{} --run {run}{} --log-format json",
                opts.binary,
                bu.host,
                bu.broker_port.expect("planned"),
                opts.output,
                bu.name,
                if d.menu.is_some() { format!(" --menu {}", crate::MENU_PATH) } else { String::new() },
            );
            let text = service(
                &format!("Tessera run {run}: FU process %i of {}", bu.name),
                &exec,
                &env_path,
                &opts.output,
                false,
                "on-failure",
            );
            add(bu.fu_host(), format!("tessera-{run}-fu-{}@.service", bu.name), text);
        }
        let host = s.controller.merger_host.clone().unwrap_or_else(|| s.bus[0].fu_host().to_owned());
        let exec = format!("{} merge --system {SYSTEM_PATH} --output {} --log-format json", opts.binary, opts.output);
        let text =
            service(&format!("Tessera run {run}: the mergers"), &exec, &env_path, &opts.output, false, "on-failure");
        add(&host, format!("tessera-{run}-mergers.service", run = run), text);
    }
    let hosts: std::collections::BTreeSet<String> = files.keys().map(|(h, _)| h.clone()).collect();
    for host in &hosts {
        files.insert((host.clone(), SYSTEM_PATH.to_owned()), d.system_yaml());
        if let Some(menu) = &opts.menu {
            files.insert((host.clone(), crate::MENU_PATH.to_owned()), menu.clone());
        }
        files.insert(
            (host.clone(), env_path.clone()),
            format!(
                "# Run {run}'s keys: install as root, mode 0600.\nTESSERA_LINK_KEY={}\nTESSERA_CONTROL_TOKEN={}\n",
                opts.link_key_hex, opts.control_token
            ),
        );
    }
    Ok(files.into_iter().map(|((host, name), text)| UnitFile { host, name, text }).collect())
}

/// A hardened service unit.
fn service(description: &str, exec: &str, env: &str, output: &str, ucx: bool, restart: &str) -> String {
    let caps = if ucx { "CAP_IPC_LOCK" } else { "" };
    format!(
        "# Rendered by `tessera deploy systemd` from the run's system file: render again rather than edit.\n\
         [Unit]\n\
         Description={description}\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         User=tessera\n\
         Group=tessera\n\
         EnvironmentFile={env}\n\
         ExecStart={exec}\n\
         Restart={restart}\n\
         RestartSec=2\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec=90\n\
         LimitNOFILE=65536\n\
         LimitMEMLOCK=infinity\n\
         NoNewPrivileges=yes\n\
         CapabilityBoundingSet={caps}\n\
         AmbientCapabilities={caps}\n\
         ProtectSystem=strict\n\
         ReadWritePaths={output}\n\
         ProtectHome=yes\n\
         PrivateTmp=yes\n\
         PrivateDevices={private_devices}\n\
         ProtectKernelTunables=yes\n\
         ProtectKernelModules=yes\n\
         ProtectControlGroups=yes\n\
         RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX{netlink}\n\
         RestrictNamespaces=yes\n\
         LockPersonality=yes\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        // RDMA devices live under /dev/infiniband; UCX's verbs need them and netlink.
        private_devices = if ucx { "no" } else { "yes" },
        netlink = if ucx { " AF_NETLINK" } else { "" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_gets_its_units_the_system_file_and_its_keys_hardened_and_not_as_root() {
        let mut cfg = SystemConfig::default();
        cfg.rus[1].host = "ru-b".into();
        cfg.bus[0].host = "bu-a".into();
        cfg.bus[1].host = "bu-a".into();
        let opts = SystemdOptions {
            base_port: 9100,
            output: "/srv/tessera".into(),
            link_key_hex: "ab".repeat(32),
            control_token: "t".into(),
            binary: "/usr/local/bin/tessera".into(),
            menu: None,
        };
        let files = systemd(&cfg, &opts).unwrap();
        let on = |host: &str| files.iter().filter(|f| f.host == host).map(|f| f.name.as_str()).collect::<Vec<_>>();
        assert!(on("bu-a").contains(&"tessera-1-bu0.service") && on("bu-a").contains(&"tessera-1-bu1.service"));
        assert!(on("ru-b").contains(&"tessera-1-ru1.service"));
        assert!(on("127.0.0.1").contains(&"tessera-1-evm.service"));
        for host in ["bu-a", "ru-b", "127.0.0.1"] {
            assert!(on(host).contains(&SYSTEM_PATH) && on(host).contains(&"/etc/tessera/run-1.env"), "{host}");
        }
        let bu = files.iter().find(|f| f.name == "tessera-1-bu0.service").unwrap();
        assert!(bu.text.contains("User=tessera\n") && bu.text.contains("NoNewPrivileges=yes\n"));
        assert!(bu.text.contains("ProtectSystem=strict\n") && bu.text.contains("ReadWritePaths=/srv/tessera\n"));
        assert!(bu.text.contains(" bu --name bu0 --restart --system /etc/tessera/system.yaml"), "{}", bu.text);
        assert!(bu.text.contains("CapabilityBoundingSet=\n"), "no capability without UCX");
        // Front ends are never restarted (their streams would start again): they wait for the RU.
        let front_ends = files.iter().find(|f| f.name == "tessera-1-ru1-front-ends.service").unwrap();
        assert!(front_ends.text.contains("Restart=no\n"), "{}", front_ends.text);
        assert!(front_ends.text.contains(&format!(" --connect-wait-s {FRONT_END_WAIT_S} ")), "{}", front_ends.text);
    }
}
